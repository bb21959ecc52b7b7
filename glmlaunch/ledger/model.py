"""Frozen types of the allocation ledger.

An :class:`Entry` is one named allocation (or a group of identical ones, ``count``) a GPU rank makes.
``requested_bytes`` is per instance and exact where the formula is; ``device_bytes`` is the total
footprint of all ``count`` instances after cudaMalloc 2 MiB pages or torch caching-allocator segment
rounding, modelled per docs/memory-model.md §1 (the preflight measures it).

``kind`` says which counter sees the bytes: ``ipc`` (cudaMalloc + IPC export: NVML only), ``torch``
(caching allocator), ``workspace`` (a view in vLLM's grow-only arena), ``transient`` (allocated and freed
inside one op call: peak only), ``driver`` (CUDA context and NCCL internals: NVML only).

``lifetime`` places the bytes in vLLM's budget (docs/memory-model.md §6): ``pre-snapshot`` (U_pre),
``profiled`` (P or N), ``graph-estimated`` (G_e), ``unbudgeted`` (X), or ``budget-term`` for the two
entries that are budget terms of their own (weights W and the KV cache). ``runtime`` entries are not
made at startup at all: they fire while requests run, after the KV pool and the graphs (the runtime
demand, :mod:`glmlaunch.ledger.demand`), and are never in a rank's startup entries. ``load-time`` entries
are held while the model loads and freed before vLLM profiles (:mod:`glmlaunch.ledger.loadtime`): they
must fit the free memory F0, not the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from glmlaunch.ledger.inputs import UNCALIBRATED, LedgerInputs

Kind = Literal["ipc", "torch", "workspace", "transient", "driver"]
Lifetime = Literal[
    "pre-snapshot", "profiled", "graph-estimated", "unbudgeted", "budget-term", "runtime", "load-time"
]
Origin = Literal["exact", "library", "default", "calibrated", "estimate"]

KINDS: tuple[Kind, ...] = ("ipc", "torch", "workspace", "transient", "driver")
LIFETIMES: tuple[Lifetime, ...] = ("budget-term", "pre-snapshot", "profiled", "graph-estimated", "unbudgeted")
ORIGINS: tuple[Origin, ...] = ("exact", "library", "default", "calibrated", "estimate")
#: when a runtime transient fires: the prefill of one long request (its chunks at long context, beside the
#: other sequences' decodes) or a decode step of max_num_seqs sequences
Phase = Literal["long-prefill", "decode"]
PHASES: tuple[Phase, ...] = ("long-prefill", "decode")


class Entry(NamedTuple):
    """Immutable (a NamedTuple: cheap to build, which matters when calibration evaluates thousands)."""

    name: str
    subsystem: str
    requested_bytes: int
    count: int  # type: ignore[assignment]  # shadows tuple.count on purpose: the field name is the contract
    device_bytes: int
    kind: Kind
    lifetime: Lifetime
    condition: str
    reader: str
    formula: str
    origin: Origin
    note: str = ""
    #: stands for the residual of its budget term (context.Draft.residual)
    residual: bool = False

    @property
    def total_requested(self) -> int:
        return self.requested_bytes * self.count


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


#: the terms a term model fits a residual of (calibrate.model), in its order
ITEMIZED_TERMS: tuple[str, ...] = ("u_pre", "n", "p", "g_e")


def itemized_sums(entries: tuple[Entry, ...]) -> dict[str, int]:
    """The exactly itemized part of each of :data:`ITEMIZED_TERMS`: every entry but the residual ones.

    Workspace views are left out too: vLLM's workspace arena is grow-only and shared with the forward pass,
    so the real boots' peak is smaller than the indexer plans alone (0.75 GiB logged vs 1.04 GiB of plans
    at 3072 rows): the plans are not additive to P, and the activations residual stands for the whole peak.
    """
    out = dict.fromkeys(ITEMIZED_TERMS, 0)
    for e in entries:
        if e.residual or e.kind == "workspace":
            continue
        term = term_of(e)
        if term in out:
            out[term] += e.device_bytes
    return out


@dataclass(frozen=True, slots=True)
class Terms:
    u_pre: int  # pre-snapshot: CUDA context, NCCL, one-shot eager channel, DMA slab
    w: int  # weights
    p: int  # torch peak increase during profiling (activations, workspace arenas)
    n: int  # non-torch increase during profiling (IPC channels made at warmup, NCCL lazies)
    g_e: int  # CUDA-graph estimate (graph pool + channels minted by the profiling capture)
    x: int  # unbudgeted
    kv: int  # the KV cache entry, 0 before it is sized


@dataclass(frozen=True, slots=True)
class RankLedger:
    rank: int
    gpu: int
    entries: tuple[Entry, ...]

    def by_lifetime(self, lifetime: Lifetime) -> tuple[Entry, ...]:
        return tuple(e for e in self.entries if e.lifetime == lifetime)

    def device_total(self, lifetime: Lifetime | None = None) -> int:
        return sum(e.device_bytes for e in self.entries if lifetime is None or e.lifetime == lifetime)

    def get(self, name: str) -> Entry | None:
        for e in self.entries:
            if e.name == name:
                return e
        return None


class Transient(NamedTuple):
    """One allocation of the runtime demand: an entry (lifetime ``runtime``) and the phase it fires in."""

    entry: Entry
    phase: Phase


@dataclass(frozen=True, slots=True)
class RuntimeDemand:
    """What a rank allocates after startup, beyond the memory it keeps cached, under the promised load.

    ``transients`` are in firing order within each phase; the peak is the largest phase sum.
    """

    transients: tuple[Transient, ...] = ()

    def phase_bytes(self, phase: Phase) -> int:
        return sum(t.entry.device_bytes for t in self.transients if t.phase == phase)

    @property
    def peak_phase(self) -> Phase:
        return max(PHASES, key=self.phase_bytes)

    @property
    def peak_bytes(self) -> int:
        return self.phase_bytes(self.peak_phase) if self.transients else 0

    def in_phase(self, phase: Phase) -> tuple[Entry, ...]:
        return tuple(t.entry for t in self.transients if t.phase == phase)

    def deciding(self, free: int) -> Entry | None:
        """The transient that runs out of ``free`` bytes (in firing order of the peak phase), or, when the
        whole peak fits, the largest one of it: the one a smaller pool would have to make room for."""
        entries = self.in_phase(self.peak_phase)
        used = 0
        for e in entries:
            used += e.device_bytes
            if used > free:
                return e
        return max(entries, key=lambda e: e.device_bytes, default=None)


@dataclass(frozen=True, slots=True)
class LoadPeak:
    """What a rank holds at the end of model loading (the weights first), against F0 as planned."""

    entries: tuple[Entry, ...] = ()
    #: F0 the peak was sized against (the InstantTensor ring reads it)
    free: int = 0

    @property
    def peak_bytes(self) -> int:
        return sum(e.device_bytes for e in self.entries)


@dataclass(frozen=True, slots=True)
class Ledger:
    stack: str
    library: Literal["builtin", "b12x"]
    constants_source: str
    ranks: tuple[RankLedger, ...]
    #: hazards a code path could allocate but this configuration does not reach (not budgeted)
    latent: tuple[Entry, ...] = ()
    notes: tuple[str, ...] = field(default=())
    #: the budget terms of rank 0 without the KV entry, as the KV entry was sized with them: the entries'
    #: sums, with the calibration's modelled whole terms in their place (terms.budget_terms); None when
    #: built by hand
    base_terms: Terms | None = None
    #: the runtime demand of every rank (the ranks are symmetric), after the KV pool and the graphs
    runtime: RuntimeDemand = field(default_factory=RuntimeDemand)
    #: what calibration supplied (UNCALIBRATED: the ledger's defaults); the budget and the verdict read it
    inputs: LedgerInputs = UNCALIBRATED
    #: the load-time peak, where loading holds more than the weights (None otherwise)
    load_time: LoadPeak | None = None

    @property
    def rank0(self) -> RankLedger:
        return self.ranks[0]

    def entry(self, name: str, rank: int = 0) -> Entry | None:
        return self.ranks[rank].get(name)

    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.ranks[0].entries)

    def itemized(self) -> dict[str, int]:
        """Rank 0's exactly itemized part of each modelled term (:func:`itemized_sums`)."""
        return itemized_sums(self.rank0.entries)
