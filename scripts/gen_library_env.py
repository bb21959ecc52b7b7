"""Write glmlaunch/config/library_env.json from the recorded generations (tests/fixtures/generations/*.json):
every SPARKINFER_* / B12X_* name each generation's library reads, with the file:line in its tree, and
what each release generation reads and no longer reads against the one before it of its library.

Run after re-recording a generation (scripts/record_generation.py); check that the two are in step with::

    python scripts/gen_library_env.py --check
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "generations"
TARGET = REPO / "glmlaunch" / "config" / "library_env.json"


def build() -> str:
    sys.path.insert(0, str(REPO))
    from glmlaunch.config.releases import RELEASE_BANDS, STACKS

    generations: dict[str, dict[str, object]] = {}
    previous: dict[str, str] = {}
    for stack in STACKS:
        doc = json.loads((FIXTURES / f"{stack}.json").read_text())
        generations[stack] = {"package": doc["package"], "tree": doc["tree"], "reads": doc["env_reads"]}
        # what a release generation reads and no longer reads against the one before it of its library
        # (the lab row is no release: it is compared with nothing)
        before = previous.get(doc["package"])
        if before is not None and stack in RELEASE_BANDS:
            mine, theirs = set(doc["env_reads"]), set(generations[before]["reads"])  # type: ignore[arg-type]
            generations[stack]["since"] = {
                "generation": before,
                "reads_added": sorted(mine - theirs),
                "reads_dropped": sorted(theirs - mine),
            }
        if stack in RELEASE_BANDS:
            previous[doc["package"]] = stack
    data = {
        "schema_version": 1,
        "note": "written by scripts/gen_library_env.py from tests/fixtures/generations/*.json; do not edit",
        "generations": generations,
    }
    return json.dumps(data, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed file is not what it writes")
    args = ap.parse_args(argv)
    text = build()
    if args.check:
        if TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET} is stale: run python scripts/gen_library_env.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
