"""Rendering of ``plan``, ``audit`` and ``diff``: rich tables on stdout, or one JSON document.

stdout carries the data (tables, the memory map, JSON); notes about the run go to stderr.
"""

from __future__ import annotations

from pathlib import Path

from rich.table import Table
from rich.text import Text

from glmlaunch.config.units import format_size
from glmlaunch.errors import MarginError
from glmlaunch.ledger.budget import Budget
from glmlaunch.ledger.model import LIFETIMES, Entry, RankLedger
from glmlaunch.output import note, out_console, out_json
from glmlaunch.plan import memmap
from glmlaunch.plan.audit import Audit
from glmlaunch.plan.diff import Diff, diff_document
from glmlaunch.plan.planner import PlanResult, entry_doc, find_entry, plan_document

_LIFETIME_TITLES = {
    "budget-term": "budget terms (W, KV)",
    "pre-snapshot": "pre-snapshot (U_pre: before vLLM's init snapshot)",
    "profiled": "profiled (P / N: inside the KV budget)",
    "graph-estimated": "graph-estimated (G_e)",
    "unbudgeted": "unbudgeted (X: the OOM window)",
}
_VERDICT_STYLE = {
    "ok": "bold green",
    "below-margin": "bold yellow",
    "oom-risk": "bold red",
    "refused": "bold red",
}


def _size(n: int) -> str:
    return format_size(n)


def _rank_groups(ranks: tuple[RankLedger, ...]) -> list[tuple[RankLedger, list[RankLedger]]]:
    groups: list[tuple[RankLedger, list[RankLedger]]] = []
    for r in ranks:
        for head, members in groups:
            if head.entries == r.entries:
                members.append(r)
                break
        else:
            groups.append((r, [r]))
    return groups


def ledger_table(rank: RankLedger, members: list[RankLedger]) -> Table:
    who = ", ".join(f"{m.rank}" for m in members)
    gpus = ", ".join(f"{m.gpu}" for m in members)
    title = f"ranks {who} (GPUs {gpus})" + (" — identical" if len(members) > 1 else "")
    table = Table(title=title, title_justify="left", show_lines=False, expand=False)
    table.add_column("entry", no_wrap=True)
    table.add_column("kind")
    table.add_column("requested", justify="right")
    table.add_column("×", justify="right")
    table.add_column("device", justify="right")
    table.add_column("origin")
    for lt in LIFETIMES:
        entries = rank.by_lifetime(lt)
        if not entries:
            continue
        table.add_row(Text(_LIFETIME_TITLES[lt], style="bold"), "", "", "", "", "")
        for e in entries:
            table.add_row(
                "  " + e.name,
                e.kind,
                _size(e.requested_bytes),
                str(e.count),
                _size(e.device_bytes),
                e.origin,
            )
        table.add_row(
            Text("  subtotal", style="italic"),
            "",
            _size(sum(e.total_requested for e in entries)),
            "",
            Text(_size(rank.device_total(lt)), style="bold"),
            "",
            end_section=True,
        )
    return table


def budget_table(b: Budget) -> Table:
    t = Table(title="budget per rank (memory-model.md §6)", title_justify="left")
    t.add_column("term")
    t.add_column("bytes", justify="right")
    t.add_column("")
    t.add_column("meaning")
    rows = [
        ("T", b.total, "", "device memory"),
        ("U_oth", b.used_by_others, "", "used by other processes"),
        ("U_pre", b.u_pre, "", "context, NCCL, eager one-shot channel, DMA slab"),
        ("F0", b.f0, "", "free at vLLM's init snapshot = T - U_oth - U_pre"),
        ("R", b.gate, "", "ceil(GMU * T): start gate F0 >= R"),
        ("W", b.w, "", "weights"),
        ("P", b.p, "", "profiled torch peak (activations, workspace)"),
        ("N", b.n, "", "profiled non-torch (IPC channels, NCCL lazies)"),
        ("G_e", b.g_e, "", "CUDA-graph estimate"),
        ("KV", b.kv, "pinned" if b.kv_pinned else "", "KV cache = R - W - P - N - G_e"),
        ("X", b.x, "", "unbudgeted"),
        ("margin", b.margin, f"min {_size(b.min_margin)}", "F0 - (W+P+N+G_e+KV) - X"),
    ]
    for term, value, extra, meaning in rows:
        t.add_row(term, f"{value:,}  ({_size(value)})", extra, meaning)
    return t


def verdict_text(b: Budget) -> Text:
    text = Text("verdict: ")
    text.append(b.verdict, style=_VERDICT_STYLE[b.verdict])
    text.append(
        f"  margin {_size(b.margin)} (minimum {_size(b.min_margin)}); KV holds {b.kv_tokens:,} tokens "
        f"({b.kv_bytes_per_token:,} B/token/rank, {b.kv_bytes_per_token_origin}); one max_model_len request "
        f"needs {_size(b.request_bytes)} per rank: {'fits' if b.request_fits else 'does not fit'}\n"
        f"recommended --kv-cache-memory-bytes={b.recommended_kv_cache_memory_bytes} "
        f"({_size(b.recommended_kv_cache_memory_bytes)}) keeps the minimum margin"
    )
    for reason in b.reasons:
        text.append(f"\n  - {reason}")
    for caution in b.cautions:
        text.append(f"\n  ! {caution}", style="yellow")
    return text


def explain_text(e: Entry) -> str:
    return "\n".join(
        [
            f"{e.name}  ({e.subsystem})",
            f"  formula:   {e.formula}",
            f"  requested: {e.requested_bytes:,} B per instance x {e.count} = {e.total_requested:,} B",
            f"  device:    {e.device_bytes:,} B ({_size(e.device_bytes)}) "
            "after page / segment rounding (modelled)",
            f"  kind:      {e.kind}    lifetime: {e.lifetime}    origin: {e.origin}",
            f"  exists:    {e.condition}",
            f"  read by:   {e.reader}",
        ]
        + ([f"  note:      {e.note}"] if e.note else [])
    )


def render_plan(
    result: PlanResult, *, as_json: bool, explain: str | None = None, svg: Path | None = None
) -> None:
    ledger, budget = result.ledger, result.budget
    title = f"glmlaunch plan -p {result.resolved.profile_name}: {result.config.description or ''}".rstrip(
        ": "
    )
    if svg is not None:
        memmap.write_svg(svg, ledger.ranks, budget, title=title)
        note(f"memory map written to {svg}")
    if explain is not None:
        from glmlaunch.plan.planner import explain_terms

        lines = explain_terms(result, explain)
        entry = find_entry(result, explain) if lines is None else None
        text = "\n".join(lines) if lines is not None else explain_text(entry) if entry is not None else ""
        if as_json:
            out_json(
                {
                    "schema_version": 1,
                    "profile": result.resolved.profile_name,
                    "explain": explain,
                    "kind": "entry" if entry is not None else "term",
                    "entry": entry_doc(entry).model_dump(mode="json") if entry is not None else None,
                    "lines": text.splitlines(),
                }
            )
        else:
            out_console.print(text, markup=False, highlight=False)
        return
    if ledger.library == "b12x":
        note(f"library: {ledger.constants_source}")
    for line in ledger.notes:
        note(line)
    if as_json:
        out_json(plan_document(result).model_dump(mode="json"))
    else:
        out_console.print(Text(title, style="bold"))
        out_console.print(Text(f"constants: {ledger.constants_source}", style="dim"))
        for head, members in _rank_groups(ledger.ranks):
            out_console.print(ledger_table(head, members))
        if ledger.latent:
            lat = Table(title="latent (reachable by other callers, not charged)", title_justify="left")
            lat.add_column("entry")
            lat.add_column("bytes", justify="right")
            lat.add_column("condition")
            for e in ledger.latent:
                lat.add_row(e.name, _size(e.requested_bytes), e.condition)
            out_console.print(lat)
        out_console.print(budget_table(budget))
        out_console.print(memmap.render_terminal(ledger.rank0, budget))
        out_console.print(verdict_text(budget))
    if budget.verdict != "ok":
        raise MarginError(f"plan verdict {budget.verdict}: " + "; ".join(budget.reasons))


def render_audit(result: PlanResult, audit: Audit, *, as_json: bool) -> None:
    if as_json:
        out_json(
            {
                "schema_version": 1,
                "profile": result.resolved.profile_name,
                "overrides": list(result.resolved.overrides),
                "findings": [
                    {
                        "id": f.id,
                        "title": f.title,
                        "entries": list(f.entries),
                        "recoverable_bytes_per_rank": f.recoverable_bytes,
                        "recoverable_device_bytes_per_rank": f.recoverable_device_bytes,
                        "certainty": f.certainty,
                        "evidence": f.evidence,
                        "fix": f.fix,
                        "caveat": f.caveat,
                    }
                    for f in audit.findings
                ],
                "not_applicable": [{"id": i, "why": why} for i, why in audit.not_applicable],
                "total_recoverable_bytes_per_rank": audit.total_bytes,
                "total_recoverable_device_bytes_per_rank": audit.total_device_bytes,
            }
        )
        return
    t = Table(
        title=f"audit -p {result.resolved.profile_name}: allocated but unread or mostly unused",
        title_justify="left",
        show_lines=True,
    )
    t.add_column("finding")
    t.add_column("per rank", justify="right")
    t.add_column("device", justify="right")
    t.add_column("evidence and fix")
    for f in audit.findings:
        body = Text(f.evidence + "\n")
        body.append("fix: ", style="bold")
        body.append(f.fix)
        if f.caveat:
            body.append("\ncaveat: ", style="bold")
            body.append(f.caveat)
        t.add_row(
            Text(f"{f.title}\n[{f.id}, {f.certainty}]"),
            _size(f.recoverable_bytes),
            _size(f.recoverable_device_bytes),
            body,
        )
    t.add_row(Text("total", style="bold"), _size(audit.total_bytes), _size(audit.total_device_bytes), "")
    out_console.print(t)
    for i, why in audit.not_applicable:
        note(f"not applicable: {i}: {why}")


def _opt(n: int | None) -> str:
    return "—" if n is None else _size(n)


def render_diff(d: Diff, *, as_json: bool) -> None:
    if as_json:
        out_json(diff_document(d))
        return
    lname = d.left.resolved.profile_name
    rname = d.right.resolved.profile_name + (
        f" + {' '.join(d.right.resolved.overrides)}" if d.right.resolved.overrides else ""
    )
    s = Table(title="settings that differ", title_justify="left")
    s.add_column("key")
    s.add_column(lname)
    s.add_column(rname)
    for sd in d.settings:
        s.add_row(sd.key, str(sd.left), str(sd.right))
    out_console.print(s)
    e = Table(title="ledger per rank (device footprint)", title_justify="left")
    e.add_column("entry")
    e.add_column(lname, justify="right")
    e.add_column(rname, justify="right")
    e.add_column("delta", justify="right")
    for x in d.entries:
        if x.left_device == x.right_device and x.left_requested == x.right_requested:
            continue
        delta = x.delta_device
        e.add_row(
            x.name,
            _opt(x.left_device),
            _opt(x.right_device),
            Text(("+" if delta > 0 else "") + _size(delta), style="red" if delta > 0 else "green"),
        )
    out_console.print(e)
    b = Table(title="budget per rank", title_justify="left")
    b.add_column("term")
    b.add_column(lname, justify="right")
    b.add_column(rname, justify="right")
    b.add_column("delta", justify="right")
    for term, lv, rv in d.budget:
        b.add_row(term, _size(lv), _size(rv), ("+" if rv - lv > 0 else "") + _size(rv - lv))
    b.add_row("verdict", d.left.budget.verdict, d.right.budget.verdict, "")
    out_console.print(b)
