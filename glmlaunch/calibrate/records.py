"""A calibration record: one parsed boot, its fingerprint, and the per-rank terms derived from it.

Derivation (docs/memory-model.md §6), per worker rank:

* W from "Model loading took", P / N / graph-actual from the free-memory line, G_e from the MRV2 estimate
  line (or, when that line is absent, ``R - W - P - N - KV``), KV from "Available KV cache memory".
* The free-memory line's two ``--kv-cache-memory-bytes`` suggestions differ by exactly ``F0 - R``. With the
  card's exact total T (an inventory, or the profile's ``hardware.memory_per_gpu`` when it agrees with the
  log to the log's 0.01 GiB) and the logged GMU, ``R = GMU * T`` and ``T - F0`` follow to the byte; otherwise
  ``T - F0`` comes from the two-decimal GiB figures (±10 MiB).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, field_validator, model_validator

from glmlaunch.calibrate.fingerprint import Fingerprint
from glmlaunch.calibrate.terms import CalibratedTerms
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import GIB
from glmlaunch.vllmlog.boot import BootLog, RankObservation
from glmlaunch.vllmlog.events import RuntimeEvent

RECORD_KIND: Final = "glmlaunch-calibration"
#: 2: the whole configuration the record is keyed on (``config``). Schema 1 kept dotted settings over a
#: shipped profile (``boot_settings`` over ``base_profile``); :mod:`.migrate` reads those.
SCHEMA_VERSION: Final = 2

# Half of the last printed digit of a "%.2f GiB" figure.
LOG_GIB_RESOLUTION = int(0.005 * GIB)

#: The note older records carry for an incomplete log: ``BootLog.complete`` says it, and the reports name
#: what the log lacks instead, so this note is no longer written and not repeated where it is stored.
TRUNCATED_NOTE: Final = "the log ends before every expected line was written"
#: Why a boot that vLLM did not refuse lacks terms: said alike by ingest, list, show and the lookup.
NOT_REACHED_KV: Final = "the boot did not reach the KV-cache size line"

# The terms a record needs before it may stand in for the ledger's defaults.
REQUIRED_TERMS: tuple[str, ...] = ("weights_bytes", "activation_peak_bytes", "non_torch_bytes")


class SupervisedBoot(BaseModel):
    """The supervised boot a record came from (``glmlaunch serve --supervise``), and how it ended.

    ``outcome`` is ``running`` from the ready line until vLLM exits, then what the supervisor concluded
    (``served``, ``refused``, ``oom``, ``failed``, ``killed``, ``engine-error``, ``hung``, ``exited``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    boot_id: str
    outcome: str
    exit_status: str | None = None  # "exit 0", "signal 9 (SIGKILL)"; None while vLLM runs
    diagnosis: str | None = None


#: Runtime readings a record keeps. A serve log that OOMs on every request for hours holds thousands of OOM
#: lines that differ only in their timestamps; what the plan learns from them is the demand each reading
#: proves (calibrate/apply.py: the largest tried - free), so a record keeps each distinct reading once and,
#: past this many, the most demanding ones: a record stays far inside the store's key limit (MAX_KEYS).
MAX_RECORD_EVENTS: Final = 256


def compact_events(events: list[RuntimeEvent]) -> list[RuntimeEvent]:
    """``events`` with each distinct reading (kind, GPU, allocation, free, total, before/after ready) once,
    the first line that showed it kept as its example, in log order; past :data:`MAX_RECORD_EVENTS`, the
    most demanding readings (largest allocation over free memory)."""
    seen: dict[tuple[object, ...], RuntimeEvent] = {}
    for e in events:
        seen.setdefault((e.kind, e.gpu, e.tried_bytes, e.free_bytes, e.total_bytes, e.after_ready), e)
    kept = list(seen.values())
    if len(kept) <= MAX_RECORD_EVENTS:
        return kept
    order = {id(e): i for i, e in enumerate(kept)}
    top = sorted(kept, key=lambda e: ((e.tried_bytes or 0) - e.free_bytes, -order[id(e)]), reverse=True)
    return sorted(top[:MAX_RECORD_EVENTS], key=lambda e: order[id(e)])


class Calibration(BaseModel):
    """One ingested boot. ``ranks`` holds the derived terms; ``boot`` keeps everything the log said."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    kind: Literal["glmlaunch-calibration"] = RECORD_KIND
    schema_version: Literal[2] = SCHEMA_VERSION
    record_id: str
    created_at: AwareDatetime
    profile: str | None
    fingerprint: Fingerprint
    fingerprint_digest: str
    boot: BootLog
    ranks: list[CalibratedTerms]
    total_bytes_exact: bool
    notes: list[str] = []
    # The configuration the record is keyed on, whole (``DeploymentConfig.model_dump(mode="json")``): the
    # one the log shows, or the one glmlaunch launched. Whole, so that no later change of a shipped
    # profile or of a schema default changes what a stored record means. None where the log showed none.
    config: dict[str, Any] | None = None
    # Set when ``serve --supervise`` wrote the record; ``calibrate ingest`` of the same file keeps it.
    supervised: SupervisedBoot | None = None
    # Why the log's figures are no evidence (:mod:`.evidence`): the boot is kept, never learned from.
    # ``calibrate ingest`` refuses such a log instead; only a supervised boot's record is kept with it.
    evidence_refused: str | None = None

    @field_validator("boot")
    @classmethod
    def _bounded_events(cls, boot: BootLog) -> BootLog:
        compact = compact_events(boot.runtime_events)
        if len(compact) == len(boot.runtime_events):
            return boot
        return boot.model_copy(update={"runtime_events": compact})

    @model_validator(mode="after")
    def _one_term_set_per_rank(self) -> Calibration:
        # every reader pairs the log's ranks with their derived terms: a file that breaks the pairing
        # (edited by hand, cut short) is refused as a whole, never read half-way
        if len(self.ranks) != len(self.boot.ranks):
            raise ValueError(
                f"{len(self.ranks)} derived term sets for {len(self.boot.ranks)} logged ranks"
            )
        return self

    @property
    def usable(self) -> bool:
        """Complete enough to replace defaults: every rank has W, P and N, and vLLM did not refuse."""
        return (
            bool(self.ranks)
            and self.evidence_refused is None
            and not self.boot.refused
            and all(getattr(t, name) is not None for t in self.ranks for name in REQUIRED_TERMS)
        )

    def unusable_reason(self) -> str | None:
        if self.usable:
            return None
        if self.evidence_refused is not None:
            return f"its log is no evidence: {self.evidence_refused}"
        if not self.ranks:
            return "the log has no worker rank lines"
        if self.boot.refused:
            return "vLLM refused to start in this boot: " + _refusal_summary(self.boot)
        cut = "" if self.boot.complete else f" (truncated: {NOT_REACHED_KV})"
        return "missing " + ", ".join(self.missing_terms()) + cut

    def missing_terms(self) -> list[str]:
        """The required terms some rank lacks."""
        return sorted({n for t in self.ranks for n in REQUIRED_TERMS if getattr(t, n) is None})

    def worst(self) -> CalibratedTerms:
        return CalibratedTerms.worst(self.ranks, source=f"calibration {self.record_id} (worst rank)")

    def for_rank(self, index: int) -> CalibratedTerms:
        """Terms of TP rank ``index`` (the ranks' order when the log names no TP index)."""
        for obs, terms in zip(self.boot.ranks, self.ranks, strict=True):
            if obs.tp_rank == index:
                return terms
        return self.ranks[index]


def _refusal_summary(boot: BootLog) -> str:
    refusals = [
        *boot.engine.refusals,
        *boot.unattributed_refusals,
        *(r for o in boot.ranks for r in o.refusals),
    ]
    for r in refusals:
        if r.kind == "kv-too-small" and r.kv_needed_bytes is not None and r.kv_available_bytes is not None:
            return (
                f"one {r.max_model_len or '?'}-token request needs "
                f"{r.kv_needed_bytes / GIB:.2f} GiB of KV cache, "
                f"{r.kv_available_bytes / GIB:.2f} GiB available (vLLM's estimated maximum model length "
                f"{r.estimated_max_model_len}); its W, G_e and P + N still calibrate the term model"
            )
    return refusals[0].message[:200] if refusals else "refused"


def _exact_total(obs: RankObservation, total_bytes: int | None) -> tuple[int | None, bool]:
    if obs.total_bytes is None:
        return total_bytes, total_bytes is not None
    if total_bytes is not None and abs(total_bytes - obs.total_bytes) <= LOG_GIB_RESOLUTION:
        return total_bytes, True
    return obs.total_bytes, False


def derive_terms(
    obs: RankObservation, *, total_bytes: int | None, source: str
) -> tuple[CalibratedTerms, bool]:
    """Per-rank terms from one observation; the flag says whether T (hence T - F0) is exact."""
    total, exact = _exact_total(obs, total_bytes)
    pre_snapshot: int | None = None
    requested: int | None = obs.requested_bytes
    if total is not None and obs.gpu_memory_utilization is not None and exact:
        # vLLM's requested_memory is total * GMU as a float; int() is what its arithmetic then uses.
        requested = int(total * obs.gpu_memory_utilization)
    headroom = obs.start_headroom_bytes
    if total is not None and requested is not None and headroom is not None and exact:
        pre_snapshot = total - (requested + headroom)
    elif total is not None and obs.free_at_start_bytes is not None:
        pre_snapshot = total - obs.free_at_start_bytes
    graph_estimate = obs.graph_estimate_bytes
    if graph_estimate is None and None not in (
        requested,
        obs.weights_bytes,
        obs.peak_activation_bytes,
        obs.non_torch_bytes,
        obs.kv_available_bytes,
    ):
        graph_estimate = max(
            0,
            int(requested or 0)
            - int(obs.weights_bytes or 0)
            - int(obs.peak_activation_bytes or 0)
            - int(obs.non_torch_bytes or 0)
            - int(obs.kv_available_bytes or 0),
        )
    terms = CalibratedTerms(
        rank=obs.rank,
        source=source,
        weights_bytes=obs.weights_bytes,
        activation_peak_bytes=obs.peak_activation_bytes,
        non_torch_bytes=obs.non_torch_bytes,
        graph_estimate_bytes=graph_estimate,
        graph_actual_bytes=obs.cudagraph_bytes if obs.cudagraph_bytes is not None else obs.graph_actual_bytes,
        pre_snapshot_bytes=pre_snapshot,
        kv_cache_bytes=obs.kv_available_bytes,
        total_bytes=total,
        dcp_transient_bytes=obs.dcp_transient_bytes,
    )
    return terms, exact


def build_calibration(
    boot: BootLog,
    fingerprint: Fingerprint,
    *,
    profile: str | None,
    total_bytes: int | None = None,
    created_at: datetime | None = None,
    config: DeploymentConfig | None = None,
    extra_notes: list[str] | None = None,
) -> Calibration:
    """Turn a parsed boot into a record (pure; the store writes it)."""
    digest = fingerprint.digest
    record_id = f"{digest[:16]}-{boot.sha256[:12]}"
    derived = [
        derive_terms(obs, total_bytes=total_bytes, source=f"boot log {boot.source} ({obs.rank})")
        for obs in boot.ranks
    ]
    notes: list[str] = list(extra_notes or [])
    if boot.repeated_ranks:
        repeated = ", ".join(boot.repeated_ranks)
        notes.append(f"the log holds more than one boot for {repeated}; the last one wins")
    exact = bool(derived) and all(e for _, e in derived)
    if derived and not exact:
        notes.append("T - F0 from two-decimal GiB figures (±10 MiB); no exact total agreed with the log")
    return Calibration(
        record_id=record_id,
        created_at=created_at or datetime.now(UTC),
        profile=profile,
        fingerprint=fingerprint,
        fingerprint_digest=digest,
        boot=boot,
        ranks=[t for t, _ in derived],
        total_bytes_exact=exact,
        notes=notes,
        config=config.model_dump(mode="json") if config is not None else None,
    )
