"""docs/configuration.md §1 (issue 31, item 14): its table names every profile shipped in profiles/ with
what it extends, and its example profile plans as the text says (verdict ok)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from conftest import REPO, run_cli

DOC = REPO / "docs" / "configuration.md"


def _section_one() -> str:
    return DOC.read_text(encoding="utf-8").split("## 1. Profiles", 1)[1].split("\n## ", 1)[0]


def test_the_doc_lists_every_shipped_profile_and_what_it_extends() -> None:
    rows = re.findall(r"^\| `([\w.-]+)` \| (?:`([\w.-]+)`)? ?\|", _section_one(), re.MULTILINE)
    listed = {name: base or None for name, base in rows}
    shipped = {}
    for path in sorted((REPO / "profiles").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        shipped[path.stem] = doc.get("extends")
    assert listed == shipped


def test_the_docs_example_profile_plans_ok(tmp_path: Path, clean_env: dict[str, str]) -> None:
    block = _section_one().split("```yaml\n", 1)[1].split("```", 1)[0]
    name = re.match(r"# (\S+\.yaml):", block)
    assert name is not None, block
    (tmp_path / name.group(1)).write_text(block, encoding="utf-8")
    assert f"glmlaunch plan -p {name.group(1)}" in _section_one()
    done = run_cli("plan", "-p", name.group(1), "--json", env=clean_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verdict"]["status"] == "ok"
