"""A boot's phases with wall times, from the lines vLLM writes as it passes each milestone.

Markers, in the order a boot reaches them (the times are glmlaunch's own clock when the line arrived,
seconds since vLLM was started; for lines every rank writes, the last rank's):

* ``load``: ``Model loading took`` (each worker, once its weights are in);
* ``profile``: ``GPU KV cache size:`` (EngineCore, after the profiling run sized the KV cache);
* ``graph capture``: ``Graph capturing finished`` (each worker);
* ``ready``: ``Application startup complete`` (the API server serves).

A phase runs from the previous marker seen to its own: ``load`` from the start, ``profile`` from the
load, ``graph capture`` from the KV size, ``api start`` from the capture to ready. A missing marker
merges its phase into the next one, which says so.

Expected times bound the wait in each phase: the last boot of the same configuration times 3 (at least
5 minutes more than it took, at most a week), else generous defaults (an hour and a half for a cold
load). A phase past its expected time is a hang: said once, kept for the diagnosis, never acted on (vLLM
may still finish).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from glmlaunch.vllmlog.events import (
    GRAPHS_CAPTURED,
    KV_CACHE_SIZED,
    STARTUP_COMPLETE,
    WEIGHTS_LOADED,
    milestone_of,
)

#: (phase, the line that ends it, whether every rank writes it)
MARKERS: tuple[tuple[str, str, bool], ...] = (
    ("load", WEIGHTS_LOADED, True),
    ("profile", KV_CACHE_SIZED, False),
    ("graph capture", GRAPHS_CAPTURED, True),
    ("api start", STARTUP_COMPLETE, False),
)
PHASES: tuple[str, ...] = tuple(name for name, _, _ in MARKERS)
_PHASE_OF = {text: name for name, text, _ in MARKERS}

#: Seconds each phase may take before it counts as a hang, without an earlier boot to go by.
DEFAULT_EXPECTED_S: dict[str, float] = {
    "load": 90 * 60.0,
    "profile": 30 * 60.0,
    "graph capture": 30 * 60.0,
    "api start": 10 * 60.0,
}
EXPECTED_FACTOR = 3.0
EXPECTED_SLACK_S = 5 * 60.0


def fmt_seconds(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


@dataclass(frozen=True)
class Phase:
    name: str
    start_s: float
    end_s: float
    merged: tuple[str, ...] = ()  # phases whose marker never came, folded into this one

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "start_s": round(self.start_s, 3),
            "end_s": round(self.end_s, 3),
            "seconds": round(self.seconds, 3),
            "merged": list(self.merged),
        }


@dataclass
class Timeline:
    """Marker times as lines arrive (:meth:`see`); phases and the hang check from them."""

    expected_s: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_EXPECTED_S))
    expected_from: str = "defaults"
    first: dict[str, float] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)
    hung: dict[str, float] = field(default_factory=dict)  # phase -> seconds in it when the hang was seen

    def see(self, line: str, t: float) -> str | None:
        """Record the marker ``line`` holds (if any) at ``t``; return its phase."""
        marker = milestone_of(line)
        if marker is None:
            return None
        name = _PHASE_OF[marker]
        self.first.setdefault(name, t)
        self.last[name] = t
        return name

    @property
    def ready_s(self) -> float | None:
        return self.first.get("api start")

    def end_of(self, name: str) -> float | None:
        every_rank = next(r for n, _, r in MARKERS if n == name)
        return (self.last if every_rank else self.first).get(name)

    def phases(self, now_s: float | None = None) -> list[Phase]:
        """Completed phases; with ``now_s``, the phase in progress too (ending at ``now_s``)."""
        out: list[Phase] = []
        start = 0.0
        pending: list[str] = []
        for name in PHASES:
            end = self.end_of(name)
            if end is None:
                pending.append(name)
                continue
            end = max(end, start)  # a marker out of the usual order ends its phase at once
            out.append(Phase(name, start, end, tuple(pending)))
            start, pending = end, []
        if now_s is not None and pending:
            out.append(Phase(pending[0], start, now_s, ()))
        return out

    def current(self) -> tuple[str, float] | None:
        """The phase vLLM is in (the first whose marker has not come) and when it started; None when ready."""
        start = 0.0
        for name in PHASES:
            end = self.end_of(name)
            if end is None:
                return name, start
            start = max(start, end)
        return None

    def check_hang(self, now_s: float) -> tuple[str, float, float] | None:
        """(phase, seconds in it, expected) the first time a phase outlasts its expected time."""
        where = self.current()
        if where is None:
            return None
        name, start = where
        spent = now_s - start
        limit = self.expected_s.get(name, DEFAULT_EXPECTED_S[name])
        if spent > limit and name not in self.hung:
            self.hung[name] = spent
            return name, spent, limit
        return None

    def summary(self, now_s: float | None = None) -> str:
        parts = []
        for p in self.phases(now_s):
            label = p.name if not p.merged else f"{p.name} (with {', '.join(p.merged)})"
            parts.append(f"{label} {fmt_seconds(p.seconds)}")
        text = ", ".join(parts) or "no phase reached"
        if self.ready_s is not None:
            text += f"; ready after {fmt_seconds(self.ready_s)}"
        return text

    def to_json(self, now_s: float | None = None) -> dict[str, object]:
        return {
            "markers": {
                name: {"first_s": round(self.first[name], 3), "last_s": round(self.last[name], 3)}
                for name in PHASES
                if name in self.first
            },
            "phases": [p.to_json() for p in self.phases(now_s)],
            "ready_s": round(self.ready_s, 3) if self.ready_s is not None else None,
            "expected_s": dict(self.expected_s),
            "expected_from": self.expected_from,
            "hung": {k: round(v, 1) for k, v in self.hung.items()},
        }


#: the longest a phase may be expected to take, whatever an earlier boot says (a hang check, never a wait)
MAX_EXPECTED_S = 7 * 86400.0


def expected_from_phases(phases: Iterable[Phase]) -> dict[str, float]:
    """Expected seconds per phase from an earlier boot's phases (read back, validated, by
    :func:`glmlaunch.supervise.boots.last_timeline`); a phase that merged others says nothing alone."""
    out = dict(DEFAULT_EXPECTED_S)
    for p in phases:
        seconds = p.seconds
        if p.name in out and not p.merged and math.isfinite(seconds) and seconds >= 0:
            out[p.name] = min(MAX_EXPECTED_S, max(EXPECTED_FACTOR * seconds, seconds + EXPECTED_SLACK_S))
    return out
