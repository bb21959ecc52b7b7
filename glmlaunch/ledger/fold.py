"""Two-level fold candidate slab of ``index_topk_fp8`` (docs/memory-model.md §4): a per-call transient.

Used when the context is >= 2 x 16,384 tokens, the output is logical (vLLM asks for physical slots only at
DCP 1), the fold is not off, and in ``auto`` mode only while ``R * (T*K*8 + 4)`` fits the budget
(``…_TWO_LEVEL_FOLD_MAX_MIB``, default 256). T = sum over supertile chunks of
``max(1, ceil(chunk_tokens / slice))``, slice = 16,384 tokens raised to ``ceil(ceil(width/32)/64)*64``.

The call's row count is whatever the step hands the indexer, so the worst case in ``auto`` mode is the
largest row count whose slab still fits the budget (capped by max_num_batched_tokens), not the decode rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.constants import StackConstants
from glmlaunch.ledger.context import Context, Draft, fmt_int
from glmlaunch.ledger.indexer import resolve_supertile, width_pages

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class FoldPlan:
    used: bool
    total_slices: int
    candidate_nbytes: int
    reason: str


def total_slices(k: StackConstants, *, width_pages: int, supertile_pages: int) -> int:
    width_tokens = width_pages * k.page_size
    slice_tokens = k.fold_slice_tokens
    min_slice = -(-width_tokens // k.fold_max_slices)
    if min_slice > slice_tokens:
        slice_tokens = -(-min_slice // k.page_size) * k.page_size
    chunks = -(-width_pages // supertile_pages)
    total = 0
    for c in range(chunks):
        pages = min((c + 1) * supertile_pages, width_pages) - c * supertile_pages
        total += max(1, -(-(pages * k.page_size) // slice_tokens))
    return total


def candidate_bytes(rows: int, slices: int, topk: int) -> int:
    return rows * (slices * topk * 8 + 4)


def plan(
    k: StackConstants,
    *,
    rows: int,
    topk: int,
    width_pages: int,
    supertile_pages: int,
    output_physical_slots: bool,
    mode: str,
    budget_mib: int,
) -> FoldPlan:
    """Mirror of ``_plan_two_level_fold``: (used, T, bytes, reason)."""
    if output_physical_slots:
        return FoldPlan(False, 0, 0, "physical output requires streaming carry")
    if width_pages * k.page_size < 2 * k.fold_slice_tokens:
        return FoldPlan(False, 0, 0, "context is below the two-level threshold")
    if mode == "0":
        return FoldPlan(False, 0, 0, "two-level fold is disabled")
    t = total_slices(k, width_pages=width_pages, supertile_pages=supertile_pages)
    nbytes = candidate_bytes(rows, t, topk)
    if mode == "auto" and nbytes > budget_mib * MIB:
        return FoldPlan(False, t, nbytes, "candidate slab exceeds the memory budget")
    return FoldPlan(True, t, nbytes, "forced" if mode == "1" else "within memory budget")


def worst_rows(cfg: DeploymentConfig, slices: int) -> int:
    """Largest row count one call can bring that still takes the fold."""
    topk = cfg.model.geometry.index_topk
    cap = cfg.scheduler.max_num_batched_tokens
    if cfg.indexer.fold_value == "1":
        return cap
    return min(cap, cfg.indexer.fold_max_mib_value * MIB // (slices * topk * 8 + 4))


def entries(ctx: Context) -> list[Draft]:
    cfg, k = ctx.config, ctx.k
    if not cfg.indexer.sparse_indexer:
        return []
    g = cfg.model.geometry
    wp = width_pages(cfg, k.page_size)
    st_pages = max(1, resolve_supertile(k, cfg.indexer.supertile_k_value, wp) // k.page_size)
    physical = cfg.parallel.dcp == 1
    decode_rows = cfg.scheduler.max_num_seqs * cfg.decode_step
    probe = plan(
        k,
        rows=1,
        topk=g.index_topk,
        width_pages=wp,
        supertile_pages=st_pages,
        output_physical_slots=physical,
        mode=cfg.indexer.fold_value,
        budget_mib=cfg.indexer.fold_max_mib_value,
    )
    if not probe.used:
        return []
    t = probe.total_slices
    rows = worst_rows(cfg, t)
    if rows < 1:
        return []
    if ctx.lib is not None:
        nbytes, t, _reason = ctx.lib.fold_candidate_bytes(
            q_rows=rows,
            topk=g.index_topk,
            page_table_width=wp,
            supertile_pages=st_pages,
            output_physical_slots=physical,
            mode=cfg.indexer.fold_value,
            budget_mib=cfg.indexer.fold_max_mib_value,
        )
        origin = "library"
    else:
        nbytes, origin = candidate_bytes(rows, t, g.index_topk), "exact"
    vals = rows * t * g.index_topk * 4
    dec_bytes = candidate_bytes(decode_rows, t, g.index_topk)
    fused_max = k.indexer_fused_max_rows_glm32
    dec_note = (
        f"decode batches of {fused_max + 1}-{decode_rows} rows take the tiled route: "
        f"{decode_rows} rows -> {fmt_int(dec_bytes)} B per sparse layer per eager step, "
        f"{g.num_sparse_layers} sparse layers -> {fmt_int(dec_bytes * g.num_sparse_layers)} B "
        "of alloc/free traffic"
        if decode_rows > fused_max
        else f"decode rows <= {fused_max} stay on the fused route (no slab at decode)"
    )
    return [
        Draft(
            name="fold.candidates",
            subsystem="fold",
            requested_bytes=nbytes,
            count=1,
            kind="transient",
            lifetime="unbudgeted",
            condition=(
                f"context {cfg.scheduler.max_model_len} >= 32,768 tokens, "
                f"DCP {cfg.parallel.dcp} > 1 (logical output), "
                f"fold {cfg.indexer.fold_value!r}, budget {cfg.indexer.fold_max_mib_value} MiB"
            ),
            reader="index_topk_fp8 two-level fold (tiled / packed routes), freed at the end of the call",
            formula=(
                f"R * (T*K*8 + 4) = {rows} * ({t} * {g.index_topk} * 8 + 4) = {fmt_int(nbytes)}  "
                f"[R = largest call whose slab fits the budget, T = {t} slices over {wp} pages]"
            ),
            origin=origin,  # type: ignore[arg-type]
            alloc="transient",
            pieces=(vals, vals, rows * 4),
            note=dec_note,
        )
    ]
