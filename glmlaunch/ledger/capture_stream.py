"""The small-pool segment every capture pass opens on its own stream (the channels' IPC-handle exchange).

vLLM's ``graph_capture`` makes a fresh stream current before it enters the pools' capture contexts, and a
new channel exchanges its IPC handles with ``broadcast_object_list`` on device tensors of the current
stream (an int64 size tensor and the pickled handle, one 512 B block each, freed after each broadcast).
torch caches blocks per stream, so on the pass's fresh stream the first of them opens a 2 MiB small-pool
segment that stays cached; the second pool's exchange in the same pass reuses it. The eager channels
exchange on the default stream, whose small pool is already open (measured: the eager one-shot channel
costs its slab page and the ``rank_data`` segment only).

Measured with the real r12 library on 2x H200 (bench/preflight/h200x2-gate-sparkinfer-warm.json): each
capture pass grows torch's reserve by 22 MiB = this 2 MiB segment + the 20 MiB ``rank_data`` segment.
"""

from __future__ import annotations

from glmlaunch.ledger import dcp_a2a, oneshot
from glmlaunch.ledger.channels import plan_for
from glmlaunch.ledger.context import Context, Draft, fmt_int
from glmlaunch.ledger.footprint import TORCH_BLOCK

#: live at once during one broadcast: the int64 object-size tensor and the pickled handle payload
EXCHANGE_BLOCKS = 2


def entries(ctx: Context) -> list[Draft]:
    cfg, k = ctx.config, ctx.k
    pools = []
    if oneshot.built(ctx):
        pools.append("one-shot")
    if dcp_a2a.built(cfg, k):
        pools.append("DCP A2A")
    if not pools:
        return []
    plan = plan_for(ctx, "profiled")
    requested = EXCHANGE_BLOCKS * TORCH_BLOCK
    return [
        Draft(
            name=f"capture_stream.exchange.{g.role}",
            subsystem="capture_stream",
            requested_bytes=requested,
            count=g.count,
            kind="torch",
            lifetime=g.lifetime,
            condition=f"{' and '.join(pools)} channels minted per capture pass; {g.why} ({plan.rule})",
            reader=f"broadcast_object_list of the {' and '.join(pools)} channel IPC handles",
            formula=(
                f"{EXCHANGE_BLOCKS} x {TORCH_BLOCK} B blocks (int64 size tensor + pickled handle) "
                f"= {fmt_int(requested)} on the pass's fresh stream: its first small-pool block opens a "
                f"2 MiB segment  [x {g.count} pass(es), one stream each]"
            ),
            origin="estimate",
            alloc="torch",
            note=(
                "torch caches blocks per stream, so each capture pass opens a small-pool segment of its own; "
                "measured on 2x H200 with the real r12 library: 22 MiB of torch reserve per pass = this "
                "2 MiB + the 20 MiB rank_data segment (bench/preflight/h200x2-gate-sparkinfer-warm.json)"
            ),
            stream=g.stream,
        )
        for g in plan.groups
        if g.stream
    ]
