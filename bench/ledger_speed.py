"""How fast a plan is made, and how long a calibration search takes: the figures that matter now.

Nothing in the ledger is memoized across builds (the hand-written memo keys are gone): every plan builds
its ledger from nothing. A ``calibrate search`` is a bisection that plans at most ``MAX_EVALUATIONS`` (256)
configurations, and a real one far fewer, so the old target of 10,000 configurations per second is
retired; what is measured is what a user waits for:

* ``plan (given inputs)``: ``make_plan(config, inputs=UNCALIBRATED)`` over a grid of distinct variants of
  the turnkey profile (GMU x batched tokens x A2A cap x capture size x single channel x KV dtype): the
  ledger, the budget and the verdict, as a search step makes them (no I/O: the model path is a hub id);
* ``plan (calibrated)``: ``make_plan(config)`` with an empty record store, as ``glmlaunch plan`` on a
  fresh install: the rig defaults' term model fitted and predicted (its itemization builds the ledger's
  entries once more), then the plan;
* ``search``: ``calibrate search`` objectives on the shipped r12-exl3 profile with the rig defaults' term
  model, as the command runs them: wall time and the number of configurations planned.

Run: ``.venv/bin/python bench/ledger_speed.py`` (add ``--json`` for one JSON line).
"""

from __future__ import annotations

import itertools
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from glmlaunch.calibrate.learn import learn, target_version
from glmlaunch.calibrate.store import Store
from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.inputs import UNCALIBRATED
from glmlaunch.plan.plan import make_plan
from glmlaunch.plan.search import search


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


def per_plan_ms(configs: list[DeploymentConfig], **kw: Any) -> float:
    start = time.perf_counter()
    for c in configs:
        make_plan(c, **kw)
    return (time.perf_counter() - start) * 1000 / len(configs)


def searches(store: Store) -> dict[str, dict[str, float]]:
    config = resolve_config("r12-exl3", environ={}).config
    model = learn(config, store.load().records).model
    out = {}
    for objective in ("max-batched-tokens", "max-gmu", "min-pool-blocks", "max-kv-bytes"):
        start = time.perf_counter()
        result = search(
            config, objective, model=model, version=target_version(config), calibration_message=""
        )
        wall = time.perf_counter() - start
        planned = len(result.steps) + 1  # every grid value tried, and the profile's own
        out[objective] = {"wall_ms": round(wall * 1000, 1), "planned": planned}
    return out


def main() -> None:
    base = resolve_config("turnkey", environ={}).config
    configs = grid(base)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp))
        given = [per_plan_ms(configs, inputs=UNCALIBRATED) for _ in range(3)]
        calibrated = [per_plan_ms(configs[:200], store=store) for _ in range(3)]
        found = searches(store)
    plan_ms = statistics.median(given)
    result = {
        "configurations": len(configs),
        "plan_given_inputs_ms": round(plan_ms, 3),
        "plan_given_inputs_per_s": round(1000 / plan_ms),
        "plan_calibrated_ms": round(statistics.median(calibrated), 3),
        "search": found,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    if "--json" in sys.argv:
        print(json.dumps(result))
        return
    print(f"{len(configs)} configurations (turnkey base), median of 3 passes")
    print(f"plan, given inputs : {plan_ms:7.3f} ms each ({1000 / plan_ms:,.0f} plans/s)")
    calibrated_ms = result["plan_calibrated_ms"]
    print(f"plan, calibrated   : {calibrated_ms:7.3f} ms each (rig defaults fitted, empty store)")
    for objective, f in found.items():
        print(f"search {objective:19}: {f['wall_ms']:7.1f} ms, {f['planned']:.0f} configurations planned")


if __name__ == "__main__":
    main()
