"""The fragmentation allowance the allocator setting implies.

With expandable segments a transient grows the segment it needs in place, so free memory is usable
whole: no allowance. Without them (LMCache forces them off) a transient needs one contiguous free block,
and freed blocks of other sizes may not serve it: the allowance is a fitted term,
``fragmentation_bytes`` (facts.json), fitted with the other runtime terms on the records.
"""

from __future__ import annotations

from glmlaunch.ledger.context import Context, fmt_int
from glmlaunch.ledger.demand.entry import transient
from glmlaunch.ledger.demand.facts import term
from glmlaunch.ledger.model import Transient


def expandable(ctx: Context) -> bool:
    return ctx.config.memory.allocator.expandable_segments and not ctx.config.lmcache


def transients(ctx: Context) -> list[Transient]:
    if expandable(ctx):
        return []
    t = term("fragmentation_bytes")
    why = "LMCache forces them off" if ctx.config.lmcache else "memory.allocator.expandable_segments: false"
    return [
        transient(
            "demand.fragmentation",
            t.bytes,
            phase="long-prefill",
            trigger=f"transients without expandable segments ({why})",
            reader="torch's caching allocator",
            formula=f"fragmentation_bytes = {fmt_int(t.bytes)}  [fitted: {t.cite()}]",
            origin="calibrated",
            rounded=False,
        )
    ]
