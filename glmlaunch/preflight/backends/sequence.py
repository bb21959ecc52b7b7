"""The order in which vLLM makes the comm pools' channels, shared by the library backends.

Pure functions of the configuration (docs/memory-model.md §5): which capture passes a runner makes, which of
them are checkpointed and rolled back, and which ledger entries a step of the sequence realises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.channels import PIECEWISE_MODES
from glmlaunch.ledger.constants import for_stack
from glmlaunch.preflight.types import PlannedAllocation


@dataclass(frozen=True)
class CapturePass:
    name: str
    rollback: bool  # profiling captures that are checkpointed and rolled back
    #: the ledger's channel role of what this pass leaves behind (for a rolled-back pass: the torch blocks
    #: its channels used, cached on its stream: ``profiling-residue``)
    role: str
    #: the channel id vLLM enters the pools' capture() with (PR 216, r17+); None before it
    channel_id: str | None = None


def capture_passes(config: DeploymentConfig) -> tuple[CapturePass, ...]:
    """One pool capture context per cudagraph-manager pass, in vLLM's order, for the profile's generation
    (the same passes as the ledger's channel plan, glmlaunch/ledger/channels.py)."""
    if config.cudagraph.mode == "NONE":
        return ()
    if for_stack(config.stack).semantic_channels:
        return _named_passes(config)
    if config.runner == "v1":
        # The r12-r16 V1 runner never rolls its profiling capture back: the channel leaks.
        return (CapturePass("profiling", False, "leaked-profiling"), CapturePass("target", False, "capture"))
    passes = [CapturePass("profiling", True, "profiling-residue"), CapturePass("target", False, "capture")]
    if config.mtp >= 1:
        passes.append(CapturePass("drafter-prefill", False, "capture"))
    if config.mtp > 1:
        passes.append(CapturePass("drafter-decode", False, "capture"))
    return tuple(passes)


def _named_passes(config: DeploymentConfig) -> tuple[CapturePass, ...]:
    """vLLM PR 216 (r17+): the profile phase is checkpointed and rolled back on both runners, then the
    production passes; one named channel per pass (vllm/v1/worker/gpu/model_runner.py and
    gpu_model_runner.py of the release integration patches)."""
    if config.runner == "v2":
        owners = [("target", "vllm:target")]
        if config.mtp >= 1:
            owners.append(("draft-prefill", "vllm:draft:prefill"))
        if config.mtp > 1:
            owners.append(("draft-decode", "vllm:draft:decode"))
    else:
        owners = [("target", "vllm:target")]
        if config.mtp >= 1 and config.cudagraph.mode in PIECEWISE_MODES:
            owners.append(("draft", "vllm:draft"))
    # The profile phase as one pass on one stream (the ledger's one residue group): the target's profile
    # channel, checkpointed and rolled back; then one production pass per graph owner.
    profile = [CapturePass("target-profile", True, "profiling-residue", "vllm:target:profile")]
    production = [CapturePass(n, False, "capture", f"{cid}:production") for n, cid in owners]
    return (*profile, *production)


def dma_max_bytes(config: DeploymentConfig) -> int:
    """vLLM's DMA ``max_bytes``: batched tokens x hidden x bf16 itemsize (every generation's vLLM)."""
    return config.scheduler.max_num_batched_tokens * config.model.geometry.hidden_size * 2


def dcp_batch(config: DeploymentConfig) -> int:
    cap = config.comm.dcp_a2a_max_tokens
    batched = config.scheduler.max_num_batched_tokens
    return min(batched, cap) if cap > 0 else batched


def covers(names: Iterable[str], subsystem: str, role: str | None = None, *parts: str) -> list[str]:
    """Ledger entry names of ``subsystem`` (optionally of one channel ``role`` and name ``parts``)."""
    out = []
    for name in names:
        pieces = name.split(".")
        if pieces[0] != subsystem:
            continue
        if role is not None and pieces[-1] != role:
            continue
        if parts and not any(p in pieces for p in parts):
            continue
        out.append(name)
    return out


def pass_covers(names: Iterable[str], role: str) -> list[str]:
    """Ledger entries one capture pass realises: its channels (one-shot, DCP A2A) and its stream's
    handle-exchange segment."""
    names = list(names)
    return [n for sub in ("oneshot", "dcp_a2a", "capture_stream") for n in covers(names, sub, role)]


def workspace_arenas(entries: Iterable[PlannedAllocation]) -> list[tuple[str, list[str], int, str]]:
    """vLLM's workspace is one grow-only arena per lane: its size is the largest plan, not the sum.

    Returns ``(arena name, ledger entries it holds, bytes, lifetime)`` per lane, in first-seen order.
    """
    lanes: dict[str, list[PlannedAllocation]] = {}
    for e in entries:
        if e.kind != "workspace":
            continue
        lane = e.name.split(".")[-1] if e.name.split(".")[-1].startswith("lane") else "lane0"
        lanes.setdefault(lane, []).append(e)
    out = []
    for lane, members in lanes.items():
        biggest = max(members, key=lambda m: m.requested_bytes)
        names = [m.name for m in members]
        out.append((f"workspace.{lane}", names, biggest.requested_bytes, biggest.lifetime))
    return out


def requested_bytes(entries: Iterable[PlannedAllocation], names: list[str]) -> int:
    return sum(a.requested_bytes for a in entries if a.name in names)


def allocate_arenas(rt: Any, note: str = "") -> list[Any]:
    """One step per workspace lane (its largest plan); returns the tensors, which the caller keeps."""
    return [
        rt.step(arena, kind="workspace", lifetime=lifetime, covers=names, requested=size,
                fn=partial(rt.torch.empty, size, dtype=rt.torch.uint8, device=rt.device), note=note)
        for arena, names, size, lifetime in workspace_arenas(rt.spec.allocations)
    ]


def record_capture_pass(
    rt: Any, names: Iterable[str], cap: CapturePass, pools: list[Any], enter_and_leave: Callable[[], None]
) -> None:
    """The step of one capture pass (and of its rollback), measured against the entries it realises.

    ``enter_and_leave`` enters every pool's capture context on the pass's own stream and leaves it, as
    vLLM's ``graph_capture`` does; the checkpoints are taken before it runs.
    """
    checkpoints = [p.checkpoint_channels() for p in pools] if cap.rollback else []
    # A rolled-back pass and its rollback together realise what the pass leaves (its cached torch
    # blocks): the report sums the two steps against the same entries.
    covered = pass_covers(names, cap.role)
    rt.step(
        f"capture.{cap.name}",
        kind="ipc+torch",
        lifetime="profiled" if cap.rollback else "graph-estimated",
        covers=covered,
        requested=requested_bytes(rt.spec.allocations, covered),
        fn=enter_and_leave,
        note=(f"channel {cap.channel_id}; " if cap.channel_id else "")
        + ("checkpointed" if cap.rollback else ("leaks (V1)" if cap.role == "leaked-profiling" else "")),
    )
    if cap.rollback:
        rt.step(
            f"capture.{cap.name}.rollback",
            kind="ipc+torch",
            lifetime="profiled",
            covers=covered,
            requested=0,
            fn=lambda: [p.rollback_channels(c) for p, c in zip(pools, checkpoints, strict=True)],
            note="rollback_channels returns the pass's IPC slabs; its torch blocks stay cached",
        )
