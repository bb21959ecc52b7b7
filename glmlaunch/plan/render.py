"""Rendering of ``plan``, ``audit`` and ``diff``: rich tables on stdout, or one JSON document.

stdout carries the data (tables, the memory map, JSON); notes about the run go to stderr.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table
from rich.text import Text

from glmlaunch.config.commands import setting_text
from glmlaunch.config.registry import GLMLAUNCH_SET
from glmlaunch.config.resolve import Resolved
from glmlaunch.config.units import format_size
from glmlaunch.errors import MarginError, StrictWarningsError
from glmlaunch.ledger.budget import Budget
from glmlaunch.ledger.constants import for_stack
from glmlaunch.ledger.model import LIFETIMES, Entry, LoadPeak, RankLedger, RuntimeDemand
from glmlaunch.output import fit, fits, mask_secrets, note, out_console, out_json, warn
from glmlaunch.plan import memmap
from glmlaunch.plan.advice import obstacle
from glmlaunch.plan.planner import ProfilePlan, entry_doc, find_entry, generation_line, plan_document

if TYPE_CHECKING:
    # audit and diff are imported by their own commands; `plan` does not load them
    from glmlaunch.plan.audit import Audit
    from glmlaunch.plan.diff import Diff

_LIFETIME_TITLES = {
    "budget-term": "budget terms (W, KV)",
    "pre-snapshot": "pre-snapshot (U_pre: before vLLM's init snapshot)",
    "profiled": "profiled (P / N: inside the KV budget)",
    "graph-estimated": "graph-estimated (G_e)",
    "unbudgeted": "unbudgeted (X: the OOM window)",
}
_VERDICT_STYLE = {
    "ok": "bold green",
    "caution": "bold yellow",
    "below-margin": "bold yellow",
    "runtime-oom": "bold red",
    "oom-risk": "bold red",
    "refused": "bold red",
}


def _size(n: int) -> str:
    return format_size(n)


def config_label(resolved: Resolved) -> str:
    """The profile and every override in effect, as ``diff`` names a side: ``turnkey + key=value …``.

    Overrides in the order they were layered: ``GLMLAUNCH_<SECTION>__<FIELD>`` variables (as the caller
    wrote them), then ``GLMLAUNCH_SET`` and ``--set`` items. A plan, a map or an audit read later must say
    which configuration it is about; the profile name alone would hide the change being evaluated.
    """
    env_vars: dict[str, None] = {}
    for source in resolved.provenance.values():
        if source.kind == "env" and source.detail and not source.detail.startswith(GLMLAUNCH_SET):
            env_vars[source.detail] = None
    items = [f"{name}={os.environ[name]}" if name in os.environ else name for name in sorted(env_vars)]
    items += list(resolved.overrides)
    name = resolved.profile_name
    return mask_secrets(f"{name} + {' '.join(items)}" if items else name)


#: Terminal widths (columns) at which the ledger table changes shape. At FULL and wider, and whenever stdout
#: is not a terminal (a pipe or a file keeps every column), the table is complete. Below it the requested
#: bytes and the count go (the count joins the entry's name as "×N"); below MEDIUM kind and origin fold
#: into a second line under the name, so the two columns left are the name and the device bytes.
FULL_WIDTH = 110
MEDIUM_WIDTH = 80
_SHORT_LIFETIME_TITLES = {
    "budget-term": "budget terms (W, KV)",
    "pre-snapshot": "pre-snapshot (U_pre)",
    "profiled": "profiled (P, N)",
    "graph-estimated": "graph-estimated (G_e)",
    "unbudgeted": "unbudgeted (X)",
}


def terminal_width() -> int | None:
    """The terminal's width when stdout is one, else None (piped output keeps the full tables).

    On a terminal, text also wraps to that width from here on: a line longer than the terminal would be
    wrapped by the terminal anyway, but mid-word and through the tables' borders.
    """
    if not out_console.is_terminal:
        return None
    out_console.soft_wrap = False
    return int(out_console.width)


def _table(title: str, width: int | None, **kwargs: Any) -> Table:
    if width is None or width >= FULL_WIDTH:
        return Table(title=title, title_justify="left", **kwargs)
    # no vertical rules: three or four columns of separators are worth a name's width at 60 columns
    return Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, **kwargs
    )


def _count_suffix(e: Entry) -> str:
    return f" ×{e.count}" if e.count != 1 else ""


def ledger_table(rank: RankLedger, members: list[RankLedger], width: int | None = None) -> Table:
    """One group of identical ranks: every entry by lifetime, in the widest layout that keeps every cell
    whole at ``width`` columns (None: full). A layout's threshold is a guess at its width; the entry names
    decide (a long one makes the medium layout wider than 80 columns)."""
    table = _ledger_layout(rank, members, width)
    for narrower in (FULL_WIDTH - 1, MEDIUM_WIDTH - 1):
        if width is None or fits(table, width):
            break
        if narrower < width:
            table = _ledger_layout(rank, members, narrower)
    return table


def _ledger_layout(rank: RankLedger, members: list[RankLedger], width: int | None) -> Table:
    who = ", ".join(f"{m.rank}" for m in members)
    gpus = ", ".join(f"{m.gpu}" for m in members)
    title = f"ranks {who} (GPUs {gpus})" + (" — identical" if len(members) > 1 else "")
    full = width is None or width >= FULL_WIDTH
    medium = not full and width is not None and width >= MEDIUM_WIDTH
    table = _table(title, width, show_lines=False, expand=False)
    # an entry name is never cut: it is what --explain takes
    table.add_column("entry", no_wrap=True, overflow="fold")
    if full:
        table.add_column("kind")
        table.add_column("requested", justify="right")
        table.add_column("×", justify="right")
    elif medium:
        table.add_column("kind")
    table.add_column("device", justify="right", no_wrap=True)
    if full or medium:
        table.add_column("origin")
    titles = _LIFETIME_TITLES if full else _SHORT_LIFETIME_TITLES
    blank = [""] * (len(table.columns) - 1)
    for lt in LIFETIMES:
        entries = rank.by_lifetime(lt)
        if not entries:
            continue
        table.add_row(Text(titles[lt], style="bold"), *blank)
        for e in entries:
            if full:
                table.add_row(
                    "  " + e.name,
                    e.kind,
                    _size(e.requested_bytes),
                    str(e.count),
                    _size(e.device_bytes),
                    e.origin,
                )
            elif medium:
                table.add_row("  " + e.name + _count_suffix(e), e.kind, _size(e.device_bytes), e.origin)
            else:
                name = Text("  " + e.name + _count_suffix(e))
                name.append(f"\n    {e.kind} · {e.origin}", style="dim")
                table.add_row(name, _size(e.device_bytes))
        subtotal = Text(_size(rank.device_total(lt)), style="bold")
        if full:
            requested = _size(sum(e.total_requested for e in entries))
            table.add_row(
                Text("  subtotal", style="italic"), "", requested, "", subtotal, "", end_section=True
            )
        else:
            cells = ["", subtotal, ""] if medium else [subtotal]
            table.add_row(Text("  subtotal", style="italic"), *cells, end_section=True)
    return table


def latent_table(latent: tuple[Entry, ...], width: int | None = None) -> Table:
    lat = _table("latent (reachable by other callers, not charged)", width)
    lat.add_column("entry", no_wrap=True, overflow="fold")
    lat.add_column("bytes", justify="right", no_wrap=True)
    lat.add_column("condition", overflow="fold")
    for e in latent:
        lat.add_row(e.name, _size(e.requested_bytes), e.condition)
    return lat


def runtime_table(demand: RuntimeDemand, width: int | None = None) -> Table:
    """The runtime demand: each transient after startup, in firing order, with its phase."""
    t = _table(f"runtime demand per rank (after startup; peak: {demand.peak_phase})", width)
    t.add_column("entry", no_wrap=True, overflow="fold")
    t.add_column("phase", no_wrap=True)
    t.add_column("bytes", justify="right", no_wrap=True)
    t.add_column("origin")
    t.add_column("trigger", overflow="fold")
    for tr in demand.transients:
        e = tr.entry
        t.add_row(e.name, tr.phase, _size(e.device_bytes), e.origin, e.condition)
    return t


def load_table(load: LoadPeak, b: Budget, width: int | None = None) -> Table:
    """The load-time peak: the weights and what loading holds beside them, against F0."""
    margin = b.load_margin if b.load_margin is not None else b.f0 - load.peak_bytes
    t = _table(
        f"load-time peak per rank {_size(load.peak_bytes)} of F0 {_size(b.f0)}: {_size(margin)} left "
        "(freed before vLLM profiles)",
        width,
    )
    t.add_column("entry", no_wrap=True, overflow="fold")
    t.add_column("bytes", justify="right", no_wrap=True)
    t.add_column("origin")
    t.add_column("reader", overflow="fold")
    for e in load.entries:
        t.add_row(e.name, _size(e.device_bytes), e.origin, e.reader)
    return t


def budget_table(b: Budget, width: int | None = None) -> Table:
    full = width is None or width >= FULL_WIDTH
    t = _table("budget per rank (docs/memory-model.md §6)", width)
    t.add_column("term", no_wrap=True)
    if full:
        t.add_column("bytes", justify="right")
        t.add_column("")
    else:
        # a number is never wrapped: the exact bytes and the size get a column each, the meaning wraps
        t.add_column("bytes", justify="right", no_wrap=True)
        t.add_column("size", justify="right", no_wrap=True)
    t.add_column("meaning", overflow="fold")
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
        ("KV", b.kv, ("pinned; " if b.kv_pinned else "") + _tokens_band(b), "KV cache = R - W - P - N - G_e"),
        ("X", b.x, "", "unbudgeted"),
        (
            "margin",
            b.margin,
            f"min {_size(b.min_margin)}; band {_band(b.margin_range)}",
            "F0 - (W+P+N+G_e+KV) - X: free after startup",
        ),
        ("D", b.runtime_demand, b.runtime_phase, "runtime demand: the peak phase's transients"),
        (
            "runtime",
            b.runtime_margin,
            f"min {_size(b.min_runtime_margin)}; band {_band(b.runtime_margin_range)}",
            "margin - D: free at the peak",
        ),
    ]
    for term, value, extra, meaning in rows:
        if full:
            t.add_row(term, f"{value:,}  ({_size(value)})", extra, meaning)
        else:
            t.add_row(term, f"{value:,}", _size(value), f"{meaning} ({extra})" if extra else meaning)
    return t


def _band(r: tuple[int, int]) -> str:
    """``[low, high]`` of a byte figure, as sizes."""
    return f"[{_size(r[0])}, {_size(r[1])}]"


def _tokens_band(b: Budget) -> str:
    lo, hi = b.kv_tokens_range
    return f"{b.kv_tokens:,} tokens [{lo:,}, {hi:,}]"


def _map_width(width: int | None) -> int:
    # the bars follow an 11-column label ("whole GPU  "); 72 cells when the terminal has room
    return 72 if width is None else max(10, min(72, width - 12))


def svg_verdict(result: ProfilePlan) -> memmap.SvgVerdict:
    """The verdict as the SVG map shows it: status and margin as the headline, the rest in small print."""
    v = result.verdict
    b = result.budget
    # both margins on the headline: a runtime-oom is decided by the second (their minimums below)
    headline = f"verdict: {v.status} — margin {_size(b.margin)}, runtime margin {_size(b.runtime_margin)}"
    if b.request_fits:
        fit = "fits"
    else:
        fit = "does not fit" if b.request_fit_confirmed else "may not fit (unconfirmed)"
    details = (
        f"margin {_size(b.margin)} (minimum {_size(b.min_margin)}); {memmap.runtime_line(b)}",
        f"T = {_size(b.total)} per GPU; KV {_size(b.kv)} holds {b.kv_tokens:,} tokens "
        f"({b.kv_bytes_per_token:,} B/token/rank, {b.kv_bytes_per_token_origin}); one "
        f"{result.config.scheduler.max_model_len:,}-token request needs {_size(b.request_bytes)} per rank: "
        f"{fit}",
        v.confidence_line(),
        *advice_lines(result),
    )
    findings = tuple(("blocker", x.message) for x in v.blockers) + tuple(("caution", c) for c in b.cautions)
    return memmap.SvgVerdict(v.status, headline, details, findings)


def advice_lines(result: ProfilePlan) -> list[str]:
    """The recommendations, or, when no pool keeps the plan, the obstacle (never a pool of 0 bytes)."""
    b = result.budget
    blocked = obstacle(b)
    if blocked is not None:
        return [blocked]
    rest = [f"recommended for the runtime margin: {result.verdict.recommendation()}"]
    # advice that was sized but, planned, does not keep the plan: what it was and what blocks it
    rest += [f"not recommended: {d}" for d in b.dropped_advice]
    if b.recommended_kv_cache_memory_bytes is None:
        if any(d.startswith("--kv-cache-memory-bytes=") for d in b.dropped_advice):
            return ["no --kv-cache-memory-bytes keeps the plan", *rest]
        # a pool fits at the figures, none at the band's low edge (where the recommendations are made)
        return [
            "no --kv-cache-memory-bytes keeps the minimum margin and the runtime demand at the band's low "
            "edge (docs/memory-model.md §11)",
            *rest,
        ]
    return [
        f"recommended --kv-cache-memory-bytes={b.recommended_kv_cache_memory_bytes} "
        f"({_size(b.recommended_kv_cache_memory_bytes)}) keeps the minimum margin and the runtime demand",
        *rest,
    ]


def verdict_text(result: ProfilePlan) -> Text:
    # Rendered from the one verdict object (glmlaunch.ledger.verdict), as check, serve and search do.
    v = result.verdict
    b = v.budget
    text = Text("verdict: ")
    text.append(v.status, style=_VERDICT_STYLE[v.status])
    if v.blockers:
        text.append(f"  {v.blocked_text()}\n", style=_VERDICT_STYLE[v.status])
    text.append(f"  {v.facts()}\n{v.confidence_line()}\n" + "\n".join(advice_lines(result)))
    for caution in (*b.band_cautions, *b.cautions):
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
    result: ProfilePlan,
    *,
    as_json: bool,
    explain: str | None = None,
    svg: Path | None = None,
    strict: bool = False,
) -> None:
    ledger, budget = result.ledger, result.budget
    label = config_label(result.resolved)
    command = f"glmlaunch plan -p {label}"
    if result.gpu_memory is not None:
        command += f" --gpu-memory {result.gpu_memory}"
    title, subtitle = command, ""
    if result.config.description:
        # The description is the profile's: with overrides it no longer describes what is planned
        # ("GMU 0.957" next to gpu_memory_utilization=0.93), so it is attributed to the profile.
        changed = label != result.resolved.profile_name or result.gpu_memory is not None
        desc = result.config.description
        subtitle = f"profile {result.resolved.profile_name}: {desc}" if changed else desc
        title += f" ({subtitle})" if changed else f": {desc}"
    if svg is not None:
        # the SVG sets the description on a line of its own: no brackets around it to close
        memmap.write_svg(
            svg, ledger.ranks, budget, title=command, subtitle=subtitle, verdict=svg_verdict(result)
        )
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
        doc = plan_document(result).model_dump(mode="json")
        if doc.get("load_time") is None:
            # only where loading holds more than the weights (docs/memory-model.md §6)
            doc.pop("load_time", None)
        out_json(doc)
    else:
        width = terminal_width()
        out_console.print(Text(title, style="bold"))
        out_console.print(Text(f"generation: {generation_line(for_stack(ledger.stack))}", style="dim"))
        out_console.print(Text(f"constants: {ledger.constants_source}", style="dim"))
        if result.calibration_message:
            out_console.print(Text(f"calibration: {result.calibration_message}", style="dim"))
        moved, unattributed = result.moved_by
        for m in moved:
            out_console.print(Text(m.line(result.verdict.status, result.verdict.confidence), style="dim"))
        if unattributed:
            out_console.print(Text(f"moved by {unattributed} more record(s), not attributed", style="dim"))
        for head, members in memmap.rank_groups(ledger.ranks):
            out_console.print(ledger_table(head, members, width))
        if ledger.latent:
            out_console.print(latent_table(ledger.latent, width))
        if ledger.runtime.transients:
            out_console.print(runtime_table(ledger.runtime, width))
        if ledger.load_time is not None:
            out_console.print(load_table(ledger.load_time, budget, width))
        out_console.print(budget_table(budget, width))
        out_console.print(memmap.render_terminal(ledger.rank0, budget, width=_map_width(width)))
        out_console.print(verdict_text(result))
    if budget.verdict != "ok":
        raise MarginError(f"plan verdict {result.verdict.summary()}")
    if result.verdict.caution:
        for caution in budget.band_cautions:
            warn(f"caution: {caution}")
        if strict:
            raise StrictWarningsError(
                "plan verdict is a caution (ok at the figures, not at the band's low edge) and --strict "
                "was given",
                hint="a boot of this shape narrows the band: glmlaunch serve --supervise, or calibrate "
                "ingest its log",
            )


def render_audit(result: ProfilePlan, audit: Audit, *, as_json: bool) -> None:
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
        title=f"audit -p {config_label(result.resolved)}: allocated but unread or mostly unused",
        title_justify="left",
        show_lines=True,
    )
    # the id is what --json and the docs name: a column of its own, never wrapped or cut
    t.add_column("id", no_wrap=True)
    t.add_column("finding", overflow="fold")
    t.add_column("per rank", justify="right", no_wrap=True)
    t.add_column("device", justify="right", no_wrap=True)
    t.add_column("evidence and fix", overflow="fold")
    for f in audit.findings:
        body = Text(f.evidence + "\n")
        body.append("fix: ", style="bold")
        body.append(f.fix)
        if f.caveat:
            body.append("\ncaveat: ", style="bold")
            body.append(f.caveat)
        t.add_row(
            f.id,
            Text(f"{f.title}\n[{f.certainty}]"),
            _size(f.recoverable_bytes),
            _size(f.recoverable_device_bytes),
            body,
        )
    t.add_row(Text("total", style="bold"), "", _size(audit.total_bytes), _size(audit.total_device_bytes), "")
    out_console.print(t)
    for i, why in audit.not_applicable:
        note(f"not applicable: {i}: {why}")


def _opt(n: int | None) -> str:
    return "—" if n is None else _size(n)


#: The longest side label ``diff`` uses as a column header; a longer one is named above the tables.
_SIDE_HEADER = 24


def render_diff(d: Diff, *, as_json: bool) -> None:
    if as_json:
        from glmlaunch.plan.diff import diff_document

        out_json(diff_document(d))
        return
    lname, rname = config_label(d.left.resolved), config_label(d.right.resolved)
    if max(len(lname), len(rname)) > _SIDE_HEADER:
        # A long label (a profile and its overrides) is said once, above, not as a column header that
        # would squeeze the figures: the columns are A and B.
        out_console.print(Text(f"A: {lname}\nB: {rname}"))
        lname, rname = "A", "B"
    # Keys and figures whole at any width (output.fit stacks a table that cannot keep them whole).
    s = Table(title="settings that differ", title_justify="left")
    s.add_column("key", no_wrap=True)
    s.add_column(lname)
    s.add_column(rname)
    for sd in d.settings:
        s.add_row(sd.key, setting_text(sd.key, sd.left), setting_text(sd.key, sd.right))
    out_console.print(fit(s))
    e = Table(title="ledger per rank (device footprint)", title_justify="left")
    e.add_column("entry", no_wrap=True)
    e.add_column(lname, justify="right", no_wrap=True)
    e.add_column(rname, justify="right", no_wrap=True)
    e.add_column("delta", justify="right", no_wrap=True)
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
    out_console.print(fit(e))
    b = Table(title="budget per rank", title_justify="left")
    b.add_column("term", no_wrap=True)
    b.add_column(lname, justify="right", no_wrap=True)
    b.add_column(rname, justify="right", no_wrap=True)
    b.add_column("delta", justify="right", no_wrap=True)
    for term, lv, rv in d.budget:
        b.add_row(term, _size(lv), _size(rv), ("+" if rv - lv > 0 else "") + _size(rv - lv))
    b.add_row(
        "verdict",
        f"{d.left.verdict.status} ({d.left.verdict.confidence})",
        f"{d.right.verdict.status} ({d.right.verdict.confidence})",
        "",
    )
    out_console.print(fit(b))
