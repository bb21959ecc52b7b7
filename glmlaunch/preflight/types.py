"""Typed messages between the preflight parent and its workers.

The parent writes one :class:`WorkerSpec` per rank as JSON; each worker writes its progress and final
:class:`RankResult` as JSON to the file the spec names (atomically, after every phase), so the parent can
follow a worker that later hangs or dies without a word. Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

DeviceMode = Literal["cpu", "cuda"]
BackendName = Literal["replay", "sparkinfer", "b12x"]
MemoryKind = Literal["ipc", "torch", "workspace", "transient"]
FaultAction = Literal["raise", "hang", "kill", "exit"]
Status = Literal["running", "ok", "failed"]

#: Worker phases in order; "spawn" is observed by the parent (process start to the first report).
PHASES: tuple[str, ...] = (
    "spawn",
    "imports",
    "context",
    "process_group",
    "baseline",
    "build",
    "allocations",
    "teardown",
)

#: Default time limit per phase, seconds. A cold nvcc build of the r12 pools takes ~3 minutes.
DEFAULT_PHASE_LIMITS: dict[str, float] = {
    "spawn": 60.0,
    "imports": 120.0,
    "context": 60.0,
    "process_group": 120.0,
    "baseline": 30.0,
    "build": 900.0,
    "allocations": 300.0,
    "teardown": 60.0,
}


@dataclass(frozen=True)
class PlannedAllocation:
    """One ledger entry as the workers need it (a copy, so workers never build the ledger)."""

    name: str
    kind: MemoryKind
    lifetime: str
    requested_bytes: int
    count: int
    predicted_device_bytes: int
    group: Literal["tp", "dcp"] = "tp"
    #: torch stream family: "" the default stream, else instance i on a fresh stream of its own (one capture
    #: pass each, as vLLM's graph_capture does)
    stream: str = ""


@dataclass(frozen=True)
class FaultSpec:
    """Fault injection for tests and drills: ``action`` at the start of ``phase`` on ``rank``."""

    rank: int
    phase: str
    action: FaultAction

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        """Read ``RANK:PHASE:ACTION`` (e.g. ``1:allocations:hang``)."""
        parts = text.split(":")
        if len(parts) != 3:
            raise ValueError(f"fault {text!r}: write RANK:PHASE:ACTION, e.g. 1:allocations:kill")
        rank_s, phase, action = parts
        if not rank_s.isdigit():
            raise ValueError(f"fault {text!r}: rank must be a number")
        if phase not in PHASES[1:]:
            raise ValueError(f"fault {text!r}: phase must be one of {', '.join(PHASES[1:])}")
        if action not in ("raise", "hang", "kill", "exit"):
            raise ValueError(f"fault {text!r}: action must be raise, hang, kill or exit")
        return cls(rank=int(rank_s), phase=phase, action=action)  # type: ignore[arg-type]


@dataclass(frozen=True)
class WorkerSpec:
    rank: int
    world_size: int
    local_device: int
    device_mode: DeviceMode
    backend: BackendName
    init_file: str
    result_path: str
    config: dict[str, Any]
    allocations: tuple[PlannedAllocation, ...]
    env: dict[str, str]
    free_before_bytes: int | None = None
    fault: FaultSpec | None = None
    parent_pid: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        raw = json.loads(text)
        raw["allocations"] = tuple(PlannedAllocation(**a) for a in raw["allocations"])
        raw["fault"] = FaultSpec(**raw["fault"]) if raw.get("fault") else None
        return cls(**raw)


@dataclass
class StepRecord:
    """What one allocation step cost on this rank, measured right after it (device synchronized)."""

    name: str
    kind: str
    lifetime: str
    covers: list[str]
    requested_bytes: int
    device_bytes: int | None  # drop of cudaMemGetInfo free memory; None in the CPU device mode
    torch_reserved_bytes: int | None  # growth of torch.cuda.memory_reserved
    note: str = ""


@dataclass
class RankResult:
    """Progress and outcome of one rank; rewritten after every phase."""

    rank: int
    pid: int
    status: Status = "running"
    phase: str = "spawn"
    phase_started: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    error_type: str | None = None
    error_message: str | None = None
    error_traceback: str | None = None
    error_time: float | None = None
    device: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, int | None] = field(default_factory=dict)
    steps: list[StepRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    build: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RankResult:
        raw = dict(raw)
        raw["steps"] = [StepRecord(**s) for s in raw.get("steps", [])]
        return cls(**raw)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON so a reader never sees half a file (the parent polls while workers write)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(obj, fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_rank_result(path: Path) -> RankResult | None:
    try:
        return RankResult.from_dict(json.loads(path.read_text()))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
