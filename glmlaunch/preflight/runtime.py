"""What a worker's backend works with: device, process groups, and the meter.

torch arrives as a module object from ``worker.run_worker`` (the only place it is imported), so this
module never imports it. In the ``cuda`` device mode every measurement synchronizes the device and reads
``cudaMemGetInfo`` (free bytes: what vLLM's start gate and KV sizing see) and
``torch.cuda.memory_reserved`` (what the torch allocator holds). In the ``cpu`` device mode (tests, CI)
the same call sequence runs over gloo and the measurements are ``None``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.preflight.types import RankResult, StepRecord, WorkerSpec

T = TypeVar("T")


@dataclass
class Runtime:
    spec: WorkerSpec
    result: RankResult
    torch: Any
    dist: Any
    config: DeploymentConfig
    device: Any
    cuda: bool
    tp_group: Any = None
    dcp_group: Any = None
    dcp_ranks: tuple[int, ...] = ()

    @classmethod
    def create(cls, spec: WorkerSpec, result: RankResult, torch: Any, dist: Any) -> Runtime:
        config = DeploymentConfig.model_validate(spec.config)
        cuda = spec.device_mode == "cuda"
        if cuda:
            torch.cuda.set_device(spec.local_device)
            device = torch.device("cuda", spec.local_device)
            # The first runtime call creates the primary context and nothing else.
            free, total = torch.cuda.mem_get_info(device)
            props = torch.cuda.get_device_properties(device)
            result.device.update(
                name=props.name,
                index=spec.local_device,
                total_bytes=int(total),
                capability=f"{props.major}.{props.minor}",
                multiprocessors=int(props.multi_processor_count),
            )
            result.memory["total"] = int(total)
            result.memory["free_before"] = spec.free_before_bytes
            result.memory["free_after_context"] = int(free)
            if spec.free_before_bytes is not None:
                result.memory["context_bytes"] = spec.free_before_bytes - int(free)
        else:
            torch.set_num_threads(1)
            device = torch.device("cpu")
            result.device.update(name="cpu", index=None)
        return cls(spec=spec, result=result, torch=torch, dist=dist, config=config, device=device, cuda=cuda)

    # --- measuring -------------------------------------------------------------------------------

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def free(self) -> int | None:
        if not self.cuda:
            return None
        self.sync()
        return int(self.torch.cuda.mem_get_info(self.device)[0])

    def reserved(self) -> int | None:
        if not self.cuda:
            return None
        return int(self.torch.cuda.memory_reserved(self.device))

    def mark(self, key: str) -> int | None:
        value = self.free()
        self.result.memory[key] = value
        if self.cuda:
            self.result.memory[key.replace("free", "reserved", 1)] = self.reserved()
        return value

    def step(
        self,
        name: str,
        *,
        kind: str,
        lifetime: str,
        covers: list[str],
        requested: int,
        fn: Callable[[], T],
        note: str = "",
    ) -> T:
        """Run one allocation and record what it cost on this device."""
        free0, res0 = self.free(), self.reserved()
        value = fn()
        free1, res1 = self.free(), self.reserved()
        self.result.steps.append(
            StepRecord(
                name=name,
                kind=kind,
                lifetime=lifetime,
                covers=covers,
                requested_bytes=int(requested),
                device_bytes=None if free0 is None or free1 is None else free0 - free1,
                torch_reserved_bytes=None if res0 is None or res1 is None else res1 - res0,
                note=note,
            )
        )
        return value

    def note(self, text: str) -> None:
        if text not in self.result.notes:
            self.result.notes.append(text)

    # --- process groups ----------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        return self.spec.rank

    @property
    def world_size(self) -> int:
        return self.spec.world_size

    @property
    def dcp(self) -> int:
        return min(self.config.parallel.dcp, self.world_size)

    def init_process_groups(self) -> None:
        """The TP group, and vLLM's separate DCP group when DCP > 1, each warmed by a collective."""
        torch, dist = self.torch, self.dist
        free0, res0 = self.free(), self.reserved()
        kwargs: dict[str, Any] = {}
        if self.cuda:
            kwargs["device_id"] = self.device
        dist.init_process_group(
            backend="nccl" if self.cuda else "gloo",
            init_method=f"file://{self.spec.init_file}",
            rank=self.rank,
            world_size=self.world_size,
            **kwargs,
        )
        self.tp_group = dist.group.WORLD
        self._warm(self.tp_group)
        free1, res1 = self.free(), self.reserved()
        if free0 is not None and free1 is not None and res0 is not None and res1 is not None:
            self.result.memory["nccl_tp_bytes"] = (free0 - free1) - (res1 - res0)
            self.result.memory["torch_reserved_after_process_group"] = res1
        if self.dcp > 1:
            # vLLM builds DCP groups of consecutive TP ranks, each its own communicator.
            groups = [
                tuple(range(start, start + self.dcp)) for start in range(0, self.world_size, self.dcp)
            ]
            for ranks in groups:
                group = dist.new_group(list(ranks))
                if self.rank in ranks:
                    self.dcp_group, self.dcp_ranks = group, ranks
            self._warm(self.dcp_group)
            free2 = self.free()
            if free1 is not None and free2 is not None:
                self.result.memory["nccl_dcp_bytes"] = free1 - free2
        self.result.memory["free_after_process_group"] = self.free()
        del torch

    def _warm(self, group: Any) -> None:
        torch, dist = self.torch, self.dist
        probe = torch.ones(1, device=self.device)
        dist.all_reduce(probe, group=group)
        objects: list[Any] = [self.rank]
        # The pools exchange IPC handles with broadcast_object_list: warm that path too.
        dist.broadcast_object_list(objects, src=dist.get_process_group_ranks(group)[0], group=group,
                                   device=self.device if self.cuda else None)
        self.sync()
        if int(probe.item()) != dist.get_world_size(group):
            raise RuntimeError(f"warm-up all-reduce returned {probe.item()}, expected the group size")

    def take_baseline(self) -> None:
        self.mark("free_baseline")

    def barrier(self, group: Any = None) -> None:
        if self.cuda:
            self.dist.barrier(group=group, device_ids=[self.device.index])
        else:
            self.dist.barrier(group=group)

    def finish(self) -> None:
        t0 = time.monotonic()
        self.barrier()
        self.dist.destroy_process_group()
        self.result.timings["destroy_process_group"] = round(time.monotonic() - t0, 4)
