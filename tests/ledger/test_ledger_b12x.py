"""The built-in formulas give the installed b12x library's answers over a grid of shapes.

The installed b12x is PyPI 1.5.1, the ``b12x-1.5`` lab row, which no release runs; every release
generation is proven against its own tree in ``test_generations.py``. Marked ``b12x``; skipped when b12x
cannot be imported (it is installed in the venv and in CI). The
library's layout functions and planners run on a CPU-only machine; the CPU planner counts one SM, so
the fused-route comparisons pass ``num_sms=1`` to the built-in formula.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest

from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger import build_ledger, dcp_a2a, fold, indexer, oneshot, topk_exchange
from glmlaunch.ledger.constants import B12X_15, SPARKINFER_R14

pytestmark = pytest.mark.b12x

b12x_bridge = pytest.importorskip("glmlaunch.ledger.b12x_bridge")
if not b12x_bridge.available():  # pragma: no cover - depends on the environment
    pytest.skip("b12x is not importable", allow_module_level=True)

from b12x.attention.dsa_indexer import paged as lib_paged  # noqa: E402
from b12x.attention.dsa_indexer import scratch as lib_scratch  # noqa: E402
from b12x.comm.pcie import pcie_dcp_a2a as lib_a2a  # noqa: E402
from b12x.comm.pcie import pcie_dcp_topk as lib_topk  # noqa: E402
from b12x.comm.pcie import pcie_dma as lib_dma  # noqa: E402
from b12x.comm.pcie import pcie_oneshot as lib_oneshot  # noqa: E402

BRIDGE = b12x_bridge.load(B12X_15)
K = BRIDGE.constants


@contextmanager
def env(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_constants_match_the_library() -> None:
    assert B12X_15.oneshot_signal_bytes == lib_oneshot._SIGNAL_BYTES
    assert B12X_15.oneshot_rank_data_bytes == lib_oneshot.DEFAULT_RANK_DATA_BYTES
    assert B12X_15.ipc_align == lib_oneshot.IPC_SLAB_ALIGNMENT
    assert B12X_15.oneshot_world_sizes == tuple(lib_oneshot.SUPPORTED_WORLD_SIZES)
    assert (B12X_15.dma_flag_slots, B12X_15.dma_flag_stride) == (lib_dma.FLAG_SLOTS, lib_dma.FLAG_STRIDE)
    assert (B12X_15.dma_scratch_align, B12X_15.dma_fp8_quant_block) == (
        lib_dma.SCRATCH_ALIGN,
        lib_dma.FP8_QUANT_BLOCK,
    )
    assert B12X_15.dma_world_sizes == tuple(lib_dma.SUPPORTED_WORLD_SIZES)
    assert B12X_15.dcp_a2a_signal_bytes == lib_a2a._SIGNAL_BYTES == 266_240
    assert B12X_15.dcp_a2a_world_sizes == tuple(lib_a2a.SUPPORTED_WORLD_SIZES)
    assert B12X_15.dcp_topk_signal_bytes == lib_topk._SIGNAL_BYTES
    assert B12X_15.dcp_topk_world_sizes == tuple(lib_topk.SUPPORTED_WORLD_SIZES)
    assert B12X_15.indexer_supertile_default == lib_scratch._PAGED_INDEX_SUPERTILE_K_DEFAULT
    assert B12X_15.indexer_tile_block_q == lib_scratch._PAGED_INDEX_TILE_BLOCK_Q
    assert B12X_15.indexer_tile_block_k == lib_scratch._PAGED_INDEX_TILE_BLOCK_K
    assert B12X_15.fold_slice_tokens == lib_paged._TWO_LEVEL_SLICE_TOKENS
    assert B12X_15.fold_max_slices == lib_paged._TWO_LEVEL_MAX_SLICES
    assert B12X_15.fold_budget_mib_default == lib_paged._TWO_LEVEL_FOLD_MAX_MIB_DEFAULT
    # the bridge's row equals the built-in b12x row except for where the constants came from
    assert replace(K, source=B12X_15.source, dcp_a2a_signal_origin=B12X_15.dcp_a2a_signal_origin) == B12X_15


A2A_GRID = [
    (w, b, hpr * w, d, dq, s)
    for w, b, hpr, (d, dq), s in itertools.product(
        lib_a2a.SUPPORTED_WORLD_SIZES,
        (1, 16, 64, 3072),
        (8, 16, 24),
        ((512, 576), (256, 576), (512, 512), (576, 256)),
        (1024, 133_120, 266_240),
    )
]


@pytest.mark.parametrize(("w", "b", "h", "d", "dq", "signal"), A2A_GRID)
def test_dcp_a2a_layout(w: int, b: int, h: int, d: int, dq: int, signal: int) -> None:
    lib = lib_a2a._staging_layout(
        signal_bytes=signal, world_size=w, max_batch_size=b, total_heads=h, head_dim=d, query_head_dim=dq
    )
    assert (
        dcp_a2a.slab_bytes(signal_bytes=signal, batch=b, heads=h, head_dim=d, query_head_dim=dq)
        == lib.slab_bytes
    )
    assert dcp_a2a.slot_bytes(batch=b, heads=h, head_dim=d, query_head_dim=dq) == lib.slot_bytes


@pytest.mark.parametrize(
    ("w", "rows", "topk", "signal"),
    [
        (w, w * m, k, s)
        for w, m, k, s in itertools.product(
            lib_topk.SUPPORTED_WORLD_SIZES, (1, 16, 22, 1024), (512, 2048), (266_240, 532_480)
        )
    ],
)
def test_dcp_topk_layout(w: int, rows: int, topk: int, signal: int) -> None:
    lib = lib_topk._candidate_staging_layout(signal_bytes=signal, max_rows=rows, topk=topk, world_size=w)
    assert topk_exchange.slab_bytes(signal_bytes=signal, rows=rows, topk=topk) == lib.slab_bytes


@pytest.mark.parametrize(
    ("w", "push", "eager"),
    list(itertools.product(lib_oneshot.SUPPORTED_WORLD_SIZES, (False, True), (16, 65_536, 86_016, 8 << 20))),
)
def test_oneshot_slab(w: int, push: bool, eager: int) -> None:
    shards = oneshot.eager_shards(K, w, push)
    policy = (push, *lib_oneshot._transport_policy_contract()[1:])
    assert shards == lib_oneshot._eager_storage_shards(w, policy)
    builtin = oneshot.slab_bytes(signal_bytes=K.oneshot_signal_bytes, eager_bytes=eager, shards=shards)
    assert builtin == BRIDGE.oneshot_slab_bytes(eager_bytes=eager, world_size=w, push=push, shards=shards)


INDEXER_GRID: list[tuple[Any, ...]] = [
    case
    for case in itertools.product(
        (1, 6, 7, 16, 17, 33, 64, 511, 3072),  # rows
        (1, 100, 512, 513, 8192),  # page-table width (pages)
        (32, 64),  # heads
        (512, 2048),  # topk
        ("prefill", "decode"),
        (False, True),  # shared page table
        (32768, 8192, 1000),  # supertile (default, explicit, rounded up)
    )
    if not (case[4] == "prefill" and not case[5])  # vLLM's prefill plans always share the page table
]


@pytest.mark.parametrize(("rows", "width", "heads", "topk", "mode", "shared", "supertile"), INDEXER_GRID)
def test_indexer_plan(
    rows: int, width: int, heads: int, topk: int, mode: str, shared: bool, supertile: int
) -> None:
    explicit = 0 if supertile == K.indexer_supertile_default else supertile
    with env(B12X_FUSED_INDEXER="1"):
        lib = lib_scratch.plan_indexer_scratch(
            lib_scratch.B12XIndexerScratchCaps(
                device="cpu",
                source_layout="paged",
                num_q_heads=heads,
                max_q_rows=rows,
                max_page_table_width=width,
                topk=topk,
                mode=mode,
                shared_page_table=shared,
                supertile_k=explicit,
            )
        ).layout
    mine = indexer.plan_layout(
        K,
        rows=rows,
        width_pages=width,
        topk=topk,
        heads=heads,
        mode=mode,
        shared_page_table=shared,
        supertile_k=supertile,
        num_sms=1,
        cc=None,
    )
    assert (mine.nbytes, mine.route, mine.supertile, mine.max_chunks) == (
        lib.nbytes,
        lib.route,
        lib.supertile_tokens,
        lib.max_chunks,
    )


def test_bridge_resizes_fused_pack_regions_for_the_sm_count() -> None:
    for rows in (1, 8, 16):
        mine = indexer.plan_layout(
            K,
            rows=rows,
            width_pages=8192,
            topk=2048,
            heads=32,
            mode="decode",
            shared_page_table=False,
            supertile_k=32768,
            num_sms=188,
        )
        assert mine.route == "paged_fused"
        nbytes, route = BRIDGE.indexer_plan_bytes(
            num_q_heads=32,
            max_q_rows=rows,
            page_table_width=8192,
            topk=2048,
            mode="decode",
            shared_page_table=False,
            supertile_k=32768,
            num_sms=188,
            fused=True,
        )
        assert (nbytes, route) == (mine.nbytes, mine.route)


@pytest.mark.parametrize(
    ("rows", "width", "st_pages", "physical", "mode", "budget"),
    list(
        itertools.product(
            (1, 48, 64, 511, 512, 3072),
            (100, 511, 512, 8192, 16384, 32768),
            (128, 512),
            (False, True),
            ("auto", "0", "1"),
            (0, 64, 256),
        )
    ),
)
def test_two_level_fold(rows: int, width: int, st_pages: int, physical: bool, mode: str, budget: int) -> None:
    with env(B12X_INDEXER_TWO_LEVEL_FOLD=mode, B12X_INDEXER_TWO_LEVEL_FOLD_MAX_MIB=str(budget)):
        lib = lib_paged._plan_two_level_fold(
            q_rows=rows,
            topk=2048,
            page_size=64,
            page_table_width=width,
            supertile_pages=st_pages,
            output_physical_slots=physical,
        )
    mine = fold.plan(
        K,
        rows=rows,
        topk=2048,
        width_pages=width,
        supertile_pages=st_pages,
        output_physical_slots=physical,
        mode=mode,
        budget_mib=budget,
    )
    assert mine.reason == lib.reason
    assert mine.used == (lib.total_slices > 0)
    if mine.used:
        assert (mine.total_slices, mine.candidate_nbytes) == (lib.total_slices, lib.candidate_nbytes)
    elif lib.candidate_nbytes:
        assert mine.candidate_nbytes == lib.candidate_nbytes


@pytest.mark.parametrize("profile", ["gate", "turnkey", "r12-exl3"])
@pytest.mark.parametrize("stack", ["sparkinfer-r14", "sparkinfer-r28", "b12x-r32", "b12x-1.5"])
def test_whole_ledger_builtin_equals_library(profile: str, stack: str) -> None:
    config = resolve_config(profile, [f"stack={stack}", "dcp_policy.query_split=true"]).config
    builtin = build_ledger(config)
    library = build_ledger(config, library="b12x")
    assert library.library == "b12x" and "imported" in library.constants_source
    assert [(e.name, e.requested_bytes, e.count, e.device_bytes) for e in builtin.rank0.entries] == [
        (e.name, e.requested_bytes, e.count, e.device_bytes) for e in library.rank0.entries
    ]
    assert {e.origin for e in library.rank0.entries if e.subsystem in ("dcp_a2a", "dma", "indexer")} <= {
        "library",
        "estimate",
    }


def test_sparkinfer_stack_keeps_its_own_signal_constants_under_the_bridge() -> None:
    bridge = b12x_bridge.load(SPARKINFER_R14)
    assert bridge.constants.dcp_a2a_signal_bytes == 133_120
    assert bridge.constants.indexer_fused_merge_state_bytes_per_row == 3088
    assert "sparkinfer-r14" in bridge.describe() and "de04125508c7" in bridge.describe()


def test_indexer_grid_covers_every_route_and_chunking() -> None:
    plans = [
        indexer.plan_layout(
            K, rows=r, width_pages=w, topk=t, heads=h, mode=m, shared_page_table=s, supertile_k=st, num_sms=1
        )
        for r, w, h, t, m, s, st in INDEXER_GRID
    ]
    assert {p.route for p in plans} == {"packed_contiguous", "paged_fused", "paged_tiled"}
    assert {p.max_chunks > 1 for p in plans} == {True, False}
