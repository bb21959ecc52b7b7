"""``glmlaunch calibrate ingest|list|show``: parse boot logs into records, store them, report what was found.

The plain functions behind the commands. Side effects: reading the logs, probing NVML only when asked,
writing to the store. Rendering lives in :mod:`glmlaunch.calibrate.render`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from glmlaunch.calibrate.fingerprint import make_fingerprint
from glmlaunch.calibrate.logs import BootLog, parse_log_file
from glmlaunch.calibrate.records import LOG_GIB_RESOLUTION, Calibration, build_calibration
from glmlaunch.calibrate.store import SaveResult, Store
from glmlaunch.config import DeploymentConfig
from glmlaunch.errors import ConfigError, GlmlaunchError
from glmlaunch.inventory import Inventory


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


def ingest_logs(
    paths: Sequence[Path],
    *,
    config: DeploymentConfig,
    profile: str | None,
    inventory: Inventory | None,
    store: Store | None,
    versions: Mapping[str, str | None] | None = None,
) -> list[Ingested]:
    """Parse each log as one boot, build its record, and save it unless ``store`` is None (dry run)."""
    if not paths:
        raise ConfigError("give at least one boot log", key="LOG")
    out: list[Ingested] = []
    for path in paths:
        if not path.is_file():
            raise ConfigError("no such log file", key="LOG", value=str(path))
        try:
            boot = parse_log_file(path)
        except OSError as exc:
            raise ConfigError(
                f"cannot read the log: {exc.strerror or exc}", key="LOG", value=str(path)
            ) from None
        if not boot.ranks and not boot.refused:
            raise ConfigError(
                "no vLLM worker lines in this file",
                key="LOG",
                value=str(path),
                hint="ingest the whole output of `vllm serve` (its lines start with '(Worker_TP0… pid=…)')",
            )
        fingerprint = make_fingerprint(
            config, inventory, vllm_version=boot.engine.vllm_version, versions=versions
        )
        record = build_calibration(
            boot, fingerprint, profile=profile, total_bytes=exact_total(config, inventory, boot)
        )
        saved = store.save(record) if store is not None else None
        out.append(Ingested(record, saved))
    return out


def inventory_for_ingest(inventory_file: Path | None, *, probe: bool) -> tuple[Inventory | None, str]:
    """A saved inventory (flag or $GLMLAUNCH_INVENTORY), NVML when ``probe``, else none; and a note why."""
    from glmlaunch.hardware import get_inventory
    from glmlaunch.settings import ToolSettings

    if inventory_file is None and ToolSettings.from_environ().inventory is None and not probe:
        return None, "no inventory: GPU identity and driver are not part of this record's fingerprint"
    try:
        inv = get_inventory(inventory_file)
    except GlmlaunchError as exc:
        if inventory_file is not None:
            raise
        return None, f"no inventory ({exc.one_line()}): GPU identity is not part of the fingerprint"
    return inv, f"hardware identity from {inv.describe()}"
