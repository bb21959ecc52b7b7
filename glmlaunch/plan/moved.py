"""Which calibration records moved a plan, and by how much (issue 31): ``plan`` names them.

A record moves a plan through the term model fitted on every applicable record (U_pre, W, P, N, G_e) and,
for a serve log of exactly the planned configuration, through the runtime demand it proves. Each record's
share is what the plan loses without it: the same configuration planned on the same device from every
other record (for a plan of one record: from none, i.e. the rig defaults or the ledger's own), term by term
and in the margin, the runtime margin and the KV tokens, with the verdict it would have had. The records
that changed nothing are not named.

Each record costs one more fit and plan; past :data:`MAX_ATTRIBUTED` records the newest are named and the
rest counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from glmlaunch.ledger import build_ledger
from glmlaunch.ledger.budget import compute_budget

if TYPE_CHECKING:
    from glmlaunch.calibrate.apply import CalibrationUse
    from glmlaunch.calibrate.records import Calibration
    from glmlaunch.calibrate.store import Loaded, Store
    from glmlaunch.plan.plan import Plan

MAX_ATTRIBUTED = 8
#: the term model's names and the plan's (``--explain`` knows both)
TERM_LABELS = {"u_pre": "U_pre", "w": "W", "p": "P", "n": "N", "g_e": "G_e", "runtime": "runtime demand"}


@dataclass(frozen=True)
class Moved:
    """What one record moved: the plan with it less the plan without it."""

    record_id: str
    source: str
    #: per term (``u_pre``, ``w``, ``p``, ``n``, ``g_e``; ``runtime``: the proven runtime demand), bytes
    terms: tuple[tuple[str, int], ...]
    margin_bytes: int
    runtime_margin_bytes: int
    kv_tokens: int
    #: the verdict's status and confidence without the record
    status_without: str
    confidence_without: str

    def doc(self) -> dict[str, Any]:
        return {
            "record_id": self.record_id,
            "source": self.source,
            "terms": dict(self.terms),
            "margin_bytes": self.margin_bytes,
            "runtime_margin_bytes": self.runtime_margin_bytes,
            "kv_tokens": self.kv_tokens,
            "status_without": self.status_without,
            "confidence_without": self.confidence_without,
        }

    def line(self, status: str, confidence: str) -> str:
        from glmlaunch.config.units import format_size

        def signed(n: int) -> str:
            return ("+" if n > 0 else "-" if n < 0 else "") + format_size(abs(n))

        terms = ", ".join(f"{TERM_LABELS.get(t, t)} {signed(d)}" for t, d in self.terms) or "no term"
        name = self.source.rsplit("/", 1)[-1]
        if (self.status_without, self.confidence_without) == (status, confidence):
            verdict = "; verdict unchanged"
        else:
            verdict = f"; without it: {self.status_without} ({self.confidence_without})"
        return (
            f"moved by {self.record_id[:12]} ({name}): {terms}; margin {signed(self.margin_bytes)}, runtime "
            f"margin {signed(self.runtime_margin_bytes)}, KV {self.kv_tokens:+,} tokens{verdict}"
        )


def _use(plan: Plan, loaded: Loaded, root: Any) -> CalibrationUse:
    from glmlaunch.calibrate.apply import calibration_from, raise_by_evidence

    use = calibration_from(plan.config, loaded, root)
    use = replace(use, inputs=replace(use.inputs, checkpoint=plan.inputs.checkpoint))
    if use.evidence:
        ledger = build_ledger(plan.config, use.inputs)
        raised = raise_by_evidence(ledger, compute_budget(plan.config, ledger), use.evidence)
        if raised is not None:
            use = replace(use, inputs=raised[0])
    return use


def _terms(plan: Plan) -> dict[str, int]:
    out = dict(plan.inputs.term_bytes)
    out["runtime"] = plan.budget.runtime_demand
    return out


def moved_by(plan: Plan, *, store: Store | None = None) -> tuple[tuple[Moved, ...], int]:
    """The records that moved ``plan`` (newest first), and how many more applied than were attributed."""
    from glmlaunch.calibrate.store import Loaded
    from glmlaunch.calibrate.store import Store as _Store
    from glmlaunch.plan.plan import make_plan

    use = plan.calibration
    if use is None or not (use.used or use.evidence):
        return (), 0
    st = store or _Store.default()
    # the records the plan was fitted on, as it read them (a store given here is read again)
    loaded = Loaded(use.records, use.warnings) if store is None and use.records else st.load()
    used = {label[:12] for label in use.used}
    evidence = {r.record_id for r, _ in use.evidence}
    applied: list[Calibration] = [
        r for r in loaded.records if r.record_id[:12] in used or r.record_id in evidence
    ]
    mine = _terms(plan)
    out: list[Moved] = []
    for rec in applied[:MAX_ATTRIBUTED]:
        others = Loaded(tuple(r for r in loaded.records if r is not rec), loaded.warnings)
        without = make_plan(
            plan.config,
            memory=plan.memory,
            inputs=_use(plan, others, st.root).inputs,
            library=plan.ledger.library,
        )
        theirs = _terms(without)
        terms = tuple(
            (t, mine.get(t, 0) - theirs.get(t, 0))
            for t in ("u_pre", "w", "p", "n", "g_e", "runtime")
            if mine.get(t, 0) != theirs.get(t, 0)
        )
        b, w = plan.budget, without.budget
        moved = Moved(
            record_id=rec.record_id,
            source=rec.boot.source,
            terms=terms,
            margin_bytes=b.margin - w.margin,
            runtime_margin_bytes=b.runtime_margin - w.runtime_margin,
            kv_tokens=b.kv_tokens - w.kv_tokens,
            status_without=without.verdict.status,
            confidence_without=without.verdict.confidence,
        )
        changed = (moved.status_without, moved.confidence_without) != (
            plan.verdict.status,
            plan.verdict.confidence,
        )
        if terms or moved.margin_bytes or moved.kv_tokens or changed:
            out.append(moved)
    return tuple(out), max(0, len(applied) - MAX_ATTRIBUTED)
