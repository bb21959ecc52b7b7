"""How many channels each PCIe pool holds, and where vLLM's budget sees them (docs/memory-model.md §5).

With ``single_channel=False`` every entry into a pool's ``capture()`` mints a channel that lives until the
pool closes; vLLM enters one capture context per cudagraph-manager pass, not per capture size.

* V2 runner: profiling captures are checkpointed and rolled back; production passes are 1 (target),
  +1 drafter prefill when MTP k >= 1, +1 drafter decode when k > 1. The graph estimate G_e is the whole
  free-memory drop of the profiling capture, channels included, so production channels are
  ``graph-estimated`` (``unbudgeted`` when the estimate is switched off). The rollback returns the
  profiling pass's IPC slabs but not its torch blocks: ``rollback_channels`` drops the channels, and the
  caching allocator keeps their segments cached for the pass's stream, which nothing uses again. That
  ``profiling-residue`` group (``rolled_back``) holds torch entries only.
* Every capture pass runs on a fresh stream (vLLM's ``graph_capture``), and torch packs per stream, so
  each capture group's instances are a stream family of their own (``stream``); the eager channel is made
  on the default stream.
* V1 runner (r12 tree): the throwaway profiling capture is never rolled back: its channel leaks for the
  process lifetime inside the profiling window (``profiled``); the single production pass that follows the
  KV sizing is ``unbudgeted``.
* No CUDA graphs (``cudagraph.mode: NONE``): only the eager channel.
* ``single_channel=True``: one channel serves eager and every capture.

From vLLM PR 216 (the r17+ images: SparkInfer r17-r28 and every B12X release; ``semantic`` below) the
channels are named per pass and made once per name: ``vllm:eager:allreduce`` / ``vllm:eager:dcp``, then
``vllm:target:{profile,production}`` and the draft's passes. The V2 counts are unchanged: every
profile pass (target, and the draft's prefill/decode with MTP) is checkpointed and rolled back, leaving
cached torch blocks (one residue group, as before). The V1 runner rolls its profiling passes back too (nothing
leaks any more) and gives the drafter its own production channel (``vllm:draft:production``) when the
capture modes include PIECEWISE; V1's production channels are made after the KV cache is sized, so
they stay ``unbudgeted``. ``max_concurrent_channels=2``, which vLLM passes from r17, is a check that two
worker grids can be resident (SMs), not a cap on live channels.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from glmlaunch.ledger.model import Lifetime

if TYPE_CHECKING:
    from glmlaunch.ledger.context import Context


@dataclass(frozen=True, slots=True)
class ChannelGroup:
    role: str  # eager | profiling-residue | leaked-profiling | capture
    count: int
    lifetime: Lifetime
    why: str
    #: torch stream family of the instances: "" the default stream, else one fresh stream per instance
    stream: str = ""
    #: True: the channels were closed by a rollback; only the torch blocks they used stay (cached)
    rolled_back: bool = False


@dataclass(frozen=True, slots=True)
class ChannelPlan:
    groups: tuple[ChannelGroup, ...]
    rule: str

    @property
    def total(self) -> int:
        """Channels alive after the capture passes (a rolled-back group's channels are closed)."""
        return sum(g.count for g in self.groups if not g.rolled_back)


@lru_cache(maxsize=256)
def channel_plan(
    *,
    runner: str,
    mtp: int,
    graphs: bool,
    single_channel: bool,
    estimate_cudagraphs: bool,
    eager_lifetime: Lifetime,
    semantic: bool = False,
    piecewise: bool = True,
) -> ChannelPlan:
    eager = ChannelGroup("eager", 1, eager_lifetime, "the warm channel every pool creates for eager calls")
    if single_channel:
        return ChannelPlan((eager,), "single_channel=True: one channel for eager and all captures")
    if not graphs:
        return ChannelPlan((eager,), "cudagraph mode NONE: no capture passes")
    capture_lifetime: Lifetime = "graph-estimated" if estimate_cudagraphs else "unbudgeted"
    if semantic:
        return _semantic_plan(runner, mtp, piecewise, estimate_cudagraphs, eager, capture_lifetime)
    if runner == "v2":
        passes = 1 + (1 if mtp >= 1 else 0) + (1 if mtp > 1 else 0)
        names = (
            ["target"] + (["drafter prefill"] if mtp >= 1 else []) + (["drafter decode"] if mtp > 1 else [])
        )
        why = f"V2 production capture passes ({' + '.join(names)}); profiling captures are rolled back" + (
            "" if estimate_cudagraphs else "; graph estimate off, so no budget term covers them"
        )
        residue = ChannelGroup(
            "profiling-residue",
            1,
            "profiled",
            "V2 profiling capture: the rollback closes its channels (IPC slabs returned, measured -10 MiB on "
            "2x H200) but the torch blocks they used stay cached on the pass's stream, which nothing uses "
            "again",
            stream="profiling-residue",
            rolled_back=True,
        )
        return ChannelPlan(
            (eager, residue, ChannelGroup("capture", passes, capture_lifetime, why, stream="capture")),
            f"V2, MTP {mtp}: 1 eager + {passes} (+ the rolled-back profiling pass's cached torch blocks)",
        )
    leaked = ChannelGroup(
        "leaked-profiling",
        1,
        "profiled",
        "V1 profiling capture is never rolled back: its channel leaks for the process lifetime",
        stream="leaked-profiling",
    )
    production = ChannelGroup(
        "capture",
        1,
        "unbudgeted",
        "V1 production capture pass, made after the KV cache is sized",
        stream="capture",
    )
    return ChannelPlan((eager, leaked, production), "V1: 1 eager + 1 leaked profiling + 1 production")


def _semantic_plan(
    runner: str,
    mtp: int,
    piecewise: bool,
    estimate_cudagraphs: bool,
    eager: ChannelGroup,
    capture_lifetime: Lifetime,
) -> ChannelPlan:
    """vLLM PR 216 (r17+): one channel per named pass; profile passes rolled back on both runners."""
    if runner == "v2":
        ids = ["vllm:target:{}"]
        if mtp >= 1:
            ids.append("vllm:draft:prefill:{}")
        if mtp > 1:
            ids.append("vllm:draft:decode:{}")
        production_lifetime = capture_lifetime
        production_why = (
            "V2 production passes: " + ", ".join(i.format("production") for i in ids)
            + ("" if estimate_cudagraphs else "; graph estimate off, so no budget term covers them")
        )
    else:
        # V1 gives the drafter its own passes only when a PIECEWISE capture needs them
        # (_captures_independent_drafter_graphs); its production passes follow the KV sizing.
        ids = ["vllm:target:{}"] + (["vllm:draft:{}"] if mtp >= 1 and piecewise else [])
        production_lifetime = "unbudgeted"
        production_why = (
            "V1 production passes, made after the KV cache is sized: "
            + ", ".join(i.format("production") for i in ids)
        )
    passes = len(ids)
    # One cached segment for the whole profile phase, as measured for the r12 library: the qualified r28
    # 3.42 bpw shape (2,032 pinned blocks, served) leaves no room for one per profile pass
    # (docs/memory-model.md §10 says what is open there).
    residue = ChannelGroup(
        "profiling-residue",
        1,
        "profiled",
        f"{runner.upper()} profile passes ({', '.join(i.format('profile') for i in ids)}), checkpointed and "
        "rolled back: their channels close (IPC slabs returned) but the torch blocks they used stay cached "
        "on the profile phase's stream, which nothing uses again",
        stream="profiling-residue",
        rolled_back=True,
    )
    production = ChannelGroup("capture", passes, production_lifetime, production_why, stream="capture")
    return ChannelPlan(
        (eager, residue, production),
        f"{runner.upper()}, MTP {mtp}, named channels (vLLM PR 216): 1 eager + {passes} production "
        "(+ the rolled-back profile phase's cached torch blocks); max_concurrent_channels=2 checks SM "
        "residency, it does not cap live channels",
    )


#: the role (and stream family) of what the rolled-back V2 profiling pass leaves behind
ROLLED_BACK_ROLE = "profiling-residue"

#: channel roles whose instances are each made on a fresh stream of their own (one capture pass each)
CAPTURE_STREAM_ROLES: tuple[str, ...] = ("profiling-residue", "leaked-profiling", "capture")


def stream_family(entry_name: str) -> str:
    """The torch stream family of a ledger entry by its role suffix ("" for the default stream).

    The preflight's replay allocates each capture instance on a fresh stream of this family, as vLLM does.
    """
    role = entry_name.rsplit(".", 1)[-1]
    return role if role in CAPTURE_STREAM_ROLES else ""


def plan_for(ctx: Context, eager_lifetime: Lifetime) -> ChannelPlan:
    """The channel plan of one pool under the context's configuration (runner, MTP, graphs, channels)."""
    cfg = ctx.config
    return channel_plan(
        runner=cfg.runner,
        mtp=cfg.mtp,
        graphs=bool(ctx.capture_sizes),
        single_channel=bool(cfg.comm.single_channel),
        estimate_cudagraphs=cfg.memory.estimate_cudagraphs,
        eager_lifetime=eager_lifetime,
        semantic=ctx.k.semantic_channels,
        piecewise=cfg.cudagraph.mode in PIECEWISE_MODES,
    )


#: cudagraph modes whose capture descriptors include PIECEWISE runtime graphs (where V1 gives the MTP
#: drafter a pass of its own, r17+)
PIECEWISE_MODES = frozenset({"PIECEWISE", "FULL_AND_PIECEWISE"})
