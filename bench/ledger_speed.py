"""How many configurations per second ``build_ledger`` + ``compute_budget`` evaluate.

Calibration search evaluates thousands of configurations that differ in a few knobs. Three measurements,
all pure arithmetic (configurations are built before timing; no I/O: the model path is a hub id):

* ``sweep (first pass)``: a grid of distinct configurations (GMU x batched tokens x A2A cap x capture
  size x single channel x KV dtype), each evaluated once, with the memo caches starting empty; the
  subsystems that did not change between neighbours are memo hits, as in a real search.
* ``sweep (second pass)``: the same grid again (everything memoized).
* ``cold``: the caches cleared before every evaluation: the worst case, nothing shared.

The 864 prebuilt configurations are ~100k live objects that Python's cyclic collector would walk again
and again while the timed loop allocates; a search builds each configuration and drops it. So the
configurations are ``gc.freeze()``-d before timing; ``sweep_first_pass_no_freeze`` shows the unfrozen
number for comparison.

Run: ``.venv/bin/python bench/ledger_speed.py`` (add ``--json`` for one JSON line).
"""

from __future__ import annotations

import gc
import itertools
import json
import platform
import sys
import time
from typing import Any

from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger import build_ledger, clear_caches
from glmlaunch.ledger.budget import compute_budget


def vary(config: DeploymentConfig, section: str, **values: Any) -> DeploymentConfig:
    sub = getattr(config, section).model_copy(update=values)
    return config.model_copy(update={section: sub})


def grid(base: DeploymentConfig) -> list[DeploymentConfig]:
    out = []
    for gmu, tokens, cap, top, single, dtype in itertools.product(
        (0.90, 0.92, 0.94, 0.95, 0.957, 0.96),
        (2048, 3072, 4096, 8192),
        (16, 32, 64),
        (32, 48, 64),
        (False, True),
        ("nvfp4_ds_mla", "fp8"),
    ):
        c = vary(base, "memory", gpu_memory_utilization=gmu, kv_cache_dtype=dtype)
        c = vary(c, "scheduler", max_num_batched_tokens=tokens)
        c = vary(c, "comm", dcp_a2a_max_tokens=cap, single_channel=single)
        c = vary(c, "cudagraph", capture_sizes=list(range(4, top + 1, 4)), capture_rule=None)
        out.append(c)
    return out


def rate(configs: list[DeploymentConfig], *, cold: bool) -> float:
    start = time.perf_counter()
    for c in configs:
        if cold:
            clear_caches()
        compute_budget(c, build_ledger(c))
    return len(configs) / (time.perf_counter() - start)


def main() -> None:
    base = resolve_config("turnkey").config
    configs = grid(base)
    clear_caches()
    unfrozen = rate(configs, cold=False)
    clear_caches()
    gc.collect()
    gc.freeze()
    first = rate(configs, cold=False)
    second = rate(configs, cold=False)
    cold = rate(configs[:400], cold=True)
    result = {
        "configurations": len(configs),
        "sweep_first_pass_per_s": round(first),
        "sweep_first_pass_no_freeze_per_s": round(unfrozen),
        "sweep_second_pass_per_s": round(second),
        "cold_per_s": round(cold),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    if "--json" in sys.argv:
        print(json.dumps(result))
        return
    print(f"{len(configs)} configurations (turnkey base)")
    print(f"sweep, first pass : {first:10,.0f} configurations/s ({unfrozen:,.0f}/s without gc.freeze)")
    print(f"sweep, second pass: {second:10,.0f} configurations/s")
    print(f"cold (no memo)    : {cold:10,.0f} configurations/s")


if __name__ == "__main__":
    main()
