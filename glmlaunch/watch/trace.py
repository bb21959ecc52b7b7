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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from glmlaunch.config.limits import MAX_RECORD_BYTES
from glmlaunch.config.safeload import decode_utf8, load_json, read_file, short
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


class TraceSample(_Model):
    t: float = Field(description="seconds since the recording started")
    gpus: list[TraceGpu]


class TraceLine(_Model):
    t: float = Field(description="the time of the sample the line was seen with")
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
    interval_s: float
    devices: list[TraceDevice]
    samples: list[TraceSample]
    log: list[TraceLine] = []

    @property
    def duration_s(self) -> float:
        return self.samples[-1].t - self.samples[0].t if self.samples else 0.0


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a trace file written by ``glmlaunch watch --record`` (a regular UTF-8 JSON file, bounded)."""
    p = Path(path)
    raw = read_file(p, limit=MAX_RECORD_BYTES, key="--replay", what="NVML trace")
    text = decode_utf8(raw, key="--replay", value=short(p, 200), what="NVML trace")
    try:
        data = load_json(text, key="--replay", value=short(p, 200), what="NVML trace")
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
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    _next: int = 0
    _line: int = 0
    _started: float | None = None
    _devices: tuple[Device, ...] = field(init=False)

    def __post_init__(self) -> None:
        self._devices = tuple(_device(d) for d in self.trace.devices)

    @property
    def devices(self) -> tuple[Device, ...]:
        return self._devices

    def read(self) -> MemorySample | None:
        if self._next >= len(self.trace.samples):
            return None
        s = self.trace.samples[self._next]
        self._next += 1
        if self.realtime:
            now = self.clock()
            if self._started is None:
                self._started = now - (s.t - self.trace.samples[0].t) / self.speed
            wait = self._started + (s.t - self.trace.samples[0].t) / self.speed - now
            if wait > 0:
                self.sleep(wait)
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
    """Wraps a live source: every sample read (and every log line seen with it) goes into the trace."""

    source: MemorySource
    command: str
    note: str
    interval_s: float
    host: str
    origin: str
    driver_version: str | None = None
    samples: list[TraceSample] = field(default_factory=list)
    log: list[TraceLine] = field(default_factory=list)
    _t0: float | None = None
    recorded_at: str = ""

    @property
    def devices(self) -> tuple[Device, ...]:
        return self.source.devices

    def read(self) -> MemorySample | None:
        sample = self.source.read()
        if sample is None:
            return None
        if self._t0 is None:
            self._t0 = sample.t
            from datetime import UTC, datetime

            self.recorded_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.samples.append(
            TraceSample(
                t=round(sample.t - self._t0, 3),
                gpus=[
                    TraceGpu(
                        used=d.used_bytes,
                        free=d.free_bytes,
                        procs=None if d.holders is None else [(h.pid, h.used_bytes) for h in d.holders],
                    )
                    for d in sample.devices
                ],
            )
        )
        return sample

    def add_lines(self, t: float, lines: Sequence[str]) -> None:
        base = self._t0 if self._t0 is not None else t
        self.log.extend(TraceLine(t=round(t - base, 3), text=line) for line in lines)

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
            devices=[
                TraceDevice.model_validate(d, from_attributes=True)
                for d in self.devices
            ],
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
