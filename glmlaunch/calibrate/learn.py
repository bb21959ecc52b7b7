"""From stored records to the term model a plan uses: which records apply, the prior, the fit.

A record applies to a plan when both run on the same rig shape: GPU model, library stack, model runner,
TP and DCP (T - F0 and the graph passes depend on them). Every other knob may differ: that is what the
term model (:mod:`.model`) transfers. W additionally needs the same checkpoint (or an explicit estimate).

The prior is the rig's defaults (:mod:`.rigdefaults`) for the RTX PRO 6000 rig the shipped profiles
describe, zero elsewhere (the ledger's own H200 defaults then stand for each residual).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from glmlaunch.calibrate.model import Point, TermModel, checkpoint_key, fit_model
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.errors import ConfigError, GlmlaunchError

if TYPE_CHECKING:
    from glmlaunch.calibrate.records import Calibration
    from glmlaunch.vllmlog.boot import BootLog

BASE_PROFILE = "r12-exl3"


#: the settings a rig shape is made of (:func:`group_key`), as dotted keys
GROUP_SETTINGS: tuple[str, ...] = ("hardware.gpu_model", "stack", "runner", "parallel.tp", "parallel.dcp")


def group_key(cfg: DeploymentConfig) -> tuple[object, ...]:
    return (cfg.hardware.gpu_model, cfg.stack, cfg.runner, cfg.parallel.tp, cfg.parallel.dcp)


def keyed_shape(settings: dict[str, Any]) -> dict[str, object]:
    """The rig shape (:data:`GROUP_SETTINGS`) a record of a log showing ``settings`` is keyed on: what the
    log shows, the rest from the base profile ``calibrate ingest`` keys such a record on. A profile made
    from the same log states these, so the record of its log applies to it."""
    from glmlaunch.config import paths

    dumped = config_from_settings(settings).model_dump(mode="json")
    return {key: paths.get(dumped, key) for key in GROUP_SETTINGS}


def describe_group(cfg: DeploymentConfig) -> str:
    return (
        f"{cfg.hardware.gpu_model}, stack {cfg.stack}, runner {cfg.runner}, "
        f"TP{cfg.parallel.tp}/DCP{cfg.parallel.dcp}"
    )


@lru_cache(maxsize=8)
def _base_dump(base: str) -> str:
    from glmlaunch.config.resolve import resolve_config

    return json.dumps(resolve_config(base, (), environ={}).config.model_dump(mode="json"))


@lru_cache(maxsize=64)
def _config_from_settings(base: str, settings_json: str) -> DeploymentConfig:
    from glmlaunch.calibrate.migrate import apply_settings

    data = apply_settings(json.loads(_base_dump(base)), json.loads(settings_json))
    try:
        return DeploymentConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(
            first["msg"], key=".".join(str(p) for p in first["loc"]), value=str(first.get("input"))[:80]
        ) from None


def config_from_settings(settings: dict[str, Any], base: str = BASE_PROFILE) -> DeploymentConfig:
    """The shipped ``base`` profile with every setting the boot logged applied on top."""
    return _config_from_settings(base, json.dumps(settings, sort_keys=True, default=str))


def logged_config(boot: BootLog, path: Path) -> DeploymentConfig | None:
    """The configuration the log at ``path`` booted: the settings it shows over the shipped base profile
    (None: it shows none). A ConfigError (key ``LOG``) where those settings do not resolve here."""
    from glmlaunch.calibrate.bootconfig import boot_settings

    settings = boot_settings(boot.boot_config) if boot.boot_config is not None else {}
    if not settings:
        return None
    try:
        return config_from_settings(settings)
    except GlmlaunchError as exc:
        raise ConfigError(
            f"the configuration this log booted does not resolve here ({exc.one_line()})",
            key="LOG",
            value=str(path),
            hint="give the profile it booted with (-p NAME) or report the log",
        ) from None


@lru_cache(maxsize=64)
def _config_of(dumped: str) -> DeploymentConfig | None:
    try:
        return DeploymentConfig.model_validate(json.loads(dumped))
    except ValidationError:  # a configuration an earlier schema allowed and this one rejects
        return None


def record_config(record: Calibration) -> DeploymentConfig | None:
    """The configuration a record is keyed on, as it stores it (None: it keeps none, or it is invalid)."""
    if record.config is None:
        return None
    return _config_of(json.dumps(record.config, sort_keys=True))


def record_point(record: Calibration, config: DeploymentConfig | None = None) -> Point | None:
    """The worst rank's terms of one record, with the configuration the boot ran."""
    cfg = config or record_config(record)
    if cfg is None or not record.ranks:
        return None
    worst = record.worst()
    pn: int | None = None
    p, n = worst.activation_peak_bytes, worst.non_torch_bytes
    if p is None and record.boot.refused and None not in (worst.weights_bytes, worst.graph_estimate_bytes):
        kv = worst.kv_cache_bytes
        refusal_kv = next(
            (r.kv_available_bytes for r in record.boot.engine.refusals if r.kv_available_bytes is not None),
            None,
        )
        kv = kv if kv is not None else refusal_kv
        total = worst.total_bytes or cfg.hardware.memory_per_gpu
        if kv is not None:
            gate = int(total * cfg.memory.gpu_memory_utilization)
            pn = gate - int(worst.weights_bytes or 0) - int(worst.graph_estimate_bytes or 0) - kv
    return Point(
        label=record.record_id[:12] + " " + record.boot.source.rsplit("/", 1)[-1],
        source=record.boot.source,
        config=cfg,
        vllm_version=record.boot.engine.vllm_version,
        checkpoint=checkpoint_key(cfg),
        w=worst.weights_bytes,
        u_pre=worst.pre_snapshot_bytes,
        p=p,
        n=n,
        g_e=worst.graph_estimate_bytes if (p is not None or pn is not None) else None,
        pn=pn,
        kv=worst.kv_cache_bytes,
    )


def _one_per_boot(records: Iterable[Calibration]) -> list[tuple[Calibration, str | None]]:
    """Each record, with the id of the record that already stands for the same log (else None).

    A supervised boot's record is keyed on the launch; ``calibrate ingest`` of the same log keys on the
    log's own configuration, so one boot can have two records. The supervised one stands for it (it knows
    what was launched), else the newest.
    """
    records = list(records)
    chosen: dict[str, Calibration] = {}
    for rec in records:
        held = chosen.get(rec.boot.sha256)
        if held is None or (held.supervised is None and rec.supervised is not None):
            chosen[rec.boot.sha256] = rec
    return [
        (rec, None if chosen[rec.boot.sha256] is rec else chosen[rec.boot.sha256].record_id)
        for rec in records
    ]


def evidence_refused(record: Calibration, config: DeploymentConfig | None) -> str | None:
    """Why a record's log is no evidence: what the record says, else the first rule its figures break keyed
    on ``config`` (its own: a record an earlier glmlaunch stored unchecked); None when it is evidence."""
    if record.evidence_refused is not None:
        return record.evidence_refused
    from glmlaunch.calibrate.evidence import record_disagreements

    refused = record_disagreements(record, config)
    return refused[0].text() if refused else None


@dataclass(frozen=True)
class Learned:
    model: TermModel | None
    used: tuple[str, ...]
    skipped: tuple[str, ...]  # "record: why"


def learn(config: DeploymentConfig, records: Iterable[Calibration]) -> Learned:
    """The term model for ``config``: the rig prior corrected by every applicable record."""
    from glmlaunch.calibrate.rigdefaults import rig_prior

    key = group_key(config)
    points: list[Point] = []
    skipped: list[str] = []
    for rec, same in _one_per_boot(records):
        if same is not None:
            skipped.append(f"{rec.record_id}: the same boot log as {same} (a boot counts once)")
            continue
        if rec.config is None:
            skipped.append(f"{rec.record_id}: no boot configuration in the record (re-ingest its log)")
            continue
        cfg = record_config(rec)
        if cfg is None:
            skipped.append(f"{rec.record_id}: its boot configuration is not valid here")
            continue
        refused = evidence_refused(rec, cfg)
        if refused is not None:
            skipped.append(f"{rec.record_id}: its log is no evidence: {refused}")
            continue
        if group_key(cfg) != key:
            skipped.append(f"{rec.record_id}: another rig shape ({describe_group(cfg)})")
            continue
        pt = record_point(rec, cfg)
        if pt is None or (pt.w is None and pt.u_pre is None):
            skipped.append(f"{rec.record_id}: the log reached no budget line")
            continue
        points.append(pt)
    prior = rig_prior(config)
    if not points and prior is None:
        return Learned(None, (), tuple(skipped))
    if not points and prior is not None:
        return Learned(prior, (), tuple(skipped))
    model = fit_model(
        points,
        prior.coefficients() if prior is not None else None,
        prior_source=prior.description if prior is not None else "zero: no rig defaults for this GPU",
        origin="calibrated",
        description=f"{len(points)} record(s) of {describe_group(config)}",
        prior_weights=prior.weights if prior is not None else None,
        prior_n_by_version=prior.n_by_version if prior is not None else (),
        release_offsets=prior.release_offsets if prior is not None else (),
    )
    return Learned(model, tuple(p.label for p in points), tuple(skipped))


def points_from(records: Sequence[Calibration]) -> list[Point]:
    out = []
    for rec in records:
        pt = record_point(rec)
        if pt is not None:
            out.append(pt)
    return out


def target_version(config: DeploymentConfig) -> str | None:
    """The vLLM build a plan is for: the profile's ``vllm_version``, else the installed vLLM, else unknown."""
    declared = getattr(config, "vllm_version", None)
    if declared:
        return str(declared)
    from glmlaunch.calibrate.fingerprint import installed_versions

    return installed_versions(("vllm",)).get("vllm")
