"""When no KV pool fits: the obstacle, named with its figures, instead of a recommendation of 0 bytes.

The budget's recommendations (``--kv-cache-memory-bytes``, the pool pin, the GMU) are the largest pool
that leaves the minimum margin and the runtime demand. When even an empty pool leaves less, no setting of
the three keeps the plan, and the advice is what stands in the way. GMU × T can be at most F0 (vLLM's
start gate, F0 >= R = ceil(GMU × T)), so "at any GMU" means "within F0".
"""

from __future__ import annotations

from glmlaunch.config.units import format_size
from glmlaunch.ledger.budget import Budget


def room_for_pool(b: Budget) -> int:
    """F0 - (W + P + N + G_e) - X - what must stay free: the largest KV pool that keeps the plan."""
    return b.f0 - b.w - b.p - b.n - b.g_e - b.x - kept_free(b)


def kept_free(b: Budget) -> int:
    """What must stay free after startup: the minimum margin or the runtime demand and its minimum."""
    return max(b.runtime_demand + b.min_runtime_margin, b.min_margin)


def obstacle(b: Budget) -> str | None:
    """Why no pool pin, GMU or ``--kv-cache-memory-bytes`` keeps this plan (None: one does)."""
    room = room_for_pool(b)
    if room > 0:
        return None
    s = format_size
    f0 = (
        f"F0 = T {s(b.total)} - U_pre {s(b.u_pre)}"
        + (f" - U_oth {s(b.used_by_others)}" if b.used_by_others else "")
        + f" = {s(b.f0)}"
    )
    fixed = b.w + b.p + b.n + b.g_e
    if b.w >= b.f0:
        return (
            f"nothing fits: the weights W {s(b.w)} are larger than GMU × T at any GMU (at most {f0}, "
            f"vLLM's start gate), {s(b.w - b.f0)} more than the GPU gives; spread them over more GPUs "
            "(parallel.tp), use GPUs with more memory or a smaller checkpoint"
        )
    if fixed >= b.f0:
        return (
            f"nothing fits: W + P + N + G_e = {s(fixed)} (W {s(b.w)}) is larger than GMU × T at any GMU "
            f"(at most {f0}), {s(fixed - b.f0)} over, before any KV cache"
        )
    keep = kept_free(b)
    if b.runtime_demand + b.min_runtime_margin >= b.min_margin:
        what = f"the runtime demand {s(b.runtime_demand)} ({b.runtime_phase})"
        if b.min_runtime_margin:
            what += f" + its minimum {s(b.min_runtime_margin)}"
    else:
        what = f"the minimum margin {s(b.min_margin)}"
    return (
        f"nothing fits: W + P + N + G_e {s(fixed)}, X {s(b.x)} and {what} need {s(fixed + b.x + keep)} "
        f"with no KV cache at all, {s(-room)} more than {f0} (GMU × T at most)"
    )
