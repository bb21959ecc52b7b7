"""The runtime demand after the KV pool: what each rank allocates while requests run.

The budget (``ledger.budget``) predicts the memory a rank has free once vLLM has started: the margin,
with the profiled peak P still cached by torch for the steps that reuse it. Requests then allocate more
than the short dummy batch vLLM profiled. This package lists each such allocation as a ledger entry of
lifetime ``runtime``, with the phase it fires in, its trigger, its reader and its size as a function of
the configuration; the verdict subtracts the peak phase's sum from the margin (the runtime margin).

One module per source, in firing order within a chunk: the allocator's fragmentation allowance, the
long prefill's growth, the online-quantized layers' temporaries, prompt logprobs; then the decode step.
Where the stack's code cannot size a transient, a named term fitted on the appliance's recorded outcomes
stands for it (``facts.json``, written by ``scripts/derive_runtime_facts.py``), and its entry says so.
"""

from __future__ import annotations

from glmlaunch.ledger.context import Context
from glmlaunch.ledger.demand import allocator, decode, logprobs, online_quant, prefill
from glmlaunch.ledger.model import RuntimeDemand

_SOURCES = (allocator, prefill, online_quant, logprobs, decode)


def runtime_demand(ctx: Context) -> RuntimeDemand:
    return RuntimeDemand(tuple(t for src in _SOURCES for t in src.transients(ctx)))


__all__ = ["runtime_demand"]
