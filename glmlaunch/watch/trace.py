"""NVML traces: what ``glmlaunch watch --record FILE`` read on a GPU machine, replayed behind the same
interface as live NVML (:class:`glmlaunch.hardware.memory.MemorySource`).

A trace holds the devices as NVML named them, every sample (per device: used, free, and the holder
processes with their memory, or ``null`` where NVML could not list them) and the log lines the watch
followed while recording (``--log``: the ready line, an OOM), each with the time it was seen. It is
written by the recorder only, from real reads; tests replay the committed ones
(``tests/fixtures/watch/``, recorded by ``scripts/record_watch_traces.py``), never a hand-written one.

:class:`TracePlayer` answers ``read()`` with the recorded samples in order (``None`` after the last), on the
trace's own clock: as fast as asked (``realtime=False``: replays and tests) or at the recorded pace
(``speed`` times faster), and hands out the recorded log lines of each sample's time
(:meth:`TracePlayer.lines_until`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from glmlaunch.config.limits import MAX_TRACE_BYTES, MAX_TRACE_SAMPLES
from glmlaunch.config.safeload import decode_utf8, load_json, read_file, short
from glmlaunch.config.units import format_size
from glmlaunch.errors import ConfigError
from glmlaunch.files import write_text
from glmlaunch.hardware.memory import Device, DeviceMemory, Holder, MemorySample, MemorySource

SCHEMA_VERSION = 1
KIND = "glmlaunch-nvml-trace"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TraceDevice(_Model):
    index: int = Field(description="position in PCI bus order")
    nvml_index: int
    uuid: str
    pci_bus_id: str | None
    name: str | None
    total_bytes: int
    reserved_bytes: int


class TraceGpu(_Model):
    used: int
    free: int
    #: [[pid, used bytes or null], ...], or null when NVML could not list the processes
    procs: list[tuple[int, int | None]] | None


#: the latest time a trace may hold: a year of recording (beyond it a replay at the recorded pace waits for
#: ages, and threading refuses such a timeout)
MAX_TRACE_T = 366 * 86400.0
Seconds = Annotated[float, Field(ge=0, le=MAX_TRACE_T, allow_inf_nan=False)]


class TraceSample(_Model):
    t: Seconds = Field(description="seconds since the recording started")
    gpus: list[TraceGpu]


class TraceLine(_Model):
    t: Seconds = Field(description="the time of the sample the line was seen with")
    text: str


class Trace(_Model):
    schema_version: int = SCHEMA_VERSION
    kind: Literal["glmlaunch-nvml-trace"] = "glmlaunch-nvml-trace"
    recorded_at: str
    host: str
    source: str = Field(description="what recorded it: glmlaunch's version and the NVML binding's")
    driver_version: str | None = None
    command: str = Field(description="the recording command line")
    note: str = Field("", description="what ran on the GPUs meanwhile (the recorder's --note)")
    interval_s: float = Field(gt=0, le=3600, allow_inf_nan=False)
    devices: list[TraceDevice]
    samples: list[TraceSample]
    log: list[TraceLine] = []

    @property
    def duration_s(self) -> float:
        return self.samples[-1].t - self.samples[0].t if self.samples else 0.0


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a trace file written by ``glmlaunch watch --record`` (a regular UTF-8 JSON file, bounded)."""
    p = Path(path)
    raw = read_file(p, limit=MAX_TRACE_BYTES, key="--replay", what="NVML trace")
    text = decode_utf8(raw, key="--replay", value=short(p, 200), what="NVML trace")
    try:
        # bounded by its size and its samples (MAX_TRACE_*), which the recorder keeps to; a key takes at
        # least four bytes (`"":0`), so the byte bound is a key bound
        data = load_json(
            text, key="--replay", value=short(p, 200), what="NVML trace", max_keys=MAX_TRACE_BYTES // 4
        )
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"not a JSON trace ({exc.msg} at line {exc.lineno})", key="--replay", source=str(p)
        ) from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise ConfigError(
            "not an NVML trace of glmlaunch watch --record",
            key="--replay",
            source=str(p),
            hint="record one on the GPU machine: glmlaunch watch -p NAME --record FILE",
        )
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ConfigError(
            f"trace schema version {short(repr(data.get('schema_version')), 40)} is not supported "
            f"(this glmlaunch reads version {SCHEMA_VERSION})",
            key="--replay",
            source=str(p),
        )
    try:
        trace = Trace.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "<root>"
        raise ConfigError(f"invalid trace: {where}: {first['msg']}", key="--replay", source=str(p)) from None
    if len(trace.samples) > MAX_TRACE_SAMPLES:
        raise ConfigError(
            f"the trace holds {len(trace.samples):,} samples; the limit is {MAX_TRACE_SAMPLES:,} (what "
            "watch --record keeps)",
            key="--replay",
            source=str(p),
        )
    if not trace.samples or any(len(s.gpus) != len(trace.devices) for s in trace.samples):
        raise ConfigError(
            "invalid trace: every sample must hold one entry per device", key="--replay", source=str(p)
        )
    return trace


def _device(d: TraceDevice) -> Device:
    # the trace's device is the probe's, field for field
    return Device(**d.model_dump())


def _sample(s: TraceSample) -> MemorySample:
    return MemorySample(
        t=s.t,
        devices=tuple(
            DeviceMemory(
                used_bytes=g.used,
                free_bytes=g.free,
                holders=None if g.procs is None else tuple(Holder(pid, used) for pid, used in g.procs),
            )
            for g in s.gpus
        ),
    )


@dataclass
class TracePlayer:
    """A recorded trace as a :class:`~glmlaunch.hardware.memory.MemorySource`."""

    trace: Trace
    realtime: bool = False
    speed: float = 1.0
    clock: Callable[[], float] = time.monotonic
    _next: int = 0
    _line: int = 0
    _started: float | None = None
    _devices: tuple[Device, ...] = field(init=False)
    #: set by :meth:`stop` (a signal's handler): a wait for the next sample ends at once
    _stopped: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._devices = tuple(_device(d) for d in self.trace.devices)

    def stop(self) -> None:
        """End the replay: a wait in :meth:`read` returns, and the next read is the end."""
        self._stopped.set()

    def _sleep(self, seconds: float) -> None:
        # in slices: an Event's wait refuses timeouts past threading.TIMEOUT_MAX, and a wait on the main
        # thread must end when a signal's handler calls stop() (time.sleep resumes after the handler)
        end = self.clock() + seconds
        while not self._stopped.is_set():
            left = end - self.clock()
            if left <= 0 or self._stopped.wait(min(left, 60.0)):
                return

    @property
    def devices(self) -> tuple[Device, ...]:
        return self._devices

    def read(self) -> MemorySample | None:
        if self._next >= len(self.trace.samples) or self._stopped.is_set():
            return None
        s = self.trace.samples[self._next]
        self._next += 1
        if self.realtime:
            now = self.clock()
            if self._started is None:
                self._started = now - (s.t - self.trace.samples[0].t) / self.speed
            wait = self._started + (s.t - self.trace.samples[0].t) / self.speed - now
            if wait > 0:
                self._sleep(wait)
                if self._stopped.is_set():
                    return None
        return _sample(s)

    def lines_until(self, t: float) -> list[str]:
        """The recorded log lines seen at or before trace time ``t`` and not handed out yet."""
        out: list[str] = []
        log = self.trace.log
        while self._line < len(log) and log[self._line].t <= t:
            out.append(log[self._line].text)
            self._line += 1
        return out

    def poll(self, t: float) -> list[str]:
        """As a :class:`~glmlaunch.watch.follow.LineSource`: the recorded lines up to the sample's time."""
        return self.lines_until(t)

    def close(self) -> None:
        return None


@dataclass
class Recorder:
    """Wraps a live source: every sample read (and every log line seen with it) goes into the trace.

    The trace is kept within what ``--replay`` reads (:data:`~glmlaunch.config.limits.MAX_TRACE_SAMPLES`,
    :data:`~glmlaunch.config.limits.MAX_TRACE_BYTES`, :data:`MAX_TRACE_T`), counted as :func:`trace_json`
    writes it: once the next sample or line would not fit, the recording stops (said once, as
    :attr:`full`) and the watch goes on; the file then holds the first part."""

    source: MemorySource
    command: str
    note: str
    interval_s: float
    host: str
    origin: str
    driver_version: str | None = None
    samples: list[TraceSample] = field(default_factory=list)
    log: list[TraceLine] = field(default_factory=list)
    max_samples: int = MAX_TRACE_SAMPLES
    max_bytes: int = MAX_TRACE_BYTES
    #: why the recording stopped before the watch did; None while it records
    full: str | None = None
    _t0: float | None = None
    _bytes: int = 0
    recorded_at: str = ""

    @property
    def devices(self) -> tuple[Device, ...]:
        return self.source.devices

    def _fits(self, entry: _Model, *, sample: bool) -> bool:
        """Whether ``entry`` still fits the trace (and count it); the first refusal ends the recording."""
        if self.full is not None:
            return False
        size = len(json.dumps(entry.model_dump(mode="json"), separators=(",", ":"))) + 6
        if sample and len(self.samples) >= self.max_samples:
            return self._stop(f"{self.max_samples:,} samples")
        if self._bytes + size > self.max_bytes:
            return self._stop(format_size(self.max_bytes))
        self._bytes += size
        return True

    def _stop(self, why: str) -> bool:
        last = self.samples[-1].t if self.samples else 0.0
        self.full = (
            f"the recording is full ({why}, what --replay reads): it keeps the first {len(self.samples):,} "
            f"samples ({last:.0f} s); the watch goes on unrecorded"
        )
        from glmlaunch.output import warn

        warn(f"watch: {self.full}")
        return False

    def read(self) -> MemorySample | None:
        sample = self.source.read()
        if sample is None:
            return None
        if self._t0 is None:
            self._t0 = sample.t
            from datetime import UTC, datetime

            self.recorded_at = datetime.now(UTC).isoformat(timespec="seconds")
            # the empty trace's text, and the brackets a first log line opens (`"log": [` ... `  ]`)
            self._bytes = len(trace_json(self.trace())) + 8
        if self.full is not None:
            return sample
        t = round(sample.t - self._t0, 3)
        if t > MAX_TRACE_T:
            self._stop(f"{MAX_TRACE_T / 86400:.0f} days")
            return sample
        entry = TraceSample(
            t=t,
            gpus=[
                TraceGpu(
                    used=d.used_bytes,
                    free=d.free_bytes,
                    procs=None if d.holders is None else [(h.pid, h.used_bytes) for h in d.holders],
                )
                for d in sample.devices
            ],
        )
        if self._fits(entry, sample=True):
            self.samples.append(entry)
        return sample

    def add_lines(self, t: float, lines: Sequence[str]) -> None:
        base = self._t0 if self._t0 is not None else t
        at = min(max(round(t - base, 3), 0.0), MAX_TRACE_T)
        for line in lines:
            entry = TraceLine(t=at, text=line)
            if not self._fits(entry, sample=False):
                return
            self.log.append(entry)

    def close(self) -> None:
        self.source.close()

    def trace(self) -> Trace:
        return Trace(
            recorded_at=self.recorded_at,
            host=self.host,
            source=self.origin,
            driver_version=self.driver_version,
            command=self.command,
            note=self.note,
            interval_s=self.interval_s,
            devices=[TraceDevice.model_validate(d, from_attributes=True) for d in self.devices],
            samples=self.samples,
            log=self.log,
        )


def trace_json(trace: Trace) -> str:
    """The file's text: the header indented, one sample and one log line per line (small, diffable)."""
    head = trace.model_dump(mode="json", exclude={"samples", "log"})
    lines = json.dumps(head, indent=2).rstrip("}").rstrip()
    samples = ",\n".join(
        "    " + json.dumps(s.model_dump(mode="json"), separators=(",", ":")) for s in trace.samples
    )
    log = ",\n".join("    " + json.dumps(x.model_dump(mode="json"), separators=(",", ":")) for x in trace.log)
    return (
        f'{lines},\n  "samples": [\n{samples}\n  ],\n  "log": [' + (f"\n{log}\n  ]" if log else "]") + "\n}\n"
    )


def save_trace(trace: Trace, path: str | os.PathLike[str]) -> Path:
    return write_text(path, trace_json(trace), key="--record", make_parents=True)
