"""Plain functions behind ``glmlaunch calibrate ingest|list|show``: resolve, do the work, render data, report
on stderr. They sit in the plan stage because a record's residuals and the term model ``show`` reports are
read against a plan (``calibrate search`` is :mod:`glmlaunch.plan.search`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from glmlaunch.calibrate.ingest import ingest_logs, inventory_for_ingest
from glmlaunch.calibrate.records import Calibration
from glmlaunch.calibrate.render import list_table, record_document, record_report, terms_table
from glmlaunch.calibrate.store import Store
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.output import fit, note, out_console, out_json, out_text, warn

#: The version of every ``calibrate … --json`` document (docs/schemas/calibrate-*.schema.json).
SCHEMA_VERSION = 1


def _residuals(record: Calibration, config: DeploymentConfig | None = None) -> Any:
    # Imported here: residuals need the ledger, which `list` does not.
    from glmlaunch.plan.residuals import residuals_document

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
    from glmlaunch.config.commands import resolve

    # A profile is only compared with what the log booted; without one the log speaks for itself.
    resolved = resolve(profile, overrides) if (profile is not None or overrides) else None
    inventory, why = inventory_for_ingest(inventory_file, probe=probe)
    store = None if dry_run else Store.default()
    results = ingest_logs(
        list(logs),
        config=resolved.config if resolved is not None else None,
        profile=resolved.profile_name if resolved is not None else None,
        inventory=inventory,
        store=store,
    )
    # Said once something was ingested: a log that cannot be read is an error, and the error stands alone.
    note(why)
    docs = []
    for item in results:
        rec = item.record
        for line in record_report(rec):
            note(f"{rec.boot.source}: {line}")
        if item.saved is not None:
            verb = "replaced" if item.saved.replaced else "saved"
            note(f"{verb} {item.saved.path}")
        residuals = _residuals(rec)
        docs.append(record_document(rec, residuals=residuals))
        if not as_json:
            out_console.print(fit(terms_table(rec)))
            _print_residuals(residuals)
    if as_json:
        out_json({"schema_version": SCHEMA_VERSION, "records": docs})
    return [i.record for i in results]


def _print_residuals(residuals: Any) -> None:
    from glmlaunch.plan.residuals import residuals_table

    table = residuals_table(residuals)
    if table is None:
        note(residuals.get("unavailable", "no residuals") if isinstance(residuals, dict) else "no residuals")
    else:
        out_console.print(fit(table))


def run_list(*, as_json: bool) -> list[Calibration]:
    store = Store.default()
    loaded = store.load()
    for w in loaded.warnings:
        warn(w)
    records = list(loaded.records)
    if as_json:
        out_json(
            {
                "schema_version": SCHEMA_VERSION,
                "store": str(store.root),
                "records": [record_document(r) for r in records],
            }
        )
    elif records:
        out_console.print(fit(list_table(records)))
    else:
        note(f"no calibration records in {store.root}")
    return records


def run_show(
    record_id: str | None, profile: str | None, overrides: Sequence[str], *, as_json: bool
) -> Calibration | None:
    """One record by id; without an id, the term model the profile's plan uses: each term's coefficients,
    the records it came from and its residual on each (and why other records do not apply)."""
    from glmlaunch.config.commands import resolve

    store = Store.default()
    record: Calibration | None
    if record_id is None:
        from glmlaunch.calibrate.apply import say_calibration
        from glmlaunch.calibrate.learn import learn, target_version
        from glmlaunch.calibrate.render import model_document, model_table
        from glmlaunch.plan.plan import make_plan

        resolved = resolve(profile, overrides)
        loaded = store.load()
        for w in loaded.warnings:
            warn(w)
        # the calibration the profile's plan uses, runtime evidence included, as plan says it
        use = make_plan(resolved.config, store=store).calibration
        assert use is not None  # make_plan looked the calibration up
        say_calibration(use, say=note)
        learned = learn(resolved.config, loaded.records)
        if learned.model is None:
            if as_json:
                out_json(_show_document(None, None, use.message))
            return None
        doc = model_document(learned.model, resolved.config, version=target_version(resolved.config))
        if as_json:
            out_json(_show_document(None, doc, use.message))
        else:
            out_console.print(fit(model_table(doc)))
            # where each term came from is the answer to `show`, not narration: stdout, also under -q
            out_text("\n".join(doc["explain"].values()))
        return None
    record = store.get(record_id)
    residuals = _residuals(record)
    if as_json:
        out_json(_show_document(record_document(record, residuals=residuals), None, None))
    else:
        for line in record_report(record):
            note(line)
        out_console.print(fit(terms_table(record)))
        _print_residuals(residuals)
    return record


def _show_document(record: Any, term_model: Any, message: str | None) -> dict[str, Any]:
    """``calibrate show --json``: one shape whether a record or the profile's term model is shown."""
    return {"schema_version": SCHEMA_VERSION, "record": record, "term_model": term_model, "message": message}
