#!/usr/bin/env python3
"""Leave-one-out accuracy of the calibrated plan on the real boot logs (tests/fixtures/boot-logs).

For each boot that reached the KV-cache lines (and for the refused one): ingest every *other* log into a fresh
calibration store, `glmlaunch profiles import` another complete boot as the base profile, plan this boot's
knobs with `--set`, and compare the plan's KV bytes and KV tokens with what vLLM logged. A second pass plans
with the rig defaults alone (an empty store). Every step is the real CLI in a subprocess.

    .venv/bin/python bench/calibration_accuracy.py [--json]
    .venv/bin/python bench/calibration_accuracy.py --documented [--json]   # the appliance's capacities
    .venv/bin/python bench/calibration_accuracy.py --band [--json]   # leave-one-shape/release-out, the band

Caveat printed with the results: the shipped rig defaults were fitted on all five logs, so where a term is
not identified by the other records (e.g. W with MTP off when only MTP-on boots remain) the default that
fills it carries the held-out boot's own figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: the rig defaults' fit and the documented boots are build-time modules of scripts/, not of the package
sys.path.insert(0, str(ROOT / "scripts"))
LOGS = sorted((ROOT / "tests" / "fixtures" / "boot-logs").glob("*.log"))
GIB = 1024**3


RIG_DEFAULTS: list[str] = []  # the rig-defaults file of the pass in progress ("" = the shipped one)


def cli(*args: str, cache: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GLMLAUNCH_CACHE_DIR": str(cache), "NO_COLOR": "1"}
    env.pop("GLMLAUNCH_PROFILE", None)
    env.pop("GLMLAUNCH_RIG_DEFAULTS", None)
    if RIG_DEFAULTS and RIG_DEFAULTS[-1]:
        env["GLMLAUNCH_RIG_DEFAULTS"] = RIG_DEFAULTS[-1]
    proc = subprocess.run(
        [sys.executable, "-m", "glmlaunch", *args], capture_output=True, text=True, env=env, cwd=ROOT
    )
    if check and proc.returncode not in (0, 4):
        raise SystemExit(f"glmlaunch {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-800:]}")
    return proc


def logged(path: Path) -> dict[str, object]:
    sys.path.insert(0, str(ROOT))
    from glmlaunch.calibrate.bootconfig import boot_settings
    from glmlaunch.vllmlog.boot import parse_log_file

    boot = parse_log_file(path)
    r0 = boot.ranks[0]
    refusal = next(iter(boot.engine.refusals), None)
    return {
        "terms": {
            "W": r0.weights_bytes,
            "P": r0.peak_activation_bytes,
            "N": r0.non_torch_bytes,
            "G_e": r0.graph_estimate_bytes,
            "T-F0": (r0.total_bytes - r0.free_at_start_bytes)
            if r0.total_bytes is not None and r0.free_at_start_bytes is not None
            else None,
        },
        "kv_bytes": r0.kv_available_bytes,
        "kv_tokens": boot.engine.kv_cache_tokens,
        "complete": boot.complete and not boot.refused,
        "refused": boot.refused,
        "refusal": refusal.message[:160] if refusal else None,
        "settings": boot_settings(boot.boot_config) if boot.boot_config else {},
    }


def plan_for(target: Path, base_log: Path, records: list[Path], work: Path) -> dict[str, object]:
    cache = work / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    for log in records:
        cli("calibrate", "ingest", str(log), cache=cache)
    base = work / "base.yaml"
    cli("profiles", "import", str(base_log), "-o", str(base), "--force", cache=cache)
    base_cfg = json.loads(cli("config", "-p", str(base), "--json", cache=cache).stdout)
    flat: dict[str, object] = {}

    def walk(d: object, prefix: str = "") -> None:
        if isinstance(d, dict):
            for k, v in d.items():
                walk(v, f"{prefix}{k}.")
        else:
            flat[prefix[:-1]] = d

    walk(base_cfg["config"])
    want = logged(target)["settings"]
    assert isinstance(want, dict)
    sets = [
        f"{k}={v if isinstance(v, str) else json.dumps(v)}"
        for k, v in sorted(want.items())
        if flat.get(k) != v and k in flat
    ]
    args = ["plan", "-p", str(base), "--json"]
    for s in sets:
        args += ["--set", s]
    proc = cli(*args, cache=cache)
    doc = json.loads(proc.stdout)
    b = doc["budget"]
    return {
        "terms": {
            "W": b["weights_bytes"],
            "P": b["profiled_torch_bytes"],
            "N": b["profiled_non_torch_bytes"],
            "G_e": b["graph_estimate_bytes"],
            "T-F0": b["u_pre_bytes"],
        },
        "kv_bytes": b["kv_cache_bytes"],
        "kv_tokens": b["kv_tokens"],
        "verdict": doc["verdict"],
        "request_fits": b["max_model_len_fits"],
        "sets": len(sets),
        "message": next(
            (
                ln
                for ln in proc.stderr.splitlines()
                if "calibration" in ln or "term model" in ln or "rig defaults" in ln
            ),
            "",
        ),
    }


MODES = (
    "strict: others' records, defaults refit without it",
    "records + shipped rig defaults",
    "shipped rig defaults only",
)


def MODES_RECORDS(others: list[Path]) -> list[tuple[str, list[Path]]]:
    return [(MODES[0], others), (MODES[1], others), (MODES[2], [])]


def documented_capacities() -> list[dict[str, object]]:
    """The appliance's documented capacities (data/upstream): logged KV tokens against the plan's.

    Every documented boot whose pool vLLM sized from memory (a pinned pool is exact by construction) is
    planned with the shipped rig defaults, in process (its configuration is the shipped profile of its
    checkpoint with the record's shape, scripts/documented_boots.py). The rig defaults' release
    overheads were fitted on these boots, so that column is in sample; the leave-one-out column re-fits
    the overhead of the boot's release and DCP without it (a release with no other boot takes the nearest
    release's, as a plan of an undocumented release does).
    """
    sys.path.insert(0, str(ROOT))
    from dataclasses import replace

    from derive_rig_defaults import release_offsets
    from documented_boots import documented_boots, sized_pool

    from glmlaunch.calibrate.apply import model_calibration
    from glmlaunch.calibrate.model import ReleaseOffset
    from glmlaunch.calibrate.rigdefaults import _rig_model
    from glmlaunch.plan.plan import make_plan

    root = ROOT / "data" / "upstream"
    shipped = _rig_model(None)
    base = replace(shipped, release_offsets=())
    groups = release_offsets(base, root)

    def tokens(model: object, cfg: object) -> int:
        cal = model_calibration(cfg, model)  # type: ignore[arg-type]
        return make_plan(cfg, inputs=cal).budget.kv_tokens  # type: ignore[arg-type]

    rows: list[dict[str, object]] = []
    for boot in documented_boots(root):
        if not sized_pool(boot) or boot.kv_tokens is None:
            continue
        cfg = boot.config
        loo_offsets = []
        for g in groups:
            diffs = {i: d + int(g["bytes"]) for i, d in g["residuals"]}  # type: ignore[union-attr]
            if boot.id in diffs:
                rest = [d for i, d in diffs.items() if i != boot.id]
                if not rest:
                    continue  # the only boot of its release: the nearest release's offset stands in
                loo_offsets.append(
                    ReleaseOffset(
                        str(g["release"]),
                        int(g["dcp"]),
                        round(sum(rest) / len(rest)),
                        tuple(i for i in diffs if i != boot.id),
                    )
                )
            else:
                loo_offsets.append(
                    ReleaseOffset(str(g["release"]), int(g["dcp"]), int(g["bytes"]), tuple(g["boots"]))  # type: ignore[arg-type]
                )
        fitted = tokens(shipped, cfg)
        loo = tokens(replace(base, release_offsets=tuple(loo_offsets)), cfg)
        rows.append(
            {
                "id": boot.id,
                "release": boot.release,
                "checkpoint": cfg.model.path,
                "shape": f"DCP{cfg.parallel.dcp} MTP{cfg.mtp} GMU {cfg.memory.gpu_memory_utilization} "
                f"batch {cfg.scheduler.max_num_batched_tokens} {cfg.memory.kv_cache_dtype}",
                "logged": boot.kv_tokens,
                "fitted": fitted,
                "fitted_error": (fitted - boot.kv_tokens) / boot.kv_tokens,
                "loo": loo,
                "loo_error": (loo - boot.kv_tokens) / boot.kv_tokens,
                "source": boot.source,
            }
        )
    return rows


#: the population each held-out case's band is drawn from (scripts/derive_band.py's transfer kinds)
def _population(row: object) -> str:
    case = row.case  # type: ignore[attr-defined]
    own = "own_offsets_" if case.origin == "readme" else ""
    return own + ("shape" if row.transfer == "shape" else "release")  # type: ignore[attr-defined]


def band_cases() -> dict[str, Any]:
    """Leave-one-shape-out and leave-one-release-out over every allowed boot (scripts/band_cases.py), each
    case's error and whether the band covers it.

    Two bands: the shipped one (``shipped``: the transfer band of the case's kind as band_facts.json
    holds it, which measured this very case too, plus the plan's W band: in sample, it covers every case
    whose kind has it as its largest error) and the honest one (``nested``: that half-width re-taken over
    the *other* cases of the kind), as a plan of that shape would have had without this boot anywhere."""
    from band_cases import cases, leave_out

    from glmlaunch.ledger.band import facts
    from glmlaunch.ledger.budget import band_over

    shipped_half = {k: int(v["half_width_bytes"]) for k, v in facts()["transfer"].items()}

    out: dict[str, Any] = {}
    rows_all = {mode: leave_out(mode) for mode in ("shape", "release")}
    table: list[dict[str, object]] = []
    for rows in rows_all.values():
        pops: dict[str, list[tuple[str, int]]] = {}
        for r in rows:
            pops.setdefault(_population(r), []).append((r.case.id, abs(r.error_bytes)))
        for r in rows:
            others = [e for i, e in pops[_population(r)] if i != r.case.id]
            # kinds measured on this case alone have no other case: the other mode's population stands in
            if not others:
                alt = [abs(x.error_bytes) for x in rows if x.case.id != r.case.id]
                others = alt
            w = r.budget.band.term("W")
            half = max(others) + w.high
            whole = shipped_half[_population(r)] + w.high
            dcp = r.case.config.parallel.dcp
            per = r.budget.kv_bytes_per_token

            def tokens(b: int, per: int = per, dcp: int = dcp) -> int:
                return max(0, b) // (64 * per) * 64 * dcp

            table.append(
                {
                    **r.to_json(),
                    "population": _population(r),
                    "shipped_band": [tokens(r.budget.kv - whole), tokens(r.budget.kv + whole)],
                    "plan_band_covers": abs(r.error_bytes) <= whole,
                    "nested_band": [tokens(r.budget.kv - half), tokens(r.budget.kv + half)],
                    "nested_half_width_bytes": half,
                    "nested_band_covers": abs(r.error_bytes) <= half,
                    "band_over_bytes": list(band_over(r.budget.band)),
                }
            )
    summary: dict[str, object] = {}
    for mode in ("shape", "release", "all"):
        sel = [t for t in table if mode == "all" or t["mode"] == mode]
        errs = [abs(float(t["error"])) for t in sel]  # type: ignore[arg-type]
        summary[mode] = {
            "cases": len(sel),
            "median_abs_kv_tokens_error": statistics.median(errs),
            "max_abs_kv_tokens_error": max(errs),
            "plan_band_covers": sum(bool(t["plan_band_covers"]) for t in sel) / len(sel),
            "nested_band_covers": sum(bool(t["nested_band_covers"]) for t in sel) / len(sel),
        }
    refused = [c for c in cases() if c.origin == "log" and c.refused]
    verdicts = []
    from band_cases import model_without, predict, shape_of

    for c in refused:
        for mode in ("shape", "release"):
            key = shape_of(c) if mode == "shape" else c.release
            gone = {o.id for o in cases() if (shape_of(o) if mode == "shape" else o.release) == key}
            b = predict(model_without(gone), c)
            verdicts.append({"id": c.id, "mode": mode, "predicted": b.verdict, "fits": b.request_fits})
    out["rows"] = table
    out["summary"] = summary
    out["refused"] = verdicts
    return out


def print_band(res: dict[str, Any]) -> None:
    print(
        "| mode (band kind) | boot | origin | release | logged KV tokens | predicted | error | shipped band "
        "| covers | band without this boot | covers |"
    )
    print("|" + "---|" * 11)
    for t in res["rows"]:
        lo, hi = t["shipped_band"]
        nlo, nhi = t["nested_band"]
        print(
            f"| {t['mode']} ({t['population']}) | {t['id']} | {t['origin']} | {t['release']} | "
            f"{t['logged']:,} | {t['predicted']:,} | {float(t['error']) * 100:+.2f} % | "
            f"{lo:,}..{hi:,} | {'yes' if t['plan_band_covers'] else 'no'} | {nlo:,}..{nhi:,} | "
            f"{'yes' if t['nested_band_covers'] else 'no'} |"
        )
    for mode, sm in res["summary"].items():
        med, top = sm["median_abs_kv_tokens_error"] * 100, sm["max_abs_kv_tokens_error"] * 100
        print(
            f"\n{mode}: {sm['cases']} cases, median |KV tokens error| {med:.2f} %, max {top:.2f} %, the "
            f"shipped band covers {sm['plan_band_covers'] * 100:.0f} %, the band without the boot covers "
            f"{sm['nested_band_covers'] * 100:.0f} %"
        )
    for v in res["refused"]:
        print(f"refused boot {v['id']} ({v['mode']} out): predicted {v['predicted']}, fits {v['fits']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--band",
        action="store_true",
        help="leave-one-shape-out and leave-one-release-out over every allowed boot, with the band",
    )
    parser.add_argument(
        "--documented", action="store_true", help="only the appliance's documented capacities (data/upstream)"
    )
    args = parser.parse_args()
    if args.band:
        res = band_cases()
        if args.json:
            print(json.dumps(res, indent=1))
            return 0
        print_band(res)
        return 0
    if args.documented:
        docs = documented_capacities()
        if args.json:
            print(json.dumps(docs, indent=1))
            return 0
        print("| boot | release | checkpoint | shape | logged KV tokens | predicted (fitted) | error | "
              "predicted (leave-one-out) | error |")  # fmt: skip
        print("|" + "---|" * 9)
        for r in docs:
            print(
                f"| {r['id']} | {r['release']} | {str(r['checkpoint']).rsplit('/', 1)[-1]} | {r['shape']} | "
                f"{r['logged']:,} | {r['fitted']:,} | {float(r['fitted_error']) * 100:+.2f} % | "  # type: ignore[arg-type]
                f"{r['loo']:,} | {float(r['loo_error']) * 100:+.2f} % |"  # type: ignore[arg-type]
            )
        for col in ("fitted_error", "loo_error"):
            errs = [abs(float(r[col])) for r in docs]  # type: ignore[arg-type]
            med, top = statistics.median(errs) * 100, max(errs) * 100
            print(f"\n{col}: median |error| {med:.2f} %, max {top:.2f} % over {len(errs)} documented boots")
        return 0
    facts = {p: logged(p) for p in LOGS}
    complete = [p for p in LOGS if facts[p]["complete"]]
    targets = [p for p in LOGS if facts[p]["complete"] or facts[p]["refused"]]
    rows = []
    for target in targets:
        others = [p for p in LOGS if p != target]
        base_log = next(p for p in complete if p != target)
        for mode, records in MODES_RECORDS(others):
            with tempfile.TemporaryDirectory() as tmp:
                RIG_DEFAULTS.append("")
                if mode.startswith("strict"):
                    from derive_rig_defaults import derive_document

                    path = Path(tmp) / "rig-defaults-without-this-boot.json"
                    path.write_text(json.dumps(derive_document([str(p) for p in others])))
                    RIG_DEFAULTS.append(str(path))
                try:
                    got = plan_for(target, base_log, records, Path(tmp))
                finally:
                    RIG_DEFAULTS.clear()
            want = facts[target]
            row = {
                "boot": target.name,
                "mode": mode,
                "base": base_log.name,
                **{f"plan_{k}": v for k, v in got.items()},
            }
            row["log_kv_bytes"] = want["kv_bytes"]
            row["log_kv_tokens"] = want["kv_tokens"]
            row["log_refused"] = want["refused"]
            if want["kv_tokens"]:
                row["kv_tokens_error"] = (int(got["kv_tokens"]) - int(want["kv_tokens"])) / int(
                    want["kv_tokens"]
                )  # type: ignore[arg-type]
            if want["kv_bytes"]:
                row["kv_bytes_error"] = (int(got["kv_bytes"]) - int(want["kv_bytes"])) / int(want["kv_bytes"])  # type: ignore[arg-type]
            rows.append(row)
    summary = {}
    for mode in MODES:
        errs = [abs(r["kv_tokens_error"]) for r in rows if r["mode"] == mode and "kv_tokens_error" in r]
        refused_ok = all(
            (r["plan_verdict"]["status"] == "refused" or not r["plan_request_fits"])
            for r in rows
            if r["mode"] == mode and r["log_refused"]
        )
        summary[mode] = {
            "median_abs_kv_tokens_error": statistics.median(errs) if errs else None,
            "max_abs_kv_tokens_error": max(errs) if errs else None,
            "refused_boot_predicted_refused": refused_ok,
        }
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=1))
        return 0
    print(
        f"{'boot':48} {'mode':52} {'KV log':>10} {'KV plan':>10} "
        f"{'tok log':>9} {'tok plan':>9} {'err':>7}  verdict"
    )
    for r in rows:
        kvl = f"{r['log_kv_bytes'] / GIB:.3f}G" if r["log_kv_bytes"] else "-"
        err = f"{r['kv_tokens_error'] * 100:+.2f}%" if "kv_tokens_error" in r else "-"
        print(
            f"{r['boot']:48} {r['mode']:52} {kvl:>10} {int(r['plan_kv_bytes']) / GIB:>9.3f}G "
            f"{r['log_kv_tokens'] or '-':>9} {r['plan_kv_tokens']:>9} {err:>7}  "
            f"{r['plan_verdict']['status']} sets={r['plan_sets']}"
            f"{' (log: refused)' if r['log_refused'] else ''}"
        )
    print("per-term error (plan - log, MiB):")
    for r in rows:
        t = r["plan_terms"]
        lt = facts[next(p for p in LOGS if p.name == r["boot"])]["terms"]
        parts = [
            f"{k} {(t[k] - lt[k]) / 2**20:+7.0f}" if lt.get(k) is not None else f"{k}      -"
            for k in ("W", "P", "N", "G_e", "T-F0")
        ]
        print(f"  {r['boot']:48} {r['mode']:52} " + "  ".join(parts))
    for mode, s in summary.items():
        med, mx = s["median_abs_kv_tokens_error"], s["max_abs_kv_tokens_error"]
        print(
            f"{mode}: median |KV tokens error| {med * 100:.2f}%, max {mx * 100:.2f}%, "
            f"refused boot predicted refused: {s['refused_boot_predicted_refused']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
