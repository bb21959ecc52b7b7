"""DCP top-k owner exchange (``pcie_dcp_topk``): one IPC slab when query split or owner merge is on.

Slab = ``A256(signal) + 2 * A256(8 * R * K)`` (fp32 values + int32 indices per row and top-k slot,
double-buffered). R is the exchange's row capacity; vLLM sizes it from the DCP decode row cap, so the
ledger takes the A2A ``max_batch_size`` rounded up to a multiple of W (an estimate until a boot log
shows the pool's arguments).
"""

from __future__ import annotations

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.context import Context, Draft, a256, align, fmt_int
from glmlaunch.ledger.dcp_a2a import max_batch_size


def slab_bytes(*, signal_bytes: int, rows: int, topk: int) -> int:
    return a256(signal_bytes) + 2 * a256(8 * rows * topk)


def rows(cfg: DeploymentConfig) -> int:
    return align(max_batch_size(cfg), cfg.parallel.dcp)


def enabled(cfg: DeploymentConfig) -> bool:
    p = cfg.dcp_policy
    return cfg.parallel.dcp > 1 and (p.query_split is True or p.topk_owner_merge is True)


def undecided(cfg: DeploymentConfig) -> bool:
    p = cfg.dcp_policy
    return cfg.parallel.dcp > 1 and not enabled(cfg) and (p.query_split is None or p.topk_owner_merge is None)


def _slab(ctx: Context) -> tuple[int, int, int, str]:
    """Rows R, top-k K, the slab's bytes and its formula with the values (the library's when imported)."""
    cfg, k = ctx.config, ctx.k
    r = rows(cfg)
    kk = cfg.model.geometry.index_topk
    if ctx.lib is not None:
        slab = ctx.lib.dcp_topk_slab_bytes(world_size=cfg.parallel.dcp, max_rows=r, topk=kk)
    else:
        slab = slab_bytes(signal_bytes=k.dcp_topk_signal_bytes, rows=r, topk=kk)
    formula = (
        f"A256(signal) + 2 * A256(8 * R * K) = A256({fmt_int(k.dcp_topk_signal_bytes)}) + 2 * "
        f"A256(8 * {r} * {kk}) = {fmt_int(slab)}  "
        f"[R = A(B, W) = A({max_batch_size(cfg)}, {cfg.parallel.dcp})]"
    )
    return r, kk, slab, formula


def _draft(ctx: Context, *, condition: str, reader: str, note: str) -> Draft:
    _, _, slab, formula = _slab(ctx)
    return Draft(
        name="dcp_topk.slab",
        subsystem="topk_exchange",
        requested_bytes=slab,
        count=1,
        kind="ipc",
        lifetime="profiled",
        condition=condition,
        reader=reader,
        formula=formula,
        origin="estimate",
        alloc="ipc",
        note=note,
    )


def entries(ctx: Context) -> list[Draft]:
    cfg = ctx.config
    if not enabled(cfg) or cfg.parallel.dcp not in ctx.k.dcp_topk_world_sizes:
        return []
    on = [
        n
        for n, v in (
            ("query split", cfg.dcp_policy.query_split),
            ("owner merge", cfg.dcp_policy.topk_owner_merge),
        )
        if v
    ]
    return [
        _draft(
            ctx,
            condition=f"DCP {cfg.parallel.dcp} with {' and '.join(on)} on",
            reader="DCP indexer top-k owner merge",
            note="R assumed equal to the DCP A2A row cap",
        )
    ]


def latent(ctx: Context) -> list[Draft]:
    """The slab while ``query_split`` / ``topk_owner_merge`` are left unset: listed, not charged.

    Unset, glmlaunch exports neither ``VLLM_DCP_QUERY_SPLIT`` nor ``VLLM_DCP_TOPK_OWNER_MERGE`` and vLLM
    reads its own default for both, ``0`` (the composed trees declare them ``bool(int(getenv(..., "0")))``):
    nothing allocates the slab, so charging it would be wrong and a note on every plan would be noise. What
    can still turn it on is outside the configuration: the caller's environment carrying either variable
    (the old launchers' ``auto`` resolved both to 1 at DCP > 1). That is a latent hazard, with its size.
    """
    cfg = ctx.config
    if not undecided(cfg) or cfg.parallel.dcp not in ctx.k.dcp_topk_world_sizes:
        return []
    return [
        _draft(
            ctx,
            condition=(
                f"DCP {cfg.parallel.dcp}: only if dcp_policy.query_split or topk_owner_merge is set to true "
                "(unset: vLLM's default, off)"
            ),
            reader="DCP indexer top-k owner merge (latent)",
            note=(
                "latent: unset, neither VLLM_DCP_QUERY_SPLIT nor VLLM_DCP_TOPK_OWNER_MERGE is exported "
                "and vLLM defaults both to 0; a caller's environment that sets either to 1 reaches vLLM "
                "unchanged and allocates this slab (set the two settings explicitly to make the plan "
                "charge it)"
            ),
        )
    ]
