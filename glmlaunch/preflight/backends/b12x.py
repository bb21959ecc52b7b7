"""The b12x generation's pools, through b12x's public classes (``b12x.comm.pcie``).

Same call sequence as the SparkInfer backend of r17+ (see ``sparkinfer.py``), which every B12X release's
vLLM makes (PR 216): distributed pools name their channels, so the eager channels are prepared
collectively (``prepare_channels(("vllm:eager:allreduce",))``, ``vllm:eager:dcp``) and used with
``for_stream(channel_id=...)``, the pools are made with ``max_concurrent_channels=2``, and every capture
pass enters ``capture(stream, channel_id=...)`` with vLLM's id for it (``vllm:target:profile``, …); every
profile pass is checkpointed and rolled back (b12x checkpoints are 4-tuples). Teardown:
``rollback_channels`` to the checkpoint taken when the pool was made (a coordinated close), then
``close()``. The installed ``b12x`` is used whatever its version; the report's build section names it.

b12x compiles CuTe-DSL kernels for sm120/sm121 only, so on other GPUs this backend cannot run; ``auto``
falls back to ``replay``. CPU device mode (tests): the pools are b12x's real classes built with their
``channel_factory`` hook, whose channels hold CPU buffers of the ledger's sizes; the DMA object, which
needs CUDA, is not built, but its arguments are bound to its real signature.
"""

from __future__ import annotations

import inspect
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import Any

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

EAGER_ALLREDUCE_ID = "vllm:eager:allreduce"
EAGER_DCP_ID = "vllm:eager:dcp"


class CpuChannel:
    """A channel for b12x's ``channel_factory`` hook: a host buffer of the channel's ledger size."""

    def __init__(self, torch: Any, nbytes: int) -> None:
        self.buffer = torch.empty(max(nbytes, 1), dtype=torch.uint8)
        self._stream_affine = True
        self._owner_stream_key: int | None = None
        self.closed = False

    def _bind_stream_key(self, stream_key: int | None) -> None:
        if self._stream_affine and stream_key is not None and self._owner_stream_key is None:
            self._owner_stream_key = int(stream_key)

    @contextmanager
    def capture(self, stream: object = None) -> Any:
        yield self

    def _close_ipc_imports(self) -> None:
        self.closed = True

    def _free_ipc_exports(self) -> None:
        self.buffer = None

    def close(self) -> None:
        self._close_ipc_imports()
        self._free_ipc_exports()


class B12xBackend:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        cfg = rt.config
        self.names = [a.name for a in rt.spec.allocations]
        from b12x.comm.pcie import pcie_dcp_a2a, pcie_oneshot

        world = rt.world_size
        self.use_oneshot = cfg.comm.pcie_allreduce and world in pcie_oneshot.SUPPORTED_WORLD_SIZES
        self.use_dma = cfg.comm.pcie_allreduce and cfg.comm.dma_min_bytes is not None and world >= 2
        self.use_dcp = cfg.comm.dcp_a2a and rt.dcp > 1 and rt.dcp in pcie_dcp_a2a.SUPPORTED_WORLD_SIZES
        self.oneshot: Any = None
        self.dcp: Any = None
        self.dma: Any = None
        self.origins: dict[int, Any] = {}
        #: what vLLM passes from r17 (PR 216): two worker grids must fit the GPU's SMs
        self.max_concurrent = for_stack(cfg.stack).max_concurrent_channels
        self.keep: list[Any] = []
        if world == 1:
            rt.note("world size 1: b12x builds no pools (one-shot needs 2..10 ranks, DMA >= 2, DCP A2A >= 2)")

    def build(self) -> None:
        import time

        t0 = time.monotonic()
        from b12x.comm.pcie import DcpAllToAllPool, DmaAllReduce, OneshotAllReducePool

        self.classes = (OneshotAllReducePool, DmaAllReduce, DcpAllToAllPool)
        import importlib.metadata

        try:
            version = importlib.metadata.version("b12x")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        k = for_stack(self.rt.config.stack)
        self.rt.result.build.update(backend="b12x", cold=False, seconds=round(time.monotonic() - t0, 3),
                                    generation=k.stack, library_version=version,
                                    note="CuTe-DSL kernels compile at first use, not here")
        if k.tree.pypi is not None and k.tree.pypi != f"b12x=={version}":
            self.rt.note(f"installed b12x {version} is not the {k.stack} generation ({k.tree.pypi}): "
                         "the pools built are the installed library's")

    def _requested(self, names: list[str]) -> int:
        return requested_bytes(self.rt.spec.allocations, names)

    def _factory(self, names: list[str]) -> Any:
        size = self._requested(names)
        return lambda _stream_key: CpuChannel(self.rt.torch, size)

    def allocate(self) -> None:
        rt, cfg = self.rt, self.rt.config
        oneshot_cls, dma_cls, dcp_cls = self.classes
        eager = cfg.comm.oneshot_eager_bytes
        if self.use_oneshot:
            kwargs: dict[str, Any] = dict(eager_buffer_bytes=eager, max_size=eager,
                                          single_channel=bool(cfg.comm.single_channel),
                                          max_concurrent_channels=self.max_concurrent)
            if rt.cuda:
                self.oneshot = oneshot_cls.from_exchange_group(exchange_group=rt.tp_group, device=rt.device,
                                                               **kwargs)
            else:
                factory = self._factory(covers(self.names, "oneshot", "eager"))
                self.oneshot = oneshot_cls(rank=rt.rank, world_size=rt.world_size, device=rt.device,
                                           channel_factory=factory, **kwargs)
            self.origins[id(self.oneshot)] = self.oneshot.checkpoint_channels()
            rt.step("oneshot.eager_channel", kind="ipc+torch", lifetime="pre-snapshot",
                    covers=covers(self.names, "oneshot", "eager"),
                    requested=self._requested(covers(self.names, "oneshot", "eager")),
                    fn=partial(self._eager, self.oneshot, EAGER_ALLREDUCE_ID))
        if self.use_dma:
            dma_kwargs = dict(exchange_group=rt.tp_group, device=rt.device, max_bytes=dma_max_bytes(cfg),
                              fp8=cfg.comm.dma_wire_mode)
            if rt.cuda:
                dma_names = covers(self.names, "dma")
                rt.step("dma.slab", kind="ipc+torch", lifetime="pre-snapshot", covers=dma_names,
                        requested=self._requested(dma_names),
                        fn=partial(self._make_dma, dma_cls, dma_kwargs))
            else:
                inspect.signature(dma_cls.__init__).bind(None, **dma_kwargs)
                rt.note("CPU device mode: DmaAllReduce needs CUDA; its arguments were bound to its signature")
        rt.mark("f0_free")
        if self.use_dcp:
            geo = cfg.model.geometry
            dcp_kwargs: dict[str, Any] = dict(
                max_batch_size=dcp_batch(cfg),
                total_heads=(geo.num_attention_heads // cfg.parallel.tp) * rt.dcp,
                head_dim=geo.kv_lora_rank,
                query_head_dim=geo.query_head_dim,
                single_channel=bool(cfg.comm.single_channel),
                max_concurrent_channels=self.max_concurrent,
            )
            if rt.cuda:
                self.dcp = dcp_cls.from_exchange_group(exchange_group=rt.dcp_group, device=rt.device,
                                                       **dcp_kwargs)
            else:
                self.dcp = dcp_cls(rank=rt.dcp_ranks.index(rt.rank), world_size=rt.dcp, device=rt.device,
                                   channel_factory=self._factory(covers(self.names, "dcp_a2a", "eager")),
                                   **dcp_kwargs)
            self.origins[id(self.dcp)] = self.dcp.checkpoint_channels()
            rt.step("dcp_a2a.eager_channel", kind="ipc", lifetime="profiled",
                    covers=covers(self.names, "dcp_a2a", "eager"),
                    requested=self._requested(covers(self.names, "dcp_a2a", "eager")),
                    fn=partial(self._eager, self.dcp, EAGER_DCP_ID))
        self.keep.extend(allocate_arenas(rt))
        for cap in capture_passes(cfg):
            self._capture_pass(cap)
        for label, pool in (("oneshot", self.oneshot), ("dcp_a2a", self.dcp)):
            if pool is not None:
                rt.note(f"{label} pool holds {len(pool._all_channels)} channel(s) after the capture passes")

    def _eager(self, pool: Any, channel_id: str) -> Any:
        if self.rt.cuda and not pool.single_channel:
            pool.prepare_channels((channel_id,))
            return pool.for_stream(channel_id=channel_id)
        return pool.for_stream()

    def _make_dma(self, cls: Any, kwargs: dict[str, Any]) -> None:
        self.dma = cls(**kwargs)

    def _capture_pass(self, cap: CapturePass) -> None:
        rt = self.rt
        pools = [p for p in (self.oneshot, self.dcp) if p is not None]
        if not pools:
            return
        stream = rt.torch.cuda.Stream(device=rt.device) if rt.cuda else None

        def enter_and_leave() -> None:
            with ExitStack() as stack:
                if stream is not None:
                    stack.enter_context(rt.torch.cuda.stream(stream))
                for pool in pools:
                    channel_id = cap.channel_id or f"capture.{cap.name}"
                    stack.enter_context(pool.capture(stream, channel_id=channel_id))

        record_capture_pass(rt, self.names, cap, pools, enter_and_leave)

    def close(self) -> None:
        rt = self.rt
        rt.sync()
        for pool in (self.oneshot, self.dcp):
            if pool is not None:
                pool.rollback_channels(self.origins[id(pool)])
                pool.close()
        if self.dma is not None:
            rt.barrier(rt.tp_group)
            self.dma.close()
            rt.barrier(rt.tp_group)
        self.oneshot = self.dcp = self.dma = None
        self.keep.clear()
        if rt.cuda:
            rt.torch.cuda.empty_cache()
        rt.mark("free_after_close")
