"""Plain functions behind ``glmlaunch calibrate …``: resolve, do the work, render data, report on stderr."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from glmlaunch.calibrate.ingest import ingest_logs, inventory_for_ingest
from glmlaunch.calibrate.records import Calibration
from glmlaunch.calibrate.render import list_table, record_document, record_report, terms_table
from glmlaunch.calibrate.search import SearchResult, changes
from glmlaunch.calibrate.store import Store
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import format_size, parse_size_option
from glmlaunch.errors import ConfigError, MarginError
from glmlaunch.files import check_writable_target, refuse_existing
from glmlaunch.output import fit, note, out_console, out_json, out_text, warn

#: The version of every ``calibrate … --json`` document (docs/schemas/calibrate-*.schema.json).
SCHEMA_VERSION = 1


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
    from glmlaunch.calibrate.residuals import residuals_table

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
        from glmlaunch.calibrate.apply import calibration_for, say_calibration
        from glmlaunch.calibrate.learn import learn, target_version
        from glmlaunch.calibrate.render import model_document, model_table

        resolved = resolve(profile, overrides)
        loaded = store.load()
        for w in loaded.warnings:
            warn(w)
        use = calibration_for(resolved.config, store=store)
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


def run_search(
    profile: str | None,
    overrides: Sequence[str],
    *,
    objective: str,
    min_margin: str | None,
    step: int | None,
    upper: str | None,
    inventory_file: Path | None,
    output: Path | None,
    write: bool,
    as_json: bool,
    command: str,
    force: bool = False,
) -> SearchResult:
    """Resolve, find the calibration, search, write the overlay, render; MarginError when nothing fits."""
    from glmlaunch.calibrate.render import search_tables
    from glmlaunch.calibrate.search import (
        overlay_yaml,
        result_document,
        search,
        write_overlay,
    )
    from glmlaunch.config.commands import resolve

    # The options are read before any work: a bad --min-margin fails first, with nothing said before it.
    margin = _size_option("--min-margin", min_margin)
    top = _upper_option(objective, upper)
    resolved = resolve(profile, overrides)
    config = resolved.config
    path: Path | None = None
    if write:
        # One rule for every output file (profiles import too): an existing one only with --force,
        # refused before the search runs.
        path = output or Path(f"{resolved.profile_name}-{objective}.yaml")
        check_writable_target(path, key="--output")
        refuse_existing(path, key="--output", force=force)
    inventory = None
    total: int | None = None
    used = 0
    if inventory_file is not None:
        from glmlaunch.hardware.checks import memory_inputs, select_group
        from glmlaunch.hardware.probe import get_inventory

        inventory = get_inventory(inventory_file)
        inputs = memory_inputs(select_group(config, inventory))
        if inputs is not None:
            total, used = inputs.total_bytes, inputs.used_by_others
            note(
                f"device total {format_size(total)}, {format_size(used)} held by others (from the inventory)"
            )
    from glmlaunch.calibrate.apply import calibration_for, say_calibration
    from glmlaunch.calibrate.learn import learn, target_version

    store = Store.default()
    loaded = store.load()
    for w in loaded.warnings:
        warn(w)
    learned = learn(config, loaded.records)
    use = calibration_for(config, inventory, store=store)
    message = use.message
    if learned.model is None:
        warn(use.headline + " (the search runs on the ledger's defaults)")
        for skipped in use.skipped:
            note(f"  skipped {skipped}")
    else:
        say_calibration(use, say=note)
        if used:
            note(
                "the boot's T - F0 already holds what other processes used then; the memory they hold now "
                "is charged again on top (conservative when they are the same processes)"
            )
    result = search(
        config,
        objective,
        model=learned.model,
        version=target_version(config),
        calibration_message=message,
        total_bytes=total,
        used_by_others=used,
        min_margin=margin,
        step=step,
        upper=top,
    )
    for line in result.notes:
        note(line)
    if result.best is not None and path is not None:
        chain = resolved.profile_chain
        extends = chain[-1].name if chain and chain[-1].builtin else str(chain[-1].path.resolve())
        write_overlay(path, overlay_yaml(result, extends=extends, command=command))
        note(f"wrote the calibrated overlay profile {path} (extends {extends}); use it with -p {path}")
    elif path is not None:
        path = None  # nothing fits: nothing was written
    if as_json:
        out_json(result_document(result, overlay=path))
    else:
        for table in search_tables(result):
            out_console.print(fit(table))
    if result.best is not None:
        if not changes(result):
            note(
                f"nothing to change: the profile's {result.knob.key} "
                f"{result.knob.show(result.original.value)} is already the best"
            )
        pinned = (
            result.best.value
            if result.objective == "max-kv-bytes"
            else result.best.recommended_kv_cache_memory_bytes
        )
        if not as_json:  # data: on stdout, as in the JSON (kv_cache_memory_bytes)
            out_text(
                f"pinned alternative: --kv-cache-memory-bytes={pinned} (keeps exactly the required margin)"
            )
    else:
        first, last = (result.knob.show(v) for v in (result.range_start, result.range_end))
        raise MarginError(
            f"no value of {result.knob.key} from {first} to {last} fits: {result.blocked_text()}",
            key=result.knob.key,
            hint=_no_fit_hint(result),
        )
    return result


def _no_fit_hint(result: SearchResult) -> str:
    from glmlaunch.calibrate.search import no_fit_hints

    return "; ".join(no_fit_hints(result))


def _size_option(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    # `--min-margin 1` meant 1 GiB, never 1 byte: the same rule as plan's --gpu-memory
    return parse_size_option(value, key=name, what="a size")


def _upper_option(objective: str, value: str | None) -> int | float | None:
    if value is None:
        return None
    if objective in ("max-gmu", "min-gmu"):
        try:
            return float(value)
        except ValueError:
            raise ConfigError("not a number", key="--max", value=value) from None
    if objective == "max-kv-bytes":
        return _size_option("--max", value)
    try:
        return int(value)
    except ValueError:
        raise ConfigError("not a whole number of tokens", key="--max", value=value) from None
