#!/usr/bin/env python3
"""Regenerate glmlaunch/calibrate/rig_defaults.json from the real boot logs in tests/fixtures/boot-logs.

The release overheads come from the appliance's documented boots in data/upstream (capacities.json,
terms.json: each row cited by file, lines and quote at malaiwah/glm52-exl3-vast eba43a5).

.venv/bin/python scripts/derive_rig_defaults.py            # rewrite the file
.venv/bin/python scripts/derive_rig_defaults.py --check    # exit 1 if the file is out of date

Deriving is build-time work (the whole ingest pipeline, the documented boots of
scripts/documented_boots.py): the package only reads the JSON this writes (glmlaunch.calibrate.rigdefaults).
bench/calibration_accuracy.py and the tests import :func:`derive_document` and :func:`release_offsets`
from here, with scripts/ on the path.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from glmlaunch.vllmlog.boot import KV_REFUSAL_LEAD, LEADS

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "fixtures" / "boot-logs"
OUT = ROOT / "glmlaunch" / "calibrate" / "rig_defaults.json"
DOCUMENTED = ROOT / "data" / "upstream"


#: the lines a default rests on, by the opening words the log parser knows them by
_CITED = (
    *(LEADS[key] for key in ("weights", "free_memory", "graph_estimate", "kv_available")),
    KV_REFUSAL_LEAD,
    LEADS["exl3_plan"],
    LEADS["exl3_draft_plan"],
)


def citations(path: str) -> list[str]:
    """``file:line`` of rank 0's budget lines in one log (what a default rests on)."""
    name = Path(path).name
    out = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if ("TP0" in line or "EngineCore" in line) and any(c in line for c in _CITED):
            if "Traceback" in line or ("core.py" in line and "ValueError" not in line):
                continue
            out.append(f"{name}:{i}")
    return out


def release_offsets(model: Any, documented_root: Any) -> list[dict[str, Any]]:
    """Each release's P overhead beyond ``model`` at each DCP: the mean of what its documented boots imply.

    A documented boot whose pool vLLM sized (no pin) states R - W - KV = P + N + G_e; the model predicts
    the same sum for the boot's configuration; the offset is their mean difference over the boots of one
    release and DCP, and every boot's residual after it is kept.
    """
    from documented_boots import documented_boots, observed_overhead, sized_pool

    from glmlaunch.calibrate.apply import model_calibration
    from glmlaunch.ledger import kv_cache
    from glmlaunch.plan.plan import make_plan

    groups: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for boot in documented_boots(documented_root):
        if not sized_pool(boot) or boot.release is None:
            continue
        cfg = boot.config
        cal = model_calibration(cfg, model)
        budget = make_plan(cfg, inputs=cal).budget
        w = boot.w if boot.w is not None else budget.w
        seen = observed_overhead(boot, w, kv_cache.geometry(cfg).bytes_per_token)
        if seen is None:
            continue
        predicted = budget.p + budget.n + budget.g_e
        groups.setdefault((boot.release, cfg.parallel.dcp), []).append((boot.id, seen - predicted))
    out = []
    for (release, dcp), rows in sorted(groups.items()):
        offset = round(sum(d for _, d in rows) / len(rows))
        out.append(
            {
                "release": release,
                "dcp": dcp,
                "bytes": offset,
                "boots": [i for i, _ in rows],
                "residuals": [[i, d - offset] for i, d in rows],
            }
        )
    return out


def checkpoint_offsets(model: Any, documented_root: Any) -> list[dict[str, Any]]:
    """What the README's documented boots of one checkpoint imply beyond ``model`` (its release offsets
    included), per checkpoint, release, DCP and MTP on/off: the mean of seen - predicted P + N + G_e
    over the group's boots, each boot's residual after it kept. The terms the ledger derives for the
    checkpoint (its arenas, pools and plans) are in the prediction; the offset is only what they miss."""
    from documented_boots import observed_overhead, readme_boots, sized_pool

    from glmlaunch.calibrate.apply import model_calibration
    from glmlaunch.config.checkpoints import checkpoint_name
    from glmlaunch.ledger import kv_cache
    from glmlaunch.plan.plan import make_plan

    groups: dict[tuple[str, str, int, bool], list[tuple[str, int]]] = {}
    for boot in readme_boots(documented_root):
        if not sized_pool(boot) or boot.release is None:
            continue
        cfg = boot.config
        budget = make_plan(cfg, inputs=model_calibration(cfg, model)).budget
        w = boot.w if boot.w is not None else budget.w
        seen = observed_overhead(boot, w, kv_cache.geometry(cfg).bytes_per_token)
        if seen is None:
            continue
        key = (checkpoint_name(cfg.model.path), boot.release, cfg.parallel.dcp, cfg.mtp > 0)
        groups.setdefault(key, []).append((boot.id, seen - (budget.p + budget.n + budget.g_e)))
    out = []
    for (checkpoint, release, dcp, mtp), rows in sorted(groups.items()):
        offset = round(sum(d for _, d in rows) / len(rows))
        out.append(
            {
                "checkpoint": checkpoint,
                "release": release,
                "dcp": dcp,
                "mtp": mtp,
                "bytes": offset,
                "boots": [i for i, _ in rows],
                "residuals": [[i, d - offset] for i, d in rows],
            }
        )
    return out


def derive_document(log_paths: list[str], documented_root: Any = None) -> dict[str, Any]:
    """Fit the term model from zero on real boot logs (and the release overheads on the appliance's
    documented boots under ``documented_root``); the JSON the rig defaults ship as."""
    from glmlaunch.calibrate.ingest import ingest_logs
    from glmlaunch.calibrate.learn import points_from
    from glmlaunch.calibrate.model import fit_model
    from glmlaunch.config.releases import release_of

    paths = sorted(log_paths, key=lambda p: Path(p).name)
    records = [
        i.record
        for i in ingest_logs([Path(p) for p in paths], config=None, profile=None, inventory=None, store=None)
    ]
    points = points_from(records)
    model = fit_model(points, origin="rig-default")
    label_to_log = {p.label: Path(p.source).name for p in points}
    cites = {Path(p).name: citations(p) for p in paths}
    terms: dict[str, Any] = {}
    for term, fit in model.fits.items():
        used = sorted({label_to_log.get(s.split(" (")[0], s) for s in fit.sources})
        terms[term] = {
            "features": list(fit.features),
            "coefficients": {k: round(v) for k, v in fit.coefficients.items()},
            "sources": [label_to_log.get(s.split(" (")[0], s) for s in fit.sources],
            "residuals": [[label_to_log.get(a.split(" (")[0], a), b] for a, b in fit.residuals],
            "unidentified": list(fit.unidentified),
            "citations": [c for log in used for c in cites.get(log, [])],
        }
    offsets = release_offsets(model, documented_root) if documented_root is not None else []
    if offsets:
        # the release the logs themselves ran is the fit: its overhead is zero by construction
        own = sorted(
            {
                (release_of(p.vllm_version), p.config.parallel.dcp)
                for p in points
                if release_of(p.vllm_version) is not None
            }
        )
        known = {(o["release"], o["dcp"]) for o in offsets}
        for rel, dcp in own:
            if (rel, dcp) not in known:
                boots = sorted(
                    {label_to_log.get(p.label, p.label) for p in points if release_of(p.vllm_version) == rel}
                )
                offsets.append({"release": rel, "dcp": dcp, "bytes": 0, "boots": boots, "residuals": []})
        offsets.sort(key=lambda o: (o["release"], o["dcp"]))
    # A checkpoint's own offsets stand alone at plan time (calibrate.model.pick_offset: where it has any,
    # the generic release offsets do not apply), so they are fitted over the residual model alone.
    per_checkpoint = checkpoint_offsets(model, documented_root) if documented_root is not None else []
    return {
        # the README's checkpoint offsets (blackwell-llm-docker; data/upstream/readme_capacities.json): each
        # applies to its own checkpoint only, so the description of the rig defaults stays the appliance's
        "checkpoint_offsets": per_checkpoint,
        "description": (
            "rig defaults: 4x RTX PRO 6000 Blackwell, PCIe, TP4/DCP4, "
            f"fitted on {len(points)} real boot logs "
            "(tests/fixtures/boot-logs)"
            + (
                f", with release overheads from {sum(len(o['boots']) for o in offsets)} documented boots "
                "(data/upstream)"
                if offsets
                else ""
            )
        ),
        "release_offsets": offsets,
        "generated_by": "scripts/derive_rig_defaults.py",
        "logs": [Path(p).name for p in paths],
        "terms": terms,
        "n_by_version": [
            [v, r, [label_to_log.get(x, x) for x in labels]] for v, r, labels in model.n_by_version
        ],
        "weights": {
            "table": [[r[0], r[1], r[2], r[3], label_to_log.get(r[4], r[4])] for r in model.weights.table],
            "mtp_layer": [
                [
                    m[0],
                    m[1],
                    " minus ".join(
                        label_to_log.get(x.strip(), x.strip())
                        for x in m[2].split(", vLLM")[0].split(" minus ")
                    )
                    + ", vLLM"
                    + m[2].split(", vLLM")[1],
                ]
                for m in model.weights.mtp_layer
            ],
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    doc = derive_document([str(p) for p in sorted(LOGS.glob("*.log"))], ROOT / "data" / "upstream")
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run scripts/derive_rig_defaults.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
