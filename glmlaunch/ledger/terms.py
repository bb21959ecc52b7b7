"""vLLM's budget terms (docs/memory-model.md §6) summed from a rank's entries."""

from __future__ import annotations

import math
from collections.abc import Iterable

from glmlaunch.ledger.model import Entry, Terms


def terms(entries: Iterable[Entry]) -> Terms:
    u_pre = w = p = n = g_e = x = kv = 0
    for e in entries:
        d = e.device_bytes
        lt = e.lifetime
        if lt == "pre-snapshot":
            u_pre += d
        elif lt == "profiled":
            if e.kind in ("ipc", "driver"):
                n += d
            else:
                p += d
        elif lt == "graph-estimated":
            g_e += d
        elif lt == "unbudgeted":
            x += d
        elif e.subsystem == "weights":
            w += d
        else:
            kv += d
    return Terms(u_pre, w, p, n, g_e, x, kv)


def gate_bytes(gmu: float, total: int) -> int:
    """R = ceil(GMU * T), the float product vLLM's ``request_memory`` takes."""
    return math.ceil(total * gmu)


_BY_ID: dict[int, tuple[tuple[Entry, ...], Terms]] = {}


def cached_terms(entries: tuple[Entry, ...]) -> Terms:
    """:func:`terms` of a tuple the ledger memoized, looked up by identity (the tuple is kept alive)."""
    hit = _BY_ID.get(id(entries))
    if hit is not None and hit[0] is entries:
        return hit[1]
    if len(_BY_ID) >= 20_000:
        _BY_ID.clear()
    result = terms(entries)
    _BY_ID[id(entries)] = (entries, result)
    return result
