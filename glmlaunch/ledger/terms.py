"""vLLM's budget terms (docs/memory-model.md §6): summed from a rank's entries, or a term model's whole terms.

The ledger's ``kv_cache`` entry and the budget size the KV cache with the same two functions here
(:func:`budget_terms`, then :func:`kv_bytes`), so a plan shows one KV figure: the ledger sizes its entry
with the inputs it is built with and keeps the terms it used (``Ledger.base_terms``), and the budget
repeats the same arithmetic over those terms (with the real device total where ``check`` or ``serve``
read one).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from glmlaunch.ledger.inputs import LedgerInputs
from glmlaunch.ledger.model import Entry, Terms, term_of


def terms(entries: Iterable[Entry]) -> Terms:
    sums = dict.fromkeys(("u_pre", "w", "p", "n", "g_e", "x", "kv"), 0)
    for e in entries:
        sums[term_of(e)] += e.device_bytes
    return Terms(**sums)


#: the whole terms a term model may predict, by the names ``LedgerInputs.term_bytes`` uses. W is not
#: among them: the weights entry decides W itself (ledger/weights.py), calibration being one of its inputs.
MODELLED_TERMS = ("u_pre", "p", "n", "g_e")
#: how each term is written in formulas (docs/memory-model.md §6)
TERM_SYMBOLS = {"u_pre": "U_pre", "w": "W", "p": "P", "n": "N", "g_e": "G_e"}


def modelled_terms(inputs: LedgerInputs) -> dict[str, int]:
    """Whole terms a term model predicted (``LedgerInputs.term_bytes``); empty without one."""
    return {k: int(v) for k, v in inputs.term_bytes if k in MODELLED_TERMS}


def budget_terms(summed: Terms, inputs: LedgerInputs) -> Terms:
    """The terms vLLM's budget uses: each whole term a calibration predicted replaces the entries' sum.

    A logged peak is one number for memory the itemized entries may hold several times over (vLLM's
    shared workspace arena), so the sum of entries is only the fallback.
    """
    over = modelled_terms(inputs)
    return replace(summed, **over) if over else summed


def kv_bytes(gate: int, t: Terms, pinned: int | None) -> int:
    """vLLM's KV cache: ``R - W - P - N - G_e`` (none when negative), or ``--kv-cache-memory-bytes``."""
    if pinned is not None:
        return pinned
    return max(0, gate - t.w - t.p - t.n - t.g_e)


def gate_bytes(gmu: float, total: int) -> int:
    """R = ceil(GMU * T), the float product vLLM's ``request_memory`` takes."""
    return math.ceil(total * gmu)
