"""How many channels each PCIe pool holds, and where vLLM's budget sees them (memory-model.md §5).

With ``single_channel=False`` every entry into a pool's ``capture()`` mints a channel that lives until the
pool closes; vLLM enters one capture context per cudagraph-manager pass, not per capture size.

* V2 runner: profiling captures are checkpointed and rolled back; production passes are 1 (target),
  +1 drafter prefill when MTP k >= 1, +1 drafter decode when k > 1. The graph estimate G_e is the whole
  free-memory drop of the profiling capture, channels included, so production channels are
  ``graph-estimated`` (``unbudgeted`` when the estimate is switched off).
* V1 runner (r12 tree): the throwaway profiling capture is never rolled back: its channel leaks for the
  process lifetime inside the profiling window (``profiled``); the single production pass that follows the
  KV sizing is ``unbudgeted``.
* No CUDA graphs (``cudagraph.mode: NONE``): only the eager channel.
* ``single_channel=True``: one channel serves eager and every capture.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from glmlaunch.ledger.model import Lifetime


@dataclass(frozen=True, slots=True)
class ChannelGroup:
    role: str  # eager | leaked-profiling | capture
    count: int
    lifetime: Lifetime
    why: str


@dataclass(frozen=True, slots=True)
class ChannelPlan:
    groups: tuple[ChannelGroup, ...]
    rule: str

    @property
    def total(self) -> int:
        return sum(g.count for g in self.groups)


@lru_cache(maxsize=256)
def channel_plan(
    *,
    runner: str,
    mtp: int,
    graphs: bool,
    single_channel: bool,
    estimate_cudagraphs: bool,
    eager_lifetime: Lifetime,
) -> ChannelPlan:
    eager = ChannelGroup("eager", 1, eager_lifetime, "the warm channel every pool creates for eager calls")
    if single_channel:
        return ChannelPlan((eager,), "single_channel=True: one channel for eager and all captures")
    if not graphs:
        return ChannelPlan((eager,), "cudagraph mode NONE: no capture passes")
    capture_lifetime: Lifetime = "graph-estimated" if estimate_cudagraphs else "unbudgeted"
    if runner == "v2":
        passes = 1 + (1 if mtp >= 1 else 0) + (1 if mtp > 1 else 0)
        names = (
            ["target"] + (["drafter prefill"] if mtp >= 1 else []) + (["drafter decode"] if mtp > 1 else [])
        )
        why = f"V2 production capture passes ({' + '.join(names)}); profiling captures are rolled back" + (
            "" if estimate_cudagraphs else "; graph estimate off, so no budget term covers them"
        )
        return ChannelPlan(
            (eager, ChannelGroup("capture", passes, capture_lifetime, why)),
            f"V2, MTP {mtp}: 1 eager + {passes}",
        )
    leaked = ChannelGroup(
        "leaked-profiling",
        1,
        "profiled",
        "V1 profiling capture is never rolled back: its channel leaks for the process lifetime",
    )
    production = ChannelGroup(
        "capture", 1, "unbudgeted", "V1 production capture pass, made after the KV cache is sized"
    )
    return ChannelPlan((eager, leaked, production), "V1: 1 eager + 1 leaked profiling + 1 production")
