"""Paged sparse-indexer scratch plans in vLLM's shared workspace arena (docs/memory-model.md §3).

vLLM reserves two plans per workspace lane: decode at the capture row count and prefill at
``profile_q_rows = min(q_rows, VLLM_SPARSE_INDEXER_MAX_LOGITS_MB * 2^20 / 4 / S)``. The arena is grow-only
and shared, so a lane costs max(prefill, decode), not the sum. The V2 runner with speculative decoding
has a second lane (the drafter runs in lane 1), an independent arena that may hold a second copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.constants import StackConstants
from glmlaunch.ledger.context import Context, Draft, align, fmt_int

ROUTE_PACKED = "packed_contiguous"
ROUTE_FUSED = "paged_fused"
ROUTE_TILED = "paged_tiled"
_FUSED_TOPKS = (512, 1024, 2048)
_Q_HEAD_TILE = 16


@dataclass(frozen=True, slots=True)
class IndexerPlan:
    rows: int
    width_pages: int
    supertile: int
    max_chunks: int
    route: str
    regions: tuple[tuple[str, int], ...]  # (name, bytes before 1 KiB alignment)
    nbytes: int


def resolve_supertile(k: StackConstants, supertile_k: int, width_pages: int) -> int:
    """Supertile tokens: rounded up to 512; capped at A(width*64, 512) only when the default is used."""
    blk = k.indexer_tile_block_k
    tokens = align(max(supertile_k, blk), blk)
    if supertile_k == k.indexer_supertile_default:
        capacity = align(max(width_pages * k.page_size, 1), blk)
        tokens = min(tokens, max(capacity, blk))
    return tokens


def fused_allowed(
    k: StackConstants, *, rows: int, heads: int, topk: int, width_tokens: int, cc: tuple[int, int] | None
) -> bool:
    if topk not in _FUSED_TOPKS or rows <= 0 or width_tokens <= 0:
        return False
    if max(-(-heads // _Q_HEAD_TILE), 1) not in (1, 2, 4):
        return False
    # the C4 rule (resolve_fused_indexer_path): 64 heads in every release tree, 32 or 64 in PyPI b12x 1.5
    if topk == 512 and heads in k.indexer_fused_c4_heads:
        return cc in ((12, 0), (12, 1)) and rows <= 16
    if topk == 2048 and heads == 32:
        return rows <= k.indexer_fused_max_rows_glm32
    return rows <= k.indexer_fused_max_rows


def route_for(
    k: StackConstants,
    *,
    mode: str,
    shared_page_table: bool,
    rows: int,
    heads: int,
    topk: int,
    width_tokens: int,
    fused: bool,
    cc: tuple[int, int] | None,
) -> str:
    if shared_page_table or mode == "prefill":
        return ROUTE_PACKED
    if fused and fused_allowed(k, rows=rows, heads=heads, topk=topk, width_tokens=width_tokens, cc=cc):
        return ROUTE_FUSED
    return ROUTE_TILED


@lru_cache(maxsize=4096)
def plan_layout(
    k: StackConstants,
    *,
    rows: int,
    width_pages: int,
    topk: int,
    heads: int,
    mode: str,
    shared_page_table: bool,
    supertile_k: int,
    num_sms: int,
    fused: bool = True,
    cc: tuple[int, int] | None = None,
    tile_logits_itemsize: int = 4,
) -> IndexerPlan:
    r = max(rows, 1)
    s = resolve_supertile(k, supertile_k, width_pages)
    st_pages = max(1, s // k.page_size)
    max_chunks = max(1, -(-width_pages // st_pages))
    route = route_for(
        k,
        mode=mode,
        shared_page_table=shared_page_table,
        rows=r,
        heads=heads,
        topk=topk,
        width_tokens=width_pages * k.page_size,
        fused=fused,
        cc=cc,
    )
    g = s if route == ROUTE_PACKED else 0
    bq = k.indexer_tile_block_q
    regions: list[tuple[str, int]] = [
        ("gather_k_quant", g * k.indexer_head_dim),
        ("gather_k_scales", g * k.indexer_scale_bytes),
        ("contiguous_lengths", r * 4),
        ("runtime_lengths", r * 4),
        ("tile_logits", tile_logits_itemsize * (-(-r // bq) * bq) * s),
        ("topk_values", r * topk * 4),
        ("topk_indices", r * topk * 4),
        ("carry_values", (2 if max_chunks > 1 else 0) * r * topk * 4),
        ("carry_indices", (2 if max_chunks > 1 else 0) * r * topk * 4),
        ("active_width", 4),
    ]
    if route == ROUTE_FUSED:
        regions += [
            ("fused_pack_values", max(1, num_sms) * topk * 4),
            ("fused_pack_indices", max(1, num_sms) * topk * 4),
            ("fused_merge_state", r * k.indexer_fused_merge_state_bytes_per_row),
        ]
    a = k.indexer_scratch_align
    nbytes = max(sum(align(b, a) for _, b in regions), a)
    return IndexerPlan(r, width_pages, s, max_chunks, route, tuple(regions), nbytes)


def width_pages(cfg: DeploymentConfig, page_size: int = 64) -> int:
    return -(-cfg.scheduler.max_model_len // page_size)


def prefill_rows(cfg: DeploymentConfig, supertile: int) -> int:
    cap = cfg.indexer.max_logits_mb_value * 1024 * 1024 // 4 // supertile
    return min(cfg.scheduler.max_num_batched_tokens, cap)


def decode_rows(cfg: DeploymentConfig, sizes: tuple[int, ...]) -> int:
    if sizes:
        return max(sizes)
    return min(cfg.scheduler.max_num_seqs * cfg.decode_step, cfg.scheduler.max_num_batched_tokens)


def compute_capability(cfg: DeploymentConfig) -> tuple[int, int]:
    major, minor = cfg.hardware.compute_capability.split(".")
    return int(major), int(minor)


def lanes(cfg: DeploymentConfig) -> int:
    return 2 if cfg.runner == "v2" and cfg.mtp > 0 else 1


@lru_cache(maxsize=1024)
def _describe(p: IndexerPlan, k: StackConstants) -> str:
    parts = " + ".join(f"{n} {fmt_int(align(b, k.indexer_scratch_align))}" for n, b in p.regions if b)
    return f"sum of 1 KiB-aligned regions: {parts} = {fmt_int(p.nbytes)}"


def plans(ctx: Context) -> tuple[IndexerPlan, IndexerPlan]:
    cfg, k = ctx.config, ctx.k
    g = cfg.model.geometry
    wp = width_pages(cfg, k.page_size)
    s = resolve_supertile(k, cfg.indexer.supertile_k_value, wp)
    common = dict(
        width_pages=wp,
        topk=g.index_topk,
        heads=g.index_n_heads,
        supertile_k=cfg.indexer.supertile_k_value,
        num_sms=cfg.hardware.num_sms,
        fused=cfg.indexer.fused_value,
        cc=compute_capability(cfg),
    )
    pre = plan_layout(k, rows=prefill_rows(cfg, s), mode="prefill", shared_page_table=True, **common)
    dec = plan_layout(
        k, rows=decode_rows(cfg, ctx.capture_sizes), mode="decode", shared_page_table=cfg.mtp > 0, **common
    )
    return pre, dec


def entries(ctx: Context) -> list[Draft]:
    cfg, k = ctx.config, ctx.k
    if not cfg.indexer.sparse_indexer:
        return []
    pre, dec = plans(ctx)
    pre_bytes, dec_bytes, origin = pre.nbytes, dec.nbytes, "exact"
    pre_route, dec_route = pre.route, dec.route
    if ctx.lib is not None:
        g = cfg.model.geometry
        common = dict(
            num_q_heads=g.index_n_heads,
            page_table_width=pre.width_pages,
            topk=g.index_topk,
            supertile_k=cfg.indexer.supertile_k_value,
            num_sms=cfg.hardware.num_sms,
            fused=cfg.indexer.fused_value,
        )
        pre_bytes, pre_route = ctx.lib.indexer_plan_bytes(
            max_q_rows=pre.rows,
            mode="prefill",
            shared_page_table=True,
            **common,  # type: ignore[arg-type]
        )
        dec_bytes, dec_route = ctx.lib.indexer_plan_bytes(
            max_q_rows=dec.rows,
            mode="decode",
            shared_page_table=cfg.mtp > 0,
            **common,  # type: ignore[arg-type]
        )
        origin = "library"
    out: list[Draft] = []
    for lane in range(lanes(cfg)):
        lane_origin = origin if lane == 0 else "estimate"
        lane_note = (
            ""
            if lane == 0
            else "whether the drafter takes the same prefill reservation is unsettled: measure"
        )
        cond_lane = (
            "lane 0 (target model)"
            if lane == 0
            else "lane 1 (MTP drafter; V2 runner with speculative decoding)"
        )
        arena_is_prefill = pre_bytes >= dec_bytes
        for mode, p, nbytes, route in (
            ("prefill", pre, pre_bytes, pre_route),
            ("decode", dec, dec_bytes, dec_route),
        ):
            holds_arena = (mode == "prefill") == arena_is_prefill
            rows_rule = (
                f"profile_q_rows = min({cfg.scheduler.max_num_batched_tokens}, "
                f"{cfg.indexer.max_logits_mb_value} MiB / 4 / {p.supertile})"
                if mode == "prefill"
                else "largest capture size"
                if ctx.capture_sizes
                else "max_num_seqs * (1 + MTP)"
            )
            out.append(
                Draft(
                    name=f"indexer.{mode}.lane{lane}",
                    subsystem="indexer",
                    requested_bytes=nbytes,
                    count=1,
                    kind="workspace",
                    lifetime="profiled",
                    condition=f"b12x sparse indexer on; {cond_lane}; {mode} plan, route {route}",
                    reader=f"index_topk_fp8 ({mode}) via current_workspace_manager().get_simultaneous",
                    formula=(
                        f"R = {p.rows} ({rows_rule}), width = {p.width_pages} pages, S = {p.supertile}, "
                        f"K = {cfg.model.geometry.index_topk}: " + _describe(p, k)
                    ),
                    origin=lane_origin,  # type: ignore[arg-type]
                    alloc="torch" if holds_arena else "absorbed",
                    note=(
                        lane_note
                        + ("; " if lane_note else "")
                        + (
                            "sets the lane's arena"
                            if holds_arena
                            else "absorbed: the grow-only arena already holds the larger plan"
                        )
                    ),
                )
            )
    return out
