"""The R7 checkpoint on the r34 and Infernal Invocation stacks: its weights, arenas, load-time peak, the
ii profile pass, the runtime demand and the KV pool the README documents. Real profiles, the real ledger."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from glmlaunch.calibrate.apply import calibration_for
from glmlaunch.calibrate.store import Store
from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger import build_ledger
from glmlaunch.ledger.budget import Budget
from glmlaunch.plan.plan import make_plan

REPO = Path(__file__).resolve().parents[2]
GIB = 2**30
MIB = 2**20
R7 = ("r34-exl3-r7", "ii-r18-exl3-r7")
#: blackwell-llm-docker README@3dd078a L909-919: the r34 R7 compose's KV pool at its two qualified shapes
README_KV = {(3, 0.98): 75_072, (0, 0.97): 82_816}


def _plan(profile: str, *sets: str) -> tuple[DeploymentConfig, Budget, Any]:
    """A plan as on a fresh machine: the rig defaults, no calibration record."""
    config = resolve_config(profile, sets, environ={}).config
    plan = make_plan(config, store=Store(REPO / "tests" / "no-such-store"))
    return config, plan.budget, plan


@pytest.mark.parametrize("profile", R7)
def test_weights_are_the_readme_figure(profile: str) -> None:
    _config, budget, result = _plan(profile)
    assert round(budget.w / GIB, 2) == 86.61
    w = result.ledger.entry("weights")
    assert w is not None and "B:README.md@9350b50 L227-229" in w.formula and "86.61 GiB" in w.formula
    # measured on ii r17: for r34 another line's figure, for ii r18 another release's (an estimate)
    assert w.origin == "estimate" and "ii-r17" in w.note


@pytest.mark.parametrize("profile", R7)
def test_both_serve_ok(profile: str) -> None:
    _config, budget, _result = _plan(profile)
    assert budget.verdict == "ok", budget.reasons
    assert budget.request_fits and budget.runtime_margin >= 0


@pytest.mark.parametrize(("mtp", "gmu"), list(README_KV))
def test_r34_kv_pool_is_within_3_percent_of_the_readme(mtp: int, gmu: float) -> None:
    _config, budget, _result = _plan(
        "r34-exl3-r7", f"speculative.num_speculative_tokens={mtp}", f"memory.gpu_memory_utilization={gmu}"
    )
    want = README_KV[(mtp, gmu)]
    assert abs(budget.kv_tokens - want) / want <= 0.03, (budget.kv_tokens, want)


def test_the_arenas_replace_the_old_executors() -> None:
    names = build_ledger(resolve_config("r34-exl3-r7", environ={}).config).names()
    assert {
        "exl3.r7_arena.target.decode",
        "exl3.r7_arena.target.prefill",
        "exl3.r7_arena.draft.decode",
        "exl3.r7_arena.draft.prefill",
        "exl3.k6_scratch",
    } <= set(names)
    assert "exl3.trellis_arena" not in names and "exl3.drafter_arena" not in names
    mtp0 = build_ledger(
        resolve_config("r34-exl3-r7", ["speculative.num_speculative_tokens=0"], environ={}).config
    )
    assert not [n for n in mtp0.names() if n.startswith("exl3.r7_arena.draft")]
    # the older checkpoints, and the R7 checkpoint on a SparkInfer stack, keep the fitted executors
    for profile, sets in (("exl3-tr3-3.42bpw", ()), ("r34-exl3-r7", ("stack=sparkinfer-r28", "release=r28"))):
        names = build_ledger(resolve_config(profile, sets, environ={}).config).names()
        assert "exl3.trellis_arena" in names and not [n for n in names if n.startswith("exl3.r7_arena")]


def test_the_prefill_block_sizes_the_arena() -> None:
    led = build_ledger(resolve_config("r34-exl3-r7", environ={}).config)
    a = led.entry("exl3.r7_arena.target.prefill")
    assert a is not None and a.requested_bytes == 552_704_944  # 527.1 MiB at block 32 (vLLM's choice)
    led = build_ledger(resolve_config("r34-exl3-r7", ["env.VLLM_EXL3_PREFILL_BLOCK_M=16"], environ={}).config)
    b = led.entry("exl3.r7_arena.target.prefill")
    assert b is not None and b.requested_bytes < a.requested_bytes and "explicit" in b.condition


def test_the_ii_profile_pass_is_in_p() -> None:
    ii = build_ledger(resolve_config("ii-r18-exl3-r7", environ={}).config)
    gg = build_ledger(resolve_config("r34-exl3-r7", environ={}).config)
    logits, topk = ii.entry("profile.verify_logits"), ii.entry("profile.topk_indices")
    assert logits is not None and logits.requested_bytes == 8 * 4 * 154_880 * 4
    assert topk is not None and topk.requested_bytes == 2048 * 2048 * 4
    assert gg.entry("profile.verify_logits") is None and gg.entry("profile.topk_indices") is None


def test_load_time_peak() -> None:
    _config, budget, result = _plan("ii-r18-exl3-r7")
    load = result.ledger.load_time
    assert load is not None
    parts = {e.name: e.device_bytes for e in load.entries}
    assert parts["load.r7_ballast"] == 512 * 6144 * 512 * 3 // 8 == 576 * MIB
    # 512 MiB tensor buffer + 8 MiB x 1 x (512 // 4) x 4 of I/O staging, below 0.05 x F0
    assert parts["load.instanttensor_ring"] == 512 * MIB + 4 * GIB
    assert parts["weights"] == budget.w
    assert budget.load_peak == sum(parts.values()) and budget.load_margin == budget.f0 - budget.load_peak
    assert budget.load_margin > 0
    # a deeper I/O queue than free memory allows at this share is capped by it; a larger share is not
    _c, capped, _r = _plan("ii-r18-exl3-r7", "env.INSTANTTENSOR_IO_DEPTH=512")
    assert capped.load_peak < budget.load_peak + 12 * GIB
    _c, refused, r = _plan(
        "ii-r18-exl3-r7", "env.INSTANTTENSOR_IO_DEPTH=512", "env.INSTANTTENSOR_MAX_FREE_MEM_USAGE=0.5"
    )
    assert refused.verdict == "refused" and refused.load_margin is not None and refused.load_margin < 0
    assert [b.id for b in r.verdict.blockers][:1] == ["load"]
    # safetensors loads of the older checkpoints have no load-time section
    _c, _b, r = _plan("exl3-tr3-3.42bpw")
    assert r.ledger.load_time is None


def test_the_runtime_demand_of_the_line() -> None:
    led = build_ledger(resolve_config("r34-exl3-r7", environ={}).config)
    names = {t.entry.name: t.entry for t in led.runtime.transients}
    assert "demand.online_quant" not in names  # the K6 temporary is profiled (exl3.k6_scratch)
    growth = names["demand.prefill_growth"]
    assert "r7_prefill_growth_bytes_per_token" in growth.formula and "r34-r7-mtp3-gmu098" in growth.formula
    old = build_ledger(resolve_config("exl3-tr3-3.42bpw", environ={}).config)
    olds = {t.entry.name: t.entry for t in old.runtime.transients}
    assert "demand.online_quant" in olds and "r7_prefill" not in olds["demand.prefill_growth"].formula


def test_nccl_on_the_ii_image_is_an_estimate() -> None:
    config = resolve_config("ii-r18-exl3-r7", environ={}).config
    cal = calibration_for(config, store=Store(REPO / "tests" / "no-such-store")).inputs
    ii = build_ledger(config, cal)
    nccl = ii.entry("runtime.nccl")
    assert nccl is not None and nccl.origin == "estimate" and "NCCL_CUMEM_ENABLE=0" in nccl.note
    gg = build_ledger(resolve_config("r34-exl3-r7", environ={}).config, cal)
    assert "NCCL_CUMEM_ENABLE" not in (gg.entry("runtime.nccl") or nccl).note


def test_plan_json_has_the_load_time_only_where_it_exists(clean_env: dict[str, str]) -> None:
    def plan(profile: str) -> dict[str, object]:
        res = subprocess.run(
            [sys.executable, "-m", "glmlaunch", "plan", "-p", profile, "--json"],
            cwd=REPO,
            env=clean_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        doc: dict[str, object] = json.loads(res.stdout)
        return doc

    doc = plan("ii-r18-exl3-r7")
    load = doc["load_time"]
    assert isinstance(load, dict) and load["margin_bytes"] == load["f0_bytes"] - load["peak_bytes"]
    assert [e["name"] for e in load["entries"]][:2] == ["weights", "load.r7_ballast"]
    assert "load_time" not in plan("gate")
