"""The audit's rules as a registry (as config/rules.py declares validation): each rule answers once per
configuration, a finding or why it does not apply, in the registry's order, carrying the rule's level."""

from __future__ import annotations

import re

import pytest

from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger import build_ledger
from glmlaunch.plan.audit import RULES, audit_ledger

CASES = [
    ("turnkey", ()),
    ("gate", ()),
    ("r12-exl3", ("runner=v1", "comm.dma_min_bytes=1TiB")),
    ("turnkey", ("comm.dma_wire_mode=mx_ring", "comm.allow_compressed_wire=true")),
    ("turnkey", ("comm.pcie_allreduce=false", "indexer.sparse_indexer=false")),
]


def test_rule_ids_are_unique_kebab_case_and_each_has_a_level() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids)) == 8
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids)
    assert {r.level for r in RULES} <= {"exact", "estimate", "upper-bound"}
    assert all(r.summary for r in RULES)


@pytest.mark.parametrize(("profile", "sets"), CASES)
def test_every_rule_answers_once_in_registry_order(profile: str, sets: tuple[str, ...]) -> None:
    config = resolve_config(profile, sets, environ={}).config
    audit = audit_ledger(config, build_ledger(config))
    found = [f.id for f in audit.findings]
    skipped = [i for i, _ in audit.not_applicable]
    assert sorted(found + skipped) == sorted(r.id for r in RULES)
    order = [r.id for r in RULES]
    assert found == [i for i in order if i in found] and skipped == [i for i in order if i in skipped]
    level = {r.id: r.level for r in RULES}
    assert all(f.certainty == level[f.id] for f in audit.findings)
    assert all(why for _, why in audit.not_applicable)
