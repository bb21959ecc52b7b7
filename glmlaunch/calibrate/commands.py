"""Plain functions behind ``glmlaunch calibrate …``: resolve, do the work, render data, report on stderr."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from glmlaunch.calibrate.ingest import ingest_logs, inventory_for_ingest
from glmlaunch.calibrate.records import Calibration
from glmlaunch.calibrate.render import boot_summary, list_table, record_document, terms_table
from glmlaunch.calibrate.store import Store, lookup_calibration
from glmlaunch.config import DeploymentConfig
from glmlaunch.output import note, out_console, out_json, warn


def _residuals(record: Calibration, config: DeploymentConfig | None = None) -> Any:
    # Imported here: residuals need the ledger, which `list` does not.
    from glmlaunch.calibrate.residuals import residuals_document

    return residuals_document(record, config)


def run_ingest(
    logs: Sequence[Path],
    profile: str | None,
    overrides: Sequence[str],
    *,
    inventory_file: Path | None,
    probe: bool,
    dry_run: bool,
    as_json: bool,
) -> list[Calibration]:
    from glmlaunch.commands import resolve

    resolved = resolve(profile, overrides)
    inventory, why = inventory_for_ingest(inventory_file, probe=probe)
    note(why)
    store = None if dry_run else Store.default()
    results = ingest_logs(
        list(logs),
        config=resolved.config,
        profile=resolved.profile_name,
        inventory=inventory,
        store=store,
    )
    docs = []
    for item in results:
        rec = item.record
        for line in boot_summary(rec.boot):
            note(f"{rec.boot.source}: {line}")
        if item.saved is not None:
            verb = "replaced" if item.saved.replaced else "saved"
            note(f"{verb} {item.saved.path}")
        if not rec.usable:
            warn(f"{rec.record_id} will not replace defaults: {rec.unusable_reason()}")
        residuals = _residuals(rec, resolved.config)
        docs.append(record_document(rec, residuals=residuals))
        if not as_json:
            out_console.print(terms_table(rec))
            _print_residuals(residuals)
    if as_json:
        out_json({"records": docs})
    return [i.record for i in results]


def _print_residuals(residuals: Any) -> None:
    from glmlaunch.calibrate.residuals import residuals_table

    table = residuals_table(residuals)
    if table is None:
        note(residuals.get("unavailable", "no residuals") if isinstance(residuals, dict) else "no residuals")
    else:
        out_console.print(table)


def run_list(*, as_json: bool) -> list[Calibration]:
    store = Store.default()
    loaded = store.load()
    for w in loaded.warnings:
        warn(w)
    records = list(loaded.records)
    if as_json:
        out_json({"store": str(store.root), "records": [record_document(r) for r in records]})
    elif records:
        out_console.print(list_table(records))
    else:
        note(f"no calibration records in {store.root}")
    return records


def run_show(
    record_id: str | None, profile: str | None, overrides: Sequence[str], *, as_json: bool
) -> Calibration | None:
    """One record by id; without an id, the record the profile would use (and why the others are not)."""
    from glmlaunch.commands import resolve

    store = Store.default()
    record: Calibration | None
    if record_id is not None:
        record = store.get(record_id)
    else:
        resolved = resolve(profile, overrides)
        found = lookup_calibration(resolved.config, store=store)
        for w in found.warnings:
            warn(w)
        note(found.message())
        for rej in found.rejected:
            note(f"  {rej.record_id}: {rej.reason}")
        record = found.calibration
        if record is None:
            if as_json:
                out_json({"record": None, "message": found.message()})
            return None
    residuals = _residuals(record)
    if as_json:
        out_json({"record": record_document(record, residuals=residuals)})
    else:
        for line in boot_summary(record.boot):
            note(line)
        for line in record.notes:
            note(line)
        out_console.print(terms_table(record))
        _print_residuals(residuals)
    return record
