"""A decode step of every sequence at long context (max_num_seqs x (1 + MTP) rows).

A step within the captured sizes replays a CUDA graph, whose memory is the graph pool (budgeted as
G_e): nothing new. A larger step runs eager: its rows grow like a prefill chunk's at long context (the
same fitted term per row, ``prefill_growth_bytes_per_token``). Rows beyond max_num_batched_tokens
cannot be scheduled in one step, so the rows are capped there. Where the build's profile run executed
a full-budget request (:func:`glmlaunch.ledger.demand.prefill.covered_by_profile`), that covers the step.
"""

from __future__ import annotations

from glmlaunch.ledger.context import Context, fmt_int
from glmlaunch.ledger.demand.entry import transient
from glmlaunch.ledger.demand.facts import term
from glmlaunch.ledger.demand.prefill import COVERED_BY, covered_by_profile
from glmlaunch.ledger.model import Transient


def transients(ctx: Context) -> list[Transient]:
    cfg = ctx.config
    rows = min(cfg.scheduler.max_num_seqs * (1 + cfg.mtp), cfg.scheduler.max_num_batched_tokens)
    captured = max(ctx.capture_sizes, default=0)
    trigger = f"a decode step of {cfg.scheduler.max_num_seqs} sequences x (1 + MTP {cfg.mtp}) = {rows} rows"
    if rows <= captured:
        return [
            transient(
                "demand.decode_step",
                0,
                phase="decode",
                trigger=trigger,
                reader="the captured CUDA graph of that size",
                formula=f"0: {rows} rows <= the largest capture size {captured}, so the step replays a graph "
                "whose memory is the graph pool (G_e)",
                origin="exact",
            )
        ]
    if covered_by_profile(ctx):
        # rows <= max_num_batched_tokens: the single-request profile ran a chunk at least this large
        return [
            transient(
                "demand.decode_step",
                0,
                phase="decode",
                trigger=trigger + f", above the largest capture size {captured}: eager",
                reader="eager decode: sparse indexer and attention over each sequence's context",
                formula=f"0: {rows} rows <= max_num_batched_tokens, covered by the profile peak: "
                + COVERED_BY,
                origin="exact",
            )
        ]
    growth = term("prefill_growth_bytes_per_token")
    n = round(growth.value * rows)
    return [
        transient(
            "demand.decode_step",
            n,
            phase="decode",
            trigger=trigger + f", above the largest capture size {captured}: eager",
            reader="eager decode: sparse indexer and attention over each sequence's context",
            formula=f"prefill_growth_bytes_per_token * rows = {growth.value:,.0f} * {rows} = {fmt_int(n)}  "
            f"[fitted: {growth.cite()}]",
            origin="calibrated",
        )
    ]
