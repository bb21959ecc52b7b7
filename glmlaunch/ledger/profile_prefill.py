"""Infernal Invocation's single-request prefill profile (vLLM PR 290), inside the profiled peak P.

The ii line's Worker runs ``profile_single_request_prefill()`` after ``profile_run()`` and before the KV
cache is sized (blackwell-llm-docker patches/releases/infernal-invocation-r18/vllm/integration.patch@3dd078a
L12428-12441): one request of ``max_num_batched_tokens`` tokens with attention forced on and a minimal KV
cache, because "the ordinary V2 profile omits attention and distributes max_num_batched_tokens across
max_num_seqs requests", while "sparse attention can initialize persistent metadata buffers and reach a larger
transient peak when one request consumes the complete token budget" (L11883-11920). Its dummy sampler also
runs the rejection sampler over ``max_num_seqs x (1 + k)`` verify rows (L11857-11872). The Gilded Gnosis
line has no such pass: what one long request adds is left to the runtime demand (docs/memory-model.md §9).

What the pass adds that the code sizes is charged here:

* ``profile.verify_logits``: the verify rows' logits, ``max_num_seqs x (1 + k) x vocab x 4 B`` (fp32);
* ``profile.topk_indices``: the sparse top-k of one full-budget request, ``max_num_batched_tokens x
  index_topk x 4 B`` (int32): the per-request metadata sparse attention keeps.

The sparse-MLA prefill transient of that request is not derived (no boot log of this line to fit it): it
stays in the term model's P residual, which an ii boot log's record replaces (``calibrate ingest``).
"""

from __future__ import annotations

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.context import Context, Draft, fmt_int

#: the stacks whose vLLM runs the single-request prefill profile (the Infernal Invocation line)
STACKS = frozenset({"b12x-ii"})


def applies(cfg: DeploymentConfig) -> bool:
    return cfg.stack in STACKS and cfg.runner == "v2"


def entries(ctx: Context) -> list[Draft]:
    cfg = ctx.config
    if not applies(cfg):
        return []
    g = cfg.model.geometry
    mnbt = cfg.scheduler.max_num_batched_tokens
    out = []
    if cfg.mtp > 0:
        rows = cfg.scheduler.max_num_seqs * cfg.decode_step
        n = rows * g.vocab_size * 4
        out.append(
            Draft(
                name="profile.verify_logits",
                subsystem="profile",
                requested_bytes=n,
                count=1,
                kind="transient",
                lifetime="profiled",
                condition=f"vLLM PR 290 (stack {cfg.stack}) with MTP k = {cfg.mtp}",
                reader="the dummy sampler's rejection-sampler pass",
                formula=(
                    f"max_num_seqs {cfg.scheduler.max_num_seqs} x (1 + {cfg.mtp}) x vocab "
                    f"{fmt_int(g.vocab_size)} "
                    f"x 4 B = {fmt_int(n)}"
                ),
                origin="exact",
                alloc="transient",
                pieces=(n,),
            )
        )
    n = mnbt * g.index_topk * 4
    out.append(
        Draft(
            name="profile.topk_indices",
            subsystem="profile",
            requested_bytes=n,
            count=1,
            kind="transient",
            lifetime="profiled",
            condition=f"vLLM PR 290 (stack {cfg.stack}): one request of max_num_batched_tokens {mnbt}",
            reader="sparse attention's per-request top-k metadata",
            formula=(
                f"max_num_batched_tokens {fmt_int(mnbt)} x index_topk {g.index_topk} x 4 B = {fmt_int(n)}"
            ),
            origin="estimate",
            alloc="transient",
            pieces=(n,),
            note=(
                "the sparse-MLA prefill transient of the same request is not derived: it is in the P "
                "residual (an ii boot log's record replaces it)"
            ),
        )
    )
    return out

