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


def derive_document(log_paths: list[str]) -> dict[str, Any]:
    """Fit the term model from zero on real boot logs; the JSON the rig defaults ship as."""
    from pathlib import Path

    from glmlaunch.calibrate.ingest import ingest_logs
    from glmlaunch.calibrate.learn import points_from
    from glmlaunch.calibrate.model import fit_model

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
    return {
        "description": (
            "rig defaults: 4x RTX PRO 6000 Blackwell, PCIe, TP4/DCP4, "
            f"fitted on {len(points)} real boot logs "
            "(tests/fixtures/boot-logs)"
        ),
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
