#!/usr/bin/env python3
"""Runtime headroom against the appliance's recorded outcomes (issue 19).

Every case of data/upstream/runtime_cases.json is planned with the real CLI (`glmlaunch plan -p PROFILE
--set … --json`, in a subprocess, with an empty calibration store: the rig defaults a fresh machine
uses), and its verdict is compared with what happened: served -> ok, OOMed after boot -> not ok. Next to
it: the KV pool against the logged one, the free memory the plan predicts after startup (the margin)
against the logged idle reading, and the free memory at the peak (the runtime margin) against the logged
reading during a long prefill or at the OOM.

The runtime terms are fitted on the `fit` cases (scripts/derive_runtime_facts.py), so those rows are in
sample. A second pass leaves each fit case out in turn: the terms are re-fitted on the others and the
left-out case is judged with them (its margin does not depend on the terms, so only the demand moves).

    .venv/bin/python bench/runtime_headroom.py [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024


def _derive() -> Any:
    spec = importlib.util.spec_from_file_location(
        "derive_runtime_facts", ROOT / "scripts" / "derive_runtime_facts.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def plan(profile: str, sets: list[str], cache: Path) -> dict[str, Any]:
    env = {**os.environ, "GLMLAUNCH_CACHE_DIR": str(cache), "NO_COLOR": "1", "GLMLAUNCH_QUIET": "1"}
    for k in list(env):
        if k.startswith("GLMLAUNCH_") and k not in ("GLMLAUNCH_CACHE_DIR", "GLMLAUNCH_QUIET"):
            env.pop(k)
    args = [sys.executable, "-m", "glmlaunch", "plan", "-p", profile, "--json"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if out.returncode not in (0, 4):
        raise SystemExit(f"plan failed ({out.returncode}): {' '.join(args)}\n{out.stderr}")
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    derive = _derive()
    rows = derive._rows_by_id()
    doc = json.loads(derive.CASES.read_text())
    sys.path.insert(0, str(ROOT))

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="glmlaunch-bench-") as tmp:
        for case in doc["cases"]:
            row = rows[case["id"]]
            p = plan(case["profile"], case["set"], Path(tmp))
            b, v = p["budget"], p["verdict"]
            free = row.get("free_memory") or {}
            logged_peak = (
                free.get("at_oom_mib")
                if free.get("at_oom_mib") is not None
                else free.get("during_prefill_mib")
            )
            expect_ok = row["outcome"] == "served"
            results.append(
                {
                    "id": case["id"],
                    "fit": case["fit"],
                    "outcome": row["outcome"],
                    "release": (row.get("release") or {}).get("key"),
                    "command": f"glmlaunch plan -p {case['profile']}"
                    + "".join(f" --set {s}" for s in case["set"]),
                    "status": v["status"],
                    "right": v["ok"] == expect_ok,
                    "kv_tokens": b["kv_tokens"],
                    "kv_logged": row.get("kv_tokens"),
                    "kv_error_pct": None
                    if not row.get("kv_tokens")
                    else round(100 * (b["kv_tokens"] - row["kv_tokens"]) / row["kv_tokens"], 2),
                    "free_after_start_mib": round(b["margin_bytes"] / MIB, 1),
                    "idle_logged_mib": free.get("idle_mib"),
                    "free_at_peak_mib": round(b["runtime_margin_bytes"] / MIB, 1),
                    "peak_logged_mib": logged_peak,
                    "deciding": b["runtime_deciding"],
                    "recommended_blocks": b["recommended_num_gpu_blocks"],
                    "recommended_gmu": b["recommended_gpu_memory_utilization"],
                    "source": "; ".join(f"{s['file']}:{s['lines'][0]}" for s in row["source"]),
                }
            )
        # leave-one-out over the fit cases: refit without the case, judge it with the refitted terms
        fit_cases = derive.plan_cases(doc, rows, only_fit=True)
        by_id = {r["id"]: r for r in results}
        for left in fit_cases:
            others = [c for c in fit_cases if c["id"] != left["id"]]
            theta, _ = derive.fit(derive._bounds(others, doc["snapshot_tolerance"]))
            demand = sum(t * f for t, f in zip(theta, left["features"], strict=True))
            loo_margin = (left["margin"] - demand) / MIB
            r = by_id[left["id"]]
            r["loo_free_at_peak_mib"] = round(loo_margin, 1)
            r["loo_right"] = (loo_margin >= 0) == (left["outcome"] == "served")

    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    head = (
        "| case | release | outcome | fit | verdict | right | KV tokens (logged, err %) | free after start "
        "MiB (logged idle) | free at peak MiB (logged) | deciding | LOO free at peak | LOO right |"
    )
    print(head)
    print("|" + "---|" * 12)
    for r in results:
        kv = f"{r['kv_tokens']:,}"
        if r["kv_logged"]:
            kv += f" ({r['kv_logged']:,}, {r['kv_error_pct']:+.2f})"
        idle = f"{r['free_after_start_mib']:,.0f}" + (
            f" ({r['idle_logged_mib']:,})" if r["idle_logged_mib"] else ""
        )
        peak = f"{r['free_at_peak_mib']:,.0f}" + (
            f" ({r['peak_logged_mib']:,})" if r["peak_logged_mib"] is not None else ""
        )
        loo = f"{r['loo_free_at_peak_mib']:,.0f}" if "loo_free_at_peak_mib" in r else "-"
        loo_right = ("yes" if r["loo_right"] else "**no**") if "loo_right" in r else "-"
        fit, right_text = ("yes" if r["fit"] else "no"), ("yes" if r["right"] else "**no**")
        print(
            f"| {r['id']} | {r['release']} | {r['outcome']} | {fit} | {r['status']} | {right_text} | {kv} | "
            f"{idle} | {peak} | {r['deciding']} | {loo} | {loo_right} |"
        )
    right = sum(r["right"] for r in results)
    fit_rows = [r for r in results if "loo_right" in r]
    print(
        f"\n{right}/{len(results)} verdicts right ({sum(r['right'] for r in results if r['fit'])}/"
        f"{sum(r['fit'] for r in results)} fit cases, {sum(r['right'] for r in results if not r['fit'])}/"
        f"{sum(not r['fit'] for r in results)} not fitted); leave-one-out: "
        f"{sum(r['loo_right'] for r in fit_rows)}/{len(fit_rows)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
