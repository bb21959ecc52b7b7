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

**When the log does not say** (no ready line before the OOM, none after it, and no sign the boot stopped
short of sizing its KV pool: a line pasted on its own), both phases are candidates. Each is read against
the plan as above, and ranked by what the plan would have to be wrong by for the OOM to come there: as a
runtime OOM, ``floor - D`` (nothing when the plan's own runtime demand D reaches the floor: the plan
predicts it); as a startup OOM, ``margin - free`` (the plan has at least ``margin`` free at every point of
startup). The one the plan explains best is the most likely; the other is listed with its own fixes.
A latent entry (the plan marks it "reachable by other callers, not charged") is never the most likely:
it is named in a note when its size would fit.

**A log of many OOMs** (every rank, every request that failed): the one explained is the one proving the
largest demand (:func:`the_oom`); the others are counted, by their distinct (when, tried, free) readings,
not each planned again: the fixes are planned once, so the cost is the log's parse.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from glmlaunch.calibrate.apply import _with, prefill_split, with_demand_floor
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import MIB, format_size
from glmlaunch.ledger.inputs import LedgerInputs
from glmlaunch.ledger.kv_cache import KV_BLOCK
from glmlaunch.ledger.model import PHASES, Entry
from glmlaunch.plan.plan import Plan, make_plan, pinned_config
from glmlaunch.vllmlog.boot import BootLog
from glmlaunch.vllmlog.events import RuntimeEvent, tried_unit
from glmlaunch.vllmlog.lines import tp_index
from glmlaunch.vllmlog.numbers import UNIT_BYTES

How = Literal["size", "position", "holds-it", "largest"]
#: when the OOM came, as the log shows it: after the ready line, during startup, or not said
When = Literal["after-ready", "startup", "unknown"]
Phase = Literal["runtime", "startup"]
_QUALITY: dict[str, int] = {"size": 0, "position": 0, "holds-it": 1, "largest": 2}
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
    #: the settings it needs beside ``key`` (a pool pin that holds less than max_model_len comes with the
    #: context it holds: vLLM refuses the pin alone)
    also: tuple[tuple[str, int | float], ...] = ()

    @property
    def setting(self) -> str:
        return f"{self.key}={self.value}"

    @property
    def settings(self) -> tuple[str, ...]:
        return (self.setting, *(f"{k}={v}" for k, v in self.also))

    @property
    def set_args(self) -> str:
        """The ``--set`` arguments, as typed."""
        return " ".join(f"--set {s}" for s in self.settings)

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "set": self.setting,
            "sets": list(self.settings),
            "key": self.key,
            "value": self.value,
            "effect": self.effect,
            "verdict": self.verdict,
            "runtime_margin_bytes": self.runtime_margin_bytes,
        }


@dataclass(frozen=True)
class Candidate:
    """One reading of the OOM: as a runtime one or as a startup one, with what keeps it."""

    phase: Phase
    match: Match | None
    #: how far the plan must be wrong for the OOM to come in this phase (0: the plan predicts it)
    unexplained_bytes: int
    realized_bytes: int  # margin - free: the runtime demand allocated when the OOM came (runtime)
    floor_bytes: int  # realized + tried: the demand this OOM proves (runtime)
    fixes: tuple[Fix, ...]
    notes: tuple[str, ...]

    def rank_key(self) -> tuple[int, int, int]:
        quality = 3 if self.match is None else _QUALITY[self.match.how]
        return (self.unexplained_bytes, quality, 0 if self.phase == "runtime" else 1)

    def to_json(self) -> dict[str, object]:
        return {
            "phase": self.phase,
            "unexplained_bytes": self.unexplained_bytes,
            "realized_bytes": self.realized_bytes,
            "demand_floor_bytes": self.floor_bytes,
            "entry": self.match.to_json() if self.match is not None else None,
            "fixes": [f.to_json() for f in self.fixes],
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Explanation:
    event: RuntimeEvent
    rank: int | None
    when: When
    margin_bytes: int
    plan_demand_bytes: int
    #: the most likely first (a single one when the log says when the OOM came)
    candidates: tuple[Candidate, ...]
    notes: tuple[str, ...]

    @property
    def best(self) -> Candidate:
        return self.candidates[0]

    @property
    def match(self) -> Match | None:
        return self.best.match

    @property
    def fixes(self) -> tuple[Fix, ...]:
        return self.best.fixes

    @property
    def realized_bytes(self) -> int:
        return self.best.realized_bytes

    @property
    def floor_bytes(self) -> int:
        return self.best.floor_bytes

    @property
    def tried_bytes(self) -> int:
        return self.event.tried_bytes or 0

    def when_text(self) -> str:
        if self.when == "after-ready":
            return "after ready"
        if self.when == "startup":
            return "during startup"
        return "with no ready line in the log (during startup or while serving)"

    def headline(self) -> str:
        e = self.event
        who = (
            f"rank {self.rank}"
            if self.rank is not None
            else (f"GPU {e.gpu}" if e.gpu is not None else "a GPU")
        )
        tried, free = format_size(self.tried_bytes), format_size(e.free_bytes)
        text = f"OOM on {who} {self.when_text()}: tried {tried} with {free} free"
        if self.match is not None:
            m = self.match
            text += f"; most likely {m.entry.name} ({format_size(m.entry.device_bytes)}"
            text += f", {m.phase})" if m.phase else ", startup)"
        if self.fixes:
            text += "; would have kept it: " + " or ".join(f.set_args for f in self.fixes)
        return text

    def to_json(self) -> dict[str, object]:
        e = self.event
        return {
            "line": e.line,
            "process": e.process,
            "gpu": e.gpu,
            "rank": self.rank,
            "after_ready": e.after_ready,
            "when": self.when,
            "phase": self.best.phase,
            "tried_bytes": self.tried_bytes,
            "free_bytes": e.free_bytes,
            "total_bytes": e.total_bytes,
            "plan_margin_bytes": self.margin_bytes,
            "plan_runtime_demand_bytes": self.plan_demand_bytes,
            "realized_bytes": self.realized_bytes,
            "demand_floor_bytes": self.floor_bytes,
            "entry": self.match.to_json() if self.match is not None else None,
            "fixes": [f.to_json() for f in self.fixes],
            "notes": [*self.notes, *self.best.notes],
            "candidates": [c.to_json() for c in self.candidates],
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
    # a latent entry is one the plan does not charge (not reached by this model's path): never the match
    entries = [e for e in plan.ledger.rank0.entries if e.device_bytes > 0]
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
            f"{format_size(floor)} this OOM proves"
        )
        inputs = plan.inputs
    else:
        inputs = raised
    planned = _replan(plan, config, inputs)
    base, verdict = planned.budget, planned.verdict.status
    fixes: list[Fix] = []
    blocks = base.recommended_num_gpu_blocks
    if blocks is not None:
        context = base.recommended_context_tokens
        pinned_cfg = pinned_config(config, blocks, context)
        pinned = _replan(plan, pinned_cfg, inputs)
        b, v = pinned.budget, pinned.verdict.status
        shorter = pinned_cfg.scheduler.max_model_len < config.scheduler.max_model_len
        if v in _KEEPS:
            fixes.append(
                Fix(
                    "pool-pin",
                    "memory.num_gpu_blocks_override",
                    blocks,
                    f"pin the KV pool at {blocks:,} blocks ({context:,} tokens"
                    + (", the context it holds)" if shorter else ")"),
                    v,
                    b.runtime_margin,
                    also=(("scheduler.max_model_len", context),) if shorter else (),
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


def latent_note(event: RuntimeEvent, plan: Plan) -> str | None:
    """A latent entry that would hold the allocation, named as the one it is not."""
    tried = event.tried_bytes or 0
    holds = [e for e in plan.ledger.latent if e.requested_bytes >= tried > 0]
    if not holds:
        return None
    e = min(holds, key=lambda e: e.requested_bytes)
    return (
        f"{e.name} ({format_size(e.device_bytes)}) would hold {format_size(tried)} too, but the plan marks "
        f"it latent ({e.condition}): not the most likely"
    )


def startup_fixes(plan: Plan, short_bytes: int) -> tuple[Fix, ...]:
    """What leaves ``short_bytes`` more free after startup than the plan does now, each planned: the
    highest GMU (a natural pool) and the largest pool pin that still holds one max_model_len request."""
    config, budget = plan.config, plan.budget
    target = budget.margin + short_bytes
    fixes: list[Fix] = []
    if config.memory.num_gpu_blocks_override is None and config.memory.kv_cache_memory_bytes is None:
        fix = _startup_gmu(plan, short_bytes, target)
        if fix is not None:
            fixes.append(fix)
    pin = _startup_pin(plan, short_bytes, target)
    if pin is not None:
        fixes.append(pin)
    return tuple(fixes)


def _startup_gmu(plan: Plan, short_bytes: int, target: int) -> Fix | None:
    config, budget = plan.config, plan.budget
    # GMU x T is what the pool takes: the step it needs, then planned (a few 0.001 steps of rounding)
    gmu = math.floor((config.memory.gpu_memory_utilization - short_bytes / budget.total) * 1000) / 1000
    for _ in range(20):
        if gmu <= 0.05:
            return None
        step = _replan(plan, _with(config, "memory.gpu_memory_utilization", gmu), plan.inputs)
        b, v = step.budget, step.verdict.status
        if b.kv <= 0 or v == "refused":  # lower only shrinks the pool further
            return None
        if b.margin >= target:
            return Fix(
                "gmu",
                "memory.gpu_memory_utilization",
                gmu,
                f"{format_size(b.margin)} free after startup ({format_size(short_bytes)} more; "
                f"{b.kv_tokens:,} tokens)",
                v,
                b.runtime_margin,
            )
        gmu = round(gmu - 0.001, 3)
    return None


def _startup_pin(plan: Plan, short_bytes: int, target: int) -> Fix | None:
    config, budget = plan.config, plan.budget
    block = KV_BLOCK * budget.kv_bytes_per_token
    if block <= 0 or config.memory.kv_cache_memory_bytes is not None:
        return None
    blocks = budget.kv // block - -(-short_bytes // block)
    least = -(-config.scheduler.max_model_len // (KV_BLOCK * config.parallel.dcp))
    while blocks >= max(least, 1):
        step = _replan(plan, _with(config, "memory.num_gpu_blocks_override", int(blocks)), plan.inputs)
        b, v = step.budget, step.verdict.status
        if v == "refused":  # a smaller pin only holds less
            return None
        if b.margin >= target:
            return Fix(
                "pool-pin",
                "memory.num_gpu_blocks_override",
                int(blocks),
                f"{format_size(b.margin)} free after startup ({format_size(short_bytes)} more; "
                f"{b.kv_tokens:,} tokens)",
                v,
                b.runtime_margin,
            )
        blocks -= 1
    return None


def _runtime_candidate(event: RuntimeEvent, plan: Plan, source: str) -> Candidate:
    tried = event.tried_bytes or 0
    budget = plan.budget
    realized = max(0, budget.margin - event.free_bytes)
    floor = realized + tried
    demand = plan.ledger.runtime.peak_bytes
    fixes, notes = runtime_fixes(plan, floor, source)
    unexplained = max(0, floor - demand)
    if unexplained == 0 and budget.runtime_margin < 0:
        notes.insert(
            0,
            f"the plan predicts it: its runtime demand {format_size(demand)} ({budget.runtime_phase}) "
            f"leaves a runtime margin of {format_size(budget.runtime_margin)}",
        )
    return Candidate("runtime", match_runtime(event, plan), unexplained, realized, floor, fixes, tuple(notes))


def _startup_candidate(event: RuntimeEvent, plan: Plan, when: When) -> Candidate:
    tried = event.tried_bytes or 0
    budget = plan.budget
    notes = ["before the server was ready: a startup allocation, not a runtime transient"]
    unexplained = max(0, budget.margin - event.free_bytes)
    if when == "unknown" and unexplained:
        notes = [
            f"as a startup OOM: the plan has at least {format_size(budget.margin)} free at every point of "
            f"startup, so it would be {format_size(unexplained)} short there"
        ]
    latent = latent_note(event, plan)
    if latent is not None:
        notes.append(latent)
    fixes = startup_fixes(plan, max(0, tried - event.free_bytes))
    return Candidate("startup", match_startup(event, plan), unexplained, 0, 0, fixes, tuple(notes))


def explain(
    event: RuntimeEvent, plan: Plan, *, source: str = "this OOM", when: When | None = None
) -> Explanation:
    """The OOM read against ``plan``; ``when`` as the log shows it (default: the event's own ready flag,
    ``startup`` when it came before a ready line)."""
    when = when or ("after-ready" if event.after_ready else "startup")
    notes: list[str] = []
    budget = plan.budget
    if event.total_bytes is not None and abs(event.total_bytes - budget.total) > 16 * MIB:
        notes.append(
            f"the failing GPU has {format_size(event.total_bytes)} in all, the plan budgets T = "
            f"{format_size(budget.total)}: plan with the GPU's (--set hardware.memory_per_gpu=…) for exact "
            "figures"
        )
    candidates: list[Candidate] = []
    if when in ("after-ready", "unknown"):
        candidates.append(_runtime_candidate(event, plan, source))
    if when in ("startup", "unknown"):
        candidates.append(_startup_candidate(event, plan, when))
    candidates.sort(key=Candidate.rank_key)
    if when == "unknown":
        best, other = candidates
        notes.append(
            f"no ready line in the log: read both ways, {best.phase} is the most likely "
            f"(the plan would be {format_size(best.unexplained_bytes)} off, against "
            f"{format_size(other.unexplained_bytes)} as a {other.phase} OOM)"
        )
    return Explanation(
        event=event,
        rank=rank_of(event),
        when=when,
        margin_bytes=budget.margin,
        plan_demand_bytes=plan.ledger.runtime.peak_bytes,
        candidates=tuple(candidates),
        notes=tuple(notes),
    )


def when_of(event: RuntimeEvent, boot: BootLog, *, ready_in_log: bool) -> When:
    """When the OOM came, as far as the log says: after its ready line; during startup when a ready line
    follows it, or when the log shows vLLM's boot lines but never the KV pool sized (the server never
    served); else the log does not say (one line, pasted on its own)."""
    if event.after_ready:
        return "after-ready"
    if ready_in_log:
        return "startup"
    booted = bool(boot.engine.found) or any(r.found for r in boot.ranks)
    sized = boot.engine.kv_cache_tokens is not None or any(
        r.kv_available_bytes is not None for r in boot.ranks
    )
    return "startup" if booted and not sized else "unknown"


Reading = tuple[bool, int | None, int]


def reading(event: RuntimeEvent) -> Reading:
    """What an OOM line reads (when, tried, free): ranks failing alike read the same, one failure."""
    return (event.after_ready, event.tried_bytes, event.free_bytes)


@dataclass(frozen=True)
class Others:
    """A log's OOMs besides the one explained: counted, not each planned again (5,000 of them cost
    minutes of planning and say nothing the one that proves the largest demand does not)."""

    lines: int  # OOM lines that do not read as the one explained
    readings: int  # their distinct (when, tried, free) readings
    same: int  # further lines reading exactly as the one explained (other ranks failing alike)
    largest_tried_bytes: int | None
    least_free_bytes: int | None

    def text(self) -> str | None:
        if not self.lines and not self.same:
            return None
        parts = []
        if self.same:
            parts.append(f"{self.same:,} more OOM line(s) read the same (other ranks failing alike)")
        if self.lines:
            tried = format_size(self.largest_tried_bytes) if self.largest_tried_bytes is not None else "?"
            free = format_size(self.least_free_bytes) if self.least_free_bytes is not None else "?"
            parts.append(
                f"{self.lines:,} other OOM line(s) ({self.readings:,} distinct readings; at most {tried} "
                f"tried, at least {free} free) prove no more demand: counted, not explained"
            )
        return "; ".join(parts)

    def to_json(self) -> dict[str, object]:
        return {
            "lines": self.lines,
            "readings": self.readings,
            "same_lines": self.same,
            "largest_tried_bytes": self.largest_tried_bytes,
            "least_free_bytes": self.least_free_bytes,
        }


def the_oom(events: Sequence[RuntimeEvent]) -> tuple[RuntimeEvent | None, Others]:
    """The OOM that matters, and the others counted. It is the one proving the largest demand,
    ``margin - free + tried`` (what :func:`glmlaunch.calibrate.apply.raise_by_evidence` keeps of a
    record's OOMs: a fix that keeps it keeps every smaller one); of equal ones the last in the log (the
    one that ended the run). The plan's margin is the same for every line: ``tried - free`` orders them."""
    best: RuntimeEvent | None = None
    best_key = 0
    ooms = [e for e in events if e.kind == "oom"]
    readings: set[Reading] = set()
    for e in ooms:
        if reading(e) in readings:  # a rank failing as one before it did: the first says it
            continue
        readings.add(reading(e))
        key = (e.tried_bytes or 0) - e.free_bytes
        if best is None or key >= best_key:
            best, best_key = e, key
    if best is None:
        return None, Others(0, 0, 0, None, None)
    mine = reading(best)
    rest = [e for e in ooms if reading(e) != mine]
    return best, Others(
        lines=len(rest),
        readings=len(readings) - 1,
        same=sum(1 for e in ooms if reading(e) == mine) - 1,
        largest_tried_bytes=max((e.tried_bytes for e in rest if e.tried_bytes is not None), default=None),
        least_free_bytes=min((e.free_bytes for e in rest), default=None),
    )
