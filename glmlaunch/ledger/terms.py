"""vLLM's budget terms (docs/memory-model.md §6): summed from a rank's entries, or a term model's whole terms.

The ledger's ``kv_cache`` entry and the budget size the KV cache with the same two functions here
(:func:`budget_terms`, then :func:`kv_bytes`), so a plan shows one KV figure: the ledger sizes its entry
with the calibration it is built with, and the budget repeats the same arithmetic over the ledger's
terms (with the real device total where ``check`` or ``serve`` read one).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from glmlaunch.ledger.model import Entry, Terms


def term_of(e: Entry) -> str:
    """The budget term an entry counts toward: u_pre, w, p, n, g_e, x, or kv (the KV cache itself)."""
    lt = e.lifetime
    if lt == "profiled":
        return "n" if e.kind in ("ipc", "driver") else "p"
    if lt == "pre-snapshot":
        return "u_pre"
    if lt == "graph-estimated":
        return "g_e"
    if lt == "unbudgeted":
        return "x"
    return "w" if e.subsystem == "weights" else "kv"


def terms(entries: Iterable[Entry]) -> Terms:
    sums = dict.fromkeys(("u_pre", "w", "p", "n", "g_e", "x", "kv"), 0)
    for e in entries:
        sums[term_of(e)] += e.device_bytes
    return Terms(**sums)


#: the whole terms a term model may predict, by the names ``LedgerCalibration.term_bytes`` uses. W is not
#: among them: the weights entry decides W itself (ledger/weights.py), calibration being one of its inputs.
MODELLED_TERMS = ("u_pre", "p", "n", "g_e")
#: how each term is written in formulas (docs/memory-model.md §6)
TERM_SYMBOLS = {"u_pre": "U_pre", "w": "W", "p": "P", "n": "N", "g_e": "G_e"}


def modelled_terms(calibration: object | None) -> dict[str, int]:
    """Whole terms a term model predicted (``LedgerCalibration.term_bytes``); empty without one."""
    items = getattr(calibration, "term_bytes", None) if calibration is not None else None
    if not items:
        return {}
    return {k: int(v) for k, v in items if k in MODELLED_TERMS}


def budget_terms(itemized: Terms, calibration: object | None) -> Terms:
    """The terms vLLM's budget uses: each whole term a calibration predicted replaces the entries' sum.

    A logged peak is one number for memory the itemized entries may hold several times over (vLLM's
    shared workspace arena), so the sum of entries is only the fallback. Applying it twice with the same
    calibration changes nothing, which lets the budget re-apply it to a ledger that already did.
    """
    over = modelled_terms(calibration)
    return replace(itemized, **over) if over else itemized


def kv_bytes(gate: int, t: Terms, pinned: int | None) -> int:
    """vLLM's KV cache: ``R - W - P - N - G_e`` (none when negative), or ``--kv-cache-memory-bytes``."""
    if pinned is not None:
        return pinned
    return max(0, gate - t.w - t.p - t.n - t.g_e)


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
