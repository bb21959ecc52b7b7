"""``glmlaunch audit``: what a configuration allocates but never reads, or mostly leaves unused.

Each finding names the ledger entries it is about, the bytes a rank would get back (requested and
modelled device footprint), how it was computed, and the fix the seed's review proposes with its
caveats. Findings do not overlap: the leaked V1 channel's ``rank_data`` is counted under the leak, not
under the ``rank_data`` finding, so the total is what applying every fix returns.

Rules as data, declared as :mod:`glmlaunch.config.rules` declares validation: one small named function
each, registered with a stable id and a level, in the order :data:`RULES` reports them. An audit rule's
level is how certain the bytes it returns are (``exact``, ``estimate`` or ``upper-bound``). A rule reads
one :class:`Audited` configuration and returns its :class:`Found`, or why it does not apply (a string).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger import dma, indexer
from glmlaunch.ledger.constants import StackConstants, for_stack
from glmlaunch.ledger.context import Context
from glmlaunch.ledger.footprint import Packer
from glmlaunch.ledger.inputs import UNCALIBRATED
from glmlaunch.ledger.model import Entry, Ledger
from glmlaunch.plan.planner import ProfilePlan, plan_profile

MIB = 1024 * 1024
RANK_DATA_FIX_BYTES = 1 * MIB

_FULL_COMPRESSED = frozenset({"ring", "a2a", "i8_ring", "i8_a2a", "mx_ring", "mx_a2a"})

Level = Literal["exact", "estimate", "upper-bound"]


@dataclass(frozen=True, slots=True)
class Finding:
    id: str
    title: str
    entries: tuple[str, ...]
    recoverable_bytes: int  # requested bytes per rank
    recoverable_device_bytes: int  # modelled footprint per rank
    evidence: str
    fix: str
    caveat: str = ""
    certainty: Level = "exact"


@dataclass(frozen=True, slots=True)
class Audit:
    findings: tuple[Finding, ...]
    not_applicable: tuple[tuple[str, str], ...]  # (id, why)

    @property
    def total_bytes(self) -> int:
        return sum(f.recoverable_bytes for f in self.findings)

    @property
    def total_device_bytes(self) -> int:
        return sum(f.recoverable_device_bytes for f in self.findings)


@dataclass(frozen=True)
class Audited:
    """What every rule reads: the configuration, its ledger and its library generation's constants."""

    config: DeploymentConfig
    ledger: Ledger

    @cached_property
    def k(self) -> StackConstants:
        return for_stack(self.config.stack)

    @property
    def expandable(self) -> bool:
        return "expandable_segments:True" in self.config.allocator_conf

    @cached_property
    def capture_sizes(self) -> list[int]:
        return self.config.capture_sizes()

    @property
    def window(self) -> int:
        """Query tokens one decode step carries: max_num_seqs x (1 + MTP)."""
        return self.config.scheduler.max_num_seqs * self.config.decode_step

    def entries(self, prefix: str = "") -> list[Entry]:
        return [e for e in self.ledger.rank0.entries if e.name.startswith(prefix)]


@dataclass(frozen=True, slots=True)
class Found:
    """A rule's result; the registry adds the rule's id and level."""

    title: str
    entries: tuple[str, ...]
    recoverable_bytes: int
    recoverable_device_bytes: int
    evidence: str
    fix: str
    caveat: str = ""


Check = Callable[[Audited], Found | str]


@dataclass(frozen=True)
class Rule:
    id: str
    level: Level
    summary: str
    evidence: str
    check: Check


RULES: list[Rule] = []


def rule(id: str, level: Level, summary: str, evidence: str = "") -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        RULES.append(Rule(id, level, summary, evidence, fn))
        return fn

    return register


def audit_ledger(config: DeploymentConfig, ledger: Ledger) -> Audit:
    subject = Audited(config, ledger)
    found: list[Finding] = []
    skipped: list[tuple[str, str]] = []
    for r in RULES:
        outcome = r.check(subject)
        if isinstance(outcome, str):
            skipped.append((r.id, outcome))
            continue
        found.append(
            Finding(
                id=r.id,
                title=outcome.title,
                entries=outcome.entries,
                recoverable_bytes=outcome.recoverable_bytes,
                recoverable_device_bytes=outcome.recoverable_device_bytes,
                evidence=outcome.evidence,
                fix=outcome.fix,
                caveat=outcome.caveat,
                certainty=r.level,
            )
        )
    return Audit(tuple(found), tuple(skipped))


def run_audit(profile: str | None, overrides: Sequence[str] = ()) -> tuple[ProfilePlan, Audit]:
    result = plan_profile(profile, overrides)
    return result, audit_ledger(result.config, result.ledger)


# --- the one-shot all-reduce --------------------------------------------------------------------------


@rule("oneshot-rank-data", "exact", "one-shot rank_data: 256 B used of each 8 MiB")
def _rank_data(a: Audited) -> Found | str:
    rd = [e for e in a.entries("oneshot.rank_data.") if not e.name.endswith("leaked-profiling")]
    n_rd = sum(e.count for e in rd)
    if not n_rd:
        return "no one-shot pool (PCIe all-reduce off or TP world size unsupported)"
    per = rd[0].requested_bytes
    dev_now = sum(e.device_bytes for e in rd)
    dev_fix = Packer(expandable=a.expandable).torch(RANK_DATA_FIX_BYTES, n_rd)
    return Found(
        title=f"{a.k.oneshot_rank_data_used_bytes} B used of each {per // MIB} MiB one-shot rank_data",
        entries=tuple(e.name for e in rd),
        recoverable_bytes=n_rd * (per - RANK_DATA_FIX_BYTES),
        recoverable_device_bytes=max(0, dev_now - dev_fix),
        evidence=(
            f"{n_rd} channel(s) x {per:,} B; only 2 RankData "
            "records (2 x 128 B) are registered on the "
            f"eager-buffer path (register_graph_buffers is unreachable with eager buffers); "
            f"shrinking to {RANK_DATA_FIX_BYTES:,} B keeps {RANK_DATA_FIX_BYTES // 128:,} slots"
        ),
        fix=(
            "scale rank_data_bytes with max_size (about 1 MiB covers 84 KiB dispatch registration); "
            "leave DEFAULT_MAX_SIZE alone (autotune/benchmark callers use it)"
        ),
        caveat="check_rank_data_capacity fails loudly at startup if it were ever too small",
    )


# --- the DMA ring all-reduce --------------------------------------------------------------------------


def _max_bytes(c: DeploymentConfig) -> int:
    return dma.max_bytes(c.scheduler.max_num_batched_tokens, c.model.geometry.hidden_size)


@rule("dma-disabled-by-crossover", "exact", "a DMA slab that the crossover disables")
def _dma_disabled(a: Audited) -> Found | str:
    if a.ledger.entry("dma.slab") is None:
        return "no DMA slab (DMA off or PCIe all-reduce off)"
    c = a.config
    w = c.parallel.tp
    mb = _max_bytes(c)
    crossover = c.comm.dma_min_bytes or 0
    largest = mb // w * w
    if crossover < mb:
        return f"crossover {crossover:,} B < max_bytes {mb:,} B"
    dead = [e for e in a.entries() if e.subsystem == "dma"]
    return Found(
        title="DMA slab allocated although its crossover admits no payload",
        entries=tuple(e.name for e in dead),
        recoverable_bytes=sum(e.total_requested for e in dead),
        recoverable_device_bytes=sum(e.device_bytes for e in dead),
        evidence=(
            f"VLLM_PCIE_DMA_MIN_BYTES = {crossover:,} B >= "
            f"max_bytes = {mb:,} B (the largest payload "
            f"the all-reduce admits; largest shardable {largest:,} B)"
        ),
        fix="set comm.dma_min_bytes: off (VLLM_PCIE_DMA_MIN_BYTES=off builds no DMA object and no slab)",
    )


@rule("dma-compressed-dead-slots", "exact", "compressed wire modes keep the full bf16 slot width")
def _dma_compressed(a: Audited) -> Found | str:
    if a.ledger.entry("dma.slab") is None:
        return "no DMA slab"
    c = a.config
    if not c.comm.compressed_wire:
        return "bf16 wire: the slab is correctly sized"
    mode = c.comm.dma_wire_mode
    w = c.parallel.tp
    mb = _max_bytes(c)
    cap = dma.shard_capacity(a.k, mb, w)
    comp = dma.compressed_slot_bytes(a.k, mb, w)
    slots = 2 * (w - 1) if mode in _FULL_COMPRESSED else (w - 1)
    dead_bytes = slots * (cap - comp)
    return Found(
        title=f"compressed wire {mode!r}: step slots keep the full bf16 width",
        entries=("dma.slab", "dma.fp8_stage"),
        recoverable_bytes=dead_bytes,
        recoverable_device_bytes=dead_bytes // (2 * MIB) * (2 * MIB),
        evidence=(
            f"{slots} slot(s) x (shard_capacity {cap:,} - compressed width {comp:,}) B; "
            + (
                "ring/a2a variants compress every hop"
                if mode in _FULL_COMPRESSED
                else "AG-only: reduce-scatter hops stay bf16; only the W-1 all-gather slots"
            )
        ),
        fix=(
            "size each slot per mode from (mode, max_bytes, world_size) only (never a per-call "
            "value: every rank must agree on the stride) "
            "and derive _fp8_stage from the same widths"
        ),
        caveat="compressed modes change model numerics; they are an explicit opt-in",
    )


# --- CUDA graphs --------------------------------------------------------------------------------------


@rule(
    "v1-leaked-profiling-channel",
    "estimate",
    "the V1 profiling capture leaks one channel per pool for the process lifetime",
    evidence="rollback measured on 2x H200 (bench/PREFLIGHT.md)",
)
def _v1_leak(a: Audited) -> Found | str:
    leaked = [e for e in a.entries() if e.name.endswith(".leaked-profiling")]
    if not leaked:
        return "not the V1 runner with CUDA graphs and per-capture channels"
    return Found(
        title="V1 profiling capture leaks one channel per pool for the process lifetime",
        entries=tuple(e.name for e in leaked),
        recoverable_bytes=sum(e.total_requested for e in leaked),
        # Measured on 2x H200 (bench/PREFLIGHT.md): a rollback returns the pass's IPC slabs; its
        # torch segments stay cached on the pass's stream, so only the IPC pages come back.
        recoverable_device_bytes=sum(e.device_bytes for e in leaked if e.kind == "ipc"),
        evidence="the V1 runner's throwaway profiling capture has no checkpoint/rollback (V2 has one)",
        fix=(
            "wrap the V1 profiling capture in checkpoint_b12x_graph_channels / "
            "rollback_b12x_graph_channels (reuses the V2 path verbatim)"
        ),
        caveat=(
            "device bytes count the IPC slabs only: measured on the V2 path, a rollback returned "
            "10 of a pass's 32 MiB; its torch segments (rank_data, handle exchange) stay cached on "
            "the pass's stream unless torch.cuda.empty_cache() follows the rollback"
        ),
    )


@rule("capture-beyond-decode-window", "estimate", "capture sizes beyond the decode window")
def _capture_beyond(a: Audited) -> Found | str:
    c, sizes, window = a.config, a.capture_sizes, a.window
    beyond = [s for s in sizes if s > window]
    pool = a.ledger.entry("cudagraph.pool")
    if not beyond or pool is None:
        return "every capture size is within the decode window"
    # One shared graph pool, captured largest-first: it grows with the largest captured size.
    kept = [s for s in sizes if s <= window]
    share = pool.device_bytes - pool.device_bytes * (max(kept) if kept else 0) // max(sizes)
    return Found(
        title=f"{len(beyond)} capture size(s) above the decode window {window}",
        entries=("cudagraph.pool",),
        recoverable_bytes=share,
        recoverable_device_bytes=share,
        evidence=(
            f"max_num_seqs {c.scheduler.max_num_seqs} "
            f"x (1 + MTP {c.mtp}) = {window}; sizes "
            f"{beyond} never serve a decode step; the shared graph pool grows with the largest "
            f"size, so 1 - {max(kept) if kept else 0}/{max(sizes)} of it is charged"
        ),
        fix=f"cap cudagraph capture sizes at {window} (keep multiples of MTP+1)",
        caveat="per-size graph memory is not itemized: measure with the preflight",
    )


# An opinion about graphs, not a memory finding: the appliance's turnkey captures 4..64 step 4 at MTP 5 on
# purpose, so validation stays quiet about it.
@rule("capture-off-decode-step", "estimate", "capture sizes off the decode step (no memory to gain)")
def _capture_off_step(a: Audited) -> Found | str:
    sizes, window, step = a.capture_sizes, a.window, a.config.decode_step
    if not (sizes and a.config.is_exl3 and step > 1 and any(s % step for s in sizes)):
        return "capture sizes are multiples of MTP+1 (or no MTP / not EXL3)"
    # a decode step of n sequences carries n x (1 + MTP) tokens and replays the smallest size >= that
    steps = range(1, window // step + 1)
    used = sorted({min((s for s in sizes if s >= n * step), default=0) for n in steps})
    idle = [s for s in sizes if s not in used and s <= window]
    return Found(
        title=f"capture sizes are not multiples of MTP+1 = {step}: decode pads to {used}",
        entries=("cudagraph.pool",),
        recoverable_bytes=0,
        recoverable_device_bytes=0,
        evidence=(
            f"decode steps carry multiples of {step} tokens ({step} .. {window}); they replay the "
            f"sizes {used}; {idle or 'no size'} within the window only serve mixed batches"
        ),
        fix=f"capture multiples of {step} up to {window} to drop the padding (the r12 chain's rule)",
        caveat="the shared graph pool grows with the largest size, not the count: no memory to gain",
    )


# --- the sparse indexer -------------------------------------------------------------------------------


@rule("fp32-tile-logits", "upper-bound", "the indexer's tile logits are fp32")
def _fp32_tile_logits(a: Audited) -> Found | str:
    arena = a.ledger.entry("indexer.prefill.lane0")
    if arena is None or arena.device_bytes <= 0:
        return "sparse indexer off"
    pre, _dec = indexer.plans(Context(a.config, a.k, UNCALIBRATED, None, tuple(a.capture_sizes)))
    half = dict(pre.regions)["tile_logits"] // 2
    step = 20 * MIB if a.expandable else 2 * MIB
    return Found(
        title="indexer tile logits are fp32 (72% of the prefill plan)",
        entries=("indexer.prefill.lane0",),
        recoverable_bytes=half,
        recoverable_device_bytes=half // step * step,
        evidence=(
            f"bf16 tile logits would halve the region ({half:,} B back); the realized saving is "
            "arena - max(new plan, largest other lane-0 consumer): an upper bound"
        ),
        fix="accept bf16 tile_logits in run_tiled_topk (keep fp32 carry/output) or a per-plan dtype",
        caveat=(
            "numerics: 8 mantissa bits reorder near-equal indexer scores, so the selected top-k set "
            "changes; needs a bf16 kernel template, radix-key "
            "mapping and store path; validate on the model"
        ),
    )


@rule("indexer-lane1-duplicate", "estimate", "a second indexer arena in workspace lane 1")
def _indexer_lane1(a: Audited) -> Found | str:
    lane1 = [e for e in a.entries("indexer.") if e.name.endswith("lane1")]
    if indexer.lanes(a.config) != 2 or not lane1:
        return "one workspace lane (V1, or no speculative decoding)"
    return Found(
        title="lane 1 (MTP drafter) may hold a second copy of the indexer arena",
        entries=tuple(e.name for e in lane1),
        recoverable_bytes=max(e.requested_bytes for e in lane1),
        recoverable_device_bytes=sum(e.device_bytes for e in lane1),
        evidence="V2 runner + speculative decoding: num_workspace_lanes = 2; lane 1 is an independent arena",
        fix="share the indexer reservation across lanes (or size lane 1 for the drafter's rows)",
        caveat="unsettled statically: measure with VLLM_DEBUG_WORKSPACE=1",
    )
