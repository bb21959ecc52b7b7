"""The r12 library (sparkinfer de04125) built for real, through its public pool classes.

Call sequence, as the r12 composed vLLM makes it (docs/memory-model.md §5, custom_all_reduce.py and
dcp_alltoall.py of that tree):

1. pre-snapshot: ``OneshotAllReducePool.from_exchange_group`` on the TP group with the eager size E and
   the configured ``single_channel``; its eager channel (``for_stream`` on the default stream) and one
   real all-reduce through it; ``DmaAllReduce`` with ``max_bytes`` and the configured wire mode.
   Free memory here is the F0 vLLM will see.
2. profiled: ``DcpAllToAllPool`` on the DCP group and its eager channel (checked with a real
   ``all_gather_heads``); the indexer scratch arenas.
3. one capture context per cudagraph-manager pass, entered and left once on its own stream; V2's
   profiling pass is checkpointed and rolled back, V1's is not (its channel leaks, as in the r12 tree).

Teardown is the library's own: ``rollback_channels`` to an empty checkpoint (a coordinated close across
ranks), ``close()``, and ``DmaAllReduce.close()`` between barriers.

The extensions are JIT-built with nvcc into ``TORCH_EXTENSIONS_DIR`` (the same cache vLLM uses when it
runs with the same variable: a preflight warms it). At world size 1 the library builds nothing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from glmlaunch.config.registry import TORCH_EXTENSIONS_DIR
from glmlaunch.preflight.backends.sequence import (
    CapturePass,
    allocate_arenas,
    capture_passes,
    covers,
    dcp_batch,
    dma_max_bytes,
    record_capture_pass,
    requested_bytes,
)
from glmlaunch.preflight.runtime import Runtime

ONESHOT_WORLD_SIZES = (2, 4, 6, 8, 10)
DCP_WORLD_SIZES = (2, 4, 8)
EXTENSIONS = {
    "oneshot": "sparkinfer_pcie_oneshot_ext",
    "dma": "sparkinfer_pcie_dma_ext",
    "dcp_a2a": "sparkinfer_pcie_dcp_a2a_ext",
}


def _built(ext_root: Path, name: str) -> bool:
    return any(ext_root.glob(f"**/{name}/{name}*.so")) or any(ext_root.glob(f"**/{name}*.so"))


class SparkinferBackend:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        cfg = rt.config
        self.names = [a.name for a in rt.spec.allocations]
        world = rt.world_size
        self.use_oneshot = cfg.comm.pcie_allreduce and world in ONESHOT_WORLD_SIZES
        self.use_dma = cfg.comm.pcie_allreduce and cfg.comm.dma_min_bytes is not None and world >= 2
        self.use_dcp = cfg.comm.dcp_a2a and rt.dcp in DCP_WORLD_SIZES
        self.oneshot: Any = None
        self.dma: Any = None
        self.dcp: Any = None
        self.keep: list[Any] = []
        self.streams: list[Any] = []
        if world == 1:
            rt.note(
                "world size 1: sparkinfer builds no pools (one-shot needs 2/4/6/8/10 ranks, DMA >= 2, "
                "DCP A2A 2/4/8); only the indexer scratch is allocated"
            )

    # --- build -----------------------------------------------------------------------------------

    def build(self) -> None:
        wanted = [k for k, on in (("oneshot", self.use_oneshot), ("dma", self.use_dma),
                                  ("dcp_a2a", self.use_dcp)) if on]
        root = Path(os.environ.get(TORCH_EXTENSIONS_DIR) or Path.home() / ".cache" / "torch_extensions")
        cold = {k: not _built(root, EXTENSIONS[k]) for k in wanted}
        seconds: dict[str, float] = {}
        from sparkinfer.comm.pcie import (  # type: ignore[import-not-found,unused-ignore]
            pcie_dcp_a2a,
            pcie_dma,
            pcie_oneshot,
        )

        loaders = {"oneshot": pcie_oneshot._load_extension, "dma": pcie_dma._load_extension,
                   "dcp_a2a": pcie_dcp_a2a._load_extension}
        for key in wanted:
            t0 = time.monotonic()
            loaders[key]()
            seconds[key] = round(time.monotonic() - t0, 3)
        self.rt.result.build.update(
            backend="sparkinfer",
            extensions_dir=str(root),
            cold=any(cold.values()),
            cold_by_extension=cold,
            seconds=round(sum(seconds.values()), 3),
            seconds_by_extension=seconds,
        )

    # --- allocations -------------------------------------------------------------------------------

    def allocate(self) -> None:
        rt, cfg = self.rt, self.rt.config
        from sparkinfer.comm.pcie import (  # type: ignore[import-not-found,unused-ignore]
            DcpAllToAllPool,
            DmaAllReduce,
            OneshotAllReducePool,
        )

        if self.use_oneshot:
            eager = cfg.comm.oneshot_eager_bytes
            self.oneshot = OneshotAllReducePool.from_exchange_group(
                exchange_group=rt.tp_group,
                device=rt.device,
                eager_buffer_bytes=eager,
                max_size=eager,
                single_channel=bool(cfg.comm.single_channel),
            )
            rt.step(
                "oneshot.eager_channel",
                kind="ipc+torch",
                lifetime="pre-snapshot",
                covers=covers(self.names, "oneshot", "eager"),
                requested=self._requested(covers(self.names, "oneshot", "eager")),
                fn=lambda: self.oneshot.for_stream(),
            )
            rt.step(
                "oneshot.first_all_reduce",
                kind="transient",
                lifetime="pre-snapshot",
                covers=[],
                requested=0,
                fn=self._check_all_reduce,
                note="one real all-reduce: loads the kernel module",
            )
        if self.use_dma:
            rt.step(
                "dma.slab",
                kind="ipc+torch",
                lifetime="pre-snapshot",
                covers=covers(self.names, "dma"),
                requested=self._requested(covers(self.names, "dma")),
                fn=lambda: self._make_dma(DmaAllReduce),
            )
        rt.mark("f0_free")

        if self.use_dcp:
            geo = cfg.model.geometry
            self.dcp = DcpAllToAllPool.from_exchange_group(
                exchange_group=rt.dcp_group,
                device=rt.device,
                max_batch_size=dcp_batch(cfg),
                total_heads=(geo.num_attention_heads // cfg.parallel.tp) * rt.dcp,
                head_dim=geo.kv_lora_rank,
                query_head_dim=geo.query_head_dim,
                single_channel=bool(cfg.comm.single_channel),
            )
            rt.step(
                "dcp_a2a.eager_channel",
                kind="ipc",
                lifetime="profiled",
                covers=covers(self.names, "dcp_a2a", "eager"),
                requested=self._requested(covers(self.names, "dcp_a2a", "eager")),
                fn=self._check_dcp,
                note="plus one real all_gather_heads",
            )
        self._indexer()
        for cap in capture_passes(cfg):
            self._capture_pass(cap)

    def _requested(self, names: list[str]) -> int:
        return requested_bytes(self.rt.spec.allocations, names)

    def _check_all_reduce(self) -> None:
        torch, rt = self.rt.torch, self.rt
        x = torch.full((4096,), float(rt.rank + 1), dtype=torch.bfloat16, device=rt.device)
        out = self.oneshot.all_reduce(x)
        rt.sync()
        expect = rt.world_size * (rt.world_size + 1) / 2
        if float(out[0].item()) != expect or float(out[-1].item()) != expect:
            raise RuntimeError(f"one-shot all-reduce returned {out[0].item()}, expected {expect}")

    def _make_dma(self, cls: Any) -> None:
        cfg = self.rt.config
        self.dma = cls(
            exchange_group=self.rt.tp_group,
            device=self.rt.device,
            max_bytes=dma_max_bytes(cfg),
            fp8=cfg.comm.dma_wire_mode,
        )

    def _check_dcp(self) -> None:
        torch, rt = self.rt.torch, self.rt
        channel = self.dcp.for_stream()
        heads = channel.heads_per_rank
        local = torch.full((1, heads, channel.query_head_dim), float(rt.dcp_ranks.index(rt.rank)),
                           dtype=torch.bfloat16, device=rt.device)
        out = self.dcp.all_gather_heads(local)
        rt.sync()
        for src in range(rt.dcp):
            got = float(out[0, src * heads, 0].item())
            if got != float(src):
                raise RuntimeError(f"DCP all_gather_heads: heads of rank {src} hold {got}")

    def _indexer(self) -> None:
        rt = self.rt
        try:
            import sparkinfer.attention.nsa_indexer.scratch  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
        except ImportError as exc:
            rt.note(f"sparkinfer's indexer planner cannot be imported here ({exc}); the scratch arenas "
                    "use the ledger's sizes")
        self.keep.extend(allocate_arenas(rt, note="one grow-only arena per lane: the largest plan"))

    def _capture_pass(self, cap: CapturePass) -> None:
        rt = self.rt
        pools = [p for p in (self.oneshot, self.dcp) if p is not None]
        if not pools:
            return
        stream = rt.torch.cuda.Stream(device=rt.device)
        self.streams.append(stream)

        def enter_and_leave() -> None:
            from contextlib import ExitStack

            with rt.torch.cuda.stream(stream), ExitStack() as stack:
                for pool in pools:
                    stack.enter_context(pool.capture(stream=stream))

        record_capture_pass(rt, self.names, cap, pools, enter_and_leave)

    # --- teardown ----------------------------------------------------------------------------------

    def close(self) -> None:
        rt = self.rt
        rt.sync()
        for pool in (self.oneshot, self.dcp):
            if pool is not None:
                pool.rollback_channels((0, {}))
                pool.close()
        if self.dma is not None:
            rt.barrier(rt.tp_group)
            self.dma.close()
            rt.barrier(rt.tp_group)
        self.oneshot = self.dcp = self.dma = None
        self.keep.clear()
        self.streams.clear()
        rt.torch.cuda.empty_cache()
        rt.mark("free_after_close")
