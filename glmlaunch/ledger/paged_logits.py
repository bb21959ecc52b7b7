"""Direct paged logits (``run_paged_logits_kernel`` behind ``paged_decode_logits``): a latent hazard.

It materialises ``rows * width_tokens * 4`` B of fp32 (optionally filled with -inf). GLM decode does not
reach it today (the fused kernel or the supertile tile-logits scratch serve every route), so the ledger
lists it under ``latent`` instead of charging it to a rank; a configuration that reached it would.
"""

from __future__ import annotations

from glmlaunch.ledger.context import Context, Draft, fmt_int
from glmlaunch.ledger.indexer import decode_rows


def nbytes(rows: int, width_tokens: int) -> int:
    return rows * width_tokens * 4


def latent(ctx: Context) -> list[Draft]:
    cfg = ctx.config
    if not cfg.indexer.sparse_indexer:
        return []
    rows = decode_rows(cfg, ctx.capture_sizes)
    width = cfg.scheduler.max_model_len
    n = nbytes(rows, width)
    return [
        Draft(
            name="paged_logits.direct",
            subsystem="paged_logits",
            requested_bytes=n,
            count=1,
            kind="transient",
            lifetime="unbudgeted",
            condition="only via paged_decode_logits / MSA block scores; not reached by GLM decode",
            reader="run_paged_logits_kernel (latent)",
            formula=f"rows * width_tokens * 4 = {rows} * {fmt_int(width)} * 4 = {fmt_int(n)}",
            origin="exact",
            alloc="transient",
            pieces=(n,),
        )
    ]
