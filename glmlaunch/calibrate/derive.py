"""Re-derive the rig defaults from real boot logs: the fit ``scripts/derive_rig_defaults.py`` writes.

Above :mod:`.rigdefaults` (which only reads the shipped JSON): deriving needs the whole ingest pipeline.
"""

from __future__ import annotations

from typing import Any

_CITED = (
    "Model loading took",
    "Free memory on device",
    "Estimated MRV2 CUDA graph memory",
    "Available KV cache memory",
    "KV cache is needed",
    "EXL3 mixed Trellis runtime planned",
    "EXL3 rank-sliced runtime planned",
)


def citations(path: str) -> list[str]:
    """``file:line`` of rank 0's budget lines in one log (what a default rests on)."""
    from pathlib import Path

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
    from glmlaunch.calibrate.apply import model_calibration
    from glmlaunch.calibrate.documented import documented_boots, observed_overhead, sized_pool
    from glmlaunch.ledger import build_ledger, kv_cache
    from glmlaunch.ledger.budget import compute_budget

    groups: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for boot in documented_boots(documented_root):
        if not sized_pool(boot) or boot.release is None:
            continue
        cfg = boot.config
        cal = model_calibration(cfg, model)
        budget = compute_budget(cfg, build_ledger(cfg, calibration=cal), calibration=cal)
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


def derive_document(log_paths: list[str], documented_root: Any = None) -> dict[str, Any]:
    """Fit the term model from zero on real boot logs (and the release overheads on the appliance's
    documented boots under ``documented_root``); the JSON the rig defaults ship as."""
    from pathlib import Path

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
    return {
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
