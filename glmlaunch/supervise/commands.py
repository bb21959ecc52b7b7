"""``glmlaunch boots [BOOT]``: the supervised boots, newest first; one boot's timeline and outcome.

Reads ``<cache>/boots/`` (:mod:`.boots`); a directory it cannot read is one warning, never an error.
Tables go to stdout, notes to stderr; ``--json`` prints one document (docs/schemas/boots.schema.json).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from glmlaunch.output import note, out_console, out_json, warn
from glmlaunch.supervise.boots import BootSummary, boots_root, find_boot, list_boots
from glmlaunch.supervise.timeline import fmt_seconds

#: ``boots --json``'s document version
SCHEMA_VERSION = 1


def _exit_text(outcome: dict[str, Any] | None) -> str:
    if outcome is None:
        return "—"
    if outcome.get("running"):
        return "running"
    exit_ = outcome.get("exit") or {}
    return str(exit_.get("status") or "—")


def _ready_text(outcome: dict[str, Any] | None) -> str:
    timeline = (outcome or {}).get("timeline") or {}
    ready = timeline.get("ready_s")
    return fmt_seconds(float(ready)) if isinstance(ready, int | float) else "—"


def summary_document(b: BootSummary) -> dict[str, Any]:
    o = b.outcome or {}
    return {
        "boot_id": b.boot.boot_id,
        "path": str(b.boot.path),
        "started_at": b.launch.get("started_at"),
        "profile": b.launch.get("profile"),
        "outcome": o.get("outcome") if b.outcome is not None else "unknown",
        "exit": _exit_text(b.outcome),
        "ready_s": ((o.get("timeline") or {}).get("ready_s")),
        "diagnosis": o.get("diagnosis"),
        "record_id": (o.get("record") or {}).get("record_id"),
    }


def list_table(boots: list[BootSummary]) -> Table:
    table = Table(title="supervised boots (newest first)", expand=False)
    for col in ("boot", "profile", "outcome", "exit", "ready after", "record", "diagnosis"):
        table.add_column(col, no_wrap=col != "diagnosis", overflow="fold")
    for b in boots:
        doc = summary_document(b)
        table.add_row(
            doc["boot_id"],
            str(doc["profile"] or "—"),
            str(doc["outcome"]),
            doc["exit"],
            _ready_text(b.outcome),
            (doc["record_id"] or "—")[:29],
            str(doc["diagnosis"] or "—"),
        )
    return table


def timeline_table(b: BootSummary) -> Table:
    o = b.outcome or {}
    timeline = o.get("timeline") or {}
    expected = timeline.get("expected_s") or {}
    table = Table(title=f"boot {b.boot.boot_id}: {b.launch.get('profile')} — timeline", expand=False)
    for col in ("phase", "from", "to", "wall time", "expected at most", "note"):
        table.add_column(
            col, no_wrap=col != "note", justify="right" if col in ("from", "to", "wall time") else "left"
        )
    hung = timeline.get("hung") or {}
    for p in timeline.get("phases") or []:
        name = str(p.get("name"))
        notes = []
        if p.get("merged"):
            notes.append("includes " + ", ".join(p["merged"]) + " (their lines never came)")
        if name in hung:
            notes.append(f"hung: {fmt_seconds(float(hung[name]))} without progress")
        limit = expected.get(name)
        table.add_row(
            name,
            fmt_seconds(float(p.get("start_s", 0))),
            fmt_seconds(float(p.get("end_s", 0))),
            fmt_seconds(float(p.get("seconds", 0))),
            fmt_seconds(float(limit)) if isinstance(limit, int | float) else "—",
            "; ".join(notes) or "—",
        )
    return table


def run_boots(ref: str | None, *, as_json: bool) -> None:
    if ref is None:
        boots, warnings = list_boots()
        for w in warnings:
            warn(w)
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
        else:
            note(f"no supervised boots in {boots_root()} (glmlaunch serve --supervise writes them)")
        return
    b = find_boot(ref)
    if as_json:
        out_json(
            {
                "schema_version": SCHEMA_VERSION,
                "boots_dir": str(boots_root()),
                "boots": [summary_document(b)],
                "boot": {"launch": b.launch, "outcome": b.outcome},
            }
        )
        return
    o = b.outcome or {}
    note(f"boot {b.boot.boot_id} ({b.boot.path}): {b.launch.get('command', '')}")
    out_console.print(timeline_table(b))
    lines = [
        f"outcome: {o.get('outcome', 'unknown')} ({_exit_text(b.outcome)})",
        f"diagnosis: {o.get('diagnosis') or '—'}",
    ]
    record = (o.get("record") or {}).get("record_id")
    lines.append(
        f"record: {record}" if record else f"record: none ({(o.get('record') or {}).get('problem')})"
    )
    for p in o.get("left_behind") or []:
        lines.append(f"left behind: {p.get('name')} pid {p.get('pid')}: {p.get('ended')}")
    gpu = o.get("gpu_baseline") or {}
    if gpu.get("checked"):
        lines.append(
            "GPUs: back at their baseline" if gpu.get("ok") else "GPUs: " + "; ".join(gpu.get("problems", []))
        )
    elif gpu:
        lines.append(f"GPUs: not checked ({gpu.get('note')})")
    for line in lines:
        out_console.print(line, markup=False, highlight=False)
