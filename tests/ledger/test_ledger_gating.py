"""Gating: an entry exists exactly when something reads it under the configuration."""

from __future__ import annotations

import pytest
from conftest import SEED_TURNKEY, UNSET_DCP_POLICY

from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger import build_ledger
from glmlaunch.ledger.model import Ledger


def names(profile: str, *sets: str) -> set[str]:
    return set(build_ledger(resolve_config(profile, sets).config).names())


def ledger(profile: str, *sets: str) -> Ledger:
    return build_ledger(resolve_config(profile, sets).config)


def test_compressed_stage_only_on_a_compressed_wire() -> None:
    assert "dma.fp8_stage" not in names("r12-exl3")
    assert "dma.fp8_stage" in names("r12-exl3", "comm.dma_wire_mode=i8", "comm.allow_compressed_wire=true")


def test_dma_slab_only_when_dma_is_on() -> None:
    on = names("r12-exl3")
    assert {"dma.slab", "dma.counters"} <= on
    off = names("r12-exl3", "comm.dma_min_bytes=off")
    assert not {n for n in off if n.startswith("dma.")}
    no_pcie = names("r12-exl3", "comm.pcie_allreduce=false")
    assert not {n for n in no_pcie if n.startswith(("dma.", "oneshot."))}


def test_topk_exchange_only_with_query_split_or_owner_merge() -> None:
    assert "dcp_topk.slab" not in names("r12-exl3", *UNSET_DCP_POLICY)
    assert "dcp_topk.slab" in names("r12-exl3", *UNSET_DCP_POLICY, "dcp_policy.query_split=true")
    assert "dcp_topk.slab" in names("r12-exl3", *UNSET_DCP_POLICY, "dcp_policy.topk_owner_merge=true")
    assert "dcp_topk.slab" not in names(
        "r12-exl3", *UNSET_DCP_POLICY, "dcp_policy.query_split=false", "dcp_policy.topk_owner_merge=false"
    )
    # unset: vLLM's default (off) applies, so nothing is charged and nothing is noted; the slab is listed
    # as latent (a caller's VLLM_DCP_* variable could still turn it on), and only while undecided
    unset = ledger("r12-exl3", *UNSET_DCP_POLICY)
    assert not unset.notes
    assert [e.name for e in unset.latent if e.name == "dcp_topk.slab"] == ["dcp_topk.slab"]
    decided = ledger(
        "r12-exl3", *UNSET_DCP_POLICY, "dcp_policy.query_split=false", "dcp_policy.topk_owner_merge=false"
    )
    assert not decided.notes and "dcp_topk.slab" not in {e.name for e in decided.latent}
    on = ledger("r12-exl3", *UNSET_DCP_POLICY, "dcp_policy.topk_owner_merge=true")
    assert "dcp_topk.slab" not in {e.name for e in on.latent}
    charged, latent = on.entry("dcp_topk.slab"), next(e for e in unset.latent if e.name == "dcp_topk.slab")
    assert charged is not None and charged.requested_bytes == latent.requested_bytes
    assert charged.device_bytes == latent.device_bytes  # whole 2 MiB pages either way


def test_lane1_only_on_v2_with_speculative_decoding() -> None:
    assert "indexer.prefill.lane1" in names("gate")
    assert "indexer.prefill.lane1" not in names("gate", "speculative.num_speculative_tokens=0")
    assert "indexer.prefill.lane1" not in names("turnkey", *SEED_TURNKEY)  # V1


def test_no_dcp_pools_at_dcp1() -> None:
    n = names("r12-exl3", "parallel.dcp=1")
    assert not {x for x in n if x.startswith(("dcp_a2a.", "dcp_topk."))}
    assert "dcp_topk.slab" not in names("r12-exl3", "parallel.dcp=1", "dcp_policy.query_split=true")
    # DCP 1 asks for physical slots, which disables the two-level fold
    assert "fold.candidates" not in n
    assert not {x for x in names("r12-exl3", "comm.dcp_a2a=false") if x.startswith("dcp_a2a.")}


def test_channel_groups_follow_runner_mtp_and_graphs() -> None:
    v2 = ledger("gate")
    assert {e.name: e.count for e in v2.rank0.entries if e.name.startswith("dcp_a2a.")} == {
        "dcp_a2a.slab.eager": 1,
        "dcp_a2a.slab.capture": 3,
    }
    assert ledger("gate", "speculative.num_speculative_tokens=1").entry("dcp_a2a.slab.capture").count == 2  # type: ignore[union-attr]
    v1 = ledger("turnkey", *SEED_TURNKEY)
    assert {e.name: (e.count, e.lifetime) for e in v1.rank0.entries if e.name.startswith("dcp_a2a.")} == {
        "dcp_a2a.slab.eager": (1, "profiled"),
        "dcp_a2a.slab.leaked-profiling": (1, "profiled"),
        "dcp_a2a.slab.capture": (1, "unbudgeted"),
    }
    eager_only = names("turnkey", *SEED_TURNKEY, "cudagraph.mode=NONE")
    assert "dcp_a2a.slab.leaked-profiling" not in eager_only and "dcp_a2a.slab.capture" not in eager_only
    assert "cudagraph.pool" not in eager_only
    single = ledger("gate", "comm.single_channel=true")
    assert [e.name for e in single.rank0.entries if e.subsystem == "dcp_a2a"] == ["dcp_a2a.slab.eager"]


def test_graph_estimate_off_makes_capture_channels_unbudgeted() -> None:
    led = ledger("gate", "memory.estimate_cudagraphs=false")
    for name in ("dcp_a2a.slab.capture", "oneshot.slab.capture", "cudagraph.pool"):
        e = led.entry(name)
        assert e is not None and e.lifetime == "unbudgeted"


def test_oneshot_eager_is_pre_snapshot_and_a2a_eager_is_profiled() -> None:
    led = ledger("gate")
    assert led.entry("oneshot.slab.eager").lifetime == "pre-snapshot"  # type: ignore[union-attr]
    assert led.entry("dcp_a2a.slab.eager").lifetime == "profiled"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("sets", "present"),
    [
        ((), True),
        (("indexer.fold=0",), False),
        (("scheduler.max_model_len=32704",), False),  # below 2 x 16,384 tokens
        (("indexer.sparse_indexer=false",), False),
    ],
)
def test_fold_gating(sets: tuple[str, ...], present: bool) -> None:
    assert ("fold.candidates" in names("turnkey", *SEED_TURNKEY, *sets)) is present


def test_indexer_off_removes_plans_and_latent_hazard() -> None:
    led = ledger("turnkey", *SEED_TURNKEY, "indexer.sparse_indexer=false")
    assert not [n for n in led.names() if n.startswith("indexer.")]
    # only the DCP top-k exchange slab stays latent: not indexer plans
    assert [e.name for e in led.latent] == ["dcp_topk.slab"]


def test_indexer_decode_plan_is_absorbed_by_the_prefill_plan() -> None:
    led = ledger("turnkey", *SEED_TURNKEY)
    pre, dec = led.entry("indexer.prefill.lane0"), led.entry("indexer.decode.lane0")
    assert pre is not None and dec is not None
    assert pre.device_bytes > 0 and dec.device_bytes == 0 and "absorbed" in dec.note


def test_no_nccl_or_pools_at_tp1() -> None:
    n = names("r12-exl3", "parallel.tp=1", "parallel.dcp=1")
    assert "runtime.nccl" not in n
    assert not {x for x in n if x.startswith(("oneshot.", "dma.", "dcp_a2a."))}


def test_unsupported_world_sizes_drop_the_pool_and_say_so() -> None:
    # resolve_config rejects these sizes; a config built around validation must still be planned honestly
    base = resolve_config("r12-exl3").config
    config = base.model_copy(
        update={"parallel": base.parallel.model_copy(update={"tp": 3, "dcp": 3, "gpus": [0, 1, 2]})}
    )
    led = build_ledger(config)
    assert not [n for n in led.names() if n.startswith(("oneshot.", "dcp_a2a."))]
    assert any("one-shot world size" in n for n in led.notes)
    assert any("DCP A2A world size" in n for n in led.notes)


def test_dcp_communicator_only_at_dcp_above_1() -> None:
    assert "runtime.nccl_dcp" in names("r12-exl3")
    assert "runtime.nccl_dcp" not in names("r12-exl3", "parallel.dcp=1")


def test_capture_stream_segments_follow_the_capture_passes() -> None:
    gate = ledger("gate", "parallel.tp=2", "parallel.dcp=2")
    exchange = gate.entry("capture_stream.exchange.capture")
    assert exchange is not None and exchange.count == 3  # target + drafter prefill + drafter decode
    assert "capture_stream.exchange.profiling-residue" in gate.names()
    assert "oneshot.rank_data_cached.profiling-residue" in gate.names()
    assert "dcp_a2a.slab.profiling-residue" not in gate.names()  # the rollback returns the slabs
    assert "oneshot.slab.profiling-residue" not in gate.names()
    turnkey = names("turnkey", *SEED_TURNKEY, "parallel.tp=2", "parallel.dcp=2")  # V1: nothing rolled back
    assert {"capture_stream.exchange.leaked-profiling", "capture_stream.exchange.capture"} <= turnkey
    assert not {n for n in turnkey if n.endswith("profiling-residue")}
    for sets in (
        ("cudagraph.mode=NONE",),
        ("comm.single_channel=true",),
        ("comm.pcie_allreduce=false", "comm.dcp_a2a=false"),
    ):
        n = names("gate", "parallel.tp=2", "parallel.dcp=2", *sets)
        assert not {x for x in n if x.startswith("capture_stream.") or x.endswith("profiling-residue")}, sets
    # a DCP pool alone still exchanges handles on every capture stream
    dcp_only = names("gate", "parallel.tp=2", "parallel.dcp=2", "comm.pcie_allreduce=false")
    assert "capture_stream.exchange.capture" in dcp_only
