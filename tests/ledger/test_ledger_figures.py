"""Every figure of docs/memory-model.md §5 and §8 (the seed's re-review), as regression vectors.

The review's DCP A2A figures assume 96 attention heads (24 per TP rank) and a 1 KiB signal region; GLM-5.2's
config.json has 64 heads (16 per TP rank; the r14 boot logs print heads=64 at TP4/DCP4) and the libraries
declare larger signal regions (sparkinfer de04125 measures 133,120 B, b12x 1.5.1 declares 266,240 B). The
figures are reproduced with the seed's inputs; the 64-head numbers the ledger uses for GLM-5.2 are pinned
next to them (``test_a2a_with_config_json_geometry``).
"""

from __future__ import annotations

import pytest
from conftest import SEED_TURNKEY

from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger import build_ledger, dcp_a2a, dma, fold, indexer, paged_logits
from glmlaunch.ledger.constants import SEED_DCP_A2A_SIGNAL_BYTES, SPARKINFER_R14

MIB = 1024 * 1024
GIB = 1024 * MIB
K = SPARKINFER_R14


def mib(n: int) -> float:
    return n / MIB


def seed_slab(heads: int, batch: int = 64) -> int:
    return dcp_a2a.slab_bytes(
        signal_bytes=SEED_DCP_A2A_SIGNAL_BYTES, batch=batch, heads=heads, head_dim=512, query_head_dim=576
    )


# --- §5: DCP A2A channels and one-shot rank_data -------------------------------------------------


def test_a2a_channel_dcp4_seed_inputs() -> None:
    # align(64*96*576*2) + align(64*96*4) per slot, x2 slots + signal
    assert seed_slab(96) == 14_205_952
    assert round(mib(seed_slab(96)), 2) == 13.55


def test_a2a_channel_dcp2_seed_inputs() -> None:
    assert seed_slab(48) == 7_103_488
    assert round(mib(seed_slab(48)), 2) == 6.77


def _a2a_channels(profile: str, *sets: str) -> int:
    config = resolve_config(profile, sets).config
    ledger = build_ledger(config)
    return sum(e.count for e in ledger.rank0.entries if e.subsystem == "dcp_a2a")


def test_gate_channel_counts_and_totals() -> None:
    # gate: V2, MTP3 -> 1 eager + target + drafter prefill + drafter decode
    n = _a2a_channels("gate")
    assert n == 4
    assert round(mib(n * seed_slab(96)), 2) == 54.19


def test_gate_mtp0_channels() -> None:
    n = _a2a_channels("gate", "speculative.num_speculative_tokens=0")
    assert n == 2
    assert round(mib(n * seed_slab(96)), 2) == 27.10


def test_turnkey_v1_channels_include_the_leak() -> None:
    n = _a2a_channels("turnkey", *SEED_TURNKEY)
    assert n == 3
    assert round(mib(n * seed_slab(48)), 2) == 20.32


@pytest.mark.parametrize(("profile", "sets", "channels"), [("gate", (), 4), ("turnkey", SEED_TURNKEY, 3)])
def test_rank_data_totals(profile: str, sets: tuple[str, ...], channels: int) -> None:
    ledger = build_ledger(resolve_config(profile, sets).config)
    rd = [e for e in ledger.rank0.entries if e.name.startswith("oneshot.rank_data.")]
    assert sum(e.count for e in rd) == channels
    assert sum(e.total_requested for e in rd) == channels * 8 * MIB  # 32 MiB gate, 24 MiB turnkey


def test_a2a_with_config_json_geometry() -> None:
    # 64 heads / TP4 * DCP4 = 64 gathered heads; B = 16 as in the r14 logs
    assert seed_slab(64, batch=16) == 2_368_512
    # at the shipped cap B = 64 the 64-head channel is 9,470,976 B, not the review's 14,205,952 B
    assert seed_slab(64, batch=64) == 9_470_976
    ledger = build_ledger(resolve_config("gate").config)
    eager = ledger.entry("dcp_a2a.slab.eager")
    assert eager is not None
    assert eager.requested_bytes == dcp_a2a.slab_bytes(
        signal_bytes=K.dcp_a2a_signal_bytes, batch=64, heads=64, head_dim=512, query_head_dim=576
    )
    # all three signal constants land on the same 2 MiB pages for GLM-sized channels
    pages = {
        -(
            -dcp_a2a.slab_bytes(signal_bytes=s, batch=64, heads=96, head_dim=512, query_head_dim=576)
            // (2 * MIB)
        )
        for s in (1024, 133_120, 266_240)
    }
    assert pages == {7}


def test_seed_heads_through_the_ledger() -> None:
    # the review's geometry (96 heads) through the whole ledger: 4 channels of the review's size class
    config = resolve_config("gate", ["model.geometry.num_attention_heads=96"]).config
    ledger = build_ledger(config)
    eager = ledger.entry("dcp_a2a.slab.eager")
    assert eager is not None
    assert eager.requested_bytes - K.dcp_a2a_signal_bytes == seed_slab(96) - SEED_DCP_A2A_SIGNAL_BYTES


# --- §8: DMA ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "slab", "stage", "full_saving", "ag_saving"),
    [(3072, 54.03, 18.56, 26.2, 13.1), (8192, 144.03, 49.5, 70, 35)],
)
def test_dma_figures(tokens: int, slab: float, stage: float, full_saving: float, ag_saving: float) -> None:
    w = 4
    mb = dma.max_bytes(tokens, 6144)
    assert mb == tokens * 6144 * 2
    if tokens == 3072:
        assert mb == 36 * MIB
        assert dma.shard_capacity(K, mb, w) == 9 * MIB
    assert round(mib(dma.slab_bytes(K, mb, w)), 2) == slab
    assert dma.slab_bytes(K, mb, w) == 32 * 1024 + 6 * dma.shard_capacity(K, mb, w)
    digits = 2 if stage < 20 else 1
    assert round(mib(dma.stage_bytes(K, mb, w)), digits) == stage
    dead = dma.shard_capacity(K, mb, w) - dma.compressed_slot_bytes(K, mb, w)
    prec = 1 if tokens == 3072 else 0
    assert round(mib(6 * dead), prec) == full_saving
    assert round(mib(3 * dead), prec) == ag_saving


def test_dma_compressed_figures_through_audit() -> None:
    from glmlaunch.plan.audit import audit_ledger

    for mode, expected in (("ring", 26.2), ("ag", 13.1)):
        config = resolve_config(
            "turnkey", [*SEED_TURNKEY, f"comm.dma_wire_mode={mode}", "comm.allow_compressed_wire=true"]
        ).config
        found = {f.id: f for f in audit_ledger(config, build_ledger(config)).findings}
        assert round(mib(found["dma-compressed-dead-slots"].recoverable_bytes), 1) == expected
        stage = build_ledger(config).entry("dma.fp8_stage")
        assert stage is not None and round(mib(stage.requested_bytes), 2) == 18.56


# --- §8 / §4: the two-level fold ----------------------------------------------------------------


def _fold(rows: int, width_tokens: int, mode: str = "auto") -> fold.FoldPlan:
    return fold.plan(
        K,
        rows=rows,
        topk=2048,
        width_pages=width_tokens // 64,
        supertile_pages=32768 // 64,
        output_physical_slots=False,
        mode=mode,
        budget_mib=256,
    )


def test_fold_figures() -> None:
    p48 = _fold(48, 524_288)
    assert p48.used and p48.total_slices == 32 and p48.candidate_nbytes == 25_166_016
    assert mib(p48.candidate_nbytes) == pytest.approx(24.00, abs=0.005)
    assert mib(_fold(64, 524_288).candidate_nbytes) == pytest.approx(32.00, abs=0.005)
    # ~1.34 GiB of alloc/free traffic per eager step over the 57 sparse layers
    assert round(57 * p48.candidate_nbytes / GIB, 2) == 1.34
    assert _fold(48, 1_048_576).total_slices == 32
    assert _fold(48, 2_097_152).total_slices == 64
    big = _fold(3072, 524_288)
    assert not big.used and big.candidate_nbytes == 1_610_625_024
    assert big.reason == "candidate slab exceeds the memory budget"
    assert _fold(3072, 524_288, mode="1").used
    assert not _fold(48, 16_384 * 2 - 64).used  # below 2 x 16,384 tokens


def test_fold_ledger_notes_decode_traffic() -> None:
    ledger = build_ledger(resolve_config("turnkey", SEED_TURNKEY).config)
    e = ledger.entry("fold.candidates")
    assert e is not None
    assert "48 rows -> 25,166,016 B" in e.note and "1,434,462,912 B" in e.note


# --- §8 / §3: the indexer prefill plan ----------------------------------------------------------


def _prefill(itemsize: int = 4) -> indexer.IndexerPlan:
    return indexer.plan_layout(
        K,
        rows=3072,
        width_pages=8192,
        topk=2048,
        heads=32,
        mode="prefill",
        shared_page_table=True,
        supertile_k=32768,
        num_sms=188,
        tile_logits_itemsize=itemsize,
    )


def test_indexer_prefill_plan_figures() -> None:
    p = _prefill()
    regions = dict(p.regions)
    assert p.nbytes == 557_999_104
    assert round(mib(p.nbytes), 1) == 532.1
    assert mib(regions["tile_logits"]) == 384.0
    assert mib(regions["topk_values"] + regions["topk_indices"]) == 48.0
    assert mib(regions["carry_values"] + regions["carry_indices"]) == 96.0
    assert round(mib(regions["gather_k_quant"] + regions["gather_k_scales"])) == 4
    assert round(mib(_prefill(itemsize=2).nbytes), 1) == 340.1


def test_indexer_plan_rows_cap_at_shipped_configs() -> None:
    # profile_q_rows = min(3072, 512 MiB / 4 / 32768 = 4096) = 3072 at both gate and turnkey
    for profile in ("gate", "turnkey"):
        ledger = build_ledger(resolve_config(profile).config)
        e = ledger.entry("indexer.prefill.lane0")
        assert e is not None and e.requested_bytes == 557_999_104


def test_direct_paged_logits_figure() -> None:
    assert paged_logits.nbytes(64, 524_288) == 128 * MIB
    config = resolve_config(
        "turnkey", [*SEED_TURNKEY, "cudagraph.capture_sizes=[6,64]"]
    ).config  # largest capture size 64
    ledger = build_ledger(config)
    # DCP 2 charges the CKV prefetch ring (ledger/dcp_prefill.py) and, with query split and
    # owner merge unset, the top-k exchange slab (A256(266,240) + 2 * A256(8 * 64 * 2048)) as latent
    assert [(e.name, e.requested_bytes) for e in ledger.latent] == [
        ("paged_logits.direct", 128 * MIB),
        ("dcp_topk.slab", 266_240 + 2 * 8 * 64 * 2048),
    ]
    assert ledger.entry("paged_logits.direct") is None  # latent: never charged to a rank
