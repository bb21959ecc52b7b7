#!/usr/bin/env python3
"""Regenerate glmlaunch/calibrate/rig_defaults.json from the real boot logs in tests/fixtures/boot-logs.

The release overheads come from the appliance's documented boots in data/upstream (capacities.json,
terms.json: each row cited by file, lines and quote at malaiwah/glm52-exl3-vast eba43a5).

.venv/bin/python scripts/derive_rig_defaults.py            # rewrite the file
.venv/bin/python scripts/derive_rig_defaults.py --check    # exit 1 if the file is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "fixtures" / "boot-logs"
OUT = ROOT / "glmlaunch" / "calibrate" / "rig_defaults.json"
DOCUMENTED = ROOT / "data" / "upstream"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    from glmlaunch.calibrate.derive import derive_document

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
