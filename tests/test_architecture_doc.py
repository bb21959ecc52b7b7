"""docs/architecture.md names what is there: the stages in the layer test's order, and real modules,
classes and functions.

The page is a map of the code (the stages and the typed object on each arrow); a rename that the page does
not follow would send a reader to a module or a class that no longer exists. So every stage row is checked
against ``STAGES`` (tests/test_layout.py), every module path, every class name and every dotted function
(``plan.plan.make_plan``) against the package's source, read with ``ast`` (nothing is imported).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from tests.test_layout import PKG, STAGES

REPO = PKG.parent
DOC = REPO / "docs" / "architecture.md"
#: the names the page may use that are not glmlaunch's own classes
FOREIGN_NAMES = frozenset({"Any", "NamedTuple", "None"})
SHARED = ("errors", "files", "output", "clikit")


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def _spans() -> list[str]:
    """Inline code spans, and every line of the fenced blocks."""
    text = _text()
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    prose = re.sub(r"^```[a-z]*\n.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    # an inline span may run over a line break
    return re.findall(r"`([^`]+)`", prose) + [line for b in blocks for line in b.splitlines()]


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _top_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in _tree(path).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


@cache
def _classes() -> frozenset[str]:
    return frozenset(
        n.name for p in PKG.rglob("*.py") for n in ast.walk(_tree(p)) if isinstance(n, ast.ClassDef)
    )


def _module(parts: list[str]) -> Path | None:
    base = PKG.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _resolves(dotted: str) -> bool:
    """``stage.module.name``: the longest prefix that is a module, then a top-level name of it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = _module(parts[:cut])
        if path is not None:
            return cut == len(parts) or parts[cut] in _top_names(path)
    return False


def test_the_stage_table_is_the_layer_tests_order() -> None:
    section = _text().split("## The stages, in pipeline order", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z]+)` \|", section, flags=re.MULTILINE)
    assert tuple(rows) == STAGES


def test_every_module_path_exists() -> None:
    paths = {p for s in _spans() for p in re.findall(r"[\w./-]+\.(?:py|md)\b", s) if "/" in p or p in (
        "cli.py", "clikit.py", "errors.py", "files.py", "output.py", "__main__.py")}
    assert paths, "no module path found: the pattern is wrong"
    missing = [p for p in sorted(paths) if not (REPO / p).is_file() and not (PKG / p).is_file()]
    assert missing == []


def test_every_class_and_function_named_exists() -> None:
    roots = (*STAGES, *SHARED)
    dotted: set[str] = set()
    classes: set[str] = set()
    for span in _spans():
        if "/" in span:
            continue
        for m in re.finditer(r"(?<![\w.])([a-z_]+(?:\.[a-z_]+)+)", span):
            parts = m.group(1).split(".")
            if parts[0] in roots and parts[-1] not in ("py", "md", "json"):
                dotted.add(m.group(1))
        classes |= set(re.findall(r"(?<![\w.])([A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+|[A-Z][a-z]{2,})\b", span))
    assert {"plan.plan.make_plan", "ledger.build_ledger"} <= dotted
    assert {"Plan", "LedgerInputs", "LaunchSpec"} <= classes
    assert [d for d in sorted(dotted) if not _resolves(d)] == []
    assert sorted(classes - _classes() - FOREIGN_NAMES) == []


def test_the_checks_catch_a_stale_name() -> None:
    assert _resolves("plan.plan.make_plan") and _resolves("ledger.budget.compute_budget")
    assert not _resolves("plan.plan.plan_stage") and not _resolves("calibrate.logs.parse_log_file")
    assert "LedgerCalibration" not in _classes()
