"""GPU memory before and after a run: is every GPU back at its baseline, and who still holds memory?

``serve`` compares twice: after the preflight (its workers must be gone before vLLM starts) and, when it
supervises vLLM, after vLLM and everything it left behind have exited. A snapshot is the free memory and
the holder pids per GPU, as NVML reports them (:func:`read_gpu_memory` probes live NVML through
:mod:`glmlaunch.hardware.probe`; a saved inventory cannot show what a run left).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from glmlaunch.hardware.inventory import Inventory


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's free memory and the processes holding it, as NVML saw it."""

    index: int
    free_bytes: int | None
    pids: tuple[int, ...]

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "free_bytes": self.free_bytes, "pids": list(self.pids)}


def baseline_problems(
    before: Sequence[GpuMemory],
    now: Sequence[GpuMemory],
    worker_pids: Sequence[int],
    alive_workers: Sequence[int],
    slack_bytes: int,
    *,
    since: str = "the preflight",
    who: str = "preflight worker",
) -> list[str]:
    """What keeps the GPUs from being clean: live workers, workers holding memory, memory not back.

    ``worker_pids`` are the processes of the run that just ended (``who`` names them); ``since`` names the
    moment ``before`` was taken.
    """
    problems = [f"{who} process group {pid} is still alive" for pid in alive_workers]
    current = {g.index: g for g in now}
    for b in before:
        a = current.get(b.index)
        if a is None:
            problems.append(f"GPU {b.index} is no longer visible")
            continue
        held = sorted(set(worker_pids) & set(a.pids))
        if held:
            problems.append(f"GPU {b.index}: {who} pid(s) {held} still hold memory")
        lost_bytes = (b.free_bytes or 0) - (a.free_bytes or 0)
        if b.free_bytes is not None and a.free_bytes is not None and lost_bytes > slack_bytes:
            lost = lost_bytes / 2**20
            others = sorted(set(a.pids) - set(b.pids) - set(worker_pids))
            held_by = f" (new holder pid(s) {others})" if others else ""
            problems.append(f"GPU {b.index}: {lost:.0f} MiB less free than before {since}{held_by}")
    return problems


def gpu_memory_of(inv: Inventory) -> list[GpuMemory]:
    return [GpuMemory(g.index, g.memory_free, tuple(p.pid for p in g.processes)) for g in inv.gpus]


def read_gpu_memory(environ: Mapping[str, str]) -> list[GpuMemory]:
    """Live NVML, always (raises NoGpuError without NVML or a visible GPU)."""
    from glmlaunch.hardware.probe import probe

    return gpu_memory_of(probe(environ=environ))
