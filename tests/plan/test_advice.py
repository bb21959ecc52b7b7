"""A refused plan's advice names what stands in the way with its figures, and never a pool of 0 bytes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from glmlaunch.config.units import format_size
from glmlaunch.plan.advice import obstacle, room_for_pool
from glmlaunch.plan.planner import plan_profile
from tests.conftest import run_cli

TP2_48 = ("--set", "parallel.tp=2", "--set", "parallel.dcp=1", "--set", "hardware.memory_per_gpu=48GiB")
#: advice of a pool of nothing (the facts line may say the KV cache is 0 B: that is what the plan holds)
ZERO = re.compile(r"^recommended.*(=0 \(0 B\)|holds 0 tokens)", re.MULTILINE)


def _plan(clean_env: dict[str, str], *args: str) -> tuple[int, str, dict[str, object]]:
    out = run_cli("plan", "-p", "turnkey", *args, env=clean_env)
    doc = json.loads(run_cli("plan", "-p", "turnkey", *args, "--json", env=clean_env).stdout)
    return out.returncode, out.stdout, doc


def test_weights_larger_than_the_gpu_say_so_with_the_figures(clean_env: dict[str, str]) -> None:
    code, text, doc = _plan(clean_env, *TP2_48)
    assert code == 4
    b = doc["budget"]
    assert isinstance(b, dict)
    assert not ZERO.search(text), text
    assert "recommended --kv-cache-memory-bytes" not in text
    line = next(x for x in text.splitlines() if x.startswith("nothing fits"))
    assert "the weights W" in line and "larger than GMU × T at any GMU" in line
    assert format_size(b["weights_bytes"]) in line and format_size(b["f0_bytes"]) in line
    assert format_size(b["total_bytes"]) in line
    # a GMU whose natural pool is empty is not a recommendation
    assert b["recommended_gpu_memory_utilization"] is None
    assert b["recommended_num_gpu_blocks"] is None


@pytest.mark.parametrize(
    ("memory", "names"),
    [
        ("80GiB", "W + P + N + G_e = "),  # the weights fit, the fixed terms do not
        ("85GiB", "the runtime demand"),  # the fixed terms fit, not with X and the demand
    ],
)
def test_other_refusals_name_their_obstacle(clean_env: dict[str, str], memory: str, names: str) -> None:
    code, text, doc = _plan(clean_env, "--set", f"hardware.memory_per_gpu={memory}")
    assert code == 4
    assert not ZERO.search(text), text
    line = next(x for x in text.splitlines() if x.startswith("nothing fits"))
    assert names in line
    b = doc["budget"]
    assert isinstance(b, dict) and b["recommended_gpu_memory_utilization"] is None


def test_the_obstacle_is_the_budget_arithmetic() -> None:
    # no obstacle where a pool fits; one exactly when the room for a pool is gone
    ok = plan_profile("turnkey").budget
    assert room_for_pool(ok) > 0 and obstacle(ok) is None
    for memory in (48, 80, 85):
        b = plan_profile("turnkey", [f"hardware.memory_per_gpu={memory}GiB"]).budget
        assert room_for_pool(b) <= 0
        said = obstacle(b) or ""
        over = b.w - b.f0 if b.w >= b.f0 else b.w + b.p + b.n + b.g_e - b.f0
        assert format_size(over if over >= 0 else -room_for_pool(b)) in said


REPO = Path(__file__).resolve().parents[2]
INVENTORY = REPO / "tests" / "fixtures" / "inventories" / "rtxpro6000x4.json"


def _schema(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads((REPO / "docs" / name).read_text()))


def test_a_refused_plan_recommends_no_pool_in_json(clean_env: dict[str, str]) -> None:
    """No pool keeps the plan: the JSON says null, as the text names the obstacle, never a pool of 0 B."""
    code, _, doc = _plan(clean_env, *TP2_48)
    assert code == 4
    _schema("plan-schema-v1.json").validate(doc)
    budget = doc["budget"]
    assert isinstance(budget, dict) and budget["recommended_kv_cache_memory_bytes"] is None
    # a plan that fits recommends a pool of its size (at half the turnkey's context: at its own, the pool the
    # band's low edge leaves is smaller than one request, test_the_turnkey_is_not_advised_…)
    _, _, ok = _plan(clean_env, "--set", "scheduler.max_model_len=262144")
    assert ok["budget"]["recommended_kv_cache_memory_bytes"] > 0  # type: ignore[index]
    # check: the same budget, the same null
    done = run_cli(
        "check", "-p", "turnkey", "--set", "parallel.tp=2", "--set", "parallel.dcp=1",
        "--inventory", str(INVENTORY), "--json", env=clean_env,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    [memory] = [r for r in json.loads(done.stdout)["results"] if r["name"] == "memory_verdict"]
    assert memory["status"] == "FAIL" and memory["details"]["recommended_kv_cache_memory_bytes"] is None
    # calibrate search: no value fits, and the closest it tried has no pool for the margin either
    done = run_cli(
        "calibrate", "search", "-p", "turnkey", "--set", "hardware.memory_per_gpu=85GiB", "--no-write",
        "--json", env=clean_env,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    search = json.loads(done.stdout)
    _schema("schemas/calibrate-search.schema.json").validate(search)
    assert search["kv_cache_memory_bytes"] is None
    assert search["closest_failed"]["kv_cache_memory_bytes_for_margin"] is None


def test_a_pool_that_fits_only_at_the_figures_is_no_recommendation(clean_env: dict[str, str]) -> None:
    """At 89,088 MiB a pool fits at the figures (no obstacle) but none at the band's low edge, where the
    recommendations are made: the text says so and the JSON says null (it printed `=0 (0 B)`)."""
    at = ("--set", "hardware.memory_per_gpu=89088MiB")
    code, text, doc = _plan(clean_env, *at)
    assert code == 4
    assert room_for_pool(plan_profile("turnkey", [at[1]]).budget) > 0
    assert not ZERO.search(text), text
    assert (
        "no --kv-cache-memory-bytes keeps the minimum margin and the runtime demand at the band's low edge"
        in text
    )
    assert doc["budget"]["recommended_kv_cache_memory_bytes"] is None  # type: ignore[index]


#: every verdict the recommendations are printed under: refused (request fit, start gate), runtime-oom,
#: oom-risk, ok; pinned and natural pools
ADVISED = [
    (profile, (*pool, f"memory.gpu_memory_utilization={gmu}"))
    for profile in ("turnkey", "exl3-tr3-3.42bpw", "r34-exl3-r7", "ii-r18-exl3-r7")
    for pool in ((), ("memory.num_gpu_blocks_override=null",))
    for gmu in ("0.93", "0.96", "0.98", "0.99")
]


@pytest.mark.parametrize(("profile", "sets"), ADVISED)
def test_every_recommended_pool_plans_ok_as_written(profile: str, sets: tuple[str, ...]) -> None:
    # the advice is applied as the text writes it (a pin with the context it holds; a fixed pool in place
    # of any pin) and planned: vLLM checks one request against a fixed pool, a shorter context moves the
    # profile run's terms, and no pool lifts the start gate
    b = plan_profile(profile, sets).budget
    natural = [s for s in sets if "num_gpu_blocks_override" not in s]
    if b.recommended_num_gpu_blocks is not None:
        pin = [f"memory.num_gpu_blocks_override={b.recommended_num_gpu_blocks}"]
        pin += [f"scheduler.max_model_len={b.recommended_context_tokens}"]
        assert plan_profile(profile, [*natural, *pin]).verdict.ok, (sets, pin)
    if b.recommended_kv_cache_memory_bytes is not None:
        fixed = ["memory.num_gpu_blocks_override=null"]
        fixed += [f"memory.kv_cache_memory_bytes={b.recommended_kv_cache_memory_bytes}"]
        assert plan_profile(profile, [*natural, *fixed]).verdict.ok, (sets, fixed)
    for dropped in b.dropped_advice:
        assert ", planned, is blocked by the " in dropped


def test_the_turnkey_is_not_advised_a_fixed_pool_smaller_than_one_request(clean_env: dict[str, str]) -> None:
    # the band's low edge leaves a fixed pool of 7.75 GiB; one 524,288-token request needs 7.81 GiB: vLLM
    # would refuse it, so the plan says so instead of recommending it
    code, text, doc = _plan(clean_env)
    assert code == 0
    b = doc["budget"]
    assert isinstance(b, dict)
    assert b["recommended_kv_cache_memory_bytes"] is None
    assert "recommended --kv-cache-memory-bytes" not in text
    line = next(x for x in text.splitlines() if x.startswith("not recommended: --kv-cache-memory-bytes="))
    assert "the request fit" in line and "524,288-token request" in line
    assert "with scheduler.max_model_len=" in text
