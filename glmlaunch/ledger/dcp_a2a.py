"""DCP all-to-all pool (``DcpAllToAllPool``): one IPC staging slab per channel.

Slab = ``A256(S6) + 2 * slot``, ``slot = A256(A256(2*B*H*max(D,Dq)) + A256(4*B*H))`` (bf16 outputs plus fp32
LSE), B = min(max_num_batched_tokens, VLLM_DCP_A2A_MAX_TOKENS if > 0), H = (heads / TP) * DCP,
D = kv_lora_rank (output), Dq = kv_lora_rank + qk_rope (query).
"""

from __future__ import annotations

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.channels import plan_for
from glmlaunch.ledger.constants import StackConstants
from glmlaunch.ledger.context import Context, Draft, a256, fmt_int
from glmlaunch.ledger.model import Origin
from glmlaunch.ledger.oneshot import resident


def max_batch_size(cfg: DeploymentConfig) -> int:
    cap = cfg.comm.dcp_a2a_max_tokens
    t = cfg.scheduler.max_num_batched_tokens
    return min(t, cap) if cap > 0 else t


def slot_bytes(*, batch: int, heads: int, head_dim: int, query_head_dim: int) -> int:
    return a256(a256(2 * batch * heads * max(head_dim, query_head_dim)) + a256(4 * batch * heads))


def slab_bytes(*, signal_bytes: int, batch: int, heads: int, head_dim: int, query_head_dim: int) -> int:
    return a256(signal_bytes) + 2 * slot_bytes(
        batch=batch, heads=heads, head_dim=head_dim, query_head_dim=query_head_dim
    )


def built(cfg: DeploymentConfig, k: StackConstants) -> bool:
    """DCP > 1 with the A2A pools on, a supported world size, and (r17+) the SM residency check passed."""
    return (
        cfg.parallel.dcp > 1
        and cfg.comm.dcp_a2a
        and cfg.parallel.dcp in k.dcp_a2a_world_sizes
        and resident(k.dcp_a2a_required_sms, k.max_concurrent_channels, cfg.hardware.num_sms)
    )


def entries(ctx: Context) -> list[Draft]:
    cfg, k = ctx.config, ctx.k
    if not built(cfg, k):
        return []
    w = cfg.parallel.dcp
    g = cfg.model.geometry
    b = max_batch_size(cfg)
    h = cfg.dcp_total_heads
    d, dq = g.kv_lora_rank, g.query_head_dim
    if ctx.lib is not None:
        slab = ctx.lib.dcp_a2a_slab_bytes(
            world_size=w, max_batch_size=b, total_heads=h, head_dim=d, query_head_dim=dq
        )
        origin: Origin = "library"
    else:
        slab = slab_bytes(
            signal_bytes=k.dcp_a2a_signal_bytes, batch=b, heads=h, head_dim=d, query_head_dim=dq
        )
        origin = "exact"
    slot = slot_bytes(batch=b, heads=h, head_dim=d, query_head_dim=dq)
    formula = (
        f"A256(S6) + 2 * A256(A256(2*B*H*max(D,Dq)) + A256(4*B*H)) = A256({fmt_int(k.dcp_a2a_signal_bytes)}) "
        f"+ 2 * {fmt_int(slot)} = {fmt_int(slab)}  "
        f"[B = {b}, H = {g.num_attention_heads}/{cfg.parallel.tp}*{w} "
        f"= {h}, D = {d}, Dq = {dq}; S6 = {k.dcp_a2a_signal_origin}]"
    )
    plan = plan_for(ctx, "profiled")
    return [
        Draft(
            name=f"dcp_a2a.slab.{grp.role}",
            subsystem="dcp_a2a",
            requested_bytes=slab,
            count=grp.count,
            kind="ipc",
            lifetime=grp.lifetime,
            condition=f"DCP {w} with the b12x A2A backend; {grp.why} ({plan.rule})",
            reader="DCP attention all-gather and LSE reduce-scatter",
            formula=formula,
            origin=origin,
            alloc="ipc",
        )
        for grp in plan.groups
        # a rolled-back pass's slabs are returned (measured: the V2 profiling rollback gives back -10 MiB)
        if not grp.rolled_back
    ]
