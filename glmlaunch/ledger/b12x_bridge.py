"""Take constants, comm layouts and the indexer planner from an installed ``b12x``.

Imported only when ``--library b12x|auto`` asks (importing b12x costs ~3-4 s and pulls torch and triton;
a terminal shows a spinner on stderr meanwhile).
Everything here runs on a CPU-only machine:

* constants: ``pcie_oneshot`` (``_SIGNAL_BYTES``, ``DEFAULT_RANK_DATA_BYTES``, ``IPC_SLAB_ALIGNMENT``),
  ``pcie_dma`` (FLAG_SLOTS, FLAG_STRIDE, SCRATCH_ALIGN, FP8_QUANT_BLOCK), ``pcie_dcp_a2a`` and
  ``pcie_dcp_topk`` (``_SIGNAL_BYTES``, world sizes), the fused indexer's merge-state words;
* layouts: ``pcie_dcp_a2a._staging_layout``, ``pcie_dcp_topk._candidate_staging_layout``, and the one-shot
  channel's ``_allocate_eager_channel_buffers`` run against a recorder that captures the slab size instead
  of calling cudaMalloc, with the library's own ``_eager_storage_shards``;
* ``plan_indexer_scratch`` (``device="cpu"``; the CPU planner counts 1 SM, so the fused route's two pack
  regions are re-sized for the configured SM count) and ``paged._plan_two_level_fold``.

For every other stack (the release generations) the installed library's layout code runs with that
generation's constants passed in (signal sizes, merge-state words, the eager shards the generation's rule
gives), since b12x 1.5 shares the layout shapes with the release trees but not their constants; each
generation's own code is compared with the built-in formulas by tests/ledger/test_generations.py.
The b12x functions read a few ``B12X_*`` variables; :func:`_scoped_env` sets them from the configuration
for the duration of one call and restores the caller's environment.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache
from typing import Any, ClassVar

from glmlaunch.config.registry import (
    B12X_FUSED_INDEXER,
    B12X_INDEXER_STREAM_SCORER,
    B12X_INDEXER_TWO_LEVEL_FOLD,
    B12X_INDEXER_TWO_LEVEL_FOLD_MAX_MIB,
    B12X_PAGED_INDEX_SUPERTILE_K,
    B12X_PCIE_ONESHOT_PUSH,
)
from glmlaunch.ledger.constants import B12X_15, StackConstants
from glmlaunch.ledger.context import align

#: the stack whose constants the installed package itself supplies
PYPI_STACK = B12X_15.stack

_ENV_KEYS = (
    B12X_FUSED_INDEXER,
    B12X_PAGED_INDEX_SUPERTILE_K,
    B12X_INDEXER_TWO_LEVEL_FOLD,
    B12X_INDEXER_TWO_LEVEL_FOLD_MAX_MIB,
    B12X_PCIE_ONESHOT_PUSH,
    B12X_INDEXER_STREAM_SCORER,
)


@contextmanager
def _scoped_env(values: Mapping[str, str | None]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


class _SlabRecorder:
    """Stands in for the pool class: records the slab size the layout code asks cudaMalloc for."""

    sizes: ClassVar[list[int]] = []

    @classmethod
    def _allocate_shared_buffer(
        cls, exchange_group: object, nbytes: int, *, zero_fill: bool, ipc: object
    ) -> Any:
        cls.sizes.append(int(nbytes))

        class _Buffer:
            peer_ptrs = (0,) * 16

        return _Buffer()


class B12xLayouts:
    """The :class:`~glmlaunch.ledger.context.LibraryLayouts` of the installed b12x."""

    name = "b12x"

    def __init__(self, k: StackConstants, mods: dict[str, Any], version: str) -> None:
        self._mods = mods
        self.version = version
        o, d, a, t, fi = mods["oneshot"], mods["dma"], mods["a2a"], mods["topk"], mods["fused"]
        lib_consts: dict[str, Any] = dict(
            ipc_align=int(o.IPC_SLAB_ALIGNMENT),
            oneshot_rank_data_bytes=int(o.DEFAULT_RANK_DATA_BYTES),
            dma_flag_slots=int(d.FLAG_SLOTS),
            dma_flag_stride=int(d.FLAG_STRIDE),
            dma_scratch_align=int(d.SCRATCH_ALIGN),
            dma_fp8_quant_block=int(d.FP8_QUANT_BLOCK),
            indexer_fused_max_rows_glm32=int(fi._GLM32_FUSED_MAX_ROWS),
            indexer_fused_max_rows=int(fi.FUSED_MAX_ROWS),
        )
        if k.stack == PYPI_STACK:
            lib_consts.update(
                version=version,
                oneshot_signal_bytes=int(o._SIGNAL_BYTES),
                oneshot_world_sizes=tuple(int(x) for x in o.SUPPORTED_WORLD_SIZES),
                dma_world_sizes=tuple(int(x) for x in d.SUPPORTED_WORLD_SIZES),
                dcp_a2a_signal_bytes=int(a._SIGNAL_BYTES),
                dcp_a2a_signal_origin="b12x.comm.pcie.pcie_dcp_a2a._SIGNAL_BYTES (imported)",
                dcp_a2a_world_sizes=tuple(int(x) for x in a.SUPPORTED_WORLD_SIZES),
                dcp_topk_signal_bytes=int(t._SIGNAL_BYTES),
                dcp_topk_world_sizes=tuple(int(x) for x in t.SUPPORTED_WORLD_SIZES),
                indexer_fused_merge_state_bytes_per_row=int(fi._COOP_STATE_WORDS) * 4,
            )
        self.constants = replace(k, source=self.describe_for(k), **lib_consts)

    def describe_for(self, k: StackConstants) -> str:
        if k.stack == PYPI_STACK:
            return (
                f"b12x {self.version} (imported): constants, layouts and plan_indexer_scratch "
                "from the library"
            )
        return (
            f"b12x {self.version} (imported) layout code with {k.stack} constants "
            f"({k.tree.short()}: signal sizes, fused merge state, eager shards) from the built-in table"
        )

    def describe(self) -> str:
        return self.constants.source

    def oneshot_slab_bytes(self, *, eager_bytes: int, world_size: int, push: bool, shards: int) -> int:
        o = self._mods["oneshot"]
        k = self.constants
        if k.oneshot_shard_rule == "pypi-1.5":
            # the library's own transport policy decides (the ledger's ``shards`` is its formula for it)
            policy = o._transport_policy_contract()
            policy = (push, *policy[1:])
            shards = int(o._eager_storage_shards(world_size, policy))
        fn = o.PCIeOneshotAllReduce.__dict__["_allocate_eager_channel_buffers"].__func__
        _SlabRecorder.sizes = []
        fn(
            _SlabRecorder,
            None,
            signal_bytes=k.oneshot_signal_bytes,
            eager_buffer_bytes=eager_bytes,
            eager_storage_shards=shards,
            ipc=None,
        )
        return _SlabRecorder.sizes[-1]

    def dcp_a2a_slab_bytes(
        self, *, world_size: int, max_batch_size: int, total_heads: int, head_dim: int, query_head_dim: int
    ) -> int:
        layout = self._mods["a2a"]._staging_layout(
            signal_bytes=self.constants.dcp_a2a_signal_bytes,
            world_size=world_size,
            max_batch_size=max_batch_size,
            total_heads=total_heads,
            head_dim=head_dim,
            query_head_dim=query_head_dim,
        )
        return int(layout.slab_bytes)

    def dcp_topk_slab_bytes(self, *, world_size: int, max_rows: int, topk: int) -> int:
        layout = self._mods["topk"]._candidate_staging_layout(
            signal_bytes=self.constants.dcp_topk_signal_bytes,
            max_rows=max_rows,
            topk=topk,
            world_size=world_size,
        )
        return int(layout.slab_bytes)

    def indexer_plan_bytes(
        self,
        *,
        num_q_heads: int,
        max_q_rows: int,
        page_table_width: int,
        topk: int,
        mode: str,
        shared_page_table: bool,
        supertile_k: int,
        num_sms: int,
        fused: bool,
    ) -> tuple[int, str]:
        return _indexer_plan(
            self,
            num_q_heads,
            max_q_rows,
            page_table_width,
            topk,
            mode,
            shared_page_table,
            supertile_k,
            num_sms,
            fused,
        )

    def fold_candidate_bytes(
        self,
        *,
        q_rows: int,
        topk: int,
        page_table_width: int,
        supertile_pages: int,
        output_physical_slots: bool,
        mode: str,
        budget_mib: int,
    ) -> tuple[int, int, str]:
        env = {B12X_INDEXER_TWO_LEVEL_FOLD: mode, B12X_INDEXER_TWO_LEVEL_FOLD_MAX_MIB: str(budget_mib)}
        with _scoped_env(env):
            plan = self._mods["paged"]._plan_two_level_fold(
                q_rows=q_rows,
                topk=topk,
                page_size=self.constants.page_size,
                page_table_width=page_table_width,
                supertile_pages=supertile_pages,
                output_physical_slots=output_physical_slots,
            )
        return int(plan.candidate_nbytes), int(plan.total_slices), str(plan.reason)


@lru_cache(maxsize=1024)
def _indexer_plan(
    b: B12xLayouts,
    num_q_heads: int,
    max_q_rows: int,
    page_table_width: int,
    topk: int,
    mode: str,
    shared_page_table: bool,
    supertile_k: int,
    num_sms: int,
    fused: bool,
) -> tuple[int, str]:
    scratch = b._mods["scratch"]
    k = b.constants
    # The library applies its capacity cap only when the supertile is left to its default.
    explicit = 0 if supertile_k == k.indexer_supertile_default else supertile_k
    env = {B12X_FUSED_INDEXER: "1" if fused else "0", B12X_PAGED_INDEX_SUPERTILE_K: None}
    with _scoped_env(env):
        plan = scratch.plan_indexer_scratch(
            scratch.B12XIndexerScratchCaps(
                device="cpu",
                source_layout="paged",
                num_q_heads=num_q_heads,
                max_q_rows=max_q_rows,
                max_page_table_width=page_table_width,
                topk=topk,
                mode=mode,
                shared_page_table=shared_page_table,
                supertile_k=explicit,
            )
        )
    layout = plan.layout
    nbytes = int(layout.nbytes)
    route = str(layout.route)
    if route == "paged_fused":
        a = k.indexer_scratch_align
        lib_state = int(layout.fused_state_words) * 4
        nbytes += 2 * (align(num_sms * topk * 4, a) - align(int(layout.fused_pack_elements) * 4, a))
        nbytes += align(max_q_rows * k.indexer_fused_merge_state_bytes_per_row, a) - align(lib_state, a)
    return nbytes, route


#: what the terminal shows while b12x imports (torch, triton and the CUDA DSL: ~3 s on a warm cache)
IMPORT_MESSAGE = "importing b12x (torch, triton) for its layouts and planners…"


def _silence_finalization_noise() -> None:
    """Keep the interpreter's shutdown from printing triton's nanobind leak report on stderr.

    b12x imports triton, whose libtriton is built with nanobind; when the interpreter finalizes, nanobind
    lists every triton object still alive ("nanobind: leaked 4 instances!", ~30 lines) on file descriptor
    2. They are triton's own caches, nothing glmlaunch can release, and the switch nanobind has for it
    (``set_leak_warnings``) is not exported by libtriton. So once the run is over (atexit: every message
    of glmlaunch's is written by then), descriptor 2 goes to /dev/null for what finalization prints.
    """
    import atexit

    def close_stderr() -> None:
        try:
            sys.stderr.flush()
            devnull = os.open(os.devnull, os.O_WRONLY)
        except (OSError, ValueError):
            return
        try:
            os.dup2(devnull, 2)
        finally:
            os.close(devnull)

    atexit.register(close_stderr)


@lru_cache(maxsize=1)
def _modules() -> dict[str, Any] | None:
    # The import is the slow part of `--library b12x`: without a sign of life the command looks hung.
    # progress() draws only on a terminal, after a second, and erases itself; a pipe or a log gets nothing.
    from glmlaunch.output import progress

    try:
        with progress(IMPORT_MESSAGE):
            from b12x.attention.dsa_indexer import fused_indexer, paged, scratch
            from b12x.comm.pcie import pcie_dcp_a2a, pcie_dcp_topk, pcie_dma, pcie_oneshot
    except Exception:  # any import failure (missing torch, triton, CUDA DSL) means "not available"
        return None
    _silence_finalization_noise()
    return {
        "oneshot": pcie_oneshot,
        "dma": pcie_dma,
        "a2a": pcie_dcp_a2a,
        "topk": pcie_dcp_topk,
        "scratch": scratch,
        "paged": paged,
        "fused": fused_indexer,
    }


@lru_cache(maxsize=8)
def load(k: StackConstants) -> B12xLayouts | None:
    """The bridge for stack constants ``k``, or None when b12x cannot be imported."""
    mods = _modules()
    if mods is None:
        return None
    try:
        version = importlib.metadata.version("b12x")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return B12xLayouts(k, mods, version)


def available() -> bool:
    return _modules() is not None
