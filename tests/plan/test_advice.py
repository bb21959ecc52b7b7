"""A refused plan's advice names what stands in the way with its figures, and never a pool of 0 bytes."""

from __future__ import annotations

import json
import re

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
