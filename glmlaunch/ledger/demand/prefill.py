"""The long prefill: what one max_model_len request's chunks allocate beyond the profiled dummy batch.

vLLM profiles one dummy batch of max_num_batched_tokens at a short context; the peak it measures (P) stays
cached in torch's allocator and is reused by every later step. A real chunk at long context needs more:
the indexer's scores and top-k over the whole context, the DCP gathers and all-to-alls of the context's
compressed KV, and MoE temporaries under real (skewed) routing. Their sum per batched token is not sized
by the stack's code here: it is one fitted term, ``prefill_growth_bytes_per_token`` (facts.json), charged
per token of the chunk. The appliance's records show it saturates early: the 3.42 natural pool died on a
128K request and the 18-block-smaller pool served 516K, so it is not charged per context token.

Those records are SparkInfer-era releases (r9-r28) at DCP2/DCP4. Mixed-tier EXL3 on the r34 and Infernal
Invocation stacks (:mod:`glmlaunch.ledger.r7`) takes its own term, ``r7_prefill_growth_bytes_per_token``,
fitted on that line's documented cases (the same script, its own group of runtime_cases.json).
"""

from __future__ import annotations

from glmlaunch.ledger import r7
from glmlaunch.ledger.context import Context, fmt_int
from glmlaunch.ledger.demand.entry import transient
from glmlaunch.ledger.demand.facts import term
from glmlaunch.ledger.model import Origin, Transient

#: the prefill growth of mixed-tier EXL3 on the r34 / ii stacks, fitted on that line's own cases
R7_TERM = "r7_prefill_growth_bytes_per_token"


def transients(ctx: Context) -> list[Transient]:
    cfg = ctx.config
    rows = cfg.scheduler.max_num_batched_tokens
    # the mixed-tier EXL3 of r34 / ii has its own fit (its own served evidence; docs/memory-model.md §9)
    name = R7_TERM if r7.applies(cfg) else "prefill_growth_bytes_per_token"
    growth = term(name)
    learned = ctx.inputs.runtime_prefill_bytes
    origin: Origin = "calibrated"
    if learned is not None:
        n = learned
        why = ctx.inputs.runtime_note or "this configuration's serve logs"
        formula = f"learned: {fmt_int(n)}  [{why}]"
    else:
        n = round(growth.value * rows)
        formula = (
            f"{name} * max_num_batched_tokens = {growth.value:,.0f} * {rows} = "
            f"{fmt_int(n)}  [fitted: {growth.cite()}]"
        )
    return [
        transient(
            "demand.prefill_growth",
            n,
            phase="long-prefill",
            trigger=f"a prefill chunk of up to {rows} tokens at a context past the profiled dummy batch",
            reader="sparse indexer (scores, top-k), DCP gathers and all-to-alls, MoE temporaries",
            formula=formula,
            origin=origin,
            note=(
                "not sized by the stack's code here: a named term fitted on the appliance's recorded "
                "outcomes (it says so); it saturates by a 32K context on every record"
            ),
        )
    ]
