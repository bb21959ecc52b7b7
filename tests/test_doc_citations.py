"""Every `<name>.md §N` citation in the product resolves inside the repository.

A citation is a path to a Markdown file followed by a section number, as the code, the docs and the
scripts write them (`docs/memory-model.md §6`). It resolves against the citing file's directory, then
against the repository root; the file must exist and have a heading `## N.`. A citation of a document
that is not shipped (a reference kept outside the repository) tells a reader nothing they can open.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from tests.conftest import REPO

CITING = ("glmlaunch", "docs", "README.md", "scripts", "profiles")
CITATION = re.compile(r"(?<![\w./-])([\w./-]*[\w-]\.md) §(\d+)")
SKIP_SUFFIXES = {".pyc", ".png", ".svg", ".whl", ".gz"}


def _citing_files() -> list[Path]:
    files: list[Path] = []
    for name in CITING:
        path = REPO / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [
                p
                for p in sorted(path.rglob("*"))
                if p.is_file() and p.suffix not in SKIP_SUFFIXES and "__pycache__" not in p.parts
            ]
    return files


@cache
def _sections(doc: Path) -> frozenset[int]:
    text = doc.read_text(encoding="utf-8")
    return frozenset(int(m) for m in re.findall(r"^## (\d+)\.", text, flags=re.MULTILINE))


def _resolve(citing: Path, target: str) -> Path | None:
    for base in (citing.parent, REPO):
        path = (base / target).resolve()
        if path.is_file() and path.is_relative_to(REPO):
            return path
    return None


def citations() -> list[tuple[Path, int, str, int]]:
    """(file, line, cited document, section) for every citation in the product."""
    found = []
    for path in _citing_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in CITATION.finditer(line):
                found.append((path, lineno, m.group(1), int(m.group(2))))
    return found


def test_citation_pattern_reads_the_forms_in_use() -> None:
    assert CITATION.findall("the budget (docs/memory-model.md §6): F0 = T - U_oth") == [
        ("docs/memory-model.md", "6")
    ]
    assert CITATION.findall("Rules (config-surface.md §4), run first") == [("config-surface.md", "4")]
    assert not CITATION.findall("memory-model.md s6; cite as `docs/memory-model.md §N`")


def test_every_citation_names_a_file_of_the_repository_and_a_section_it_has() -> None:
    found = citations()
    assert found, "no citation found: the pattern or the scanned folders are wrong"
    broken = []
    for path, lineno, target, section in found:
        where = f"{path.relative_to(REPO)}:{lineno}: {target} §{section}"
        doc = _resolve(path, target)
        if doc is None:
            broken.append(f"{where}: no such file in the repository")
        elif section not in _sections(doc):
            broken.append(f"{where}: {doc.relative_to(REPO)} has no heading '## {section}.'")
    assert not broken, f"{len(broken)} citation(s) do not resolve:\n" + "\n".join(broken)


def test_the_product_docs_number_their_sections_as_cited() -> None:
    assert _sections(REPO / "docs" / "memory-model.md") >= set(range(1, 8))
    assert _sections(REPO / "docs" / "configuration.md") >= {1, 2, 3, 4}
