"""``glmlaunch calibrate ingest|list|show``: parse boot logs into records, store them, report what was found.

The plain functions behind the commands. Side effects: reading the logs, probing NVML only when asked,
writing to the store. Rendering lives in :mod:`glmlaunch.calibrate.render`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from glmlaunch.calibrate.fingerprint import make_fingerprint
from glmlaunch.calibrate.learn import logged_config
from glmlaunch.calibrate.records import (
    LOG_GIB_RESOLUTION,
    Calibration,
    SupervisedBoot,
    build_calibration,
)
from glmlaunch.calibrate.store import SaveResult, Store, check_record_text
from glmlaunch.config.safeload import short
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.errors import ConfigError, GlmlaunchError
from glmlaunch.hardware.inventory import Inventory
from glmlaunch.vllmlog.boot import BootLog, parse_log_file
from glmlaunch.vllmlog.events import RuntimeEvent


@dataclass(frozen=True)
class Ingested:
    record: Calibration
    saved: SaveResult | None


def exact_total(config: DeploymentConfig, inventory: Inventory | None, boot: BootLog) -> int | None:
    """The device total vLLM saw, to the byte, when a source agrees with the log's two-decimal figure."""
    logged = [r.total_bytes for r in boot.ranks if r.total_bytes is not None]
    candidates: list[int] = []
    if inventory is not None:
        wanted = set(config.gpu_list)
        totals = [g.usable_total for g in inventory.gpus if g.index in wanted and g.usable_total is not None]
        if totals:
            candidates.append(min(totals))
    candidates.append(config.hardware.memory_per_gpu)
    if not logged:
        return candidates[0]
    for cand in candidates:
        if all(abs(cand - t) <= LOG_GIB_RESOLUTION for t in logged):
            return cand
    return None


def profile_differences(profile_config: DeploymentConfig, boot_config: DeploymentConfig) -> list[str]:
    """Setting by setting, where a profile and the boot differ (memory-relevant settings)."""
    from glmlaunch.calibrate.fingerprint import memory_settings

    a, b = memory_settings(profile_config), memory_settings(boot_config)
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            out.append(f"{key}: profile {a.get(key)!r}, boot {b.get(key)!r}")
    return out


def ingest_logs(
    paths: Sequence[Path],
    *,
    config: DeploymentConfig | None,
    profile: str | None,
    inventory: Inventory | None,
    store: Store | None,
    versions: Mapping[str, str | None] | None = None,
) -> list[Ingested]:
    """Parse each log as one boot, build its record, and save it unless ``store`` is None (dry run).

    The record is fingerprinted on the configuration the log itself shows (vLLM's non-default args, the
    launcher's effective configuration); ``config`` (a ``-p`` profile) is only compared with it, never
    adopted. A log that shows no configuration needs ``config``.
    """
    if not paths:
        raise ConfigError("give at least one boot log", key="LOG")
    out: list[Ingested] = []
    for path in paths:
        record = _record_from_log(
            path, config=config, profile=profile, inventory=inventory, versions=versions
        )
        if store is None:  # a dry run reports what a real ingest would: a record the reader refuses
            check_record_text(record.model_dump_json(indent=2) + "\n", source=record.boot.source)
        saved = store.save(record) if store is not None else None
        out.append(Ingested(record, saved))
    return out


def _read_boot(path: Path) -> BootLog:
    try:
        exists = path.exists()
    except OSError:  # e.g. a name longer than NAME_MAX: read_file says so
        exists = True
    if not exists:
        raise ConfigError("no such log file", key="LOG", value=short(path, 200))
    try:
        boot = parse_log_file(path)  # a regular file within MAX_BOOT_LOG_BYTES, else ConfigError
    except OSError as exc:
        raise ConfigError(
            f"cannot read the log: {exc.strerror or exc}", key="LOG", value=short(path, 200)
        ) from None
    return _vllm_boot(boot, path)


def _vllm_boot(boot: BootLog, path: Path) -> BootLog:
    """``boot`` (parsed from ``path``) when it is a vLLM boot; else why not."""
    if not boot.ranks and not boot.refused:
        raise ConfigError(
            "no vLLM worker lines in this file",
            key="LOG",
            value=str(path),
            hint="ingest the whole output of `vllm serve` (its lines start with '(Worker_TP0… pid=…)')",
        )
    return boot


def _record_from_log(
    path: Path,
    *,
    config: DeploymentConfig | None,
    profile: str | None,
    inventory: Inventory | None,
    versions: Mapping[str, str | None] | None,
) -> Calibration:
    boot = _read_boot(path)
    logged = boot_cfg = logged_config(boot, path)
    notes: list[str] = []
    if boot_cfg is None:
        if config is None:
            raise ConfigError(
                "the log shows no configuration (no `non-default args:` line)",
                key="LOG",
                value=str(path),
                hint="give the profile it booted with: glmlaunch calibrate ingest LOG -p NAME",
            )
        boot_cfg = config
        notes.append(f"keyed on profile {profile or 'default'}: the log shows no configuration")
    elif config is not None:
        diffs = profile_differences(config, boot_cfg)
        if diffs:
            notes.append(
                f"profile {profile} differs from the boot in {len(diffs)} setting(s); the record keeps "
                "the boot's: " + "; ".join(diffs)
            )
    fingerprint = make_fingerprint(
        boot_cfg, inventory, vllm_version=boot.engine.vllm_version, versions=versions
    )
    record = build_calibration(
        boot,
        fingerprint,
        profile=profile,
        total_bytes=exact_total(boot_cfg, inventory, boot),
        # None when the log shows none: a -p profile then keys the record, but nothing says the boot ran it
        config=logged,
        extra_notes=notes,
    )
    from glmlaunch.calibrate.evidence import boot_disagreements, refuse_evidence, shown_settings

    exact = next((t.total_bytes for t in record.ranks if t.total_bytes is not None), None)
    refused = boot_disagreements(
        boot,
        boot_cfg,
        exact_total=exact if record.total_bytes_exact else None,
        claimed=None if logged is None else shown_settings(boot),
    )
    if refused:
        raise refuse_evidence(
            refused[0].text(), path, len(refused), profile=(profile or "default") if logged is None else None
        )
    return record


def ingest_launched(
    path: Path,
    *,
    launched: DeploymentConfig,
    profile: str,
    inventory: Inventory | None,
    store: Store | None,
    supervised: SupervisedBoot | None = None,
    versions: Mapping[str, str | None] | None = None,
    parsed: BootLog | None = None,
) -> Ingested:
    """The record of a boot glmlaunch launched itself (``serve --supervise``), keyed on ``launched``.

    ``parsed``: the log at ``path`` as the caller has parsed it already (the supervisor, after a boot that
    never became ready, parses it for its verdict): not read again; else ``path`` is read and parsed.

    The key is what glmlaunch started, never re-inferred from the log; everything measured (the parsed
    log, each rank's terms, the device total) is what ``calibrate ingest`` makes of the same file. A log
    whose own configuration shows a memory setting other than the launch's, or whose figures disagree
    (:mod:`.evidence`), is kept with ``evidence_refused`` saying why: the boot stays on record, and no plan
    learns from it.
    """
    from glmlaunch.calibrate.evidence import boot_disagreements, launch_disagreements

    boot = _read_boot(path) if parsed is None else _vllm_boot(parsed, path)
    why: str | None = None
    logged: DeploymentConfig | None = None
    try:
        logged = logged_config(boot, path)
    except ConfigError as exc:
        why = f"the log's own configuration does not resolve here ({exc.message})"
    notes: list[str] = []
    if logged is None:
        notes.append(f"keyed on the launch: {why or 'the log shows no configuration of its own'}")
    # A boot whose log shows another configuration than the launch (a stand-in vLLM printing any log) is
    # no evidence of the launch: it is kept, never learned from.
    refused = launch_disagreements(launched, boot, logged) if logged is not None else []
    fingerprint = make_fingerprint(
        launched, inventory, vllm_version=boot.engine.vllm_version, versions=versions
    )
    record = build_calibration(
        boot,
        fingerprint,
        profile=profile,
        total_bytes=exact_total(launched, inventory, boot),
        config=launched,
        extra_notes=notes,
    )
    exact = next((t.total_bytes for t in record.ranks if t.total_bytes is not None), None)
    refused += boot_disagreements(boot, launched, exact_total=exact if record.total_bytes_exact else None)
    if refused:
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        record = record.model_copy(update={"evidence_refused": refused[0].text() + more})
    if supervised is not None:
        record = record.model_copy(update={"supervised": supervised})
    saved = store.save(record) if store is not None else None
    return Ingested(record, saved)


def inventory_for_ingest(inventory_file: Path | None, *, probe: bool) -> tuple[Inventory | None, str]:
    """A saved inventory (flag or $GLMLAUNCH_INVENTORY), NVML when ``probe``, else none; and a note why."""
    from glmlaunch.config.settings import ToolSettings
    from glmlaunch.hardware.probe import get_inventory

    if inventory_file is None and ToolSettings.from_environ().inventory is None and not probe:
        return None, "no inventory: GPU identity and driver are not part of this record's fingerprint"
    try:
        inv = get_inventory(inventory_file)
    except GlmlaunchError as exc:
        if inventory_file is not None:
            raise
        return None, f"no inventory ({exc.one_line()}): GPU identity is not part of the fingerprint"
    return inv, f"hardware identity from {inv.describe()}"


def ingest_named(
    boot: BootLog,
    *,
    config: DeploymentConfig,
    profile: str,
    store: Store,
    events: Sequence[RuntimeEvent] | None = None,
    notes: Sequence[str] = (),
) -> Ingested:
    """The record of a log that shows no configuration of its own, keyed on the one the operator names
    (``explain-oom -p NAME LOG --ingest``) and keeping it whole, so the next plan of that configuration
    reads the log's runtime evidence (``calibrate.apply.runtime_evidence`` needs the record's own
    configuration). ``events`` replaces the log's runtime events where the caller read them (an OOM the
    log gives no ready line for, read as one after ready); ``notes`` say so in the record.
    """
    if events is not None:
        boot = boot.model_copy(update={"runtime_events": list(events)})
    fingerprint = make_fingerprint(config, None, vllm_version=boot.engine.vllm_version)
    record = build_calibration(
        boot,
        fingerprint,
        profile=profile,
        total_bytes=exact_total(config, None, boot),
        config=config,
        extra_notes=[
            f"keyed on profile {profile}, named by the operator: the log shows no configuration",
            *notes,
        ],
    )
    return Ingested(record, store.save(record))
