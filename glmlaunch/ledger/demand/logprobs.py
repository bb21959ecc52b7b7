"""Prompt logprobs (``scheduler.prompt_logprobs``): fp32 logits over the vocabulary for a prefill chunk.

vLLM computes a chunk's prompt logprobs from a [rows, vocab] fp32 logits tensor and its log-softmax, both
live at once. On this rig a 512-row chunk asked for 303 MiB (local-inference-lab/vllm issue 257:
512 x 154,880 x 4 B = 302.5 MiB), one of the two. A client can ask for them on any request, so the plan
charges them only when the deployment promises them.
"""

from __future__ import annotations

from glmlaunch.ledger.context import Context, fmt_int
from glmlaunch.ledger.demand.entry import transient
from glmlaunch.ledger.model import Transient

FP32 = 4


def transients(ctx: Context) -> list[Transient]:
    cfg = ctx.config
    if not cfg.scheduler.prompt_logprobs:
        return []
    rows, vocab = cfg.scheduler.max_num_batched_tokens, cfg.model.geometry.vocab_size
    n = 2 * rows * vocab * FP32
    return [
        transient(
            "demand.prompt_logprobs",
            n,
            phase="long-prefill",
            trigger="a request with prompt_logprobs (scheduler.prompt_logprobs)",
            reader="vLLM's sampler: prompt logprobs of the chunk",
            formula=f"2 (logits + log-softmax) * max_num_batched_tokens * vocab_size * 4 B = 2 * {rows} * "
            f"{vocab} * 4 = {fmt_int(n)}",
            origin="exact",
        )
    ]
