"""Channels per pass from r17 (vLLM PR 216), the pools' SM-residency check, and the r32 one-shot shards.

The vLLM side is read from each release's integration patch (tests/fixtures/generations/<stack>.json,
``vllm``); the library side (residency, shard rule) from each tree (test_generations.py).
"""

from __future__ import annotations

import pytest

from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger import build_ledger
from glmlaunch.ledger.channels import channel_plan
from glmlaunch.preflight.backends.sequence import capture_passes


def plan(runner: str, mtp: int, *, semantic: bool, piecewise: bool = True) -> dict[str, int]:
    p = channel_plan(
        runner=runner,
        mtp=mtp,
        graphs=True,
        single_channel=False,
        estimate_cudagraphs=True,
        eager_lifetime="pre-snapshot",
        semantic=semantic,
        piecewise=piecewise,
    )
    return {g.role: g.count for g in p.groups}


@pytest.mark.parametrize(("mtp", "passes"), [(0, 1), (1, 2), (2, 3), (5, 3)])
def test_v2_counts_are_unchanged_by_named_channels(mtp: int, passes: int) -> None:
    before, after = plan("v2", mtp, semantic=False), plan("v2", mtp, semantic=True)
    assert before == after == {"eager": 1, "profiling-residue": 1, "capture": passes}


def test_v1_no_longer_leaks_and_the_drafter_gets_its_own_channel() -> None:
    assert plan("v1", 0, semantic=False) == {"eager": 1, "leaked-profiling": 1, "capture": 1}
    assert plan("v1", 0, semantic=True) == {"eager": 1, "profiling-residue": 1, "capture": 1}
    # the drafter's own pass exists only where PIECEWISE graphs are captured
    # (_captures_independent_drafter_graphs in the r17+ gpu_model_runner.py)
    assert plan("v1", 3, semantic=True, piecewise=True) == {"eager": 1, "profiling-residue": 1, "capture": 2}
    assert plan("v1", 3, semantic=True, piecewise=False) == {"eager": 1, "profiling-residue": 1, "capture": 1}


def _entries(profile: str, *sets: str) -> dict[str, tuple[int, str]]:
    ledger = build_ledger(resolve_config(profile, list(sets), environ={}).config)
    return {e.name: (e.count, e.lifetime) for e in ledger.rank0.entries}


def test_v1_ledger_per_generation() -> None:
    r14 = _entries("turnkey", "stack=sparkinfer-r14", "release=r14", "runner=v1")
    r28 = _entries("turnkey", "runner=v1")
    assert r14["oneshot.slab.leaked-profiling"] == (1, "profiled")
    assert r14["oneshot.slab.capture"] == (1, "unbudgeted")
    assert not any("leaked" in name for name in r28)
    # turnkey: MTP 5, FULL_AND_PIECEWISE: target and drafter production channels, both after the KV sizing
    assert r28["oneshot.slab.capture"] == (2, "unbudgeted")
    assert r28["dcp_a2a.slab.capture"] == (2, "unbudgeted")
    assert r28["oneshot.rank_data_cached.profiling-residue"] == (1, "profiled")


def test_the_named_passes_the_preflight_enters() -> None:
    r28 = resolve_config("turnkey", environ={}).config
    assert [(p.name, p.channel_id, p.rollback) for p in capture_passes(r28)] == [
        ("target-profile", "vllm:target:profile", True),
        ("target", "vllm:target:production", False),
        ("draft-prefill", "vllm:draft:prefill:production", False),
        ("draft-decode", "vllm:draft:decode:production", False),
    ]
    r14 = resolve_config("turnkey", ["stack=sparkinfer-r14", "release=r14"], environ={}).config
    assert {p.channel_id for p in capture_passes(r14)} == {None}
    v1 = resolve_config("turnkey", ["runner=v1"], environ={}).config
    assert [p.channel_id for p in capture_passes(v1)] == [
        "vllm:target:profile",
        "vllm:target:production",
        "vllm:draft:production",
    ]


def test_pools_need_resident_grids_from_r17() -> None:
    # 36 x 2 = 72 SMs for the one-shot pool, 64 x 2 = 128 for the DCP A2A pool (max_concurrent_channels=2)
    few = ("hardware.num_sms=100",)
    r28 = build_ledger(resolve_config("turnkey", list(few), environ={}).config)
    names = {e.subsystem for e in r28.rank0.entries}
    assert "dcp_a2a" not in names and "oneshot" in names and "dma" in names
    assert any("no DCP A2A pool" in n and "128 visible SMs" in n for n in r28.notes)
    tiny = build_ledger(resolve_config("turnkey", ["hardware.num_sms=64"], environ={}).config)
    assert not {"oneshot", "dma", "dcp_a2a", "capture_stream"} & {e.subsystem for e in tiny.rank0.entries}
    assert any("falls back to PyNCCL" in n for n in tiny.notes)
    # r12-r16 pools check nothing
    r14 = build_ledger(
        resolve_config(
            "turnkey", ["stack=sparkinfer-r14", "release=r14", "hardware.num_sms=64"], environ={}
        ).config
    )
    assert {"oneshot", "dma", "dcp_a2a"} <= {e.subsystem for e in r14.rank0.entries}


def _oneshot_slab(*sets: str) -> int:
    config = resolve_config("turnkey", ["parallel.tp=8", "hardware.gpu_count=8", *sets], environ={}).config
    entry = build_ledger(config).entry("oneshot.slab.eager")
    assert entry is not None
    return entry.requested_bytes


def test_r32_shards_the_one_shot_slot_at_tp8_by_default() -> None:
    assert _oneshot_slab("stack=b12x-r29", "release=r29") == 322_560
    assert _oneshot_slab("stack=b12x-r32", "release=r34") == 1_526_784  # A256(150,528) + 2 x 8 x 86,016
    assert _oneshot_slab("stack=b12x-r32", "release=r34", "comm.oneshot_tp8_owner_reduce=false") == 322_560
    assert _oneshot_slab("stack=sparkinfer-r28") == 322_816  # the r28 signal carries a staging generation
