#!/usr/bin/env python3
"""Write glmlaunch/ledger/demand/facts.json: the runtime terms, from the appliance's recorded outcomes.

1. ``lmcache_gpu_bytes``: idle free memory of the same boot with native offload minus with LMCache
   (data/upstream/outcomes.json, the r11 offload isolation rows).
2. The demand terms ``prefill_growth_bytes_per_token``, ``online_quant_bytes`` and
   ``fragmentation_bytes``: every `fit` case of data/upstream/runtime_cases.json is planned with
   glmlaunch's own ledger (its margin is the free memory it predicts after startup, LMCache included);
   a served case says the demand fits that margin, an OOM after boot says it does not, a free-memory
   reading during a long prefill bounds it from below. The terms are the analytic centre of that
   polytope (the point farthest, in the log-barrier sense, from every bound), found by a grid search
   refined around its best point: no solver dependency for three unknowns.

tests/ledger/test_runtime_facts.py re-derives the file and compares, so the two cannot drift.

Usage:
  .venv/bin/python scripts/derive_runtime_facts.py            # rewrite the file
  .venv/bin/python scripts/derive_runtime_facts.py --check    # exit 1 if the file is not current
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "glmlaunch" / "ledger" / "demand" / "facts.json"
OUTCOMES = REPO / "data" / "upstream" / "outcomes.json"
CASES = REPO / "data" / "upstream" / "runtime_cases.json"
README = REPO / "data" / "upstream" / "readme_capacities.json"
#: the case group of mixed-tier EXL3 on the r34 / ii stacks, fitted apart (its own term)
R7_GROUP = "r7"
R7_TERM = "r7_prefill_growth_bytes_per_token"
MIB = 1024 * 1024
NATIVE, LMCACHE = (
    "r11-3.25-offload-isolation-native-served",
    (
        "r11-3.25-offload-isolation-lmcache-served",
        "r11-3.25-offload-isolation-lmcache-nvme-served",
    ),
)
UNKNOWNS = ("prefill_growth_bytes_per_token", "online_quant_bytes", "fragmentation_bytes")
#: search box per unknown: (low, high) in its unit
BOX = {
    "prefill_growth_bytes_per_token": (0.0, 2.0 * MIB),
    "online_quant_bytes": (0.0, 4096.0 * MIB),
    "fragmentation_bytes": (0.0, 1024.0 * MIB),
}


def _rows_by_id() -> dict[str, dict[str, Any]]:
    rows = {r["id"]: r for r in json.loads(OUTCOMES.read_text())["rows"]}
    # the release repository's README outcomes (the R7 checkpoint on r34), in the same row format
    rows.update({r["id"]: r for r in json.loads(README.read_text())["rows"] if "outcome" in r})
    return rows


def lmcache_term(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    native = rows[NATIVE]["free_memory"]["idle_mib"]
    with_lm = [rows[i]["free_memory"]["idle_mib"] for i in LMCACHE]
    value = (native - sum(with_lm) / len(with_lm)) * MIB
    return {
        "value": round(value),
        "unit": "bytes",
        "how": f"idle free {native:,} MiB with native offload - mean idle free with LMCache "
        f"({', '.join(f'{x:,}' for x in with_lm)} MiB), same boot shape (3.25 bpw, TP4/DCP4, r11)",
        "evidence": [NATIVE, *LMCACHE],
    }


def _features(config: Any) -> tuple[float, float, float]:
    expandable = config.memory.allocator.expandable_segments and not config.lmcache
    return (
        float(config.scheduler.max_num_batched_tokens),
        0.0 if config.model.online_quant == "none" else 1.0,
        0.0 if expandable else 1.0,
    )


def plan_cases(
    doc: dict[str, Any], rows: dict[str, dict[str, Any]], *, only_fit: bool, group: str | None = None
) -> list[dict[str, Any]]:
    """Each case planned: its margin (bytes), its demand features and the record's facts."""
    os.environ["GLMLAUNCH_QUIET"] = "1"
    from glmlaunch.calibrate.store import Store
    from glmlaunch.config.resolve import resolve_config
    from glmlaunch.ledger.demand import facts
    from glmlaunch.plan.plan import make_plan

    facts.reload()
    empty = Store(Path(tempfile.mkdtemp(prefix="glmlaunch-derive-")))
    out = []
    for case in doc["cases"]:
        if only_fit and not case["fit"]:
            continue
        if case.get("group") != group:
            continue
        row = rows[case["id"]]
        resolved = resolve_config(case["profile"], tuple(case["set"]), environ={})
        # the rig defaults, as a plan on a fresh machine uses them: an empty calibration store
        result = make_plan(resolved.config, store=empty)
        free = row.get("free_memory") or {}
        out.append(
            {
                "id": case["id"],
                "outcome": row["outcome"],
                "served": row["outcome"] == "served",
                "margin": result.budget.margin,
                "features": _features(resolved.config),
                "during_prefill_mib": free.get("during_prefill_mib") if case["snapshot"] else None,
                "result": result,
                "case": case,
                "row": row,
            }
        )
    return out


def _bounds(cases: list[dict[str, Any]], tol: float) -> list[tuple[tuple[float, ...], float, int]]:
    """(features, bound, sign): sign +1 means demand > bound, -1 means demand <= bound."""
    out = []
    for c in cases:
        m = float(c["margin"])
        out.append((c["features"], m, -1 if c["served"] else +1))
        if c["during_prefill_mib"] is not None:
            out.append((c["features"], m - c["during_prefill_mib"] * (1 + tol) * MIB, +1))
    return out


def _score(theta: tuple[float, ...], bounds: list[tuple[tuple[float, ...], float, int]]) -> float:
    total = 0.0
    for feats, bound, sign in bounds:
        demand = sum(t * f for t, f in zip(theta, feats, strict=True))
        slack = (demand - bound) * sign / MIB
        if slack <= 0:
            return -math.inf
        total += math.log(slack)
    # the box is part of the polytope: every term is non-negative
    for t, name in zip(theta, UNKNOWNS, strict=True):
        lo, hi = BOX[name]
        if not lo <= t <= hi:
            return -math.inf
    return total


def fit(bounds: list[tuple[tuple[float, ...], float, int]]) -> tuple[tuple[float, ...], float]:
    lows = [BOX[n][0] for n in UNKNOWNS]
    highs = [BOX[n][1] for n in UNKNOWNS]
    steps = 40
    best: tuple[float, tuple[float, ...]] = (-math.inf, tuple(lows))
    for _ in range(6):
        grids = [
            [lo + (hi - lo) * i / steps for i in range(steps + 1)] for lo, hi in zip(lows, highs, strict=True)
        ]
        for a in grids[0]:
            for b in grids[1]:
                for c in grids[2]:
                    s = _score((a, b, c), bounds)
                    if s > best[0]:
                        best = (s, (a, b, c))
        if best[0] == -math.inf:
            raise SystemExit("derive_runtime_facts: no terms satisfy every fit case (the cases contradict)")
        spans = [(hi - lo) / steps * 3 for lo, hi in zip(lows, highs, strict=True)]
        lows = [max(BOX[n][0], t - s) for n, t, s in zip(UNKNOWNS, best[1], spans, strict=True)]
        highs = [min(BOX[n][1], t + s) for n, t, s in zip(UNKNOWNS, best[1], spans, strict=True)]
    return best[1], best[0]


def r7_term(doc: dict[str, Any], rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The prefill growth of mixed-tier EXL3 on the r34 / ii stacks, from its own group of cases.

    Its demand there is the growth alone: the K6 temporary is profiled and no fragmentation is charged with
    expandable segments on. A served case bounds the growth per batched token from above (margin / tokens),
    an OOM after boot from below; with no OOM documented the lower bound is 0. The term is the analytic
    centre of that interval, its midpoint (the log barrier of both ends)."""
    cases = plan_cases(doc, rows, only_fit=True, group=R7_GROUP)
    highs = [c["margin"] / c["features"][0] for c in cases if c["served"]]
    lows = [c["margin"] / c["features"][0] for c in cases if not c["served"]]
    hi = min(highs) if highs else BOX["prefill_growth_bytes_per_token"][1]
    lo = max(lows, default=0.0)
    if lo >= hi:
        raise SystemExit("derive_runtime_facts: the r7 group's cases contradict")
    return {
        "value": round((lo + hi) / 2, 1),
        "unit": "bytes per batched token",
        "how": (
            f"analytic centre of the r7 group's bounds [{lo:,.0f}, {hi:,.0f}] B per batched token: "
            f"{len(highs)} served case(s) bound it from above"
            + (f", {len(lows)} OOM(s) from below" if lows else ", no OOM documented (the lower bound is 0)")
        ),
        "evidence": [c["id"] for c in cases],
    }


def build() -> dict[str, Any]:
    rows = _rows_by_id()
    doc = json.loads(CASES.read_text())
    terms: dict[str, Any] = {"lmcache_gpu_bytes": lmcache_term(rows)}
    # the margins include LMCache's buffers: plan with this lmcache term in place
    current = json.loads(OUT.read_text()) if OUT.exists() else None
    staged = {"schema_version": 1, "terms": {**(current or {}).get("terms", {}), **terms}}
    for name in (*UNKNOWNS, R7_TERM):
        staged["terms"].setdefault(name, {"value": 0, "unit": "bytes", "how": "bootstrap", "evidence": []})
    OUT.write_text(json.dumps(staged, indent=1) + "\n")
    try:
        cases = plan_cases(doc, rows, only_fit=True)
        bounds = _bounds(cases, doc["snapshot_tolerance"])
        theta, score = fit(bounds)
        r7 = r7_term(doc, rows)
    finally:
        if current is not None:
            OUT.write_text(json.dumps(current, indent=1) + "\n")
    ids = [c["id"] for c in cases]
    terms[R7_TERM] = r7
    units = {"prefill_growth_bytes_per_token": "bytes per batched token"}
    hows = {
        "prefill_growth_bytes_per_token": "analytic centre of the fit cases' bounds: the long prefill's "
        "growth over the profiled dummy batch, per batched token",
        "online_quant_bytes": "analytic centre of the fit cases' bounds: online-quantized (exl3-b6) prefill "
        "temporaries",
        "fragmentation_bytes": "analytic centre of the fit cases' bounds: free memory unusable without "
        "expandable segments",
    }
    for name, value in zip(UNKNOWNS, theta, strict=True):
        terms[name] = {
            "value": round(value, 1) if name == "prefill_growth_bytes_per_token" else round(value),
            "unit": units.get(name, "bytes"),
            "how": hows[name],
            "evidence": ids,
        }
    fitted = []
    for c in cases:
        demand = sum(t * f for t, f in zip(theta, c["features"], strict=True))
        fitted.append(
            {
                "id": c["id"],
                "outcome": c["outcome"],
                "predicted_free_mib": round(c["margin"] / MIB, 1),
                "demand_mib": round(demand / MIB, 1),
                "runtime_margin_mib": round((c["margin"] - demand) / MIB, 1),
                "during_prefill_mib": c["during_prefill_mib"],
            }
        )
    return {
        "schema_version": 1,
        "generated_by": "scripts/derive_runtime_facts.py",
        "source": "data/upstream/outcomes.json + data/upstream/runtime_cases.json (malaiwah/glm52-exl3-vast "
        "eba43a5: TEST_RESULTS.md and docs/, held-out field reviews excluded)",
        "terms": terms,
        "fit": {"log_barrier": round(score, 3), "cases": fitted},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the file is not current")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    doc = build()
    text = json.dumps(doc, indent=1) + "\n"
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(
                f"{OUT.relative_to(REPO)} is not current: run scripts/derive_runtime_facts.py",
                file=sys.stderr,
            )
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
