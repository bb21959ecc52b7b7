#!/usr/bin/env python3
"""Write glmlaunch/calibrate/schema1_bases.json: r12-exl3 as every glmlaunch that wrote schema-1 records
resolved it.

A schema-1 calibration record keeps its boot configuration as dotted settings over the shipped
``r12-exl3`` profile (``boot_settings`` over ``base_profile``), so what it means depends on that profile
as the glmlaunch that wrote it resolved it (profile file, schema defaults). This script checks out each
commit of that era (``git archive`` of ``glmlaunch/``, ``profiles/`` and ``data/`` into a temporary
directory), resolves ``r12-exl3`` there with an empty environment in a fresh interpreter, and keeps each
distinct configuration with the commits that shipped it, and the settings the fingerprint left out then
(``NON_MEMORY_SETTINGS``, the same at every commit of the era). :mod:`glmlaunch.calibrate.migrate` reads the
file; the history it records does not change, so the file is written once (again only if the era is
extended, with ``--last``).

The earliest commits import pydantic-settings (a dependency then): give an interpreter that has it, or
``--extra-path`` to a directory holding it (``pip install --target DIR pydantic-settings``).

Usage:
  .venv/bin/python scripts/freeze_record_bases.py [--first 5518314] [--last b4e824e] [--extra-path DIR]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "glmlaunch" / "calibrate" / "schema1_bases.json"
PROFILE = "r12-exl3"
#: the commit that added boot_settings/base_profile to schema 1, and the last one that wrote them
FIRST, LAST = "5518314", "872f37d"

RESOLVE = """
import json
try:
    from glmlaunch.config.resolve import resolve_config
except ImportError:  # before the stage packages (5b0f695)
    from glmlaunch.resolve import resolve_config
print(json.dumps(resolve_config(%r, (), environ={}).config.model_dump(mode="json"), sort_keys=True))
"""


def git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True).stdout


def resolved_at(commit: str, extra_path: str | None) -> dict[str, Any]:
    """r12-exl3 as ``commit`` resolves it (in a fresh interpreter, on that commit's files)."""
    paths = [p for p in ("glmlaunch", "profiles", "data") if git("ls-tree", commit, p).strip()]
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=BytesIO(git("archive", commit, *paths))) as tar:
            tar.extractall(tmp, filter="data")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tmp, extra_path) if p)
        res = subprocess.run(
            [sys.executable, "-c", RESOLVE % PROFILE], cwd=tmp, env=env, capture_output=True, text=True
        )
        if res.returncode:
            raise SystemExit(f"{commit}: {res.stderr.strip().splitlines()[-1]}")
        config: dict[str, Any] = json.loads(res.stdout)
        return config


def fingerprint_excludes(commit: str) -> list[str]:
    """``NON_MEMORY_SETTINGS`` of ``commit``'s fingerprint module, read from its source (not imported)."""
    source = git("show", f"{commit}:glmlaunch/calibrate/fingerprint.py").decode()
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "NON_MEMORY_SETTINGS"
            and node.value is not None
        ):
            return list(ast.literal_eval(node.value))
    raise SystemExit(f"{commit}: no NON_MEMORY_SETTINGS in glmlaunch/calibrate/fingerprint.py")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--first", default=FIRST)
    ap.add_argument("--last", default=LAST)
    ap.add_argument("--extra-path", help="a directory to put on PYTHONPATH (pydantic-settings)")
    args = ap.parse_args()
    commits = git("rev-list", "--reverse", f"{args.first}^..{args.last}").decode().split()
    bases: list[dict[str, Any]] = []
    excludes: list[str] | None = None
    for commit in commits:
        config = resolved_at(commit, args.extra_path)
        if excludes is not None and fingerprint_excludes(commit) != excludes:
            raise SystemExit(f"{commit}: the fingerprint's NON_MEMORY_SETTINGS changed in this era")
        excludes = fingerprint_excludes(commit)
        short = git("rev-parse", "--short=7", commit).decode().strip()
        date = git("show", "-s", "--format=%cI", commit).decode().strip()
        base = next((b for b in bases if b["config"] == config), None)
        if base is None:
            base = {"first_shipped": date, "commits": [], "config": config}
            bases.append(base)
        base["commits"].append(short)
        base["first_shipped"] = min(base["first_shipped"], date)
        print(f"{short} {date} base {bases.index(base) + 1}", file=sys.stderr)
    doc = {
        "description": (
            f"{PROFILE} as each glmlaunch that wrote schema-1 calibration records resolved it (commits "
            f"{args.first}..{args.last}, an empty environment), one entry per distinct configuration, "
            "oldest first, and the configuration keys the fingerprint left out in that era. Written by "
            "scripts/freeze_record_bases.py; read by glmlaunch.calibrate.migrate."
        ),
        "profile": PROFILE,
        "fingerprint_excludes": excludes,
        "bases": sorted(bases, key=lambda b: str(b["first_shipped"])),
    }
    OUT.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(REPO)}: {len(bases)} distinct configurations", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
