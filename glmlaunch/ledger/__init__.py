"""Stage 2 — the memory model: every allocation each GPU rank makes, and vLLM's budget over it.

``build_ledger(config, inputs)`` here; ``compute_budget(config, ledger)`` in :mod:`glmlaunch.ledger.budget`
and ``judge(config, ledger, budget)`` in :mod:`glmlaunch.ledger.verdict`. A plan chains the three
(``glmlaunch.plan.plan.make_plan``); ``inputs`` (:mod:`glmlaunch.ledger.inputs`) are what calibration
supplies, carried by the ledger so that the budget and the verdict read the same.

``build_ledger(config, inputs)`` is pure arithmetic over the typed configuration and its inputs (the
checkpoint's safetensors payload among them, read on disk where the plan is asked for: the ledger reads no
file); nothing is memoized across calls (a plan builds a few ledgers, a search a few hundred). One
module per memory subsystem returns draft entries; this module orders them by creation (lifetime), models
their device footprint (:mod:`glmlaunch.ledger.footprint`), sizes the KV cache from what is left, and
copies the result to every TP rank (the ranks are symmetric in these deployments).

``library``: ``builtin`` (default: the versioned constants table, no heavy import), ``b12x`` (take
constants, layouts and the indexer planner from the installed b12x; error if it does not import) or
``auto`` (b12x when it imports, else builtin). Importing b12x costs ~4 s and pulls torch, which light
commands must not do unless asked.
"""

from __future__ import annotations

from collections.abc import Callable

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.errors import ConfigError
from glmlaunch.ledger import (
    activations,
    capture_stream,
    dcp_a2a,
    dcp_prefill,
    demand,
    dma,
    exl3,
    fold,
    indexer,
    kv_cache,
    lmcache,
    loadtime,
    oneshot,
    paged_logits,
    profile_prefill,
    r7,
    runtime,
    topk_exchange,
    weights,
)
from glmlaunch.ledger.constants import StackConstants, for_stack
from glmlaunch.ledger.context import Context, Draft, LibraryLayouts, fmt_int
from glmlaunch.ledger.footprint import PAGE, SMALL_SEGMENT, Packer, align, transient_peak
from glmlaunch.ledger.inputs import UNCALIBRATED, LedgerInputs
from glmlaunch.ledger.model import Entry, Ledger, Origin, RankLedger, Terms, itemized_sums, term_of
from glmlaunch.ledger.terms import TERM_SYMBOLS, budget_terms, gate_bytes, kv_bytes, modelled_terms, terms

__all__ = [
    "LIBRARY_CHOICES",
    "UNCALIBRATED",
    "Entry",
    "Ledger",
    "LedgerInputs",
    "RankLedger",
    "build_ledger",
    "itemize",
]

LIBRARY_CHOICES = ("builtin", "b12x", "auto")

_ORDER = {"pre-snapshot": 0, "budget-term": 1, "profiled": 2, "graph-estimated": 3, "unbudgeted": 4}


def _library(config: DeploymentConfig, library: str) -> tuple[StackConstants, LibraryLayouts | None, str]:
    k = for_stack(config.stack)
    if library == "builtin":
        return k, None, k.source
    if library not in LIBRARY_CHOICES:
        raise ConfigError("unknown library source", key="--library", value=library, allowed=LIBRARY_CHOICES)
    from glmlaunch.ledger import b12x_bridge

    bridge = b12x_bridge.load(k)
    if bridge is None:
        if library == "b12x":
            raise ConfigError(
                "b12x cannot be imported",
                key="--library",
                value=library,
                hint="install the b12x extra (pip install 'glmlaunch[b12x]') or use --library builtin",
            )
        return k, None, k.source + " (b12x not importable)"
    return bridge.constants, bridge, bridge.describe()


def _footprint(d: Draft, packer: Packer, expandable: bool) -> int:
    if d.alloc == "ipc":
        return packer.ipc(d.requested_bytes, d.count)
    if d.alloc == "torch":
        return packer.torch(d.requested_bytes, d.count, d.stream)
    if d.alloc == "transient":
        return d.count * transient_peak(d.pieces, expandable=expandable)
    if d.alloc == "absorbed":
        return 0
    return d.requested_bytes * d.count


def _entry(d: Draft, device: int) -> Entry:
    return Entry(
        d.name,
        d.subsystem,
        d.requested_bytes,
        d.count,
        device,
        d.kind,
        d.lifetime,
        d.condition,
        d.reader,
        d.formula,
        d.origin,
        d.note,
        d.residual,
    )


def _term_sources(itemized: Terms, whole: Terms, modelled: dict[str, int], who: str) -> str:
    """Where W, P, N and G_e come from, with the entries' sum of each modelled term that differs."""
    names = ("w", "p", "n", "g_e")
    model = [n for n in names if n in modelled]
    summed = [n for n in names if n not in modelled]
    parts = []
    if model:
        differ = [
            f"{TERM_SYMBOLS[n]} {fmt_int(getattr(itemized, n))}"
            for n in model
            if getattr(itemized, n) != getattr(whole, n)
        ]
        text = f"{', '.join(TERM_SYMBOLS[n] for n in model)}: whole terms of {who}"
        if differ:
            text += f", not the sums of their entries ({', '.join(differ)})"
        parts.append(text)
    if summed:
        parts.append(f"{', '.join(TERM_SYMBOLS[n] for n in summed)}: sums of their entries")
    return "; ".join(parts)


def _kv_entry(config: DeploymentConfig, ctx: Context, sized: tuple[Entry, ...]) -> tuple[Entry, Terms]:
    """The KV pool's entry, and the budget terms it was sized with (the budget uses the same)."""
    geo = kv_cache.geometry(config)
    cal = ctx.inputs.kv_bytes_per_token
    per_token = cal if cal is not None else geo.bytes_per_token
    pinned = config.memory.kv_cache_memory_bytes
    total = config.hardware.memory_per_gpu
    # The budget (budget.py) sizes vLLM's KV cache with these same two calls over these same terms, so
    # the entry, --explain kv_cache, diff and the budget line cannot show two figures.
    itemized = terms(sized)
    whole = budget_terms(itemized, ctx.inputs)
    modelled = modelled_terms(ctx.inputs)
    natural = kv_bytes(gate_bytes(config.memory.gpu_memory_utilization, total), whole, pinned)
    kv = kv_cache.pool_bytes(config, per_token, natural)
    blocks = config.memory.num_gpu_blocks_override
    r = gate_bytes(config.memory.gpu_memory_utilization, total)
    rid = ctx.inputs.record_id
    who = {
        "rig-defaults": "the term model (rig defaults)",
        "term-model": "the term model fitted on the calibration records",
    }.get(str(rid), f"calibration {rid}")
    from_memory = (
        f"R - W - P - N - G_e = {fmt_int(r)} - {fmt_int(whole.w)} - {fmt_int(whole.p)} - "
        f"{fmt_int(whole.n)} - {fmt_int(whole.g_e)} = {fmt_int(natural)}  "
        f"[R = ceil({config.memory.gpu_memory_utilization} * {fmt_int(total)}); "
        f"{_term_sources(itemized, whole, modelled, who)}]"
    )
    if blocks is not None:
        # vLLM sizes the pool from memory first (and checks one request against it), then takes the
        # block count it is told
        formula = (
            f"--num-gpu-blocks-override: {fmt_int(blocks)} blocks of {kv_cache.KV_BLOCK} tokens at "
            f"{fmt_int(per_token)} B/token: {fmt_int(kv)} B; the pool sized from memory would be "
            + from_memory
        )
        origin: Origin = "exact"
    elif pinned is not None:
        formula = f"--kv-cache-memory-bytes = {fmt_int(kv)}"
        origin = "exact"
    else:
        formula = from_memory
        # A modelled whole term replaces its entries, so only the entries still summed (and the weights
        # entry, which carries how W was carried over) decide whether the figure is an estimate.
        summed = {"w", "p", "n", "g_e"} - (modelled.keys() - {"w"})
        deciding = [e for e in sized if term_of(e) in summed]
        if any(e.origin in ("default", "estimate") for e in deciding):
            origin = "estimate"
        else:
            origin = "calibrated" if modelled else "exact"
    dcp = config.parallel.dcp
    tokens = kv_cache.tokens_for(kv, per_token, dcp)
    need = kv_cache.request_bytes(config, per_token)
    entry = Entry(
        name="kv_cache",
        subsystem="kv_cache",
        requested_bytes=kv,
        count=1,
        device_bytes=kv,
        kind="torch",
        lifetime="budget-term",
        condition=f"KV dtype {config.memory.kv_cache_dtype}, DCP {dcp}",
        reader="attention (sparse MLA) and the indexer",
        formula=formula,
        origin=origin,
        note=(
            f"{fmt_int(per_token)} B/token/rank ({'calibrated' if cal is not None else geo.formula}); "
            f"holds {fmt_int(tokens // dcp)} tokens per rank (whole {kv_cache.KV_BLOCK}-token blocks) = "
            f"{fmt_int(tokens)} with DCP {dcp}; one {fmt_int(config.scheduler.max_model_len)}-token request "
            f"needs {fmt_int(need)} B per rank"
        ),
    )
    return entry, whole


_SUBSYSTEMS: tuple[Callable[[Context], list[Draft]], ...] = (
    runtime.entries,
    weights.entries,
    # a capture pass's handle exchange precedes the channel it sets up (the replay keeps this order)
    capture_stream.entries,
    oneshot.entries,
    dma.entries,
    dcp_a2a.entries,
    topk_exchange.entries,
    indexer.entries,
    activations.entries,
    fold.entries,
    # appended last so the packing of the entries above is unchanged by them
    exl3.entries,
    dcp_prefill.entries,
    lmcache.entries,
    # the B12X-era EXL3 arenas and the ii profile pass: last, so no earlier configuration packs otherwise
    r7.all_entries,
    profile_prefill.entries,
    # the CKV prefetch ring's lookahead (in W): last, so no earlier configuration packs otherwise
    dcp_prefill.prefetch_ring,
)


#: hazards a code path could allocate but the configuration does not charge (listed under ``latent``)
_LATENT: tuple[Callable[[Context], list[Draft]], ...] = (
    paged_logits.latent,
    topk_exchange.latent,
)


def _latent_footprint(d: Draft, expandable: bool) -> int:
    # A latent entry is priced alone, as if it were the next allocation of its kind: a slab in whole
    # cudaMalloc pages, a transient at its torch peak.
    if d.alloc == "ipc":
        return d.count * align(d.requested_bytes, PAGE)
    return transient_peak(d.pieces, expandable=expandable)


def _pack(drafts: tuple[Draft, ...], expandable: bool) -> tuple[Entry, ...]:
    ordered = sorted(drafts, key=lambda d: _ORDER[d.lifetime])
    # vLLM opens the torch small pool long before any pool is built (init tensors, the sampler), so the
    # first small persistent allocation does not open a segment (measured: DMA counters cost nothing).
    packer = Packer(expandable=expandable, torch_small_free=SMALL_SEGMENT)
    return tuple(_entry(d, _footprint(d, packer, expandable)) for d in ordered)


def _context(config: DeploymentConfig, inputs: LedgerInputs, library: str) -> tuple[Context, str]:
    k, lib, source = _library(config, library)
    ctx = Context(config=config, k=k, inputs=inputs, lib=lib, capture_sizes=tuple(config.capture_sizes()))
    return ctx, source


def _expandable(config: DeploymentConfig) -> bool:
    # allocator_conf's rule without building the string: LMCache forces expandable segments off
    return config.memory.allocator.expandable_segments and not config.lmcache


def _drafts(ctx: Context) -> list[Draft]:
    return [d for fn in _SUBSYSTEMS for d in fn(ctx)]


def _notes(ctx: Context, drafts: list[Draft]) -> tuple[str, ...]:
    config, k = ctx.config, ctx.k
    notes: list[str] = [
        d.note for d in drafts if d.name == "weights" and "differs from the calibrated" in d.note
    ]
    on_disk = weights.payload_note(ctx)
    if on_disk is not None:
        notes.append(on_disk)
    w, d = config.parallel.tp, config.parallel.dcp
    sms = config.hardware.num_sms
    oneshot_sms = k.oneshot_required_sms * k.max_concurrent_channels
    dcp_sms = k.dcp_a2a_required_sms * k.max_concurrent_channels
    if config.comm.pcie_allreduce and w > 1 and w not in k.oneshot_world_sizes:
        notes.append(f"no one-shot pool: TP {w} is not a one-shot world size {k.oneshot_world_sizes}")
    elif config.comm.pcie_allreduce and w > 1 and sms < oneshot_sms:
        notes.append(
            f"no one-shot pool and no DMA all-reduce: the {k.stack} pool needs {oneshot_sms} visible SMs "
            f"({k.oneshot_required_sms} per grid x max_concurrent_channels {k.max_concurrent_channels}), "
            f"hardware.num_sms is {sms}; vLLM falls back to PyNCCL all-reduce"
        )
    if (
        config.comm.pcie_allreduce
        and w > 1
        and sms >= oneshot_sms
        and not dma.built(config, k)
        and config.comm.dma_min_bytes is not None
    ):
        notes.append(f"no DMA all-reduce: TP {w} is not a DMA world size {k.dma_world_sizes}")
    if d > 1 and config.comm.dcp_a2a and d not in k.dcp_a2a_world_sizes:
        notes.append(f"no DCP A2A pool: DCP {d} is not a DCP A2A world size {k.dcp_a2a_world_sizes}")
    elif d > 1 and config.comm.dcp_a2a and sms < dcp_sms:
        notes.append(
            f"no DCP A2A pool: the {k.stack} pool needs {dcp_sms} visible SMs ({k.dcp_a2a_required_sms} per "
            f"grid x max_concurrent_channels {k.max_concurrent_channels}), hardware.num_sms is {sms}"
        )
    return tuple(notes)


def itemize(config: DeploymentConfig) -> dict[str, int]:
    """The exactly itemized part of each modelled term of ``config`` (u_pre, n, p, g_e): what a term model
    fits its residuals over. Calibration cannot change it (the residual entries are left out), so no
    inputs are taken; nor is the KV pool or the runtime demand built. Equal to ``Ledger.itemized()`` of any
    ledger of ``config``."""
    ctx, _ = _context(config, UNCALIBRATED, "builtin")
    return itemized_sums(_pack(tuple(_drafts(ctx)), _expandable(config)))


def build_ledger(
    config: DeploymentConfig, inputs: LedgerInputs = UNCALIBRATED, *, library: str = "builtin"
) -> Ledger:
    """Every allocation of every rank of ``config``, with ``inputs`` from calibration (UNCALIBRATED: the
    ledger's defaults), and the budget terms the KV pool was sized with."""
    ctx, source = _context(config, inputs, library)
    expandable = _expandable(config)
    drafts = _drafts(ctx)
    sized = _pack(tuple(drafts), expandable)
    latent = tuple(_entry(d, _latent_footprint(d, expandable)) for fn in _LATENT for d in fn(ctx))
    kv, base = _kv_entry(config, ctx, sized)
    entries = (*sized, kv)
    gpus = tuple(config.gpu_list)
    ranks = tuple(
        RankLedger(rank=i, gpu=gpus[i] if i < len(gpus) else i, entries=entries)
        for i in range(config.parallel.tp)
    )
    weights_entry = next(e for e in sized if e.name == "weights")
    return Ledger(
        stack=config.stack,
        library="b12x" if ctx.lib is not None else "builtin",
        constants_source=source,
        ranks=ranks,
        latent=latent,
        notes=_notes(ctx, drafts),
        base_terms=base,
        runtime=demand.runtime_demand(ctx),
        inputs=inputs,
        load_time=loadtime.load_peak(
            config,
            weights_entry._replace(device_bytes=base.w, requested_bytes=base.w),
            config.hardware.memory_per_gpu - base.u_pre,
        ),
    )
