"""Formula strings show the configured values, not the launcher's defaults."""

from __future__ import annotations

from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger import build_ledger


def _formula(*overrides: str) -> str:
    config = resolve_config("turnkey", list(overrides), environ={}).config
    entry = next(e for e in build_ledger(config).rank0.entries if e.name == "oneshot.slab.eager")
    return entry.formula


def test_oneshot_formula_names_the_configured_sizes() -> None:
    assert "max(allreduce 65,536, fused 86,016, 16) = 86,016" in _formula()
    # Same E (the max) but another all-reduce size: the text must follow, memo or not.
    assert "max(allreduce 32,768, fused 86,016, 16) = 86,016" in _formula(
        "comm.oneshot_allreduce_max_size=32KB"
    )
    assert "fused 131,072, 16) = 131,072" in _formula("comm.oneshot_fused_max_size=128KB")
