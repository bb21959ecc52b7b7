"""What the plan expects of each rank once vLLM is ready: the numbers the watch compares NVML with.

From one plan (the ledger and its budget, docs/memory-model.md §6 and §9):

* **planned resident** ``T - U_oth - margin`` = U_pre + W + P + N + G_e + KV + X: what the deployment holds
  on each GPU after startup, as NVML's ``used`` sees it (P stays cached by torch's allocator);
* **margin**: the free memory predicted after startup; **min margin**: ``memory.min_margin``, what the
  deployment promises to keep free;
* **runtime transients**: the runtime demand's entries (lifetime ``runtime``) per phase, in firing order
  (:mod:`glmlaunch.ledger.demand`). They fire after ready and, the allocator caching what they took,
  raise ``used`` for good: growth since the ready baseline is credited to them in firing order
  (:meth:`Expectation.pending`), and what they do not cover yet can still fire. Growth past the plan's
  demand voids the credit: the plan under-counts, and its transients can fire again.
"""

from __future__ import annotations

from dataclasses import dataclass

from glmlaunch.ledger.model import PHASES
from glmlaunch.plan.plan import Plan

#: a transient counts as fired once the growth since ready covers this share of it: its size is a plan's
#: figure (some are fitted terms), so growth a little short of it is the transient, not a smaller one
FIRED_SHARE = 0.9
#: growth past this share of the plan's runtime demand is more than the plan explains: the plan under-counts,
#: so the crediting is void and its transients can fire again, the largest first
BEYOND_SHARE = 1.1


@dataclass(frozen=True, slots=True)
class Transient:
    """One runtime-demand entry of the plan, as the watch names it."""

    name: str
    bytes: int
    phase: str
    reader: str
    trigger: str

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "bytes": self.bytes, "phase": self.phase, "reader": self.reader}


@dataclass(frozen=True, slots=True)
class Pending:
    """What can still fire, given the growth since ready."""

    largest: Transient | None
    demand_bytes: int  # the largest phase sum still to come
    fired: tuple[str, ...]  # names credited with the growth, in firing order
    #: the growth since ready is past the plan's demand (BEYOND_SHARE): every transient is pending again
    beyond: bool = False

    @property
    def largest_bytes(self) -> int:
        return self.largest.bytes if self.largest is not None else 0


@dataclass(frozen=True)
class Expectation:
    """Per rank (the plan's ranks are symmetric); ``total_bytes`` is the T the plan budgeted."""

    profile: str
    tp: int
    total_bytes: int
    planned_resident_bytes: int
    margin_bytes: int
    min_margin_bytes: int
    min_runtime_margin_bytes: int
    runtime_peak_bytes: int
    runtime_phase: str
    transients: tuple[Transient, ...]  # every phase, in firing order within its phase
    verdict: str

    def in_phase(self, phase: str) -> tuple[Transient, ...]:
        return tuple(t for t in self.transients if t.phase == phase)

    @property
    def largest(self) -> Transient | None:
        return max(self.in_phase(self.runtime_phase), key=lambda t: t.bytes, default=None)

    def pending(self, realized: int) -> Pending:
        """Credit ``realized`` bytes of growth since ready to each phase's transients in firing order; past
        the plan's demand (:data:`BEYOND_SHARE`) nothing is credited: the plan under-counts."""
        if self.runtime_peak_bytes > 0 and realized > BEYOND_SHARE * self.runtime_peak_bytes:
            return Pending(largest=self.largest, demand_bytes=self.runtime_peak_bytes, fired=(), beyond=True)
        largest: Transient | None = None
        demand = 0
        fired: list[str] = []
        for phase in PHASES:
            done = 0
            left = 0
            for t in self.in_phase(phase):
                if t.bytes <= 0:
                    continue
                if realized >= done + FIRED_SHARE * t.bytes:
                    done += t.bytes
                    if t.name not in fired:
                        fired.append(t.name)
                    continue
                left += t.bytes
                done += t.bytes
                if largest is None or t.bytes > largest.bytes:
                    largest = t
            demand = max(demand, left)
        return Pending(largest=largest, demand_bytes=demand, fired=tuple(fired))


def expectation(profile: str, plan: Plan) -> Expectation:
    """What ``plan`` (of the deployment named ``profile``) expects of each rank once vLLM is ready."""
    budget, demand = plan.budget, plan.ledger.runtime
    return Expectation(
        profile=profile,
        tp=plan.config.parallel.tp,
        total_bytes=budget.total,
        planned_resident_bytes=budget.total - budget.used_by_others - budget.margin,
        margin_bytes=budget.margin,
        min_margin_bytes=budget.min_margin,
        min_runtime_margin_bytes=budget.min_runtime_margin,
        runtime_peak_bytes=demand.peak_bytes,
        runtime_phase=demand.peak_phase,
        transients=tuple(
            Transient(
                name=t.entry.name,
                bytes=t.entry.device_bytes,
                phase=t.phase,
                reader=t.entry.reader,
                trigger=t.entry.condition,
            )
            for t in demand.transients
        ),
        verdict=plan.verdict.status,
    )
