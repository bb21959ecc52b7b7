"""The runtime terms fitted on the appliance's recorded outcomes (``facts.json``).

``scripts/derive_runtime_facts.py`` writes the file from ``data/upstream/outcomes.json`` and
``data/upstream/runtime_cases.json``: each case is planned with glmlaunch's own ledger, and the terms are
the analytic centre of the intervals the outcomes allow (served: the demand fits the free memory; OOMed
after boot: it does not). A test re-derives the file, so the two cannot drift.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

FACTS_FILE = "facts.json"


@dataclass(frozen=True, slots=True)
class Term:
    """One fitted (or measured) runtime figure, with how it was obtained and the records behind it."""

    name: str
    value: float
    unit: str
    how: str
    evidence: tuple[str, ...]

    @property
    def bytes(self) -> int:
        return round(self.value)

    def cite(self) -> str:
        return f"{self.how} [records: {', '.join(self.evidence)}]" if self.evidence else self.how


@lru_cache(maxsize=1)
def _load() -> dict[str, Any]:
    text = resources.files(__package__).joinpath(FACTS_FILE).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def term(name: str) -> Term:
    raw = _load()["terms"][name]
    return Term(
        name=name,
        value=float(raw["value"]),
        unit=str(raw["unit"]),
        how=str(raw["how"]),
        evidence=tuple(raw.get("evidence", ())),
    )


def document() -> dict[str, Any]:
    """The whole facts document (the benchmark and the docs show its fit)."""
    return _load()


def reload() -> None:
    """Forget the cached file (the derive script rewrites it, then plans with it)."""
    _load.cache_clear()
