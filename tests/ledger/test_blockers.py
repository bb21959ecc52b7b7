"""The verdict's blockers are a registry: one declared check per BlockerId, reported in a declared order."""

from __future__ import annotations

from typing import get_args

from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger import build_ledger
from glmlaunch.ledger.budget import Budget, compute_budget
from glmlaunch.ledger.verdict import BLOCKERS, BlockerId, blockers, judge


def _turnkey() -> tuple[DeploymentConfig, Budget]:
    config = resolve_config("turnkey", [], environ={}).config
    return config, compute_budget(config, build_ledger(config))


def test_every_blocker_id_has_exactly_one_entry_in_report_order() -> None:
    ids = [r.id for r in BLOCKERS]
    assert sorted(ids) == sorted(get_args(BlockerId))
    assert len(ids) == len(set(ids))
    # vLLM's order: loading, the start gate, the KV cache, one request, then what startup leaves
    assert ids == ["load", "start-gate", "no-kv", "request-fit", "runtime", "oom-risk", "margin"]


def test_each_check_raises_its_own_blocker_and_holds_on_a_budget_that_passes() -> None:
    config, real = _turnkey()
    # Two budgets that fail every constraint between them: the margin is either negative (oom-risk)
    # or short of its minimum and of the runtime demand (margin, runtime).
    common = {
        "load_margin": -1,
        "start_gate_ok": False,
        "kv_pinned": False,
        "gate": 0,
        "request_fits": False,
        "request_fit_confirmed": True,
    }
    negative = real._replace(**common, margin=-1)
    short = real._replace(**common, margin=0, min_margin=1, runtime_margin=-1, min_runtime_margin=0)
    passing = real._replace(
        load_margin=None,
        start_gate_ok=True,
        gate=real.w + real.p + real.n + real.g_e + 1,
        request_fits=True,
        margin=1,
        min_margin=1,
        runtime_margin=0,
        min_runtime_margin=0,
    )
    for rule in BLOCKERS:
        raised = [b for b in (rule.check(config, negative), rule.check(config, short)) if b is not None]
        assert raised, rule.id
        assert {b.id for b in raised} == {rule.id}
        assert all(b.message.startswith("the ") and b.terms for b in raised)
        assert rule.check(config, passing) is None, rule.id
    assert [b.id for b in blockers(config, negative)] == [
        "load", "start-gate", "no-kv", "request-fit", "oom-risk"
    ]
    assert [b.id for b in blockers(config, short)] == [
        "load", "start-gate", "no-kv", "request-fit", "runtime", "margin"
    ]
    assert blockers(config, passing) == ()


def test_the_verdict_reports_the_registry_blockers() -> None:
    config, real = _turnkey()
    b = real._replace(margin=0, min_margin=1)
    v = judge(config, build_ledger(config), b)
    assert v.blockers == blockers(config, b)
    assert v.blockers[-1].id == "margin"
    assert v.deciding == tuple(t for t in ("U_pre", "W", "P", "N", "G_e", "KV bytes/token")
                               if any(t in x.terms for x in v.blockers))
