"""Calibration as ledger inputs: a term model's prediction for a configuration, and what plan/check use.

:func:`calibration_for` is what every plan starts from (``glmlaunch.plan.plan.make_plan``, which ``plan``,
``check``, ``serve``, ``preflight`` and ``watch`` use): it fits the term model (:mod:`.model`) for the
configuration from every stored record of the same rig shape, over the rig defaults (:mod:`.rigdefaults`)
where they apply, and turns the prediction into :class:`~glmlaunch.ledger.inputs.LedgerInputs`:

* the residual ledger entries (``weights``, ``activations``, ``runtime.nontorch_profiled``,
  ``cudagraph.pool``, ``runtime.cuda_context`` + ``runtime.nccl``) carry the modelled residual of each term,
  clamped at zero and explained (``plan --explain P`` / ``--explain activations``);
* ``term_bytes`` carries the whole predicted terms, which the budget uses as they are: the ledger's
  itemized entries may overlap the logged peak (vLLM's shared workspace arena), so a sum of entries would
  count that memory twice.

A boot log cannot split the CUDA context from NCCL (T - F0 is one number): the context keeps its default
size and NCCL carries the rest, and the notes say so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from glmlaunch.config import paths
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.inputs import UNCALIBRATED, LedgerInputs

if TYPE_CHECKING:
    from pathlib import Path

    from glmlaunch.calibrate.model import TermModel
    from glmlaunch.calibrate.records import Calibration
    from glmlaunch.calibrate.store import Loaded, Store
    from glmlaunch.ledger.budget import Budget
    from glmlaunch.ledger.model import Ledger
    from glmlaunch.vllmlog.events import RuntimeEvent

TOKENS_KEY = "scheduler.max_num_batched_tokens"


def _with(config: DeploymentConfig, dotted: str, value: Any) -> DeploymentConfig:
    data = config.model_dump(mode="python")
    paths.put(data, dotted, value)
    return DeploymentConfig.model_validate(data)


def boot_config(config: DeploymentConfig, record: Calibration) -> DeploymentConfig:
    """``config`` with the batched-token count the boot ran (the one setting search lets differ)."""
    if record.config is not None:
        from glmlaunch.calibrate.learn import record_config

        own = record_config(record)
        if own is not None:
            return own
    recorded = record.fingerprint.settings.get(TOKENS_KEY)
    if isinstance(recorded, int) and recorded != config.scheduler.max_num_batched_tokens:
        return _with(config, TOKENS_KEY, recorded)
    return config


def model_calibration(
    config: DeploymentConfig, model: TermModel, *, version: str | None = None, record_id: str | None = None
) -> LedgerInputs:
    """A term model's prediction for ``config`` as ledger inputs: residual entries and whole terms."""
    from glmlaunch.ledger.runtime import CUDA_CONTEXT_DEFAULT

    pred = model.predict(config, version)
    r = pred.residuals
    notes: list[str] = []
    for term, entry in (("p", "activations"), ("n", "runtime.nontorch_profiled"), ("g_e", "cudagraph.pool")):
        if r[term] < 0:
            notes.append(
                f"{entry}: the itemized entries exceed the logged {term.upper()} "
                f"by {-r[term] / MIB:,.0f} MiB "
                "(they share an arena with the peak); the budget uses the modelled term"
            )
    rest = r["u_pre"]
    context = min(max(rest, 0), CUDA_CONTEXT_DEFAULT)
    notes.append("T - F0 cannot split the CUDA context from the NCCL communicators: NCCL carries the rest")
    return LedgerInputs(
        record_id=record_id or ("rig-defaults" if model.origin == "rig-default" else "term-model"),
        weights_bytes=pred.terms.get("w"),
        activation_bytes=max(0, r["p"]),
        nontorch_bytes=max(0, r["n"]),
        graph_bytes=max(0, r["g_e"]),
        cuda_context_bytes=context,
        nccl_bytes=max(0, rest - context),
        nccl_dcp_bytes=0 if config.parallel.dcp > 1 else None,
        notes=tuple(notes),
        term_bytes=tuple(sorted(pred.terms.items())),
        explain=tuple(sorted(pred.explain.items())),
        origin=model.origin,
        weights_origin=pred.w_origin if "w" in pred.terms else None,
    )


MIB = 1024 * 1024


#: (record, event): an OOM or a free-memory reading after ready, in a serve log of the planned configuration
Evidence = tuple[tuple["Calibration", "RuntimeEvent"], ...]


@dataclass(frozen=True)
class CalibrationUse:
    """The ledger inputs a plan uses (``glmlaunch.plan.plan.make_plan``), and what to say about them."""

    #: UNCALIBRATED when no term model applies (the ledger's defaults)
    inputs: LedgerInputs
    message: str
    record: Calibration | None
    warnings: tuple[str, ...]
    #: the message without the skipped records it names; with ``skipped``, for commands that list them all
    headline: str = ""
    #: every record that does not apply, with the reason ("<id>: another rig shape (…)")
    skipped: tuple[str, ...] = ()
    #: what this configuration's serve logs proved after ready: the plan raises its demand by it
    #: (:func:`raise_by_evidence`), since the floor is read against the plan's own margin
    evidence: Evidence = ()
    #: the records read, and the labels (``<id[:12]> <log name>``) of those the term model was fitted on
    records: tuple[Calibration, ...] = ()
    used: tuple[str, ...] = ()


def calibration_for(config: DeploymentConfig, *, store: Store | None = None) -> CalibrationUse:
    """The term model for ``config`` (rig defaults corrected by every applicable record) as ledger inputs.

    Records of other knobs apply (that is what the model transfers); records of another rig shape are
    skipped with the reason. ``make_plan`` calls it, then applies the runtime evidence it returns.
    """
    from glmlaunch.calibrate.store import Store as _Store

    st = store or _Store.default()
    return calibration_from(config, st.load(), st.root)


def calibration_from(config: DeploymentConfig, loaded: Loaded, root: Path) -> CalibrationUse:
    """:func:`calibration_for` over records already read (``root``: where they were read from, named in
    the message): what a plan would use with just these records (``plan``'s moved-by figures)."""
    from glmlaunch.calibrate.learn import describe_group, learn

    learned = learn(config, loaded.records)
    skipped = tuple(learned.skipped)
    if learned.model is None:
        if not loaded.records:
            headline = message = f"no calibration records in {root}; using defaults"
        else:
            headline = message = f"no calibration record applies ({describe_group(config)}); using defaults"
            if learned.skipped:
                message += ". " + learned.skipped[0]
        # a serve log's OOM proves its demand whether or not a term model applies (a rig of no defaults)
        evidence = runtime_evidence(config, loaded.records)
        return CalibrationUse(
            UNCALIBRATED, message, None, loaded.warnings, headline, skipped, evidence, loaded.records
        )
    from glmlaunch.calibrate.learn import target_version

    cal = model_calibration(config, learned.model, version=target_version(config))
    if learned.used:
        headline = f"using the term model fitted on {len(learned.used)} record(s) ({', '.join(learned.used)})"
        if learned.model.fits["p"].prior_source != "zero":
            headline += " over the rig defaults"
        message = headline
        if learned.skipped:
            message += f"; skipped {len(learned.skipped)}: " + "; ".join(learned.skipped[:2])
    else:
        headline = message = f"using the rig defaults ({learned.model.description}); no record applies"
        if learned.skipped:
            more = f" (and {len(learned.skipped) - 1} more)" if len(learned.skipped) > 1 else ""
            message += f": {learned.skipped[0]}{more}"
    record = next(
        (r for r in loaded.records if learned.used and r.record_id[:12] == learned.used[0][:12]), None
    )
    used = {u[:12] for u in learned.used}
    applied = [r for r in loaded.records if r.record_id[:12] in used]
    cal = replace(
        cal,
        covered_terms=covered_terms(config, applied),
        covering_records=covering_records(config, applied),
    )
    evidence = runtime_evidence(config, loaded.records)
    return CalibrationUse(
        cal, message, record, loaded.warnings, headline, skipped, evidence, loaded.records, learned.used
    )


#: what each modelled term depends on besides the rig shape: a record covers a term for a configuration
#: only when it ran the same release with these same settings
COVERAGE_KEYS: dict[str, tuple[str, ...]] = {
    "u_pre": (),
    "n": (),
    "p": ("scheduler.max_num_batched_tokens", "speculative.num_speculative_tokens", "exl3.prefill_capacity"),
    "g_e": ("speculative.num_speculative_tokens", "cudagraph.max_capture"),
}


def _setting(config: DeploymentConfig, key: str) -> object:
    if key == "cudagraph.max_capture":
        return max(config.capture_sizes(), default=0)
    if key == "exl3.prefill_capacity":
        return config.exl3_prefill_capacity_effective
    node: Any = config
    for part in key.split("."):
        node = getattr(node, part)
    return node


def covered_terms(config: DeploymentConfig, records: list[Calibration]) -> tuple[str, ...]:
    """The modelled terms some record of ``config``'s release ran at ``config``'s own settings."""
    from glmlaunch.calibrate.learn import record_config

    configs = [c for c in (record_config(r) for r in records) if c is not None]
    same_release = [c for c in configs if c.release_effective == config.release_effective]
    return tuple(
        term
        for term, keys in COVERAGE_KEYS.items()
        if any(all(_setting(c, k) == _setting(config, k) for k in keys) for c in same_release)
    )


def covering_records(config: DeploymentConfig, records: list[Calibration]) -> tuple[str, ...]:
    """The records whose boot ran ``config``'s release and shape (ledger/band.py's coverage key) and
    served: they calibrate the band to their logs' precision."""
    from glmlaunch.calibrate.learn import record_config
    from glmlaunch.ledger.band import shape_key

    want = shape_key(config)
    out = []
    for r in records:
        own = record_config(r)
        if own is not None and r.boot.complete and not r.boot.refused and shape_key(own) == want:
            out.append(r.record_id)
    return tuple(out)


def runtime_evidence(config: DeploymentConfig, records: tuple[Calibration, ...]) -> Evidence:
    """Every event after ready in a serve log of exactly this configuration (same memory settings)."""
    from glmlaunch.calibrate.fingerprint import memory_settings
    from glmlaunch.calibrate.learn import record_config

    def settings(c: DeploymentConfig) -> dict[str, Any]:
        # a log shows the launcher's environment only where a launcher prints it: env.* never decides
        return {k: v for k, v in memory_settings(c).items() if k != "env" and not k.startswith("env.")}

    mine = settings(config)
    ooms: list[tuple[Calibration, RuntimeEvent]] = []
    for r in records:
        if not any(e.after_ready for e in r.boot.runtime_events):
            continue
        own = record_config(r)
        if own is None or settings(own) != mine:
            continue
        # an OOM after ready, or a free-memory reading while requests ran (a lower bound: a moment of it)
        ooms += [(r, e) for e in r.boot.runtime_events if e.after_ready]
    return tuple(ooms)


def raise_by_evidence(ledger: Ledger, budget: Budget, evidence: Evidence) -> tuple[LedgerInputs, str] | None:
    """The ledger's inputs with the long prefill's demand raised by the runtime ``evidence``, and what to
    say; None when the plan's demand already covers it.

    A serve log of exactly this configuration that OOMed after the server was ready proves the demand is
    at least ``margin - free + tried`` (a free-memory reading while serving: ``margin - free``): the memory
    the plan (``ledger`` and its ``budget``) says was free after startup, less what was still free at the
    OOM, plus the allocation that failed. When that is more than the plan's demand, the long prefill's
    growth term (the fitted one: ledger/demand) takes the difference; the record and the allocation are
    named. An OOM never lowers the demand.
    """
    if not evidence:
        return None
    record, event = max(evidence, key=lambda x: budget.margin - x[1].free_bytes + (x[1].tried_bytes or 0))
    floor = budget.margin - event.free_bytes + (event.tried_bytes or 0)
    growth, others = prefill_split(ledger)
    needed = floor - others
    if needed <= growth:
        return None
    tried = event.tried_bytes or 0
    what = (
        f"OOMed after ready (tried {tried:,} B with {event.free_bytes:,} B free)"
        if event.kind == "oom"
        else f"read {event.free_bytes:,} B free while serving"
    )
    note = (
        f"record {record.record_id[:12]} ({record.boot.source.rsplit('/', 1)[-1]}) {what}, so the demand is "
        f"at least margin {budget.margin:,} - {event.free_bytes:,} + {tried:,} = {floor:,} B; "
        f"demand.prefill_growth takes {needed:,} B (was {growth:,})"
    )
    return replace(ledger.inputs, runtime_prefill_bytes=needed, runtime_note=note), (
        f"the runtime demand is raised by record {record.record_id[:12]}'s serve log"
    )


def prefill_split(ledger: Ledger) -> tuple[int, int]:
    """(the long prefill's growth entry, the rest of its phase): what a runtime floor raises, and what not."""
    phase = ledger.runtime.in_phase("long-prefill")
    growth = next((e.device_bytes for e in phase if e.name == "demand.prefill_growth"), 0)
    return growth, sum(e.device_bytes for e in phase) - growth


def with_demand_floor(ledger: Ledger, floor: int, note: str) -> LedgerInputs | None:
    """The ledger's inputs with the long prefill's demand raised so the long-prefill phase needs at least
    ``floor`` bytes (what one OOM or free-memory reading after ready proves, as :func:`raise_by_evidence`
    reads them); None when the ledger's demand already is that large. ``note`` says where the floor comes
    from."""
    # uncalibrated inputs are named for the evidence; the checkpoint on disk stays with them
    base = ledger.inputs if ledger.inputs.calibrated else replace(ledger.inputs, record_id="runtime-evidence")
    growth, others = prefill_split(ledger)
    needed = floor - others
    if needed <= growth:
        return None
    return replace(base, runtime_prefill_bytes=needed, runtime_note=note)


def say_calibration(use: CalibrationUse, *, say: Callable[[str], object]) -> None:
    """The calibration in use, then every record that does not apply, each named once (show, search)."""
    say(use.headline or use.message)
    for skipped in use.skipped:
        say(f"  skipped {skipped}")
