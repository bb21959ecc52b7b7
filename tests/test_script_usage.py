"""The maintainer scripts' documented `--check` usage (their docstrings) runs and passes.

tests/test_examples.py runs the examples in README.md and the shell/container files under scripts/; the
Python scripts document theirs in the module docstring: every docstring line that runs a script with
`--check` is run here, exactly as written (with this interpreter for `python`), from the repository root
(once per session: conftest.script_check, which the tests of the generated files share).
"""

from __future__ import annotations

import ast
import re
import shlex
import sys

import pytest
from conftest import REPO, script_check

USAGE = re.compile(r"^\s*(?:\.venv/bin/)?python3?\s+(scripts/\S+\.py)\s+(--check)\b")


def _check_lines() -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []
    for path in sorted((REPO / "scripts").glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        for line in doc.splitlines():
            m = USAGE.match(line.split("#", 1)[0])
            if m:
                found.append((line.strip(), [sys.executable, *shlex.split(f"{m[1]} {m[2]}")]))
    return found


CHECKS = _check_lines()


def test_the_scripts_document_a_check() -> None:
    names = {argv[1] for _, argv in CHECKS}
    assert {"scripts/derive_rig_defaults.py", "scripts/make_inventory_fixtures.py"} <= names


@pytest.mark.parametrize(("line", "argv"), CHECKS, ids=[line for line, _ in CHECKS])
def test_documented_check_passes(line: str, argv: list[str]) -> None:
    script = argv[1].removeprefix("scripts/")
    assert argv == [sys.executable, f"scripts/{script}", "--check"], line  # the command script_check runs
    res = script_check(script)
    assert res.returncode == 0, (line, res.stdout[-2000:], res.stderr[-2000:])
