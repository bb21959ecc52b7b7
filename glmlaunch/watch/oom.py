"""After an OOM: which ledger entry it most likely was, and what would have kept it.

vLLM's and PyTorch's message, ``Tried to allocate X … of which Y is free``, parsed as ``calibrate ingest``
parses it (:func:`glmlaunch.vllmlog.events.runtime_events_of`), is read against the plan:

* **after ready** (a runtime OOM): the plan predicted ``margin`` free after startup, so ``margin - Y`` of
  the runtime demand had been allocated when ``X`` failed, and the demand is at least
  ``floor = margin - Y + X`` (the bound ``calibrate ingest`` learns from the same line). The entry is
  the runtime transient whose size is ``X`` (to the message's two decimals, or its 2 MiB pages); else
  the one firing at that point of its phase (the cumulative demand, in firing order, crosses
  ``margin - Y`` inside it) and large enough to hold ``X``; else the smallest that holds ``X``; else
  the plan has no transient that large and the largest stands in, said so.
* **before ready** (a startup OOM): the startup entry of size ``X``, else the smallest that holds it.

What would have kept it is planned, not guessed: the configuration is planned again with the demand
raised to ``floor`` (:func:`glmlaunch.calibrate.apply.with_demand_floor`), and each fix is the planner's
answer under that demand, checked by planning with it: the pool pin and the GMU the budget recommends,
and the largest ``max_num_batched_tokens`` (the prefill's growth scaled with the chunk) whose runtime margin
holds. A startup OOM's fix is the GMU that leaves ``X - Y`` more free after startup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from glmlaunch.calibrate.apply import _with, prefill_split, with_demand_floor
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import MIB, format_size
from glmlaunch.ledger.inputs import LedgerInputs
from glmlaunch.ledger.model import PHASES, Entry
from glmlaunch.plan.plan import Plan, make_plan
from glmlaunch.vllmlog.events import RuntimeEvent, tried_unit
from glmlaunch.vllmlog.lines import tp_index
from glmlaunch.vllmlog.numbers import UNIT_BYTES

How = Literal["size", "position", "holds-it", "largest"]
#: the message prints two decimals of its unit; the allocator rounds a fresh block up to 2 MiB pages
PAGE = 2 * MIB
#: verdicts under which the proven runtime demand fits: the fix keeps it (a margin below the minimum is
#: the plan's own business, not this OOM's)
_KEEPS = ("ok", "below-margin")
BATCH_STEP = 256


@dataclass(frozen=True)
class Match:
    entry: Entry
    phase: str | None  # None: a startup entry
    how: How
    reason: str

    def to_json(self) -> dict[str, object]:
        e = self.entry
        return {
            "name": e.name,
            "device_bytes": e.device_bytes,
            "requested_bytes": e.requested_bytes,
            "phase": self.phase,
            "lifetime": e.lifetime,
            "reader": e.reader,
            "trigger": e.condition,
            "formula": e.formula,
            "origin": e.origin,
            "matched_by": self.how,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Fix:
    kind: Literal["pool-pin", "gmu", "batched-tokens"]
    key: str
    value: int | float
    effect: str
    verdict: str
    runtime_margin_bytes: int

    @property
    def setting(self) -> str:
        return f"{self.key}={self.value}"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "set": self.setting,
            "key": self.key,
            "value": self.value,
            "effect": self.effect,
            "verdict": self.verdict,
            "runtime_margin_bytes": self.runtime_margin_bytes,
        }


@dataclass(frozen=True)
class Explanation:
    event: RuntimeEvent
    rank: int | None
    margin_bytes: int
    plan_demand_bytes: int
    realized_bytes: int  # margin - free: the runtime demand allocated when the OOM came (after ready)
    floor_bytes: int  # realized + tried: the demand this OOM proves (after ready)
    match: Match | None
    fixes: tuple[Fix, ...]
    notes: tuple[str, ...]

    @property
    def tried_bytes(self) -> int:
        return self.event.tried_bytes or 0

    def headline(self) -> str:
        e = self.event
        who = (
            f"rank {self.rank}"
            if self.rank is not None
            else (f"GPU {e.gpu}" if e.gpu is not None else "a GPU")
        )
        when = "after ready" if e.after_ready else "during startup"
        tried, free = format_size(self.tried_bytes), format_size(e.free_bytes)
        text = f"OOM on {who} {when}: tried {tried} with {free} free"
        if self.match is not None:
            m = self.match
            text += f"; most likely {m.entry.name} ({format_size(m.entry.device_bytes)}"
            text += f", {m.phase})" if m.phase else ", startup)"
        if self.fixes:
            text += "; would have kept it: " + " or ".join(f"--set {f.setting}" for f in self.fixes)
        return text

    def to_json(self) -> dict[str, object]:
        e = self.event
        return {
            "line": e.line,
            "process": e.process,
            "gpu": e.gpu,
            "rank": self.rank,
            "after_ready": e.after_ready,
            "tried_bytes": self.tried_bytes,
            "free_bytes": e.free_bytes,
            "total_bytes": e.total_bytes,
            "plan_margin_bytes": self.margin_bytes,
            "plan_runtime_demand_bytes": self.plan_demand_bytes,
            "realized_bytes": self.realized_bytes,
            "demand_floor_bytes": self.floor_bytes,
            "entry": self.match.to_json() if self.match is not None else None,
            "fixes": [f.to_json() for f in self.fixes],
            "notes": list(self.notes),
        }


def rank_of(event: RuntimeEvent) -> int | None:
    """The rank that failed: its worker's name (``Worker_TP1_…``), else the GPU in the message (a worker's
    ``cuda:r`` under the deployment's CUDA_VISIBLE_DEVICES is rank r)."""
    if event.process:
        tp = tp_index(event.process)
        if tp is not None:
            return tp
    return event.gpu


def _resolution(event: RuntimeEvent) -> int:
    printed = tried_unit(event.line)
    unit = UNIT_BYTES[printed] if printed is not None else MIB
    return max(PAGE, unit // 200)


def match_runtime(event: RuntimeEvent, plan: Plan) -> Match | None:
    demand = plan.ledger.runtime
    tried = event.tried_bytes or 0
    tol = _resolution(event)
    sized = [
        t
        for t in demand.transients
        if t.entry.device_bytes > 0
        and min(abs(tried - t.entry.requested_bytes), abs(tried - t.entry.device_bytes)) <= tol
    ]
    if sized:
        best = min(sized, key=lambda t: abs(tried - t.entry.requested_bytes))
        return Match(best.entry, best.phase, "size", f"its size is the allocation's, {format_size(tried)}")
    realized = max(0, plan.budget.margin - event.free_bytes)
    phases = [demand.peak_phase, *(p for p in PHASES if p != demand.peak_phase)]
    for phase in phases:
        done = 0
        for e in demand.in_phase(phase):
            if e.device_bytes <= 0:
                continue
            if done <= realized < done + e.device_bytes and e.device_bytes >= tried:
                return Match(
                    e,
                    phase,
                    "position",
                    f"the {phase} phase had allocated {format_size(realized)} (margin - free) when it "
                    f"failed, inside this entry's share ({format_size(done)} to "
                    f"{format_size(done + e.device_bytes)}), and the entry holds the {format_size(tried)} "
                    "asked for",
                )
            done += e.device_bytes
    holds = [t for t in demand.transients if t.entry.device_bytes >= tried]
    if holds:
        best = min(holds, key=lambda t: (t.phase != demand.peak_phase, t.entry.device_bytes))
        return Match(
            best.entry,
            best.phase,
            "holds-it",
            f"the smallest runtime transient that holds {format_size(tried)}; the plan put the failure "
            f"point past its firing order ({format_size(realized)} allocated when it failed)",
        )
    largest = max(demand.transients, key=lambda t: t.entry.device_bytes, default=None)
    if largest is None:
        return None
    return Match(
        largest.entry,
        largest.phase,
        "largest",
        f"no runtime transient of the plan is as large as {format_size(tried)}: the plan under-counts; "
        "the largest stands in",
    )


def match_startup(event: RuntimeEvent, plan: Plan) -> Match | None:
    tried = event.tried_bytes or 0
    tol = _resolution(event)
    entries = [e for e in (*plan.ledger.rank0.entries, *plan.ledger.latent) if e.device_bytes > 0]
    sized = [e for e in entries if min(abs(tried - e.requested_bytes), abs(tried - e.device_bytes)) <= tol]
    if sized:
        best = min(sized, key=lambda e: abs(tried - e.requested_bytes))
        return Match(best, None, "size", f"its size is the allocation's, {format_size(tried)}")
    holds = [
        e for e in entries if e.kind in ("torch", "transient", "workspace") and e.requested_bytes >= tried
    ]
    if holds:
        best = min(holds, key=lambda e: e.requested_bytes)
        return Match(
            best, None, "holds-it", f"the smallest startup allocation that holds {format_size(tried)}"
        )
    return None


def _replan(plan: Plan, config: DeploymentConfig, inputs: LedgerInputs) -> Plan:
    """``config`` planned with ``inputs`` on the device memory ``plan`` was budgeted for."""
    return make_plan(config, memory=plan.memory, inputs=inputs, library=plan.ledger.library)


def runtime_fixes(plan: Plan, floor: int, source: str) -> tuple[tuple[Fix, ...], list[str]]:
    """The pool pin, the GMU and the batched tokens that keep a long-prefill demand of ``floor`` bytes."""
    config = plan.config
    note = f"{source} proves a runtime demand of at least {floor:,} B (margin - free + tried)"
    raised = with_demand_floor(plan.ledger, floor, note)
    notes: list[str] = []
    if raised is None:
        notes.append(
            f"the plan's runtime demand {format_size(plan.ledger.runtime.peak_bytes)} already covers the "
            f"{format_size(floor)} this OOM proves: the startup left less free than the plan's margin"
        )
        inputs = plan.inputs
    else:
        inputs = raised
    planned = _replan(plan, config, inputs)
    base, verdict = planned.budget, planned.verdict.status
    fixes: list[Fix] = []
    blocks = base.recommended_num_gpu_blocks
    if blocks is not None:
        pinned = _replan(plan, _with(config, "memory.num_gpu_blocks_override", blocks), inputs)
        b, v = pinned.budget, pinned.verdict.status
        if v in _KEEPS:
            fixes.append(
                Fix(
                    "pool-pin",
                    "memory.num_gpu_blocks_override",
                    blocks,
                    f"pin the KV pool at {blocks:,} blocks ({base.recommended_context_tokens:,} tokens)",
                    v,
                    b.runtime_margin,
                )
            )
    gmu = base.recommended_gpu_memory_utilization
    if gmu is not None and config.memory.num_gpu_blocks_override is None:
        natural = _replan(plan, _with(config, "memory.gpu_memory_utilization", gmu), inputs)
        b, v = natural.budget, natural.verdict.status
        if v in _KEEPS:
            fixes.append(
                Fix(
                    "gmu",
                    "memory.gpu_memory_utilization",
                    gmu,
                    f"the natural pool at GMU {gmu} ({b.kv_tokens:,} tokens)",
                    v,
                    b.runtime_margin,
                )
            )
    tokens = _batched_tokens_fix(planned, floor)
    if tokens is not None:
        fixes.append(tokens)
    if verdict in _KEEPS and raised is not None:
        notes.append("the configuration as it is keeps that demand by the plan's figures")
    return tuple(fixes), notes


def _batched_tokens_fix(plan: Plan, floor: int) -> Fix | None:
    """The largest max_num_batched_tokens (a multiple of 256) under which the prefill's growth, scaled with
    the chunk from the demand this OOM proves (``plan``: planned under it), keeps the runtime margin."""
    config, inputs = plan.config, plan.inputs
    now = config.scheduler.max_num_batched_tokens
    learned = inputs.runtime_prefill_bytes
    if learned is None:
        growth, _ = prefill_split(plan.ledger)
        learned = growth
    per_token = learned / now
    base = inputs if inputs.calibrated else replace(inputs, record_id="runtime-evidence")
    tokens = (now - 1) // BATCH_STEP * BATCH_STEP
    smallest = max(BATCH_STEP, config.scheduler.max_num_seqs * (1 + config.mtp))
    while tokens >= smallest:
        try:
            candidate = _with(config, "scheduler.max_num_batched_tokens", tokens)
        except ValueError:
            tokens -= BATCH_STEP
            continue
        scaled = replace(
            base,
            runtime_prefill_bytes=round(per_token * tokens),
            runtime_note=f"{per_token:,.0f} B per batched token, as the OOM proves, x {tokens}",
        )
        step = _replan(plan, candidate, scaled)
        b, v = step.budget, step.verdict.status
        if v in _KEEPS:
            return Fix(
                "batched-tokens",
                "scheduler.max_num_batched_tokens",
                tokens,
                f"prefill chunks of {tokens:,} tokens (the growth scales with the chunk)",
                v,
                b.runtime_margin,
            )
        tokens -= BATCH_STEP
    return None


def startup_fix(plan: Plan, short_bytes: int) -> Fix | None:
    """The highest GMU that leaves ``short_bytes`` more free after startup than the plan does now."""
    config, budget = plan.config, plan.budget
    target = budget.margin + short_bytes
    gmu = round(config.memory.gpu_memory_utilization - 0.001, 3)
    while gmu > 0.05:
        step = _replan(plan, _with(config, "memory.gpu_memory_utilization", gmu), plan.inputs)
        b, v = step.budget, step.verdict.status
        if b.margin >= target:
            return Fix(
                "gmu",
                "memory.gpu_memory_utilization",
                gmu,
                f"{format_size(b.margin)} free after startup ({format_size(short_bytes)} more)",
                v,
                b.runtime_margin,
            )
        gmu = round(gmu - 0.001, 3)
    return None


def explain(event: RuntimeEvent, plan: Plan, *, source: str = "this OOM") -> Explanation:
    notes: list[str] = []
    tried = event.tried_bytes or 0
    budget = plan.budget
    if event.total_bytes is not None and abs(event.total_bytes - budget.total) > 16 * MIB:
        notes.append(
            f"the failing GPU has {format_size(event.total_bytes)} in all, the plan budgets T = "
            f"{format_size(budget.total)}: plan with the GPU's (--set hardware.memory_per_gpu=…) for exact "
            "figures"
        )
    if event.after_ready:
        realized = max(0, budget.margin - event.free_bytes)
        floor = realized + tried
        match = match_runtime(event, plan)
        fixes, more = runtime_fixes(plan, floor, source)
        notes.extend(more)
    else:
        realized, floor = 0, 0
        match = match_startup(event, plan)
        fix = startup_fix(plan, max(0, tried - event.free_bytes))
        fixes = (fix,) if fix is not None else ()
        notes.append("before the server was ready: a startup allocation, not a runtime transient")
    return Explanation(
        event=event,
        rank=rank_of(event),
        margin_bytes=budget.margin,
        plan_demand_bytes=plan.ledger.runtime.peak_bytes,
        realized_bytes=realized,
        floor_bytes=floor,
        match=match,
        fixes=fixes,
        notes=tuple(notes),
    )


def distinct(events: Sequence[RuntimeEvent]) -> list[RuntimeEvent]:
    """The OOMs of a log, one per (when, size, free): ranks failing alike are one failure, said once."""
    seen: set[tuple[bool, int | None, int]] = set()
    out: list[RuntimeEvent] = []
    for e in events:
        if e.kind != "oom":
            continue
        key = (e.after_ready, e.tried_bytes, e.free_bytes)
        if key in seen:
            continue
        seen.add(key)
        out.append(e)
    return out
