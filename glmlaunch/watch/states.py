"""Each rank's state, sample by sample: the plan's expectations against NVML's memory.

Per rank, from one sample of its GPU (:class:`~glmlaunch.hardware.memory.DeviceMemory`):

* **resident**: ``used`` less what foreign processes hold: the deployment's memory;
* **baseline**: the resident memory right after ready (the log's ready line, or the endpoint answering),
  or, with neither, once the resident memory has reached :data:`READY_SHARE` of the planned resident and
  stayed within ``settle_tolerance`` for ``settle_s`` ("the first stable minutes");
* **realized demand**: growth since the baseline, credited to the plan's runtime transients in firing order
  (:meth:`~glmlaunch.watch.expect.Expectation.pending`); the rest can still fire.

The states (``conditions`` holds every one that applies, ``state`` the first of
:data:`PRECEDENCE`):

* ``critical``: free memory below the largest transient that can still fire (its allocation fails);
* ``warn``: free memory below that transient plus ``memory.min_margin``;
* ``foreign``: a process outside the deployment holds memory on the GPU (the deployment: the supervised
  process tree, else the holders at the baseline; NVML lists host pids, which a container cannot see);
* ``drift``: steady growth the plan does not explain: over the drift window, the resident memory rose in
  at least three of its four quarters, by at least ``drift_min_bytes`` in all, never falling by more than a
  tenth of that. A transient fires within a step, so a planned one is a step, never a ramp; the rate is
  the least-squares slope over the window;
* ``ok``: none of these; ``starting``: no baseline yet (only ``foreign`` can apply).

What a sample cannot see: an allocation made and freed between two samples (docs/watch.md).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from glmlaunch.config.units import MIB
from glmlaunch.hardware.memory import DeviceMemory, Holder
from glmlaunch.watch.expect import Expectation, Pending, Transient
from glmlaunch.watch.ranks import RankGpu

State = Literal["starting", "ok", "warn", "critical", "foreign", "drift"]
STATES: tuple[State, ...] = ("starting", "ok", "warn", "critical", "foreign", "drift")
#: the state a rank reports when several conditions hold: the most urgent first
PRECEDENCE: tuple[State, ...] = ("critical", "warn", "foreign", "drift")
#: without a ready signal, the baseline waits for this share of the planned resident memory (a stable
#: plateau before it is vLLM loading weights or compiling, before the KV cache exists)
READY_SHARE = 0.9
#: the deployment is gone (vLLM exited or restarts) when its resident memory falls below this share of the
#: baseline: the watch waits for the next ready
GONE_SHARE = 0.5


@dataclass(frozen=True)
class Settings:
    drift_window_s: float = 600.0
    drift_min_bytes: int = 64 * MIB
    settle_s: float = 60.0
    settle_tolerance_bytes: int = 64 * MIB


@dataclass(frozen=True)
class Reading:
    """One rank at one sample: the figures, the conditions that hold and the state."""

    rank: int
    rank_gpu: RankGpu
    t: float
    state: State
    conditions: tuple[State, ...]
    used_bytes: int
    free_bytes: int
    resident_bytes: int
    foreign: tuple[Holder, ...]
    foreign_bytes: int
    processes_visible: bool
    baseline_resident_bytes: int | None
    realized_bytes: int
    pending: Pending | None
    unexplained_bytes: int
    drift_bytes_per_s: float | None
    expect: Expectation

    @property
    def largest_pending(self) -> Transient | None:
        return self.pending.largest if self.pending is not None else None

    @property
    def largest_pending_bytes(self) -> int:
        return self.pending.largest_bytes if self.pending is not None else 0

    @property
    def warn_below_bytes(self) -> int:
        return self.largest_pending_bytes + self.expect.min_margin_bytes

    @property
    def eta_critical_s(self) -> float | None:
        """At the drift rate, seconds until free memory is below the largest pending transient."""
        rate = self.drift_bytes_per_s
        if rate is None or rate <= 0:
            return None
        room = self.free_bytes - self.largest_pending_bytes
        return max(0.0, room / rate)

    def why(self) -> str:
        """The figures behind the state, then the other conditions that hold, in one line."""
        clauses = [self._clause(self.state)]
        clauses += [self._clause(c) for c in self.conditions if c != self.state]
        return "; also ".join(clauses)

    def _clause(self, state: str) -> str:
        from glmlaunch.config.units import format_size as fs

        largest = self.largest_pending
        pending = f"{largest.name} {fs(largest.bytes)}" if largest is not None else "none"
        if self.pending is not None and self.pending.beyond:
            pending += (
                f", resident memory {fs(self.realized_bytes)} above ready being past the plan's runtime "
                f"demand {fs(self.expect.runtime_peak_bytes)}: the plan under-counts"
            )
        if state == "critical":
            return f"free {fs(self.free_bytes)} < the largest transient that can still fire ({pending})"
        if state == "warn":
            return (
                f"free {fs(self.free_bytes)} < the largest pending transient ({pending}) + memory.min_margin "
                f"{fs(self.expect.min_margin_bytes)}"
            )
        if state == "foreign":
            held = ", ".join(
                f"pid {h.pid} ({fs(h.used_bytes) if h.used_bytes is not None else 'size unknown'})"
                for h in self.foreign
            )
            return f"held by a process outside the deployment: {held}"
        if state == "drift":
            rate = (self.drift_bytes_per_s or 0.0) * 60
            eta = self.eta_critical_s
            until = f", critical in ~{max(1, round(eta / 60))} min at this rate" if eta is not None else ""
            return f"resident memory grows steadily, {fs(rate)}/min, beyond what the plan explains{until}"
        if state == "starting":
            return "waiting for vLLM to be ready (no baseline yet)"
        return f"free {fs(self.free_bytes)}, largest pending transient {pending}"


@dataclass
class Deployment:
    """Which processes on one GPU are the deployment's: a known set (the supervised process tree), else the
    holders of that GPU at the baseline. Until one of them answers, no process is called foreign."""

    known: Callable[[], frozenset[int]] | None = None
    learned: frozenset[int] | None = None
    #: the known set named none of NVML's holders at ready (another pid namespace: a container): the
    #: holders at the baseline decide instead
    namespace_mismatch: bool = False

    def foreign(self, holders: tuple[Holder, ...] | None) -> tuple[Holder, ...]:
        if not holders:
            return ()
        if self.known is not None and not self.namespace_mismatch:
            mine = self.known()
            if self.learned is None and not any(h.pid in mine for h in holders):
                return ()  # none is ours yet: too early to tell, or pids of another namespace
            return tuple(h for h in holders if h.pid not in mine)
        if self.learned is not None:
            return tuple(h for h in holders if h.pid not in self.learned)
        return ()

    def learn(self, holders: tuple[Holder, ...] | None) -> None:
        """At the baseline: the GPU's holders now are the deployment's (unless the known set names them)."""
        pids = frozenset(h.pid for h in holders or ())
        if self.known is not None and pids and not pids & self.known():
            self.namespace_mismatch = True
        self.learned = pids

    def forget(self) -> None:
        self.learned = None


@dataclass
class RankWatch:
    """One rank's state machine (the watcher keeps one per rank)."""

    gpu: RankGpu
    expect: Expectation
    settings: Settings
    deployment: Deployment
    baseline: int | None = None
    history: deque[tuple[float, int]] = field(default_factory=deque)
    _stable_since: float | None = None
    _stable_level: int | None = None
    _ready_used: int = 0

    def update(self, t: float, mem: DeviceMemory, ready: int | None) -> Reading:
        """``ready``: how many times the log or the endpoint has said vLLM is ready (0: not yet), or None
        when nothing can say (the baseline then waits for a stable plateau). A deployment that went away
        is baselined again at the next ready, never at a ready it was already baselined at."""
        if self.baseline is None and self.deployment.learned is None:
            fresh = ready is not None and ready > self._ready_used
            if fresh or (ready is None and self._settled(t, mem.used_bytes)):
                self.deployment.learn(mem.holders)
                self._ready_used = ready or 0
        foreign = self.deployment.foreign(mem.holders)
        foreign_bytes = sum(h.used_bytes or 0 for h in foreign)
        resident = max(0, mem.used_bytes - foreign_bytes)

        if self.baseline is not None and resident < GONE_SHARE * self.baseline:
            self._reset()
        elif self.baseline is None and self.deployment.learned is not None:
            self.baseline = resident
        conditions: list[State] = []
        pending: Pending | None = None
        realized = 0
        unexplained = 0
        rate: float | None = None
        if self.baseline is not None:
            realized = max(0, resident - self.baseline)
            pending = self.expect.pending(realized)
            unexplained = max(0, realized - self.expect.runtime_peak_bytes)
            largest = pending.largest_bytes
            if largest > 0 and mem.free_bytes < largest:
                conditions.append("critical")
            elif mem.free_bytes < largest + self.expect.min_margin_bytes:
                conditions.append("warn")
            rate = self._drift(t, resident)
        if foreign:
            conditions.append("foreign")
        if rate is not None:
            conditions.append("drift")
        if self.baseline is None:
            state: State = "foreign" if foreign else "starting"
        else:
            state = next((s for s in PRECEDENCE if s in conditions), "ok")
        return Reading(
            rank=self.gpu.rank,
            rank_gpu=self.gpu,
            t=t,
            state=state,
            conditions=tuple(conditions),
            used_bytes=mem.used_bytes,
            free_bytes=mem.free_bytes,
            resident_bytes=resident,
            foreign=foreign,
            foreign_bytes=foreign_bytes,
            processes_visible=mem.holders is not None,
            baseline_resident_bytes=self.baseline,
            realized_bytes=realized,
            pending=pending,
            unexplained_bytes=unexplained,
            drift_bytes_per_s=rate,
            expect=self.expect,
        )

    def _reset(self) -> None:
        self.baseline = None
        self.deployment.forget()
        self.history.clear()
        self._stable_since = self._stable_level = None

    def _settled(self, t: float, resident: int) -> bool:
        s = self.settings
        if resident < READY_SHARE * self.expect.planned_resident_bytes:
            self._stable_since = self._stable_level = None
            return False
        if self._stable_level is None or abs(resident - self._stable_level) > s.settle_tolerance_bytes:
            self._stable_since, self._stable_level = t, resident
            return False
        assert self._stable_since is not None
        return t - self._stable_since >= s.settle_s

    def _drift(self, t: float, resident: int) -> float | None:
        """The drift rate in bytes/s when the last window shows a steady rise, else None."""
        s = self.settings
        h = self.history
        h.append((t, resident))
        while h and t - h[0][0] > s.drift_window_s:
            h.popleft()
        span = t - h[0][0]
        if len(h) < 8 or span < 0.75 * s.drift_window_s:
            return None
        growth = h[-1][1] - h[0][1]
        if growth < s.drift_min_bytes:
            return None
        quarters = [0, 0, 0, 0]
        largest_fall = 0
        prev_v = h[0][1]
        t0 = h[0][0]
        for ti, vi in list(h)[1:]:
            q = min(3, int(4 * (ti - t0) / span)) if span > 0 else 0
            quarters[q] += vi - prev_v
            largest_fall = max(largest_fall, prev_v - vi)
            prev_v = vi
        rising = sum(1 for q in quarters if q > 0)
        if rising < 3 or largest_fall > growth / 10:
            return None
        n = len(h)
        mean_t = sum(p[0] for p in h) / n
        mean_v = sum(p[1] for p in h) / n
        var = sum((p[0] - mean_t) ** 2 for p in h)
        if var <= 0:
            return None
        slope = sum((p[0] - mean_t) * (p[1] - mean_v) for p in h) / var
        return slope if slope > 0 else None
