#!/usr/bin/env python3
"""Regenerate glmlaunch/ledger/band_facts.json: the boots on record by shape and the measured transfer errors.

.venv/bin/python scripts/derive_band.py            # rewrite the file
.venv/bin/python scripts/derive_band.py --check    # exit 1 if the file is out of date

What it writes (ledger/band.py reads it; docs/memory-model.md §11):

* ``boots``: every allowed boot that served (the shared logs, the appliance's documented capacities, the
  README's figures; scripts/band_cases.py) with its shape key and, where vLLM sized its pool from memory,
  the residual the shipped rig defaults leave on it (predicted - logged KV bytes per rank): a plan of
  that shape is *covered* and its band is that residual;
* ``transfer.shape``: the error of each leave-one-shape-out case whose release kept other boots;
* ``transfer.release``: the error of each leave-one-release-out case;
* ``transfer.u_pre``: the leave-one-out error of T - F0 over the logs that state it;
* ``transfer.w_estimate``: each documented W against the nearest other documented bit rate's.

Each transfer's ``half_width_bytes`` is its largest |error|: the band's half-width for that kind.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from band_cases import cases, leave_out, u_pre_rows, w_estimate_rows, w_release_rows

from glmlaunch.config.checkpoints import checkpoint_name
from glmlaunch.ledger.band import key_json

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "glmlaunch" / "ledger" / "band_facts.json"


def _transfer(rows: list[tuple[str, int]], how: str) -> dict[str, object]:
    return {
        "how": how,
        "cases": [[i, e] for i, e in sorted(rows)],
        "half_width_bytes": max((abs(e) for _, e in rows), default=0),
    }


def derive() -> dict[str, object]:
    fitted = {r.case.id: r.error_bytes for r in leave_out("fitted")}
    boots = [
        {
            "id": c.id,
            "origin": c.origin,
            "release": c.release,
            "shape": key_json(c.config),
            "checkpoint": checkpoint_name(c.config.model.path),
            "kv_residual_bytes": fitted.get(c.id),
            "source": c.source,
        }
        for c in cases()
        if c.complete
    ]
    # A checkpoint with offsets of its own (the README's R7 boots, derive_rig_defaults.checkpoint_offsets)
    # loses them when its boots are held out: its transfers are a population of their own.
    shape_rows = [r for r in leave_out("shape") if r.transfer == "shape"]
    release_rows = leave_out("release")
    own = {r.case.id for r in [*shape_rows, *release_rows] if r.case.origin == "readme"}
    shape = [(r.case.id, r.error_bytes) for r in shape_rows if r.case.id not in own]
    release = [(r.case.id, r.error_bytes) for r in release_rows if r.case.id not in own]
    own_shape = [(r.case.id, r.error_bytes) for r in shape_rows if r.case.id in own]
    own_release = [(r.case.id, r.error_bytes) for r in release_rows if r.case.id in own]
    u_pre = u_pre_rows()
    w = w_estimate_rows()
    return {
        "generated_by": "scripts/derive_band.py",
        "inputs": [
            "tests/fixtures/boot-logs/*.log",
            "data/upstream/capacities.json",
            "data/upstream/terms.json",
            "data/upstream/readme_capacities.json",
            "data/upstream/weights.json",
        ],
        "boots": sorted(boots, key=lambda b: str(b["id"])),
        "offset_checkpoints": sorted(
            {checkpoint_name(c.config.model.path) for c in cases() if c.origin == "readme"}
        ),
        "transfer": {
            "shape": _transfer(shape, "leave-one-shape-out: every boot of the shape out, its release kept"),
            "release": _transfer(release, "leave-one-release-out: every boot of the release out"),
            "own_offsets_shape": _transfer(
                own_shape, "leave-one-shape-out of a checkpoint with offsets of its own (they go with it)"
            ),
            "own_offsets_release": _transfer(
                own_release, "leave-one-release-out of a checkpoint with offsets of its own"
            ),
            "u_pre": {
                "how": "leave-one-out of T - F0 over the logs that state it",
                "cases": u_pre,
                "half_width_bytes": max((abs(int(r["error_bytes"])) for r in u_pre), default=0),
                # the logged T - F0 of two builds and shapes: the only measured difference between boots
                "spread_bytes": max((int(r["logged_bytes"]) for r in u_pre), default=0)
                - min((int(r["logged_bytes"]) for r in u_pre), default=0),
            },
            "w_release": {
                "how": "the documented W of one checkpoint, online quantization and MTP k across releases "
                "and builds: largest minus smallest",
                "cases": w_release_rows(),
                "half_width_bytes": max((abs(int(r["error_bytes"])) for r in w_release_rows()), default=0),
            },
            "w_estimate": {
                "how": "each documented W against the nearest other documented bit rate's (same online "
                "quantization, MTP on/off)",
                "cases": w,
                "half_width_bytes": max((abs(int(r["error_bytes"])) for r in w), default=0),
            },
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = json.dumps(derive(), indent=1, sort_keys=True) + "\n"
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is out of date: run scripts/derive_band.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
