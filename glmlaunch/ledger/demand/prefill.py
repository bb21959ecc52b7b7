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

Per generation, what the build's own profile run already executed is not charged again. The Infernal
Invocation line's Worker runs ``profile_single_request_prefill()`` after ``profile_run()`` and before the KV
cache is sized (vLLM PR 290; B:``patches/releases/infernal-invocation-r18/vllm/integration.patch``
L12434-12441 at local-inference-lab/blackwell-llm-docker@3dd078a): one request of the whole
``max_num_batched_tokens`` budget with attention forced on, because "sparse attention can ... reach a larger
transient peak when one request consumes the complete token budget" (L11883-11920). That is this transient:
the peak it reaches is in P, which vLLM keeps cached, so on that line the growth is 0 here
(:func:`covered_by_profile`). The Gilded Gnosis line's profile omits attention, so its growth stays charged.
A growth learned from this configuration's own serve logs is measured past the profile and is kept on either
line.
"""

from __future__ import annotations

from glmlaunch.ledger import profile_prefill, r7
from glmlaunch.ledger.context import Context, fmt_int
from glmlaunch.ledger.demand.entry import transient
from glmlaunch.ledger.demand.facts import term
from glmlaunch.ledger.model import Origin, Transient

#: the prefill growth of mixed-tier EXL3 on the r34 / ii stacks, fitted on that line's own cases
R7_TERM = "r7_prefill_growth_bytes_per_token"


#: where the profile run executes the long-prefill transient itself (the code says so above)
COVERED_BY = (
    "vLLM PR 290's single-request prefill profile (Infernal Invocation: blackwell-llm-docker@3dd078a "
    "patches/releases/infernal-invocation-r18/vllm/integration.patch L12434-12441) already ran one "
    "request of the whole batch budget with attention on before the KV cache was sized: its peak is in P"
)


def covered_by_profile(ctx: Context) -> bool:
    """Whether this build's profile run already executed the long-prefill transient (so P holds it)."""
    return profile_prefill.applies(ctx.config) and ctx.inputs.runtime_prefill_bytes is None


def transients(ctx: Context) -> list[Transient]:
    cfg = ctx.config
    rows = cfg.scheduler.max_num_batched_tokens
    if covered_by_profile(ctx):
        return [
            transient(
                "demand.prefill_growth",
                0,
                phase="long-prefill",
                trigger=f"a prefill chunk of up to {rows} tokens at a context past the profiled dummy batch",
                reader="sparse indexer (scores, top-k), DCP gathers and all-to-alls, MoE temporaries",
                formula=f"0: covered by the profile peak (stack {cfg.stack}, runner {cfg.runner}): "
                + COVERED_BY,
                origin="exact",
                note="not charged twice: the profile run of this build executes it",
            )
        ]
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
