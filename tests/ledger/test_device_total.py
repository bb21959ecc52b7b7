"""The target rig's device total T: the shipped profiles, the constructed inventory and the real boot logs.

`plan` sizes the budget with the profile's ``hardware.memory_per_gpu``, `check --inventory` with the
inventory's usable total. They used to differ by 251,658 B (95.01GiB rounded to a byte vs 97,290 MiB),
both printed as 95.01 GiB, and turnkey's plan said 557,312 KV tokens where check said 557,184.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from conftest import FIXTURES, REPO, run_cli

from glmlaunch.config.resolve import resolve_config
from glmlaunch.hardware.inventory import load_inventory

PROFILES = sorted(p.stem for p in (REPO / "profiles").glob("*.yaml"))
RIG = FIXTURES / "inventories" / "rtxpro6000x4.json"
LOGS = sorted((FIXTURES / "boot-logs").glob("*.log"))
GIB, MIB = 2**30, 2**20

# vLLM's gpu_worker line after the KV cache is sized: F0 and T at two decimals, GMU, R at two decimals,
# then `--kv-cache-memory-bytes=` to fit R and to fit F0; both subtract the same non-KV memory and the same
# 150 MiB buffer, so their difference is F0 - R exactly, with R = ceil(GMU * T).
_LINE = re.compile(
    r"Free memory on device \((?P<f0>[\d.]+)/(?P<t>[\d.]+) GiB\) on startup\. Desired GPU memory "
    r"utilization is \((?P<gmu>[\d.]+), (?P<r>[\d.]+) GiB\)\..*?--kv-cache-memory-bytes=(?P<req>\d+)`.*?"
    r"--kv-cache-memory-bytes=(?P<full>\d+)`"
)


def _log_bounds() -> tuple[float, float, int]:
    """The open interval of T (bytes) every logged line allows, and how many lines there were."""
    lo, hi, lines = 0.0, math.inf, 0
    for log in LOGS:
        for m in _LINE.finditer(log.read_text(errors="replace")):
            lines += 1
            gmu = float(m["gmu"])
            f0_minus_r = int(m["full"]) - int(m["req"])
            # vLLM prints round(x / GiB, 2): each figure is within half a hundredth of a GiB
            half = 0.005 * GIB
            bounds = [
                (float(m["t"]) * GIB - half, float(m["t"]) * GIB + half),
                ((float(m["r"]) * GIB - half) / gmu, (float(m["r"]) * GIB + half) / gmu),
                (
                    (float(m["f0"]) * GIB - half - f0_minus_r) / gmu,
                    (float(m["f0"]) * GIB + half - f0_minus_r) / gmu,
                ),
            ]
            lo = max([lo, *(b[0] for b in bounds)])
            hi = min([hi, *(b[1] for b in bounds)])
    return lo, hi, lines


def test_the_profiles_state_the_inventorys_total_which_the_boot_logs_allow() -> None:
    lo, hi, lines = _log_bounds()
    assert lines >= 12  # three complete boots, four ranks each
    inv = load_inventory(RIG)
    usable = {g.usable_total for g in inv.gpus}
    assert len(usable) == 1
    (total,) = usable
    assert total is not None and total % MIB == 0  # CUDA's totals are whole MiB
    for profile in PROFILES:
        assert resolve_config(profile, [], environ={}).config.hardware.memory_per_gpu == total, profile
    assert lo < total < hi, (lo / MIB, total / MIB, hi / MIB)
    # The logs allow several whole MiB, so no log pins the byte: the constructed value is a choice within
    # the bound (if a new log narrows it to one MiB, state that value in the profile and the inventory).
    assert math.floor(hi / MIB) - math.ceil(lo / MIB) >= 1


@pytest.mark.parametrize("profile", PROFILES)
def test_plan_and_check_agree_on_the_constructed_rig(profile: str, clean_env: dict[str, str]) -> None:
    plan = run_cli("plan", "-p", profile, "--json", env=clean_env)
    assert plan.returncode == 0, plan.stderr
    b = json.loads(plan.stdout)["budget"]
    check = run_cli("check", "-p", profile, "--inventory", str(RIG), "--json", env=clean_env)
    row = next(r for r in json.loads(check.stdout)["results"] if r["name"] == "memory_verdict")
    terms = row["details"]["terms"]
    assert terms["T"] == b["total_bytes"]
    assert row["details"]["kv_tokens"] == b["kv_tokens"]
    assert terms["KV"] == b["kv_cache_bytes"]
    assert terms["margin"] == b["margin_bytes"]
    assert f"holds {b['kv_tokens']:,} tokens" in row["message"]
