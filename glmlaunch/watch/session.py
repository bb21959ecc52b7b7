"""The watch loop: sample, read the log lines, update every rank, say what changed, publish.

One :class:`Watcher` serves both forms: the sidecar (``glmlaunch watch``, :mod:`.commands`) runs it on the
main thread until a signal, ``--duration``, ``--samples`` or a trace's end; ``serve --supervise --watch``
runs it on a thread of the supervisor, fed the lines its log parser sees, and stops it when vLLM exits.

Per sample (:meth:`Watcher.step`): the source's next sample; the log lines seen by then (the ready line
counts the ready signals; an OOM is explained against the plan at once, :mod:`.oom`); each rank's state
(:mod:`.states`); a :class:`~.snapshot.Snapshot` for the renderer and the metrics endpoint; one stderr
line per event. After ready it keeps each rank's lowest free memory (what foreign processes held counted
as free: it is the deployment's own peak): written as ``GPU N: X MiB free`` lines, the form ``calibrate
ingest`` reads after a log's ready line (a sidecar's ``--readings FILE``), and handed to the supervisor
as runtime events for the boot's calibration record (:meth:`Watcher.runtime_events`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from glmlaunch.config.units import MIB, format_size
from glmlaunch.errors import ConfigError
from glmlaunch.files import append_text
from glmlaunch.hardware.memory import MemorySource
from glmlaunch.output import debug_enabled, warn
from glmlaunch.plan.plan import Plan
from glmlaunch.vllmlog.events import RuntimeEvent, free_reading, is_ready_line, runtime_events_of
from glmlaunch.watch import oom
from glmlaunch.watch.expect import expectation
from glmlaunch.watch.follow import LineSource
from glmlaunch.watch.ranks import RankGpu
from glmlaunch.watch.render import Quiet, Renderer, say
from glmlaunch.watch.snapshot import Event, Snapshot
from glmlaunch.watch.states import Deployment, RankWatch, Reading, Settings, State
from glmlaunch.watch.trace import Recorder
from glmlaunch.watch.vllm import Scraper

READING_PROCESS = "glmlaunch watch"


@dataclass(frozen=True)
class Options:
    interval_s: float = 0.5
    duration_s: float | None = None
    samples: int | None = None
    settings: Settings = field(default_factory=Settings)
    #: only the ready line may set the baseline (supervised: vLLM's own log is certain to say it)
    strict_ready: bool = False
    readings: Path | None = None


@dataclass
class _Low:
    free: int
    t: float


class Watcher:
    def __init__(
        self,
        plan: Plan,
        source: MemorySource,
        ranks: tuple[RankGpu, ...],
        *,
        profile: str,
        options: Options,
        lines: LineSource | None = None,
        has_ready_signal: bool | None = None,
        known_pids: Callable[[], frozenset[int]] | None = None,
        scraper: Scraper | None = None,
        renderer: Renderer | None = None,
        source_name: str = "nvml",
        host: str = "",
        recorder: Recorder | None = None,
        paced: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan = plan
        self.profile = profile
        self.expect = expectation(profile, plan)
        self.source = recorder if recorder is not None else source
        self.recorder = recorder
        self.ranks = ranks
        self.options = options
        self.lines = lines
        self.scraper = scraper
        self.renderer: Renderer = renderer or Quiet()
        self.source_name = source_name
        self.host = host
        self.paced = paced
        self.clock = clock
        self.has_ready_signal = (
            has_ready_signal if has_ready_signal is not None else (lines is not None or scraper is not None)
        )
        self.watches = [
            RankWatch(g, self.expect, options.settings, Deployment(known=known_pids)) for g in ranks
        ]
        self.latest: Snapshot | None = None
        self.seq = 0
        self.t0: float | None = None
        self.ready_lines = 0
        self.ooms: dict[int, int] = {}
        self.oom_events: list[RuntimeEvent] = []
        self.explanations: list[oom.Explanation] = []
        self.events: list[Event] = []
        self.lows: dict[int, _Low] = {}
        self.worst: dict[int, State] = {}
        self._state: dict[int, State] = {}
        self._written_low: dict[int, int] = {}
        self._armed = True  # the next ready line is a new ready signal
        self._lock = threading.Lock()
        self.stop_event = threading.Event()

    # --- one sample --------------------------------------------------------------------------------

    def _ready_count(self) -> int:
        """Ready signals so far: the log's ready lines, else (no log to say it) the endpoint coming up."""
        if self.lines is None and self.scraper is not None:
            return self.scraper.ups
        return self.ready_lines

    def _ready(self) -> int | None:
        """The ranks' ready signal: the count of ready signals; None (wait for a stable plateau) while
        none came, unless only the log may say it (supervised)."""
        count = self._ready_count()
        if count > 0 or self.options.strict_ready:
            return count
        return None

    def step(self) -> Snapshot | None:
        sample = self.source.read()
        if sample is None:
            return None
        if self.t0 is None:
            self.t0 = sample.t
        # to the millisecond, as a recording keeps it: a replay then decides exactly as the live watch did
        t = round(sample.t - self.t0, 3)
        self.seq += 1
        events: list[Event] = []
        lines = self.lines.poll(sample.t) if self.lines is not None else []
        if self.recorder is not None and lines:
            self.recorder.add_lines(sample.t, lines)
        for line in lines:
            events.extend(self._line(line))
        ready = self._ready()
        readings: list[Reading] = []
        for watch in self.watches:
            had = watch.baseline
            r = watch.update(t, sample.devices[watch.gpu.position], ready)
            readings.append(r)
            events.extend(self._changes(r, had))
        snap = Snapshot(
            seq=self.seq,
            t=t,
            wall=time.time(),
            profile=self.profile,
            source=self.source_name,
            host=self.host,
            interval_s=self.options.interval_s,
            ready=self._ready_count() if self.has_ready_signal else None,
            readings=tuple(readings),
            vllm=self.scraper.latest if self.scraper is not None else None,
            events=tuple(events),
            ooms=dict(self.ooms),
        )
        with self._lock:
            self.latest = snap
            self.events.extend(events)
        for e in events:
            say(e)
        self.renderer.show(snap)
        return snap

    def _line(self, line: str) -> list[Event]:
        out: list[Event] = []
        if is_ready_line(line) and self._armed:
            # vLLM says it twice (the API server starting, then startup complete): one ready per boot
            self._armed = False
            self.ready_lines += 1
            out.append(
                Event("ready", None, "vLLM is ready (its log says so): the baseline is the next sample")
            )
        for ev in runtime_events_of(line, after_ready=self.ready_lines > 0):
            if ev.kind != "oom":
                continue
            self.oom_events.append(ev)
            rank = oom.rank_of(ev)
            if rank is not None:
                self.ooms[rank] = self.ooms.get(rank, 0) + 1
            try:
                ex = oom.explain(ev, self.plan, source="the OOM the watch saw")
            except Exception as exc:  # an explanation must never stop the watch
                if debug_enabled():
                    raise
                warn(f"watch: could not explain the OOM: {type(exc).__name__}: {exc}")
                continue
            self.explanations.append(ex)
            out.append(Event("oom", rank, ex.headline(), {"explanation": ex.to_json()}))
        return out

    def _changes(self, r: Reading, had_baseline: int | None) -> list[Event]:
        out: list[Event] = []
        d = r.rank_gpu.device
        who = f"rank {r.rank} (GPU {d.nvml_index}, {d.uuid[:12]})"
        if had_baseline is None and r.baseline_resident_bytes is not None:
            delta = r.baseline_resident_bytes - self.expect.planned_resident_bytes
            out.append(
                Event(
                    "baseline",
                    r.rank,
                    f"{who}: ready; resident {format_size(r.baseline_resident_bytes)}, the plan "
                    f"{format_size(self.expect.planned_resident_bytes)} ({'+' if delta >= 0 else '-'}"
                    f"{format_size(abs(delta))}); free {format_size(r.free_bytes)}, the plan's margin "
                    f"{format_size(self.expect.margin_bytes)}",
                    {"resident_bytes": r.baseline_resident_bytes, "free_bytes": r.free_bytes},
                )
            )
        if had_baseline is not None and r.baseline_resident_bytes is None:
            out.append(
                Event(
                    "gone",
                    r.rank,
                    f"{who}: the deployment's memory is gone (vLLM exited?); waiting for ready",
                )
            )
            self._armed = True
        before = self._state.get(r.rank, "starting")
        if r.state != before:
            out.append(
                Event(
                    "state",
                    r.rank,
                    f"{who}: {before} -> {r.state}: {r.why()}",
                    {"from": before, "to": r.state},
                )
            )
            self._state[r.rank] = r.state
        worst = self.worst.get(r.rank)
        if worst is None or _rank_of_state(r.state) > _rank_of_state(worst):
            self.worst[r.rank] = r.state
        if r.baseline_resident_bytes is not None:
            free = r.free_bytes + r.foreign_bytes
            low = self.lows.get(r.rank)
            if low is None or free < low.free:
                self.lows[r.rank] = _Low(free, r.t)
                self._write_reading(r.rank, free, d.uuid)
        return out

    # --- calibration -------------------------------------------------------------------------------

    @staticmethod
    def reading_line(rank: int, free: int, uuid: str) -> str:
        """The form ``calibrate ingest`` reads after a log's ready line (``GPU N: X MiB free``)."""
        return (
            f"{datetime.now(UTC).isoformat(timespec='seconds')} {READING_PROCESS}: "
            f"{free_reading(rank, free // MIB)} (rank {rank}, {uuid}; the lowest since ready, memory of "
            "processes outside the deployment counted as free)"
        )

    def _write_reading(self, rank: int, free: int, uuid: str) -> None:
        path = self.options.readings
        mib = free // MIB
        if path is None or self._written_low.get(rank, mib + 1) <= mib:
            return
        self._written_low[rank] = mib
        try:
            append_text(path, self.reading_line(rank, free, uuid) + "\n", key="--readings")
        except ConfigError as exc:
            # checked when the watch started; a file replaced since by a link or a FIFO ends the readings
            warn(f"watch: no more readings: {exc.one_line()}")
            self.options = Options(**{**self.options.__dict__, "readings": None})

    def runtime_events(self) -> list[RuntimeEvent]:
        """What this run teaches the calibration: each rank's lowest free memory after ready, and the OOMs
        seen after ready (as ``calibrate ingest`` reads them from a log)."""
        out = [e for e in self.oom_events if e.after_ready]
        for rank, low in sorted(self.lows.items()):
            uuid = self.ranks[rank].device.uuid if rank < len(self.ranks) else ""
            line = self.reading_line(rank, low.free, uuid)
            out.append(
                RuntimeEvent(
                    kind="free",
                    process=READING_PROCESS,
                    gpu=rank,
                    free_bytes=low.free // MIB * MIB,
                    after_ready=True,
                    line=line[:240],
                )
            )
        return out

    def summary(self) -> dict[str, Any]:
        with self._lock:
            snap = self.latest
            events = list(self.events)
        ranks = []
        for watch in self.watches:
            r = next((x for x in snap.readings if x.rank == watch.gpu.rank), None) if snap else None
            low = self.lows.get(watch.gpu.rank)
            ranks.append(
                {
                    "rank": watch.gpu.rank,
                    "uuid": watch.gpu.device.uuid,
                    "gpu": watch.gpu.device.nvml_index,
                    "state": r.state if r is not None else "starting",
                    "worst_state": self.worst.get(watch.gpu.rank, "starting"),
                    "baseline_resident_bytes": watch.baseline,
                    "planned_resident_bytes": self.expect.planned_resident_bytes,
                    "lowest_free_bytes": low.free if low is not None else None,
                }
            )
        return {
            "samples": self.seq,
            "profile": self.profile,
            "ranks": ranks,
            "ooms": [ex.to_json() for ex in self.explanations],
            "events": [e.to_json() for e in events[-100:]],
        }

    # --- the loop ----------------------------------------------------------------------------------

    def run(self) -> None:
        """Sample until stopped (:attr:`stop_event`), the limits, or the source's end."""
        opts = self.options
        next_at = self.clock()
        try:
            while not self.stop_event.is_set():
                snap = self.step()
                if snap is None:
                    break
                if opts.samples is not None and snap.seq >= opts.samples:
                    break
                if opts.duration_s is not None and snap.t >= opts.duration_s:
                    break
                if self.paced:
                    next_at += opts.interval_s
                    wait = next_at - self.clock()
                    if wait <= 0:
                        next_at = self.clock()  # fell behind (a slow explanation): no burst to catch up
                    elif self.stop_event.wait(wait):
                        break
        finally:
            self.renderer.close()

    def stop(self) -> None:
        self.stop_event.set()
        # a replay at the recorded pace waits inside read(): it ends that wait too (a signal's handler
        # calls this on the main thread, where the wait is)
        halt = getattr(self.source, "stop", None)
        if callable(halt):
            halt()

    def close(self) -> None:
        if self.scraper is not None:
            self.scraper.stop()
        with contextlib.suppress(Exception):
            self.source.close()


_ORDER: dict[str, int] = {"starting": 0, "ok": 1, "drift": 2, "foreign": 3, "warn": 4, "critical": 5}


def _rank_of_state(state: str) -> int:
    return _ORDER.get(state, 0)
