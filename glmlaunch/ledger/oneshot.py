"""One-shot all-reduce pool (``OneshotAllReducePool``): a channel slab and an 8 MiB ``rank_data`` per channel.

Slab (docs/memory-model.md §2 #1): ``A256(S1) + A256(E') + E'`` with ``E' = E * shards``; vLLM passes
``E = max(VLLM_PCIE_ONESHOT_ALLREDUCE_MAX_SIZE, VLLM_PCIE_ONESHOT_FUSED_ADD_RMS_NORM_MAX_SIZE, 16)``.
Up to B12X r29-r31 the eager slot holds one shard per source rank only in push mode; from r32 also under
the topology transports (TP2/TP4 remote push on opt-in, TP8 owner reduce by default:
``_uses_sharded_eager_storage``, pcie_oneshot.py:135-148 at cd3ce190); b12x 1.5 reserves them by default
on its own transports (TP2 plain peer-push adds 2 incoming shards, TP8 owner-reduce uses W shards).

Each capture pass's ``rank_data`` is made on the pass's own stream, so it opens a 20 MiB segment of its own
(measured on 2x H200 with the real r12 library: 22 MiB of torch reserve per pass with the handle exchange,
bench/preflight/h200x2-gate-sparkinfer-warm.json); the rolled-back V2 profiling pass leaves its segment
cached (``oneshot.rank_data_cached.profiling-residue``), its slab returned.
"""

from __future__ import annotations

from glmlaunch.ledger.channels import plan_for
from glmlaunch.ledger.constants import StackConstants
from glmlaunch.ledger.context import Context, Draft, align, fmt_int
from glmlaunch.ledger.model import Origin


def eager_shards(
    k: StackConstants,
    world_size: int,
    push: bool,
    *,
    tp2_remote_push: bool | None = None,
    tp4_remote_push: bool | None = None,
    tp8_owner_reduce: bool | None = None,
) -> int:
    """Shards of the one-shot eager slot; a topology flag left None takes the library's default."""
    if k.oneshot_shard_rule == "push":
        return world_size if push else 1
    if k.oneshot_shard_rule == "push+topology":
        # r32+ defaults (pcie_oneshot.py:117-132 at cd3ce190): TP2/TP4 remote push off, TP8 owner reduce on
        sharded = push or (
            (world_size == 2 and bool(tp2_remote_push))
            or (world_size == 4 and bool(tp4_remote_push))
            or (world_size == 8 and (tp8_owner_reduce is None or tp8_owner_reduce))
        )
        return world_size if sharded else 1
    # b12x 1.5 defaults: TP2 plain remote push on, TP8 owner reduce on, TP2/TP4 fused remote push off.
    base = world_size if (push or world_size == 8) else 1
    return base + (2 if world_size == 2 else 0)


def config_shards(ctx: Context) -> int:
    """:func:`eager_shards` under the context's configuration and generation."""
    c = ctx.config.comm
    return eager_shards(
        ctx.k,
        ctx.config.parallel.tp,
        bool(c.oneshot_push),
        tp2_remote_push=c.oneshot_tp2_remote_push,
        tp4_remote_push=c.oneshot_tp4_remote_push,
        tp8_owner_reduce=c.oneshot_tp8_owner_reduce,
    )


def resident(required_sms: int, max_concurrent_channels: int, num_sms: int) -> bool:
    """Whether a pool's residency check passes: ``required x max_concurrent_channels`` visible SMs
    (``_require_full_grid_residency``, r17+); a generation without the check has required_sms 0."""
    return num_sms >= required_sms * max_concurrent_channels


def built(ctx: Context) -> bool:
    """Whether vLLM builds the one-shot pool (and with it the DMA all-reduce): the PCIe all-reduce on, a
    supported world size, and (r17+) the residency check passed; otherwise vLLM falls back to PyNCCL."""
    cfg, k = ctx.config, ctx.k
    w = cfg.parallel.tp
    return (
        cfg.comm.pcie_allreduce
        and w >= 2
        and w in k.oneshot_world_sizes
        and resident(k.oneshot_required_sms, k.max_concurrent_channels, cfg.hardware.num_sms)
    )


def slab_bytes(*, signal_bytes: int, eager_bytes: int, shards: int, ipc_align: int = 256) -> int:
    e = eager_bytes * shards
    return align(signal_bytes, ipc_align) + align(e, ipc_align) + e


def entries(ctx: Context) -> list[Draft]:
    cfg, k = ctx.config, ctx.k
    w = cfg.parallel.tp
    if not built(ctx):
        return []
    e = cfg.comm.oneshot_eager_bytes
    push = bool(cfg.comm.oneshot_push)
    shards = config_shards(ctx)
    if ctx.lib is not None:
        slab = ctx.lib.oneshot_slab_bytes(eager_bytes=e, world_size=w, push=push, shards=shards)
        origin: Origin = "library"
    else:
        slab = slab_bytes(
            signal_bytes=k.oneshot_signal_bytes, eager_bytes=e, shards=shards, ipc_align=k.ipc_align
        )
        origin = "exact"
    s1 = k.oneshot_signal_bytes
    ep = e * shards
    formula = (
        f"A256(S1) + A256(E') + E' = A256({fmt_int(s1)}) + A256({fmt_int(ep)}) + {fmt_int(ep)} "
        f"= {fmt_int(slab)}"
        f"  [E = max(allreduce {fmt_int(cfg.comm.oneshot_allreduce_max_size)}, "
        f"fused {fmt_int(cfg.comm.oneshot_fused_max_size)}, 16) = {fmt_int(e)}; E' = E * {shards} shard(s)]"
    )
    plan = plan_for(ctx, "pre-snapshot")
    rd = k.oneshot_rank_data_bytes
    out: list[Draft] = []
    for g in plan.groups:
        cond = f"PCIe all-reduce on, TP {w}; {g.why} ({plan.rule})"
        if g.rolled_back:
            out.append(
                Draft(
                    # not ``rank_data.``: no live channel holds it (the §5 rank_data figures count channels)
                    name=f"oneshot.rank_data_cached.{g.role}",
                    subsystem="oneshot",
                    requested_bytes=rd,
                    count=g.count,
                    kind="torch",
                    lifetime=g.lifetime,
                    condition=cond,
                    reader="nothing: the channel was closed by rollback_channels; the segment stays cached",
                    formula=(
                        f"rank_data_bytes = {fmt_int(rd)}, freed by the rollback into a segment cached for "
                        "the profiling pass's stream (torch packs per stream: never reused)"
                    ),
                    origin="library" if ctx.lib is not None else "exact",
                    alloc="torch",
                    note=(
                        "measured on 2x H200, real r12 library: the profiling pass costs 32 MiB and its "
                        "rollback returns only 10 MiB (the IPC slabs); 22 MiB of torch segments stay. "
                        "Budget term P: vLLM sees it as torch-reserved memory grown inside the profile "
                        "window (never as non-torch N); it lowers KV, not the margin"
                    ),
                    stream=g.stream,
                )
            )
            continue
        out.append(
            Draft(
                name=f"oneshot.slab.{g.role}",
                subsystem="oneshot",
                requested_bytes=slab,
                count=g.count,
                kind="ipc",
                lifetime=g.lifetime,
                condition=cond,
                reader="one-shot all-reduce and fused add+RMSNorm kernels (payloads <= E)",
                formula=formula,
                origin=origin,
                alloc="ipc",
            )
        )
        out.append(
            Draft(
                name=f"oneshot.rank_data.{g.role}",
                subsystem="oneshot",
                requested_bytes=rd,
                count=g.count,
                kind="torch",
                lifetime=g.lifetime,
                condition=cond,
                reader=f"register_pcie_buffers: {k.oneshot_rank_data_used_bytes} B (2 RankData records) used",
                formula=(
                    f"rank_data_bytes = DEFAULT_RANK_DATA_BYTES = 8 * 1024 * 1024 = {fmt_int(rd)}"
                    + (f"  [one fresh stream per capture pass: a 20 MiB segment each x {g.count}]"
                       if g.stream else "")
                ),
                origin="library" if ctx.lib is not None else "exact",
                alloc="torch",
                note=(
                    "each pass's rank_data is made on the pass's own stream (vLLM's graph_capture) and torch "
                    "packs per stream, so it opens its own 20 MiB segment: measured 22 MiB of torch reserve "
                    "per pass on 2x H200 with the real r12 library (bench/preflight/"
                    "h200x2-gate-sparkinfer-warm.json)"
                    if g.stream
                    else ""
                ),
                stream=g.stream,
            )
        )
    return out
