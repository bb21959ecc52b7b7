"""The SparkInfer generations built for real, through their public pool classes: sparkinfer-r14
(de04125, releases r12-r16) and sparkinfer-r28 (tree 200c1db7, releases r17-r28).

Call sequence, as the composed vLLM of the profile's generation makes it (docs/memory-model.md §5 and §10,
custom_all_reduce.py and dcp_alltoall.py of those trees):

1. pre-snapshot: ``OneshotAllReducePool.from_exchange_group`` on the TP group with the eager size E and
   the configured ``single_channel``; its eager channel on the default stream and one real all-reduce
   through it; ``DmaAllReduce`` with ``max_bytes`` and the configured wire mode. Free memory here is the F0
   vLLM will see. At r17+ vLLM passes ``max_concurrent_channels=2`` (the pools check that two worker grids
   can be resident) and names the eager channel: ``prepare_channels(("vllm:eager:allreduce",))`` then
   ``for_stream(channel_id=...)``.
2. profiled: ``DcpAllToAllPool`` on the DCP group and its eager channel (``vllm:eager:dcp`` at r17+),
   checked with a real ``all_gather_heads``; the indexer scratch arenas.
3. one capture context per cudagraph-manager pass, entered and left once on its own stream
   (:func:`~glmlaunch.preflight.backends.sequence.capture_passes`): r12-r16 V2 checkpoints and rolls back its
   profiling pass, V1 does not (its channel leaks); r17+ enters every pool with the pass's channel id
   (``vllm:target:profile``, ``vllm:draft:prefill:production``, …) and rolls every profile pass back on both
   runners.

Teardown is the library's own: ``rollback_channels`` to an empty checkpoint (a coordinated close across
ranks), ``close()``, and ``DmaAllReduce.close()`` between barriers.

The extensions are JIT-built with nvcc into ``TORCH_EXTENSIONS_DIR`` (the same cache vLLM uses when it
runs with the same variable: a preflight warms it). At world size 1 the library builds nothing. The
installed ``sparkinfer`` must be the profile's generation: an r17+ tree names its channels
(``OneshotAllReducePool.prepare_channels``), an r12-r16 tree does not; a mismatch stops the build.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from glmlaunch.config.registry import TORCH_EXTENSIONS_DIR
from glmlaunch.ledger.constants import for_stack
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

#: vLLM's channel ids for the eager channels (r17+: custom_all_reduce.py, dcp_alltoall.py)
EAGER_ALLREDUCE_ID = "vllm:eager:allreduce"
EAGER_DCP_ID = "vllm:eager:dcp"
EXTENSIONS = {
    "oneshot": "sparkinfer_pcie_oneshot_ext",
    "dma": "sparkinfer_pcie_dma_ext",
    "dcp_a2a": "sparkinfer_pcie_dcp_a2a_ext",
}


def _sizes(world_sizes: tuple[int, ...]) -> str:
    return "/".join(map(str, world_sizes))


def _built(ext_root: Path, name: str) -> bool:
    return any(ext_root.glob(f"**/{name}/{name}*.so")) or any(ext_root.glob(f"**/{name}*.so"))


class SparkinferBackend:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        cfg = rt.config
        self.names = [a.name for a in rt.spec.allocations]
        world = rt.world_size
        # the world sizes the ledger prices pools for (config.worldsizes, through the stack's row)
        k = for_stack(cfg.stack)
        self.use_oneshot = cfg.comm.pcie_allreduce and world in k.oneshot_world_sizes
        self.use_dma = cfg.comm.pcie_allreduce and cfg.comm.dma_min_bytes is not None and world >= 2
        self.use_dcp = cfg.comm.dcp_a2a and rt.dcp in k.dcp_a2a_world_sizes
        #: r17+: named channels, max_concurrent_channels=2 (vLLM PR 216)
        self.semantic = k.semantic_channels
        self.pool_kwargs: dict[str, Any] = (
            {"max_concurrent_channels": k.max_concurrent_channels} if self.semantic else {}
        )
        self.oneshot: Any = None
        self.dma: Any = None
        self.dcp: Any = None
        self.keep: list[Any] = []
        self.streams: list[Any] = []
        if world == 1:
            rt.note(
                f"world size 1: sparkinfer builds no pools (one-shot needs {_sizes(k.oneshot_world_sizes)} "
                f"ranks, DMA >= 2, DCP A2A {_sizes(k.dcp_a2a_world_sizes)}); only the indexer scratch is "
                "allocated"
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
        self._check_generation(pcie_oneshot)
        self.rt.result.build.update(
            backend="sparkinfer",
            generation=self.rt.config.stack,
            extensions_dir=str(root),
            cold=any(cold.values()),
            cold_by_extension=cold,
            seconds=round(sum(seconds.values()), 3),
            seconds_by_extension=seconds,
        )

    def _check_generation(self, pcie_oneshot: Any) -> None:
        named = hasattr(pcie_oneshot.PCIeOneshotAllReducePool, "prepare_channels")
        if named != self.semantic:
            have = "an r17+ tree (named channels)" if named else "an r12-r16 tree (no named channels)"
            raise RuntimeError(
                f"the installed sparkinfer ({pcie_oneshot.__file__}) is {have}, but the profile names stack "
                f"{self.rt.config.stack}: install that generation's tree, or set stack to match"
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
                **self.pool_kwargs,
            )
            rt.step(
                "oneshot.eager_channel",
                kind="ipc+torch",
                lifetime="pre-snapshot",
                covers=covers(self.names, "oneshot", "eager"),
                requested=self._requested(covers(self.names, "oneshot", "eager")),
                fn=lambda: self._eager(self.oneshot, EAGER_ALLREDUCE_ID),
                note=f"channel {EAGER_ALLREDUCE_ID}" if self.semantic else "",
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
                **self.pool_kwargs,
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

    def _eager(self, pool: Any, channel_id: str) -> Any:
        """The eager channel: r17+ prepares it by name (vLLM's call), earlier generations by stream."""
        if not self.semantic:
            return pool.for_stream()
        if not pool.single_channel:
            pool.prepare_channels((channel_id,))
            return pool.for_stream(channel_id=channel_id)
        return pool.for_stream(channel_id=None)

    def _eager_id(self, channel_id: str) -> dict[str, Any]:
        return {"channel_id": channel_id} if self.semantic and not self.rt.config.comm.single_channel else {}

    def _check_all_reduce(self) -> None:
        torch, rt = self.rt.torch, self.rt
        x = torch.full((4096,), float(rt.rank + 1), dtype=torch.bfloat16, device=rt.device)
        out = self.oneshot.all_reduce(x, **self._eager_id(EAGER_ALLREDUCE_ID))
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
        channel = self._eager(self.dcp, EAGER_DCP_ID)
        heads = channel.heads_per_rank
        local = torch.full((1, heads, channel.query_head_dim), float(rt.dcp_ranks.index(rt.rank)),
                           dtype=torch.bfloat16, device=rt.device)
        out = self.dcp.all_gather_heads(local, **self._eager_id(EAGER_DCP_ID))
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
                    named = {"channel_id": cap.channel_id} if self.semantic else {}
                    stack.enter_context(pool.capture(stream=stream, **named))

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
