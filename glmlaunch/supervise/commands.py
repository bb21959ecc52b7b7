"""``glmlaunch boots [BOOT]``: the supervised boots, newest first; one boot's timeline and outcome.

Reads ``<cache>/boots/`` (:mod:`.boots`); a directory it cannot read is one warning, never an error.
Tables go to stdout, notes to stderr; ``--json`` prints one document (docs/schemas/boots.schema.json).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from glmlaunch.output import note, out_console, out_json, warn
from glmlaunch.supervise.boots import BootSummary, OutcomeDoc, boots_root, find_boot, list_boots
from glmlaunch.supervise.timeline import fmt_seconds

#: ``boots --json``'s document version
SCHEMA_VERSION = 1


def _exit_text(outcome: OutcomeDoc | None) -> str:
    if outcome is None:
        return "—"
    if outcome.running:
        return "running"
    return (outcome.exit.status if outcome.exit is not None else "") or "—"


def _ready_text(outcome: OutcomeDoc | None) -> str:
    ready = outcome.timeline.ready_s if outcome is not None else None
    return fmt_seconds(ready) if ready is not None else "—"


def summary_document(b: BootSummary) -> dict[str, Any]:
    o = b.outcome
    return {
        "boot_id": b.boot.boot_id,
        "path": str(b.boot.path),
        "started_at": b.launch.started_at,
        "profile": b.launch.profile,
        "outcome": o.outcome if o is not None else "unknown",
        "exit": _exit_text(o),
        "ready_s": o.timeline.ready_s if o is not None else None,
        "diagnosis": o.diagnosis if o is not None else None,
        "record_id": o.record.record_id if o is not None else None,
    }


def list_table(boots: list[BootSummary]) -> Table:
    table = Table(title="supervised boots (newest first)", expand=False)
    for col in ("boot", "profile", "outcome", "exit", "ready after", "record", "diagnosis"):
        table.add_column(col, no_wrap=col != "diagnosis", overflow="fold")
    for b in boots:
        doc = summary_document(b)
        table.add_row(
            doc["boot_id"],
            doc["profile"] or "—",
            doc["outcome"],
            doc["exit"],
            _ready_text(b.outcome),
            (doc["record_id"] or "—")[:29],
            doc["diagnosis"] or "—",
        )
    return table


def timeline_table(b: BootSummary) -> Table:
    timeline = b.outcome.timeline if b.outcome is not None else None
    table = Table(title=f"boot {b.boot.boot_id}: {b.launch.profile} — timeline", expand=False)
    for col in ("phase", "from", "to", "wall time", "expected at most", "note"):
        table.add_column(
            col, no_wrap=col != "note", justify="right" if col in ("from", "to", "wall time") else "left"
        )
    if timeline is None:
        return table
    for p in timeline.phases:
        notes = []
        if p.merged:
            notes.append("includes " + ", ".join(p.merged) + " (their lines never came)")
        if p.name in timeline.hung:
            notes.append(f"hung: {fmt_seconds(timeline.hung[p.name])} without progress")
        limit = timeline.expected_s.get(p.name)
        table.add_row(
            p.name,
            fmt_seconds(p.start_s),
            fmt_seconds(p.end_s),
            fmt_seconds(p.seconds),
            fmt_seconds(limit) if limit is not None else "—",
            "; ".join(notes) or "—",
        )
    return table


def run_boots(ref: str | None, *, as_json: bool) -> None:
    if ref is None:
        boots, problems = list_boots()
        for problem in problems:
            warn(problem.warning)
        if as_json:
            out_json(
                {
                    "schema_version": SCHEMA_VERSION,
                    "boots_dir": str(boots_root()),
                    "boots": [summary_document(b) for b in boots],
                    "boot": None,
                }
            )
        elif boots:
            out_console.print(list_table(boots))
        elif not problems:
            note(f"no supervised boots in {boots_root()} (glmlaunch serve --supervise writes them)")
        return
    b = find_boot(ref)
    if as_json:
        out_json(
            {
                "schema_version": SCHEMA_VERSION,
                "boots_dir": str(boots_root()),
                "boots": [summary_document(b)],
                "boot": {"launch": b.launch_json, "outcome": b.outcome_json},
            }
        )
        return
    o = b.outcome
    note(f"boot {b.boot.boot_id} ({b.boot.path}): {b.launch.command}")
    out_console.print(timeline_table(b))
    lines = [
        f"outcome: {o.outcome if o is not None else 'unknown'} ({_exit_text(o)})",
        f"diagnosis: {(o.diagnosis if o is not None else None) or '—'}",
    ]
    if o is not None:
        rec = o.record
        lines.append(f"record: {rec.record_id}" if rec.record_id else f"record: none ({rec.problem})")
        for p in o.left_behind:
            lines.append(f"left behind: {p.name} pid {p.pid}: {p.ended}")
        gpu = o.gpu_baseline
        if gpu is not None and gpu.checked:
            lines.append("GPUs: back at their baseline" if gpu.ok else "GPUs: " + "; ".join(gpu.problems))
        elif gpu is not None:
            lines.append(f"GPUs: not checked ({gpu.note})")
    else:
        lines.append("record: none (no outcome.json: glmlaunch itself was killed before writing it)")
    for line in lines:
        out_console.print(line, markup=False, highlight=False)
