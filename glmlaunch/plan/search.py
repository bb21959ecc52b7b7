"""``glmlaunch calibrate search``: the largest knob value that keeps every rank's margin.

One knob per objective, on an integer grid:

* ``max-batched-tokens``: ``scheduler.max_num_batched_tokens`` in multiples of ``step`` (default 256);
* ``max-kv-bytes``: a pinned ``memory.kv_cache_memory_bytes`` in whole MiB;
* ``min-pool-blocks``: the recommended pool pin, ``memory.num_gpu_blocks_override``: the smallest pool that
  holds one max_model_len request and keeps both margins (the runtime one included);
* ``max-gmu``: ``memory.gpu_memory_utilization`` in thousandths (the highest that keeps both margins).

A value is *feasible* exactly when the memory verdict (:mod:`glmlaunch.ledger.verdict`, the one ``plan``,
``check`` and ``serve`` print) is ``ok``: the same ``judge`` of the same budget, so ``plan --set KNOB=VALUE``
calls a value ok exactly when the search calls it feasible. A ``max_model_len`` request that may not fit
where that fit rests on estimates (W or the KV bytes per token) is the verdict's caution, not a blocker:
the search shows it as a caution on every value where it applies, and does not decide on it. Each
configuration is planned (:func:`glmlaunch.plan.plan.make_plan`) with the term model's prediction for it
(:mod:`glmlaunch.calibrate.apply`) as its inputs; the model predicts every rank alike, so one budget stands
for all ranks. The evaluator keeps each plan by grid index: a bisection asks for some values twice.

Feasibility is monotone in each knob above its lower end (more batched tokens, more pinned KV or a larger
GMU only ever take memory), so the search is a bisection, and its answer carries its own proof: the best
value is feasible and the next grid step up is not (or the best is the end of the range). The lower end is
the smallest value where the verdict's lower-end constraints hold (GMU, pinned KV: some memory is left for
the KV cache and, where the verdict decides it, one request fits) or the smallest legal batch (tokens).

Lossless only: the search changes nothing but its knob; the DMA wire mode stays what the profile says, and
a compressed mode without the profile's explicit opt-in is refused before searching.

Bounded: a search never runs unbounded. It budgets at most :data:`MAX_EVALUATIONS` configurations and
stops after :data:`TIME_LIMIT_S` seconds of wall time (both checked before every evaluation, and the time
limit also up front, from how long the profile's own evaluation took). Hitting either is a
:class:`SearchLimitError` (exit 2) that names the limit, how far the search got and the best feasible value
found so far, which is then not proven the largest.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from rich.table import Table

from glmlaunch.calibrate.apply import _with, model_calibration
from glmlaunch.calibrate.model import TermModel
from glmlaunch.config import paths
from glmlaunch.config.limits import MAX_TOKENS
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import MIB, format_size, parse_size_option
from glmlaunch.errors import ConfigError, MarginError
from glmlaunch.hardware.checks import MemoryInputs
from glmlaunch.ledger.budget import Budget
from glmlaunch.ledger.inputs import UNCALIBRATED, CheckpointOnDisk
from glmlaunch.ledger.terms import gate_bytes
from glmlaunch.ledger.verdict import Verdict
from glmlaunch.plan.plan import Plan, checkpoint_for, make_plan

Objective = Literal[
    "max-batched-tokens", "max-prefill-capacity", "max-kv-bytes", "min-pool-blocks", "max-gmu", "min-gmu"
]
OBJECTIVES: tuple[str, ...] = (
    "max-batched-tokens",
    "max-prefill-capacity",
    "max-kv-bytes",
    "min-pool-blocks",
    "max-gmu",
    "min-gmu",
)
# Objectives whose answer is the *lowest* value that works (the rest: the highest).
LOWEST: frozenset[str] = frozenset({"min-gmu", "min-pool-blocks"})
#: ``calibrate search --json``'s document version (docs/schemas/calibrate-search.schema.json).
SCHEMA_VERSION = 1
DEFAULT_TOKEN_STEP = 256
#: At most this many configurations are budgeted by one search (a bisection over a 2**60 grid needs ~125).
MAX_EVALUATIONS = 256
#: A search stops after this many seconds of wall time (a real profile searches in well under a second).
TIME_LIMIT_S = 4.0


class SearchLimitError(ConfigError):
    """The search hit :data:`MAX_EVALUATIONS` or :data:`TIME_LIMIT_S` before it could prove an answer."""


def _least_pool(pools: Iterable[int | None]) -> int | None:
    """The smallest recommended pool of the ranks; None when one rank has none (no pool keeps it)."""
    least: int | None = None
    for pool in pools:
        if pool is None:
            return None
        least = pool if least is None else min(least, pool)
    return least


@dataclass(frozen=True)
class Knob:
    objective: Objective
    key: str
    step: int

    def value(self, index: int) -> int | float:
        if self.objective in ("max-gmu", "min-gmu"):
            return round(index / 1000, 3)
        return index * self.step

    def show(self, value: int | float | None) -> str:
        if value is None:
            return "unset"
        if self.objective == "max-kv-bytes":
            return f"{int(value):,} B ({format_size(value)})"
        if self.objective in ("max-gmu", "min-gmu"):
            return f"{value:.3f}"
        return f"{int(value):,}"


#: The verdict's blockers that fail at the low end of a knob and clear as it grows (GMU, pinned KV).
FLOOR_BLOCKERS: frozenset[str] = frozenset({"no-kv", "request-fit"})


def _decisive_margin(b: Budget) -> int:
    """The margin a search value must keep: the figure's on a covered shape, else the band's low edge."""
    return b.margin if b.band.covered else b.margin_range[0]


def band_blocker(b: Budget) -> str:
    """Why a budget that is ok at its figures fails at the band's low edge ("" when it holds there, or when
    a boot covered the shape: its figures are calibrated, the verdict's rule)."""
    parts: list[str] = []
    if b.band.covered:
        return ""
    if b.margin_range[0] < b.min_margin:
        parts.append(
            f"the margin at the band's low edge {format_size(b.margin_range[0])} < memory.min_margin "
            f"{format_size(b.min_margin)}"
        )
    if b.runtime_margin_range[0] < b.min_runtime_margin:
        parts.append(
            f"the runtime margin at the band's low edge {format_size(b.runtime_margin_range[0])} < "
            f"memory.min_runtime_margin {format_size(b.min_runtime_margin)}"
        )
    return "; ".join(parts)


@dataclass(frozen=True)
class RankCheck:
    rank: str
    budget: Budget
    margin: int
    verdict: Verdict


@dataclass(frozen=True)
class Evaluation:
    index: int
    value: int | float | None  # None: the profile leaves this knob unset (no pinned KV)
    config: DeploymentConfig
    ranks: tuple[RankCheck, ...]
    kv_bytes: int
    request_bytes: int
    required_margin: int
    #: (blocker id, message) of every constraint that fails, as the verdict names them
    blockers: tuple[tuple[str, str], ...]
    #: the smallest of the ranks' recommendations; None when no pool keeps some rank's plan
    recommended_kv_cache_memory_bytes: int | None
    #: the verdict's cautions here (one request's fit where it rests on estimates): shown, not decided on
    cautions: tuple[str, ...] = ()

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(message for _, message in self.blockers)

    @property
    def feasible(self) -> bool:
        """The verdict's ``ok`` on every rank, and at the band's low edge too (a caution is not feasible)."""
        return all(r.verdict.ok for r in self.ranks) and not any(i == "band" for i, _ in self.blockers)

    @property
    def floor_ok(self) -> bool:
        """No low-end constraint fails: KV memory is left and, where the verdict decides, one request fits."""
        return not any(i in FLOOR_BLOCKERS for i, _ in self.blockers)

    @property
    def verdict(self) -> Verdict:
        """The verdict of the tightest rank (its confidence is the answer's)."""
        return min(self.ranks, key=lambda r: r.margin).verdict

    @property
    def fits_one_request(self) -> bool:
        return self.kv_bytes >= self.request_bytes

    @property
    def min_margin(self) -> int:
        return min(r.margin for r in self.ranks)


@dataclass(frozen=True)
class SearchResult:
    objective: Objective
    knob: Knob
    calibration_message: str
    profile_config: DeploymentConfig  # as resolved, before --min-margin or un-pinning
    original: Evaluation
    best: Evaluation | None
    next_up: Evaluation | None  # the proof: one grid step past best (down for min-gmu), infeasible
    lower_bound: Evaluation | None  # when nothing is feasible: the value that came closest, which failed
    range_end: int | float
    steps: tuple[tuple[int | float, bool], ...]
    notes: tuple[str, ...] = field(default=())
    model: TermModel | None = None
    #: what ``lower_bound`` is, in words: "lowest tried", "highest tried", "lowest where one request fits",
    #: "lowest that leaves KV memory"
    bound_label: str | None = None
    range_start: int | float | None = None

    @property
    def limit_reached(self) -> bool:
        return self.best is not None and self.next_up is None

    @property
    def closest(self) -> Evaluation:
        """When nothing fits: the evaluation that came closest (else the profile's own)."""
        return self.lower_bound or self.original

    def blocked_text(self) -> str:
        """``blocked by the margin: …`` for the closest failed value (empty when a value fits)."""
        if self.best is not None:
            return ""
        blockers = list(self.closest.blockers)
        if self.bound_label == "highest tried":
            # the low end fails everywhere in the range (no KV memory, or one request does not fit): that is
            # what blocks, whatever else fails up there
            blockers.sort(key=lambda b: b[0] not in FLOOR_BLOCKERS)
        first, *rest = [m for _, m in blockers] or ["nothing fits"]
        return "blocked by " + first + "".join(f"; and by {r}" for r in rest)


class Evaluator:
    """Plans every rank of one configuration; keeps each evaluation by knob index."""

    def __init__(
        self,
        *,
        memory: MemoryInputs | None,
        required_margin: int,
        model: TermModel | None = None,
        version: str | None = None,
        budget: _Limits | None = None,
        checkpoint: CheckpointOnDisk | None = None,
    ) -> None:
        self.model = model
        self.version = version
        self.checkpoint = checkpoint
        self.limits = budget
        self.memory = memory
        self.required_margin = required_margin
        self.cache: dict[int, Evaluation] = {}
        self.notes: list[str] = []

    def _rank_budgets(self, config: DeploymentConfig) -> list[tuple[str, Plan]]:
        if self.model is not None:
            inputs, basis = model_calibration(config, self.model, version=self.version), "term model"
        else:
            inputs, basis = UNCALIBRATED, "ledger defaults"
        plan = make_plan(config, memory=self.memory, inputs=inputs, checkpoint=self.checkpoint)
        return [(f"all {config.parallel.tp} ranks ({basis})", plan)]

    def evaluate(self, index: int, config: DeploymentConfig, value: int | float | None) -> Evaluation:
        if index in self.cache:
            return self.cache[index]
        if self.limits is not None:
            self.limits.before_evaluation()
        plans = self._rank_budgets(config)
        # the margins a value must keep are the band's low edge (ledger/band.py) where no boot covered the
        # shape: the search never picks a value that holds only at the figures there
        checks = tuple(
            RankCheck(name, p.budget, _decisive_margin(p.budget), p.verdict) for name, p in plans
        )
        budgets = [c.budget for c in checks]
        blockers: list[tuple[str, str]] = []
        cautions: list[str] = []
        for c in checks:
            prefix = f"{c.rank}: " if len(checks) > 1 else ""
            for x in c.verdict.blockers:
                if (x.id, prefix + x.message) not in blockers:
                    blockers.append((x.id, prefix + x.message))
            b = c.budget
            low = band_blocker(b)
            if c.verdict.ok and low:
                blockers.append(("band", prefix + low))
            if not b.request_fits and not b.request_fit_confirmed:
                # the verdict's caution, in the words of its blockers (the terms it rests on, the figures)
                unsure = c.verdict.sources_text(c.verdict.request_fit_terms())
                why = f"unconfirmed: {unsure}" if unsure else "unconfirmed"
                text = (
                    f"{prefix}the request fit ({why}): one {config.scheduler.max_model_len:,}-token "
                    f"request needs {format_size(b.request_bytes)} of KV per rank, the KV cache is "
                    f"{format_size(b.kv)}"
                )
                if text not in cautions:
                    cautions.append(text)
        ev = Evaluation(
            index,
            value,
            config,
            checks,
            min(b.kv for b in budgets),
            max(b.request_bytes for b in budgets),
            self.required_margin,
            tuple(blockers),
            _least_pool(b.recommended_kv_cache_memory_bytes for b in budgets),
            tuple(cautions),
        )
        self.cache[index] = ev
        if self.limits is not None:
            self.limits.after_evaluation(ev)
        return ev


class _Limits:
    """Counts evaluations and wall time for one search; raises :class:`SearchLimitError` at a limit."""

    def __init__(self, knob: Knob, *, max_evaluations: int, time_limit_s: float) -> None:
        self.knob = knob
        self.max_evaluations = max_evaluations
        self.time_limit_s = time_limit_s
        self.started = time.monotonic()
        self.count = 0
        self.best: int | float | None = None  # the best feasible value seen so far (not proven)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def after_evaluation(self, ev: Evaluation) -> None:
        if not ev.feasible or ev.index < 0 or ev.value is None:
            return
        lowest = self.knob.objective in LOWEST
        if self.best is None or (ev.value < self.best if lowest else ev.value > self.best):
            self.best = ev.value

    def _best_so_far(self) -> str:
        if self.best is None:
            return "no feasible value found so far"
        return f"best feasible value so far: {self.knob.show(self.best)} (not proven the best)"

    def before_evaluation(self) -> None:
        if self.count >= self.max_evaluations:
            limit = f"limit MAX_EVALUATIONS={self.max_evaluations}"
            self.stop(f"stopped after {self.count} evaluations ({limit})")
        if self.elapsed() > self.time_limit_s:
            self.stop(
                f"stopped after {self.elapsed():.1f} s and {self.count} evaluations "
                f"(wall-time limit TIME_LIMIT_S={self.time_limit_s:g} s)"
            )
        self.count += 1

    def check_forecast(self, per_evaluation_s: float, needed: int) -> None:
        """Stop before searching when the evaluations the bisection needs cannot finish in time."""
        if per_evaluation_s * needed > self.time_limit_s:
            self.stop(
                f"would need about {needed} evaluations of {per_evaluation_s:.2f} s each, over the wall-time "
                f"limit TIME_LIMIT_S={self.time_limit_s:g} s"
            )

    def stop(self, why: str) -> None:
        raise SearchLimitError(
            f"calibrate search {why}; {self._best_so_far()}",
            key=self.knob.key,
            hint="narrow the range with --max (or a larger --step), or simplify the profile "
            "(a long cudagraph capture list makes every evaluation slow)",
        )


def _first_true(pred: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """Smallest i in [lo, hi] with pred(i), for pred false-then-true; None when pred(hi) is false."""
    if not pred(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _last_true(pred: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """Largest i in [lo, hi] with pred(i), for pred true-then-false; None when pred(lo) is false."""
    if not pred(lo):
        return None
    if pred(hi):
        return hi
    good, bad = lo, hi
    while bad - good > 1:
        mid = (good + bad) // 2
        if pred(mid):
            good = mid
        else:
            bad = mid
    return good


def knob_for(objective: str, *, step: int | None) -> Knob:
    if objective not in OBJECTIVES:
        raise ConfigError("unknown objective", key="--objective", value=objective, allowed=OBJECTIVES)
    if objective == "max-batched-tokens":
        s = DEFAULT_TOKEN_STEP if step is None else step
        if s < 1:
            raise ConfigError("the step must be at least 1", key="--step", value=step)
        return Knob("max-batched-tokens", "scheduler.max_num_batched_tokens", s)
    if step is not None:
        raise ConfigError("--step applies to max-batched-tokens only", key="--step", value=step)
    if objective == "max-prefill-capacity":
        return Knob("max-prefill-capacity", "exl3.prefill_capacity", DEFAULT_TOKEN_STEP)
    if objective == "max-kv-bytes":
        return Knob("max-kv-bytes", "memory.kv_cache_memory_bytes", MIB)
    if objective == "min-pool-blocks":
        return Knob("min-pool-blocks", "memory.num_gpu_blocks_override", 1)
    if objective == "min-gmu":
        return Knob("min-gmu", "memory.gpu_memory_utilization", 1)
    return Knob("max-gmu", "memory.gpu_memory_utilization", 1)


def search(
    config: DeploymentConfig,
    objective: str,
    *,
    calibration_message: str,
    memory: MemoryInputs | None = None,
    min_margin: int | None = None,
    step: int | None = None,
    upper: int | float | None = None,
    model: TermModel | None = None,
    version: str | None = None,
    max_evaluations: int = MAX_EVALUATIONS,
    time_limit_s: float = TIME_LIMIT_S,
    checkpoint: CheckpointOnDisk | None = None,
) -> SearchResult:
    """Bisection for the largest feasible value of the objective's knob (pure, apart from the ledger).

    ``memory``: the device memory an inventory reported (None: the profile's); ``checkpoint``: the
    checkpoint on disk, W priced from it as the plan does (``plan.checkpoint_for``). Bounded by
    ``max_evaluations`` planned configurations and ``time_limit_s`` seconds of wall time;
    :class:`SearchLimitError` when either is reached first.
    """
    if config.comm.compressed_wire and not config.comm.allow_compressed_wire:
        raise ConfigError(
            "the profile uses a compressed DMA wire without opting in; calibration is lossless only",
            key="comm.dma_wire_mode",
            value=config.comm.dma_wire_mode,
            hint="set comm.dma_wire_mode: '0' (bf16), or comm.allow_compressed_wire: true to opt in",
        )
    knob = knob_for(objective, step=step)
    limits = _Limits(knob, max_evaluations=max_evaluations, time_limit_s=time_limit_s)
    profile_config = config
    if min_margin is not None:
        config = _with(config, "memory.min_margin", min_margin)
    required = config.memory.min_margin
    if knob.objective != "max-kv-bytes" and config.memory.kv_cache_memory_bytes is not None:
        # A pinned KV size would hold KV constant and hide what the knob costs; search the GMU-sized KV.
        config = _with(config, "memory.kv_cache_memory_bytes", None)

    def evaluator() -> Evaluator:
        return Evaluator(
            memory=memory,
            required_margin=required,
            model=model,
            version=version,
            budget=limits,
            checkpoint=checkpoint,
        )

    ev = evaluator()
    steps: list[tuple[int | float, bool]] = []

    def at(index: int) -> Evaluation:
        value = knob.value(index)
        cached = index in ev.cache
        result = ev.evaluate(index, _with(config, knob.key, value), value)
        if not cached:
            steps.append((value, result.feasible))
        return result

    original = evaluator()
    current_value = _current(config, knob)
    lo, hi = _range(config, knob, total_bytes=_total(memory, config), upper=upper)
    base = original.evaluate(-1, config, current_value)
    notes = list(original.notes)
    # Two bisections over [lo, hi] and the proof's neighbour: stop now if they cannot finish in time.
    limits.check_forecast(limits.elapsed(), 2 * max(1, (hi - lo + 1).bit_length()) + 3)
    bound_label: str | None = None
    lower: Evaluation | None = None
    if knob.objective in LOWEST:
        # The lowest GMU vLLM accepts: the low-end constraints (KV memory left, one request's fit where the
        # verdict decides it) are monotone in GMU. Above that point the start gate and the margin only get
        # worse with GMU, so when the lowest value that passes the low end fails either, every value does.
        # The neighbour that proves it is the next step *down*.
        low = _first_true(lambda i: at(i).floor_ok, lo, hi)
        best = at(low) if low is not None and at(low).feasible else None
        next_up = at(low - 1) if best is not None and low is not None and low > lo else None
        if best is None:
            lower = at(low) if low is not None else at(hi)
            bound_label = _floor_label(lower) if low is not None else "highest tried"
    else:
        if knob.objective in ("max-batched-tokens", "max-prefill-capacity"):
            anchor: int | None = lo
        else:
            # the low-end constraints hold from some value on: find it, then bisect feasibility above it
            anchor = _first_true(lambda i: at(i).floor_ok, lo, hi)
        best_i = _last_true(lambda i: at(i).feasible, anchor, hi) if anchor is not None else None
        best = at(best_i) if best_i is not None else None
        next_up = at(best_i + 1) if best_i is not None and best_i < hi else None
        if best is None:
            if anchor is None:  # the low end fails even at the top of the range
                lower, bound_label = at(hi), "highest tried"
            elif anchor == lo:
                lower, bound_label = at(anchor), "lowest tried"
            else:
                lower = at(anchor)
                bound_label = _floor_label(lower)
        if next_up is not None and next_up.feasible:  # not monotone: say so rather than claim optimality
            notes.append(f"{knob.show(next_up.value)} is feasible too: feasibility is not monotone here")
    for n in ev.notes:
        if n not in notes:
            notes.append(n)
    return SearchResult(
        objective=knob.objective,
        knob=knob,
        calibration_message=calibration_message,
        profile_config=profile_config,
        original=base,
        best=best,
        next_up=next_up,
        lower_bound=lower,
        range_end=knob.value(hi),
        steps=tuple(steps),
        notes=tuple(notes),
        model=model,
        bound_label=bound_label,
        range_start=knob.value(lo),
    )


def _floor_label(ev: Evaluation) -> str:
    """What the lowest value past the low-end constraints is, in words."""
    return "lowest where one request fits" if ev.fits_one_request else "lowest that leaves KV memory"


def _current(config: DeploymentConfig, knob: Knob) -> int | float | None:
    if knob.objective == "max-batched-tokens":
        return config.scheduler.max_num_batched_tokens
    if knob.objective == "max-prefill-capacity":
        return config.exl3_prefill_capacity_effective
    if knob.objective in ("max-gmu", "min-gmu"):
        return config.memory.gpu_memory_utilization
    if knob.objective == "min-pool-blocks":
        return config.memory.num_gpu_blocks_override
    return config.memory.kv_cache_memory_bytes


def _total(memory: MemoryInputs | None, config: DeploymentConfig) -> int:
    return memory.total_bytes if memory is not None else config.hardware.memory_per_gpu


def _range(
    config: DeploymentConfig, knob: Knob, *, total_bytes: int, upper: int | float | None
) -> tuple[int, int]:
    if upper is not None and not (isinstance(upper, int) or math.isfinite(upper)):
        raise ConfigError("the upper end must be a finite number", key="--max", value=upper)
    if knob.objective == "max-batched-tokens":
        if not config.scheduler.enable_chunked_prefill:
            raise ConfigError(
                "without chunked prefill max_num_batched_tokens must cover max_model_len; nothing to search",
                key="scheduler.enable_chunked_prefill",
                value=False,
            )
        # vLLM needs room for every sequence's decode step (1 + MTP tokens) in one batch, and an explicit
        # EXL3 prefill arena lives inside one scheduler chunk (exl3-prefill-capacity-above-scheduler)
        arena = config.exl3.prefill_capacity if config.is_exl3 else None
        floor = max(knob.step, config.scheduler.max_num_seqs * config.decode_step, arena or 0)
        lo = -(-floor // knob.step)
        top = min(int(upper), MAX_TOKENS) if upper is not None else config.scheduler.max_model_len
        hi = top // knob.step
    elif knob.objective == "max-prefill-capacity":
        if not config.is_exl3:
            raise ConfigError(
                "the EXL3 prefill capacity only exists for an EXL3 checkpoint",
                key="model.quantization",
                value=config.model.quantization,
                hint="pick another --objective",
            )
        lo = 1
        # the scheduler never sends more than max_num_batched_tokens to one prefill
        top = min(int(upper), MAX_TOKENS) if upper is not None else config.scheduler.max_num_batched_tokens
        hi = top // knob.step
    elif knob.objective == "max-kv-bytes":
        lo = 1
        hi = int(upper) // MIB if upper is not None else total_bytes // MIB
    elif knob.objective == "min-pool-blocks":
        from glmlaunch.ledger import kv_cache

        # blocks per rank: at most the whole device in KV blocks
        block = kv_cache.KV_BLOCK * max(1, kv_cache.geometry(config).bytes_per_token)
        lo = 1
        hi = int(upper) if upper is not None else total_bytes // block
    else:
        lo = 1
        hi = min(1000, math.floor(float(upper) * 1000)) if upper is not None else 1000
    if hi < lo:
        raise ConfigError("the search range is empty", key="--max", value=upper)
    return lo, hi


def highest_gmu(total: int, limit: int) -> float | None:
    """The highest GMU on the 0.001 grid whose R = ceil(GMU x T) is at most ``limit`` (None: not 0.001)."""
    if total <= 0:
        return None
    index = min(1000, limit * 1000 // total)
    while index > 0 and gate_bytes(index / 1000, total) > limit:
        index -= 1  # the float product can round R up past the limit: step down to one that passes
    return index / 1000 if index > 0 else None


def no_fit_hints(result: SearchResult) -> list[str]:
    """When nothing fits: what to change for each blocker of the closest value, each remedy said once.

    A remedy names a setting that moves the blockers it is given for, never the searched knob (the search
    has tried it), and serves every blocker it moves: ``for the start gate and the negative margin: …``.
    Freeing GPU memory is offered only when other processes hold some (U_oth > 0).
    """
    ev = result.closest
    ids = list(dict.fromkeys(i for i, _ in ev.blockers))
    b = min(ev.ranks, key=lambda r: r.margin).budget
    knob = result.knob.key
    remedies: dict[str, list[str]] = {}

    def add(remedy: str, *blockers: str) -> None:
        names = remedies.setdefault(remedy, [])
        names += [_BLOCKER_NAMES[x] for x in blockers if x in ids and _BLOCKER_NAMES[x] not in names]

    memory = [x for x in ids if x in ("start-gate", "margin", "oom-risk", "runtime", "band")]
    if knob in ("memory.gpu_memory_utilization", "memory.kv_cache_memory_bytes"):
        # The closest value is where the knob's low end (KV memory, one request) is first reached, or the
        # top of the range when it never is; above it the start gate and the margin only get worse. Every
        # blocker there moves only when the low end needs less.
        request = "request-fit" in ids or result.bound_label == "lowest where one request fits"
        what = "scheduler.max_model_len or the pools" if request else "the pools"
        less = "a lower GMU" if knob == "memory.gpu_memory_utilization" else "a smaller KV cache"
        add(f"lower {what} (glmlaunch audit lists what is recoverable), so that {less} suffices", *ids)
    else:
        # Tokens or prefill capacity at the profile's GMU: a GMU-sized KV cache absorbs W, P, N and G_e, so
        # margin = F0 - GMU x T - X, and the start gate wants GMU x T <= F0. A GMU named here must work at the
        # profile's own value of the knob too (U_pre and X grow with it): the tighter of the two.
        both = [r.budget for e in (ev, result.original) for r in e.ranks]
        gate_gmu = highest_gmu(b.total, min(x.f0 for x in both))
        # a natural pool's margin is F0 - GMU x T - X; it must hold the minimum and the runtime demand
        margin_gmu = highest_gmu(
            b.total,
            min(x.f0 - x.x - max(x.min_margin, x.runtime_demand + x.min_runtime_margin) for x in both),
        )
        gate_text = f"{gate_gmu:.3f} is the highest that passes the start gate" if gate_gmu else ""
        if "margin" in ids or "oom-risk" in ids or "runtime" in ids:
            if margin_gmu is None:
                add("no GMU keeps the margin: lower what is held before vLLM's snapshot (U_pre)", *memory)
            else:
                highest = (
                    f"{gate_text}, {margin_gmu:.3f} the highest that also keeps the margin"
                    if "start-gate" in ids and gate_text
                    else f"{margin_gmu:.3f} is the highest that keeps the margin"
                )
                add(
                    f"lower memory.gpu_memory_utilization: {highest} (margin = F0 - GMU x T - X, which must "
                    "also hold the runtime demand)",
                    *memory,
                )
        elif "start-gate" in ids:
            add(
                f"lower memory.gpu_memory_utilization: {gate_text} (R = GMU x T <= F0)"
                if gate_text
                else "lower what is held before vLLM's snapshot (U_pre)",
                "start-gate",
            )
        tokens = knob == "scheduler.max_num_batched_tokens"
        add(
            "raise memory.gpu_memory_utilization or lower the pools "
            + ("" if tokens else "or scheduler.max_num_batched_tokens ")
            + "(glmlaunch audit lists what is recoverable)",
            "no-kv",
        )
        add("lower scheduler.max_model_len", "request-fit")
    add("lower the required margin (--min-margin, memory.min_margin)", "margin")
    # no knob the search moves lowers the load-time peak (W and what loading holds beside it)
    add("a checkpoint with smaller weights, or lower what is held before vLLM's snapshot (U_pre)", "load")
    if b.used_by_others > 0:
        held = format_size(max(x.budget.used_by_others for x in ev.ranks))
        add(f"free memory on the GPUs ({held} held by other processes; glmlaunch hw shows who)", *memory)
    # remedies for the same blockers go in one hint: "for the margin: lower …, or lower …"
    grouped: dict[tuple[str, ...], list[str]] = {}
    for remedy, names in remedies.items():
        if names:
            grouped.setdefault(tuple(names), []).append(remedy)
    hints = [f"for {_join(list(names))}: " + ", or ".join(rs) for names, rs in grouped.items()]
    return hints or ["lower memory.min_margin or scheduler.max_model_len"]


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


_BLOCKER_NAMES = {
    "load": "the load-time peak",
    "start-gate": "the start gate",
    "no-kv": "the KV cache",
    "request-fit": "the request fit",
    "oom-risk": "the negative margin",
    "runtime": "the runtime margin",
    "margin": "the margin",
    "band": "the band's low edge",
}


# --- outputs --------------------------------------------------------------------------------------


def changes(result: SearchResult) -> dict[str, tuple[Any, Any]]:
    """Setting -> (profile value, calibrated value), for the overlay and the diff."""
    if result.best is None:
        return {}
    out: dict[str, tuple[Any, Any]] = {}
    orig = result.profile_config
    best = result.best.config
    if result.best.value != result.original.value or result.knob.objective == "max-kv-bytes":
        out[result.knob.key] = (result.original.value, result.best.value)
    if best.memory.min_margin != orig.memory.min_margin:
        out["memory.min_margin"] = (orig.memory.min_margin, best.memory.min_margin)
    if orig.memory.kv_cache_memory_bytes is not None and result.knob.objective != "max-kv-bytes":
        out["memory.kv_cache_memory_bytes"] = (orig.memory.kv_cache_memory_bytes, None)
    return out


def overlay_yaml(result: SearchResult, *, extends: str, command: str) -> str:
    """The calibrated overlay profile: ``extends:`` the original and sets only what the search changed."""
    if result.best is None:
        raise ValueError("no feasible value: nothing to write")
    best = result.best
    diff = changes(result)
    header = [
        f"Calibrated overlay written by: {command}",
        result.calibration_message,
        f"objective {result.objective}: {result.knob.key} = {result.knob.show(best.value)}, "
        f"smallest rank margin {format_size(best.min_margin)} >= {format_size(best.required_margin)}",
    ]
    if result.next_up is not None:
        up = result.knob.show(result.next_up.value)
        side = "down" if result.objective in LOWEST else "up"
        why = "; ".join(result.next_up.reasons) or "vLLM refuses it"
        header.append(f"next step {side} ({up}) fails: {why}")
    else:
        header.append(f"{result.knob.show(best.value)} is the end of the searched range")
    if result.knob.objective != "max-kv-bytes" and best.recommended_kv_cache_memory_bytes is not None:
        header.append(
            f"to pin the KV cache instead of sizing it by GMU (keeps exactly the required margin): "
            f"memory.kv_cache_memory_bytes: {best.recommended_kv_cache_memory_bytes}"
        )
    body: dict[str, Any] = {
        "description": f"{extends} calibrated for {result.objective}: "
        + ", ".join(
            f"{k} {result.knob.show(v) if k == result.knob.key else v}" for k, (_, v) in diff.items()
        ),
        "extends": extends,
        **paths.nest({k: v for k, (_, v) in diff.items()}),
    }
    from glmlaunch.files import comment_header

    return comment_header(header) + yaml.safe_dump(body, sort_keys=False, allow_unicode=True)


def write_overlay(path: Path, text: str) -> None:
    from glmlaunch.files import write_text

    write_text(path, text, key="--output", make_parents=True)


def evaluation_document(ev: Evaluation | None, knob: Knob) -> dict[str, Any] | None:
    if ev is None:
        return None
    return {
        "value": ev.value,
        "feasible": ev.feasible,
        "blockers": [{"id": i, "message": m} for i, m in ev.blockers],
        "cautions": list(ev.cautions),
        "confidence": ev.verdict.confidence,
        "kv_cache_bytes": ev.kv_bytes,
        "one_request_bytes": ev.request_bytes,
        "fits_one_request": ev.fits_one_request,
        "required_margin": ev.required_margin,
        "min_margin": ev.min_margin,
        "kv_cache_memory_bytes_for_margin": ev.recommended_kv_cache_memory_bytes,
        "ranks": [
            {
                "rank": r.rank,
                "margin": r.margin,
                "start_gate_ok": r.budget.start_gate_ok,
                "terms": r.budget.terms,
            }
            for r in ev.ranks
        ],
    }


def result_document(result: SearchResult, *, overlay: Path | None) -> dict[str, Any]:
    """One document, ``schema_version`` first (docs/schemas/calibrate-search.schema.json)."""
    best = result.best
    lowest = result.objective in LOWEST
    neighbour = evaluation_document(result.next_up, result.knob)
    bound = evaluation_document(result.lower_bound, result.knob)
    return {
        "schema_version": SCHEMA_VERSION,
        "objective": result.objective,
        "knob": result.knob.key,
        "step": result.knob.step
        if result.objective in ("max-batched-tokens", "max-prefill-capacity")
        else None,
        "calibration": {
            "message": result.calibration_message,
            "term_model": (
                {"origin": result.model.origin, "records": list(result.model.points)}
                if result.model is not None
                else None
            ),
        },
        "lossless": {"dma_wire_mode": result.original.config.comm.dma_wire_mode, "changed": False},
        "feasible": best is not None,
        "verdict": (best or result.closest).verdict.to_json(),
        "blocked": result.blocked_text() or None,
        "original": evaluation_document(result.original, result.knob),
        "best": evaluation_document(best, result.knob),
        "next_step": (
            {"direction": "down" if lowest else "up", **neighbour} if neighbour is not None else None
        ),
        "closest_failed": {"label": result.bound_label, **bound} if bound is not None else None,
        "range_start": result.range_start,
        "range_end": result.range_end,
        "limit_reached": result.limit_reached,
        "kv_cache_memory_bytes": (
            best.value
            if best is not None and result.objective == "max-kv-bytes"
            else (best.recommended_kv_cache_memory_bytes if best is not None else None)
        ),
        "changes": {k: {"profile": a, "calibrated": b} for k, (a, b) in changes(result).items()},
        "steps": [{"value": v, "feasible": f} for v, f in result.steps],
        "notes": list(result.notes),
        "overlay": str(overlay) if overlay is not None else None,
    }


def search_tables(result: SearchResult) -> list[Table]:
    """The settings diff, the proof (best and the next step past it), and the predicted memory map at the
    best; when nothing fits, only the values tried and what blocks them (there is nothing to prove)."""
    knob = result.knob
    tables: list[Table] = []
    diff = changes(result)
    if diff:
        table = Table(title=f"settings diff ({result.objective})", expand=False)
        for col in ("setting", "profile", "calibrated"):
            table.add_column(col, no_wrap=True)
        for key, (old, new) in diff.items():
            shown_old = knob.show(old) if key == knob.key else ("unset" if old is None else str(old))
            shown_new = knob.show(new) if key == knob.key else ("unset" if new is None else str(new))
            table.add_row(key, shown_old, shown_new)
        tables.append(table)

    lowest = result.objective in LOWEST
    side = "down" if lowest else "up"
    rows: list[tuple[str, Evaluation | None]] = [("profile", result.original)]
    best = result.best
    if best is None:
        title = f"no value of {knob.key} fits; the values that came closest, and what blocks them"
        rows.append((result.bound_label or "closest tried", result.lower_bound))
    else:
        shown = knob.show(best.value)
        if result.next_up is not None:
            up = knob.show(result.next_up.value)
            if lowest:
                title = f"proof: the verdict is ok at {shown}, not at the next step down, {up}"
            else:
                title = f"proof: {shown} fits, the next step up, {up}, does not"
        else:
            title = f"{shown} fits and is the end of the searched range: there is no step {side} to try"
        rows += [("best", best), (f"next step {side}", result.next_up)]
    proof = Table(title=title, expand=False)
    findings_col = "blocked by; cautions"
    for col in ("", knob.key, "feasible", "min rank margin", "KV / rank", "one request", findings_col):
        proof.add_column(col, no_wrap=col != findings_col)  # figures whole (output.fit), findings wrap
    for label, ev in rows:
        if ev is None:
            continue
        # "feasible" is the verdict's ok; a caution (an unconfirmed request fit) is shown, never decisive
        findings = [*ev.reasons, *(f"caution: {c}" for c in ev.cautions)]
        proof.add_row(
            label,
            knob.show(ev.value),
            "yes" if ev.feasible else "no",
            format_size(ev.min_margin),
            format_size(ev.kv_bytes),
            format_size(ev.request_bytes),
            "; ".join(findings) or "—",
        )
    if best is not None:
        proof.caption = f"confidence: {best.verdict.confidence_text()}"
    tables.append(proof)
    if best is not None:
        tables.append(memory_map(best))
    return tables


_MAP_TERMS: tuple[tuple[str, str], ...] = (
    ("U_oth", "others"),
    ("U_pre", "pre-snapshot"),
    ("W", "weights"),
    ("P", "activation"),
    ("N", "non-torch"),
    ("G_e", "graphs"),
    ("KV", "KV cache"),
    ("X", "unbudgeted"),
    ("margin", "margin"),
)


def memory_map(ev: Evaluation, *, width: int = 40) -> Table:
    """Per rank: every budget term and a proportional bar (one letter per term) of the device."""
    table = Table(title="predicted memory map per rank (T = device total)", expand=False)
    table.add_column("rank", no_wrap=True)
    for key, _ in _MAP_TERMS:
        table.add_column(key, no_wrap=True, justify="right")
    table.add_column("map: o U w P n g K x .", no_wrap=True)
    letters = {"U_oth": "o", "U_pre": "U", "W": "w", "P": "P", "N": "n", "G_e": "g", "KV": "K", "X": "x"}
    for r in ev.ranks:
        terms = dict(r.budget.terms)
        terms["KV"] = ev.kv_bytes
        terms["margin"] = r.margin
        total = max(1, terms["T"])
        # at least one cell per non-zero term, so small pools stay visible next to 83 GiB of weights
        bar = "".join(
            letter * max(1 if terms[key] > 0 else 0, round(width * terms[key] / total))
            for key, letter in letters.items()
        )
        bar += "." * max(0, round(width * terms["margin"] / total))
        table.add_row(r.rank, *(format_size(terms[k]) for k, _ in _MAP_TERMS), bar)
    return table


# --- the command ---------------------------------------------------------------------------------


def run_search(
    profile: str | None,
    overrides: Sequence[str],
    *,
    objective: str,
    min_margin: str | None,
    step: int | None,
    upper: str | None,
    inventory_file: Path | None,
    output: Path | None,
    write: bool,
    as_json: bool,
    command: str,
    force: bool = False,
) -> SearchResult:
    """Resolve, find the calibration, search, write the overlay, render; MarginError when nothing fits."""
    from glmlaunch.calibrate.store import Store
    from glmlaunch.config.commands import resolve
    from glmlaunch.files import check_writable_target, refuse_existing
    from glmlaunch.output import fit, note, out_console, out_json, out_text, warn

    # The options are read before any work: a bad --min-margin fails first, with nothing said before it.
    margin = _size_option("--min-margin", min_margin)
    top = _upper_option(objective, upper)
    resolved = resolve(profile, overrides)
    config = resolved.config
    path: Path | None = None
    if write:
        # One rule for every output file (profiles import too): an existing one only with --force,
        # refused before the search runs.
        path = output or Path(f"{resolved.profile_name}-{objective}.yaml")
        check_writable_target(path, key="--output")
        refuse_existing(path, key="--output", force=force)
    memory: MemoryInputs | None = None
    used = 0
    if inventory_file is not None:
        from glmlaunch.hardware.checks import group_memory
        from glmlaunch.hardware.probe import get_inventory

        memory = group_memory(config, get_inventory(inventory_file))
        if memory is not None:
            used = memory.used_by_others
            note(
                f"device total {format_size(memory.total_bytes)}, {format_size(used)} held by others "
                "(from the inventory)"
            )
    from glmlaunch.calibrate.apply import say_calibration
    from glmlaunch.calibrate.learn import learn, target_version

    store = Store.default()
    loaded = store.load()
    for w in loaded.warnings:
        warn(w)
    learned = learn(config, loaded.records)
    # the calibration the profile's own plan uses, as plan says it; each searched value is planned with
    # the term model's prediction for it
    checkpoint = checkpoint_for(config, os.environ)
    use = make_plan(config, store=store, checkpoint=checkpoint).calibration
    assert use is not None  # make_plan looked the calibration up
    message = use.message
    if learned.model is None:
        warn(use.headline + " (the search runs on the ledger's defaults)")
        for skipped in use.skipped:
            note(f"  skipped {skipped}")
    else:
        say_calibration(use, say=note)
        if used:
            note(
                "the boot's T - F0 already holds what other processes used then; the memory they hold now "
                "is charged again on top (conservative when they are the same processes)"
            )
    result = search(
        config,
        objective,
        model=learned.model,
        version=target_version(config),
        calibration_message=message,
        memory=memory,
        min_margin=margin,
        step=step,
        upper=top,
        checkpoint=checkpoint,
    )
    for line in result.notes:
        note(line)
    unchanged = result.best is not None and not changes(result)
    if result.best is not None and path is not None and not unchanged:
        chain = resolved.profile_chain
        extends = chain[-1].name if chain and chain[-1].builtin else str(chain[-1].path.resolve())
        write_overlay(path, overlay_yaml(result, extends=extends, command=command))
        note(f"wrote the calibrated overlay profile {path} (extends {extends}); use it with -p {path}")
    elif path is not None:
        path = None  # nothing fits, or the profile is already the best: nothing to write
    if as_json:
        out_json(result_document(result, overlay=path))
    else:
        for table in search_tables(result):
            out_console.print(fit(table))
    if result.best is not None:
        if unchanged:
            note(
                f"nothing to change: the profile's {result.knob.key} "
                f"{result.knob.show(result.original.value)} is already the best"
                + ("; no overlay written (use the profile itself)" if write else "")
            )
        pinned = (
            result.best.value
            if result.objective == "max-kv-bytes"
            else result.best.recommended_kv_cache_memory_bytes
        )
        if not as_json and pinned is not None:  # data: on stdout, as in the JSON (kv_cache_memory_bytes)
            out_text(
                f"pinned alternative: --kv-cache-memory-bytes={pinned} (keeps exactly the required margin)"
            )
        elif not as_json:
            note("no pinned alternative: no --kv-cache-memory-bytes keeps the required margin")
    else:
        first, last = (result.knob.show(v) for v in (result.range_start, result.range_end))
        raise MarginError(
            f"no value of {result.knob.key} from {first} to {last} fits: {result.blocked_text()}",
            key=result.knob.key,
            hint=_no_fit_hint(result),
        )
    return result


def _no_fit_hint(result: SearchResult) -> str:
    return "; ".join(no_fit_hints(result))


def _size_option(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    # `--min-margin 1` meant 1 GiB, never 1 byte: the same rule as plan's --gpu-memory
    return parse_size_option(value, key=name, what="a size")


def _upper_option(objective: str, value: str | None) -> int | float | None:
    if value is None:
        return None
    if objective in ("max-gmu", "min-gmu"):
        try:
            return float(value)
        except ValueError:
            raise ConfigError("not a number", key="--max", value=value) from None
    if objective == "max-kv-bytes":
        return _size_option("--max", value)
    try:
        return int(value)
    except ValueError:
        raise ConfigError("not a whole number of tokens", key="--max", value=value) from None
