"""One sample of the whole deployment: every rank's reading, vLLM's facts and what happened meanwhile.

The live view, the ``--json`` lines (``docs/schemas/watch.schema.json``: one object per line,
``schema_version`` first) and the Prometheus endpoint all render the same :class:`Snapshot`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from glmlaunch.watch.states import Reading
from glmlaunch.watch.vllm import VllmFacts

SCHEMA_VERSION = 1
EventKind = Literal["ready", "baseline", "state", "oom", "gone", "note"]


@dataclass(frozen=True)
class Event:
    """Something that happened at this sample; ``state`` events are the warnings said once per change."""

    kind: EventKind
    rank: int | None
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "rank": self.rank, "message": self.message, **self.data}


def reading_json(r: Reading) -> dict[str, Any]:
    d = r.rank_gpu.device
    largest = r.largest_pending
    return {
        "rank": r.rank,
        "gpu": d.nvml_index,
        "pci_index": d.index,
        "uuid": d.uuid,
        "pci_bus_id": d.pci_bus_id,
        "name": d.name,
        "state": r.state,
        "conditions": list(r.conditions),
        "why": r.why(),
        "used_bytes": r.used_bytes,
        "free_bytes": r.free_bytes,
        "total_bytes": d.usable_bytes,
        "resident_bytes": r.resident_bytes,
        "planned_resident_bytes": r.expect.planned_resident_bytes,
        "baseline_resident_bytes": r.baseline_resident_bytes,
        "margin_bytes": r.expect.margin_bytes,
        "min_margin_bytes": r.expect.min_margin_bytes,
        "realized_demand_bytes": r.realized_bytes,
        "pending_demand_bytes": r.pending.demand_bytes if r.pending is not None else None,
        "largest_pending": largest.to_json() if largest is not None else None,
        "fired": list(r.pending.fired) if r.pending is not None else [],
        "unexplained_bytes": r.unexplained_bytes,
        "foreign": [{"pid": h.pid, "used_bytes": h.used_bytes} for h in r.foreign],
        "foreign_bytes": r.foreign_bytes,
        "processes_visible": r.processes_visible,
        "drift_bytes_per_s": None if r.drift_bytes_per_s is None else round(r.drift_bytes_per_s, 1),
        "eta_critical_s": None if r.eta_critical_s is None else round(r.eta_critical_s, 1),
    }


@dataclass(frozen=True)
class Snapshot:
    seq: int  # samples taken so far, this one included
    t: float  # seconds since the watch started, on the source's clock
    wall: float  # time.time() when it was taken
    profile: str
    source: str  # "nvml" or "replay"
    host: str
    interval_s: float
    ready: int | None  # ready signals seen (None: no log or endpoint to say)
    readings: tuple[Reading, ...]
    vllm: VllmFacts | None
    events: tuple[Event, ...]
    ooms: dict[int, int]  # OOMs seen per rank so far

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "seq": self.seq,
            "t_s": round(self.t, 3),
            "time": datetime.fromtimestamp(self.wall, UTC).isoformat(timespec="milliseconds"),
            "profile": self.profile,
            "source": self.source,
            "ready": None if self.ready is None else self.ready > 0,
            "ranks": [reading_json(r) for r in self.readings],
            "vllm": self.vllm.to_json() if self.vllm is not None else None,
            "events": [e.to_json() for e in self.events],
        }
