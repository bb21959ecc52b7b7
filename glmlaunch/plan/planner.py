"""``glmlaunch plan``: resolve a profile, plan it (:mod:`.plan`), and the JSON document.

The ``--json`` document is versioned (:data:`SCHEMA_VERSION`) and described by the pydantic models
below; ``docs/plan-schema-v1.json`` is their JSON Schema, and a test keeps the two identical. Adding a
field is a compatible change within version 1; renaming or removing one, or changing a meaning, bumps
the version.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from glmlaunch import __version__
from glmlaunch.config.resolve import Resolved
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import parse_size_option
from glmlaunch.errors import ConfigError
from glmlaunch.ledger.budget import Budget
from glmlaunch.ledger.constants import StackConstants, for_stack
from glmlaunch.ledger.model import PHASES, Entry, Ledger, RuntimeDemand
from glmlaunch.ledger.verdict import Verdict
from glmlaunch.plan.plan import Plan, checkpoint_for, make_plan

if TYPE_CHECKING:
    from glmlaunch.plan.moved import Moved

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ProfilePlan:
    """The plan of a resolved profile, with the names its outputs give it."""

    resolved: Resolved
    plan: Plan
    # `--gpu-memory` as given (None: the profile's hardware.memory_per_gpu), for the headers that name
    # the configuration a plan is about.
    gpu_memory: str | None = None

    @property
    def config(self) -> DeploymentConfig:
        return self.plan.config

    @property
    def ledger(self) -> Ledger:
        return self.plan.ledger

    @property
    def budget(self) -> Budget:
        return self.plan.budget

    @property
    def verdict(self) -> Verdict:
        """The one verdict (status, blockers, confidence) every output of this plan renders."""
        return self.plan.verdict

    @cached_property
    def moved_by(self) -> tuple[tuple[Moved, ...], int]:
        """The records that moved this plan and by how much, and how many more were not attributed."""
        from glmlaunch.plan.moved import moved_by

        return moved_by(self.plan)

    @property
    def calibration_message(self) -> str:
        # Which calibration the figures use, in words: part of the plan's header (stdout), not a message,
        # so a shipped profile's plan says nothing about itself on stderr.
        return self.plan.message


def parse_gpu_memory(value: str | None) -> int | None:
    if value is None:
        return None
    # `--gpu-memory 96` meant 96 GiB, never 96 bytes; a device of 0 bytes holds nothing to plan
    return parse_size_option(value, key="--gpu-memory", what="a device total", minimum=1)


def plan_profile(
    profile: str | None,
    overrides: Sequence[str] = (),
    *,
    gpu_memory: str | None = None,
    library: str = "builtin",
    messages: list[str] | None = None,
) -> ProfilePlan:
    """Resolve and plan. The calibration message is kept in the plan (the plan shows it in its header),
    and appended to ``messages`` when given (``diff`` plans twice and says a message both sides share
    once)."""
    from glmlaunch.config.commands import resolve
    from glmlaunch.output import warn

    # The one resolve every command uses: the configuration's warnings are said here too (issue 22)
    resolved = resolve(profile, overrides)
    total = parse_gpu_memory(gpu_memory)
    # the checkpoint on disk is looked up in this process's environment, the one the command resolved in
    checkpoint = checkpoint_for(resolved.config, os.environ)
    plan = make_plan(resolved.config, device_total=total, library=library, checkpoint=checkpoint)
    for line in plan.warnings:
        warn(line)
    if messages is not None:
        messages.append(plan.message)
    if total is not None:
        resolved = Resolved(
            config=plan.config,
            provenance=resolved.provenance,
            warnings=resolved.warnings,
            profile_chain=resolved.profile_chain,
            overrides=resolved.overrides,
        )
    return ProfilePlan(resolved, plan, gpu_memory)


#: ``--explain`` names for the budget terms (the term model's account of each), besides ledger entries.
TERM_NAMES: dict[str, str] = {"W": "w", "P": "p", "N": "n", "G_E": "g_e", "T-F0": "u_pre", "U_PRE": "u_pre"}


def explain_terms(result: ProfilePlan, name: str) -> list[str] | None:
    """The term model's explanation of one budget term (or of all, for ``terms``); None when not a term."""
    key = name.upper()
    if key != "TERMS" and key not in TERM_NAMES:
        return None
    explain = dict(result.plan.inputs.explain)
    if not explain:
        return [f"{name}: no calibration record or rig defaults apply; the ledger's defaults stand (entries)"]
    wanted = list(dict.fromkeys(TERM_NAMES.values())) if key == "TERMS" else [TERM_NAMES[key]]
    return [explain[t] for t in wanted if t in explain] or [f"{name}: the term model does not know it"]


def find_entry(result: ProfilePlan, name: str) -> Entry:
    entries = {
        e.name: e
        for e in (
            *result.ledger.rank0.entries,
            *result.ledger.latent,
            *(t.entry for t in result.ledger.runtime.transients),
        )
    }
    if name in entries:
        return entries[name]
    close = difflib.get_close_matches(name, list(entries), n=3)
    prefix = [n for n in entries if n.startswith(name)]
    hint = f"did you mean {', '.join(close or prefix)}?" if (close or prefix) else None
    raise ConfigError(
        "no such ledger entry or budget term",
        key="--explain",
        value=name,
        allowed=[*sorted(entries), "terms", "W", "P", "N", "G_e", "T-F0"],
        hint=hint,
    )


# --- the JSON document (schema version 1) ---------------------------------------------------------


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class EntryDoc(_Doc):
    name: str
    subsystem: str
    requested_bytes: int
    count: int
    total_requested_bytes: int
    device_bytes: int
    kind: str
    lifetime: str
    origin: str
    condition: str
    reader: str
    formula: str
    note: str


class RankDoc(_Doc):
    rank: int
    gpu: int
    entries: list[EntryDoc]
    device_bytes_by_lifetime: dict[str, int]


class GenerationDoc(_Doc):
    stack: str
    releases: str
    library: str
    repo: str
    tree: str
    commit: str | None
    base: str | None
    pull_requests: list[str]
    patch: str | None
    patch_sha256: str | None
    pypi: str | None
    semantic_channels: bool


class LibraryDoc(_Doc):
    source: str
    stack: str
    constants: str
    # Added in version 1 (compatible).
    generation: GenerationDoc | None = Field(
        None,
        description=(
            "the kernel-library generation the constants were read from: its releases, tree and commit (or "
            "base + pull requests + integration patch), and whether vLLM names its channels per pass"
        ),
    )


def generation_line(k: StackConstants) -> str:
    """The plan header's citation: ``sparkinfer-r28 (r17-r28): <repo> tree 200c1db7 = …; <channel model>``."""
    named = "one channel per named pass (vLLM PR 216)"
    channels = named if k.semantic_channels else "a new channel per capture() call"
    return f"{k.stack} ({k.releases}): {k.tree.short()}; {channels}"


def generation_doc(stack: str) -> GenerationDoc:
    k = for_stack(stack)
    t = k.tree
    return GenerationDoc(
        stack=k.stack,
        releases=k.releases,
        library=k.library,
        repo=t.repo,
        tree=t.tree,
        commit=t.commit,
        base=t.base,
        pull_requests=list(t.pull_requests),
        patch=t.patch,
        patch_sha256=t.patch_sha256,
        pypi=t.pypi,
        semantic_channels=k.semantic_channels,
    )


class BudgetDoc(_Doc):
    total_bytes: int
    used_by_others_bytes: int
    u_pre_bytes: int
    f0_bytes: int
    gate_bytes: int
    weights_bytes: int
    profiled_torch_bytes: int
    profiled_non_torch_bytes: int
    graph_estimate_bytes: int
    kv_cache_bytes: int
    kv_cache_pinned: bool
    unbudgeted_bytes: int
    margin_bytes: int
    min_margin_bytes: int
    start_gate_ok: bool
    kv_bytes_per_token: int
    kv_bytes_per_token_origin: str
    kv_tokens: int
    max_model_len_request_bytes: int
    max_model_len_fits: bool
    recommended_kv_cache_memory_bytes: int | None = Field(
        description="the --kv-cache-memory-bytes that keeps the minimum margin and the runtime demand; null "
        "when no pool keeps the plan (the text plan names the obstacle instead)"
    )
    # Added in version 1 (compatible): the pinned pool.
    kv_cache_natural_bytes: int = Field(
        0,
        description="the KV pool vLLM sizes from memory (R - W - P - N - G_e, or --kv-cache-memory-bytes); "
        "kv_cache_bytes is the pool it allocates, which num_gpu_blocks_override replaces",
    )
    num_gpu_blocks_override: int | None = Field(
        None, description="the pinned pool's blocks per rank (--num-gpu-blocks-override), null when unpinned"
    )
    # Added in version 1 (compatible): the runtime demand after the KV pool, and the computed fix.
    runtime_demand_bytes: int = Field(
        0, description="the runtime demand's peak: the sum of its peak phase's transients (runtime_demand)"
    )
    runtime_phase: str = Field("long-prefill", description="the phase of that peak: long-prefill or decode")
    runtime_margin_bytes: int = Field(0, description="margin_bytes - runtime_demand_bytes: free at the peak")
    min_runtime_margin_bytes: int = Field(0, description="memory.min_runtime_margin")
    runtime_deciding: str | None = Field(
        None,
        description="the transient that runs out of memory first (in firing order), or the largest of the "
        "peak phase when all fit",
    )
    recommended_num_gpu_blocks: int | None = Field(
        None,
        description="the smallest pool (blocks per rank) that holds one max_model_len request and keeps the "
        "runtime margin, else the largest that keeps it, with the shorter context it holds; null when none "
        "does, or when that pin, planned, is still blocked (the start gate, the load, the request fit)",
    )
    recommended_context_tokens: int = Field(
        0,
        description="the context the recommended pool holds: max_model_len, or less when it cannot (set it "
        "as max_model_len with the pin: vLLM refuses a pool smaller than the context, and checks one "
        "request against the pool it sizes from memory, so it is never more than that pool holds)",
    )
    recommended_gpu_memory_utilization: float | None = Field(
        None, description="the highest GMU (3 decimals) whose natural pool keeps both margins"
    )
    recommended_gmu_kv_tokens: int = Field(
        0,
        description="the tokens that GMU's natural pool holds (less than max_model_len: only a pin fixes it)",
    )
    # Added in version 1 (compatible): the band (docs/memory-model.md §11).
    kv_tokens_range: list[int] = Field(
        default=[0, 0], description="[low, high]: kv_tokens at the band's pessimistic and optimistic edges"
    )
    margin_bytes_range: list[int] = Field(default=[0, 0], description="[low, high] of margin_bytes")
    runtime_margin_bytes_range: list[int] = Field(
        default=[0, 0], description="[low, high] of runtime_margin_bytes"
    )
    band: dict[str, Any] = Field(
        default={},
        description="covered (a boot of this release and shape is on record), covered_by (its ids), shape, "
        "and terms: per W, P+N+G_e and U_pre its kind (exact, calibrated, transferred, estimated), "
        "low_bytes, high_bytes and why",
    )
    # Added in version 1 (compatible): the recommendations the plan planned and dropped.
    dropped_advice: list[str] = Field(
        default=[],
        description="recommendations (the pool pin, --kv-cache-memory-bytes) that, planned, are still "
        "blocked, each with what blocks it; their fields are null",
    )


class RuntimeDoc(_Doc):
    """The runtime demand: every transient that fires after startup, with its phase."""

    phase: str = Field(description="the peak phase")
    peak_bytes: int
    phases: dict[str, int] = Field(description="the sum of each phase's transients")
    transients: list[EntryDoc] = Field(description="in firing order within each phase (note: the phase)")
    phase_of: dict[str, str] = Field(description="transient name -> the phase it fires in")


class LoadTimeDoc(_Doc):
    """The load-time peak: what a rank holds at the end of model loading, against F0."""

    peak_bytes: int = Field(description="the sum of the entries: W and what loading holds beside it")
    f0_bytes: int = Field(description="the free memory the load fits into (T - U_oth - U_pre)")
    margin_bytes: int = Field(description="f0_bytes - peak_bytes; negative: the load runs out of memory")
    entries: list[EntryDoc] = Field(description="the weights first, then each load-time allocation")


class BlockerDoc(_Doc):
    id: str = Field(
        description="the constraint that fails: load (the load-time peak exceeds F0), start-gate, no-kv "
        "(no memory left for the KV cache), "
        "request-fit (one max_model_len request does not fit the KV cache), oom-risk (negative margin), "
        "runtime (the runtime demand leaves less than memory.min_runtime_margin), margin (below "
        "memory.min_margin)"
    )
    message: str = Field(description="the constraint and its figures, e.g. 'the margin: 512.00 MiB < …'")
    terms: list[str] = Field(description="the budget terms this constraint rests on")


class VerdictDoc(_Doc):
    """The one memory verdict (glmlaunch.ledger.verdict): the same object in plan, check, serve and search."""

    status: str = Field(description="ok, caution, below-margin, runtime-oom, oom-risk or refused")
    ok: bool = Field(description="status is ok or caution (ok at the figures, not at the band's low edge)")
    reasons: list[str] = Field(description="the budget's reasons for a status other than ok")
    # Added in version 1 (compatible): findings that rest on defaults or estimates and so do not
    # decide the status, e.g. a max_model_len request that may not fit the KV budget.
    cautions: list[str] = Field(
        default=[],
        description="findings that rest on defaults or estimates and so do not decide the status",
    )
    request_fit_confirmed: bool = Field(
        default=True,
        description="whether one max_model_len request's fit decides the status: W and KV bytes/token come "
        "from the profile, calibration (records or the rig defaults, estimates included) or a formula (a "
        "shortfall then refuses); false only on built-in default figures (a shortfall is then a caution)",
    )
    # Added in version 1 (compatible): the blocker and the confidence.
    confidence: str = Field(
        description="confirmed (every deciding term from calibration records, the profile or an exact "
        "formula), rig-defaults (one rests on the rig defaults), estimate (one is a default or estimate)"
    )
    blocker: str | None = Field(description="the first failing constraint's id (null when ok)")
    blockers: list[BlockerDoc] = Field(description="every failing constraint, in vLLM's order")
    deciding_terms: list[str] = Field(description="the budget terms the status rests on")
    unconfirmed_terms: list[str] = Field(
        description="the deciding terms that are not from records, the profile or an exact formula"
    )
    term_sources: dict[str, str] = Field(
        description="per term (U_pre, W, P, N, G_e, KV bytes/token): record, exact, profile, rig-defaults, "
        "estimate or default"
    )
    # Added in version 1 (compatible): the runtime margin.
    runtime: dict[str, Any] = Field(
        default={},
        description="phase, demand_bytes, margin_bytes, min_margin_bytes and deciding (the transient that "
        "runs out first, or the largest)",
    )
    summary: str = Field(description="the verdict as one line, as the text outputs print it")
    # Added in version 1 (compatible): the band.
    band_cautions: list[str] = Field(
        default=[],
        description="why the status is caution: no boot covered the shape and a margin fails at the band's "
        "low edge (ok stays true; plan --strict exits 7)",
    )
    covered_by: list[str] = Field(
        default=[],
        description="the boots of this release and shape on record (empty: the shape is not covered)",
    )
    band: str = Field(
        default="",
        description="the band in words: the KV tokens range, which terms widen it and which boot narrows it",
    )


class SettingsDoc(_Doc):
    stack: str
    runner: str
    tp: int
    dcp: int
    mtp: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    kv_cache_dtype: str
    gpu_memory_utilization: float
    capture_sizes: list[int]
    allocator: str
    dma_wire_mode: str


class MovedDoc(_Doc):
    record_id: str
    source: str = Field(description="the boot log the record came from")
    terms: dict[str, int] = Field(
        description="bytes per term it moved (u_pre, w, p, n, g_e; runtime: the proven runtime demand)"
    )
    margin_bytes: int
    runtime_margin_bytes: int
    kv_tokens: int
    status_without: str = Field(description="the verdict's status without this record")
    confidence_without: str = Field(description="the verdict's confidence without this record")


class PlanDoc(_Doc):
    schema_version: int
    tool: str
    tool_version: str
    profile: str
    overrides: list[str]
    settings: SettingsDoc
    library: LibraryDoc
    ranks: list[RankDoc]
    latent: list[EntryDoc]
    notes: list[str]
    # Added in version 1 (compatible).
    runtime_demand: RuntimeDoc | None = Field(
        None, description="what each rank allocates after startup under the promised load"
    )
    # Added in version 1 (compatible).
    calibration: str = Field(
        "", description="which calibration the figures use: the records applied, or the rig defaults, or none"
    )
    # Added in version 1 (compatible).
    moved_by: list[MovedDoc] = Field(
        default_factory=lambda: [],
        description="the calibration records that moved this plan: each one's share, the plan with it less "
        "the plan without it (newest first; those that changed nothing are not listed)",
    )
    budget: BudgetDoc
    verdict: VerdictDoc
    # Added in version 1 (compatible): present only where loading holds more than the weights.
    load_time: LoadTimeDoc | None = Field(
        None,
        description="the load-time peak (InstantTensor's ring, the R7 preparation ballast, online-K6 "
        "staging) against F0; absent where loading holds nothing beside the weights that the ledger charges",
    )
    # Added in version 1 (compatible).
    warnings: list[str] = Field(
        default_factory=list,
        description="the plan's warnings, one line each (also printed on stderr): calibration records that "
        "do not read, a checkpoint glmlaunch does not know (its W an estimate, with its band)",
    )


def entry_doc(e: Entry) -> EntryDoc:
    return EntryDoc(
        name=e.name,
        subsystem=e.subsystem,
        requested_bytes=e.requested_bytes,
        count=e.count,
        total_requested_bytes=e.total_requested,
        device_bytes=e.device_bytes,
        kind=e.kind,
        lifetime=e.lifetime,
        origin=e.origin,
        condition=e.condition,
        reader=e.reader,
        formula=e.formula,
        note=e.note,
    )


def settings_doc(config: DeploymentConfig) -> SettingsDoc:
    return SettingsDoc(
        stack=config.stack,
        runner=config.runner,
        tp=config.parallel.tp,
        dcp=config.parallel.dcp,
        mtp=config.mtp,
        max_num_batched_tokens=config.scheduler.max_num_batched_tokens,
        max_num_seqs=config.scheduler.max_num_seqs,
        max_model_len=config.scheduler.max_model_len,
        kv_cache_dtype=config.memory.kv_cache_dtype,
        gpu_memory_utilization=config.memory.gpu_memory_utilization,
        capture_sizes=config.capture_sizes(),
        allocator=config.allocator_conf,
        dma_wire_mode=config.comm.dma_wire_mode,
    )


def budget_doc(b: Budget) -> BudgetDoc:
    return BudgetDoc(
        total_bytes=b.total,
        used_by_others_bytes=b.used_by_others,
        u_pre_bytes=b.u_pre,
        f0_bytes=b.f0,
        gate_bytes=b.gate,
        weights_bytes=b.w,
        profiled_torch_bytes=b.p,
        profiled_non_torch_bytes=b.n,
        graph_estimate_bytes=b.g_e,
        kv_cache_bytes=b.kv,
        kv_cache_pinned=b.kv_pinned,
        unbudgeted_bytes=b.x,
        margin_bytes=b.margin,
        min_margin_bytes=b.min_margin,
        start_gate_ok=b.start_gate_ok,
        kv_bytes_per_token=b.kv_bytes_per_token,
        kv_bytes_per_token_origin=b.kv_bytes_per_token_origin,
        kv_tokens=b.kv_tokens,
        max_model_len_request_bytes=b.request_bytes,
        max_model_len_fits=b.request_fits,
        recommended_kv_cache_memory_bytes=b.recommended_kv_cache_memory_bytes,
        kv_cache_natural_bytes=b.kv_natural,
        num_gpu_blocks_override=b.kv_blocks_override,
        runtime_demand_bytes=b.runtime_demand,
        runtime_phase=b.runtime_phase,
        runtime_margin_bytes=b.runtime_margin,
        min_runtime_margin_bytes=b.min_runtime_margin,
        runtime_deciding=b.runtime_deciding or None,
        recommended_num_gpu_blocks=b.recommended_num_gpu_blocks,
        recommended_context_tokens=b.recommended_context_tokens,
        recommended_gpu_memory_utilization=b.recommended_gpu_memory_utilization,
        recommended_gmu_kv_tokens=b.recommended_gmu_kv_tokens,
        kv_tokens_range=list(b.kv_tokens_range),
        margin_bytes_range=list(b.margin_range),
        runtime_margin_bytes_range=list(b.runtime_margin_range),
        dropped_advice=list(b.dropped_advice),
        band={
            "covered": b.band.covered,
            "covered_by": list(b.band.covered_by),
            "shape": b.band.shape,
            "terms": {t.term: t.to_json() for t in b.band.terms},
        },
    )


def runtime_doc(demand: RuntimeDemand) -> RuntimeDoc:
    return RuntimeDoc(
        phase=demand.peak_phase,
        peak_bytes=demand.peak_bytes,
        phases={ph: demand.phase_bytes(ph) for ph in PHASES},
        transients=[entry_doc(t.entry) for t in demand.transients],
        phase_of={t.entry.name: t.phase for t in demand.transients},
    )


def plan_document(result: ProfilePlan) -> PlanDoc:
    ledger, budget = result.ledger, result.budget
    ranks = [
        RankDoc(
            rank=r.rank,
            gpu=r.gpu,
            entries=[entry_doc(e) for e in r.entries],
            device_bytes_by_lifetime={
                lt: r.device_total(lt)
                for lt in ("pre-snapshot", "budget-term", "profiled", "graph-estimated", "unbudgeted")
            },
        )
        for r in ledger.ranks
    ]
    return PlanDoc(
        schema_version=SCHEMA_VERSION,
        tool="glmlaunch",
        tool_version=__version__,
        profile=result.resolved.profile_name,
        overrides=list(result.resolved.overrides),
        settings=settings_doc(result.config),
        library=LibraryDoc(
            source=ledger.library,
            stack=ledger.stack,
            constants=ledger.constants_source,
            generation=generation_doc(ledger.stack),
        ),
        ranks=ranks,
        latent=[entry_doc(e) for e in ledger.latent],
        notes=list(ledger.notes),
        runtime_demand=runtime_doc(ledger.runtime),
        calibration=result.calibration_message,
        moved_by=[MovedDoc.model_validate(m.doc()) for m in result.moved_by[0]],
        budget=budget_doc(budget),
        verdict=VerdictDoc.model_validate(result.verdict.to_json()),
        warnings=list(result.plan.warnings),
        load_time=None
        if ledger.load_time is None
        else LoadTimeDoc(
            peak_bytes=ledger.load_time.peak_bytes,
            f0_bytes=budget.f0,
            margin_bytes=budget.load_margin if budget.load_margin is not None else 0,
            entries=[entry_doc(e) for e in ledger.load_time.entries],
        ),
    )
