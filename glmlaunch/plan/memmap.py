"""A per-GPU memory map: where every byte of one rank goes, drawn in the terminal and as an SVG file.

Segments, in address-free "stacking" order: other processes, runtime (CUDA context, NCCL, non-torch),
weights, PCIe comm pools (IPC slabs and ``rank_data``), indexer workspace, activations and the graph
pool, KV cache, unbudgeted (X), and the margin that is left. Weights dominate a 96 GB card, so each map
has two bars: the whole GPU, and a zoom on everything but the weights.

The map adds up to the verdict's budget, not to the ledger's item sum: the budget's P, N and G_e are
peaks (measured or calibrated), smaller or larger than the itemized entries, so the "activations +
graphs" segment is what the budget holds besides the itemized runtime, pools and workspace, and the
margin segment is the verdict's margin. A negative margin is drawn as an overrun past the device's end.

The SVG is always ``WIDTH`` px wide: each bar is scaled to the larger of its capacity and what it holds,
so a plan that overruns the device by twice its size still draws in the same picture (the device's end
then falls inside the bar, the overrun hatched after it). Under the zoom bar a strip shows the runtime
demand D after the margin's start, and the runtime margin (margin - D) is written under the bars.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from glmlaunch.config.units import format_size
from glmlaunch.files import write_text
from glmlaunch.ledger.budget import Budget
from glmlaunch.ledger.model import Entry, RankLedger


@dataclass(frozen=True, slots=True)
class Segment:
    key: str
    label: str
    nbytes: int
    color: str  # SVG fill
    style: str  # rich style
    letter: str


# key, label, SVG fill, terminal background, terminal letter (readable without colour too)
_SEGMENTS: tuple[tuple[str, str, str, str, str], ...] = (
    ("others", "other processes", "#9e9e9e", "grey50", "o"),
    ("runtime", "runtime (context, NCCL)", "#8d6e63", "color(137)", "r"),
    ("weights", "weights", "#3f51b5", "blue", "W"),
    ("pools", "comm pools", "#ff9800", "dark_orange", "p"),
    ("workspace", "indexer workspace", "#9c27b0", "magenta", "i"),
    ("activations", "activations + graphs", "#009688", "cyan", "a"),
    ("kv", "KV cache", "#4caf50", "green", "K"),
    ("unbudgeted", "unbudgeted (X)", "#f44336", "red", "X"),
    ("margin", "margin", "#e0e0e0", "white", "."),
)
#: verdict status -> SVG colour of the verdict line (the terminal uses the same hues)
STATUS_COLOURS = {
    "ok": "#2e7d32",
    "below-margin": "#b26a00",
    "runtime-oom": "#c62828",
    "oom-risk": "#c62828",
    "refused": "#c62828",
}
_OVERRUN = "#b00020"
#: the SVG's width in px, whatever the plan: the bars scale to the device or to what overruns it
WIDTH = 1000.0


def _category(e: Entry) -> str:
    if e.lifetime == "unbudgeted":
        return "unbudgeted"
    if e.subsystem == "weights":
        return "weights"
    if e.subsystem == "kv_cache":
        return "kv"
    if e.subsystem == "runtime":
        return "runtime"
    if e.subsystem in ("oneshot", "dma", "dcp_a2a", "topk_exchange"):
        return "pools"
    if e.kind == "workspace":
        return "workspace"
    return "activations"


def segments(rank: RankLedger, budget: Budget) -> tuple[Segment, ...]:
    """The rank's memory by category; the categories add up to T and the margin is the budget's."""
    sums = dict.fromkeys((s[0] for s in _SEGMENTS), 0)
    for e in rank.entries:
        sums[_category(e)] += e.device_bytes
    sums["others"] = budget.used_by_others
    sums["weights"], sums["kv"], sums["unbudgeted"] = budget.w, budget.kv, budget.x
    # U_pre + P + N + G_e is what the budget holds besides W, KV and X; the itemized runtime, pools and
    # workspace are part of it, and the rest is the activations' and graphs' share. When the budget's
    # (calibrated) terms are below the itemization, the itemized segments give way, last built first.
    held = budget.u_pre + budget.p + budget.n + budget.g_e
    rest = held - sums["runtime"] - sums["pools"] - sums["workspace"]
    sums["activations"] = max(rest, 0)
    short = max(-rest, 0)
    for key in ("workspace", "pools", "runtime"):
        take = min(short, sums[key])
        sums[key] -= take
        short -= take
    sums["margin"] = budget.margin
    return tuple(
        Segment(key, label, sums[key], color, f"black on {style}", letter)
        for key, label, color, style, letter in _SEGMENTS
    )


def _zoom(segs: tuple[Segment, ...]) -> tuple[Segment, ...]:
    return tuple(s for s in segs if s.key not in ("weights", "others"))


def rank_groups(ranks: Sequence[RankLedger]) -> list[tuple[RankLedger, list[RankLedger]]]:
    """Ranks with identical ledgers, grouped in rank order: each group is drawn (and tabled) once."""
    groups: list[tuple[RankLedger, list[RankLedger]]] = []
    for r in ranks:
        for head, members in groups:
            if head.entries == r.entries:
                members.append(r)
                break
        else:
            groups.append((r, [r]))
    return groups


def _span(numbers: Sequence[int]) -> str:
    """``0–3`` for a run of consecutive numbers, else ``0, 2, 5``."""
    ns = list(numbers)
    if len(ns) > 2 and ns == list(range(ns[0], ns[0] + len(ns))):
        return f"{ns[0]}\u2013{ns[-1]}"
    return ", ".join(str(n) for n in ns)


def group_label(members: Sequence[RankLedger]) -> str:
    """``GPU 0 (rank 0)`` for one rank, ``ranks 0–3, GPUs 0–3`` for identical ranks drawn once."""
    if len(members) == 1:
        return f"GPU {members[0].gpu} (rank {members[0].rank})"
    return f"ranks {_span([m.rank for m in members])}, GPUs {_span([m.gpu for m in members])}"


# --- terminal --------------------------------------------------------------------------------------


def _bar(segs: tuple[Segment, ...], width: int) -> Text:
    total = sum(max(s.nbytes, 0) for s in segs) or 1
    text = Text()
    used = 0
    cells: list[tuple[Segment, int]] = []
    for s in segs:
        n = round(max(s.nbytes, 0) * width / total)
        if s.nbytes > 0 and n == 0:
            n = 1  # visible, however small
        cells.append((s, n))
        used += n
    if cells and used != width:
        big = max(range(len(cells)), key=lambda i: cells[i][1])
        cells[big] = (cells[big][0], max(0, cells[big][1] + width - used))
    for s, n in cells:
        text.append(s.letter * n, style=s.style)
    return text


def render_terminal(rank: RankLedger, budget: Budget, *, width: int = 72, title: str = "") -> RenderableType:
    """The two bars and a legend; ``width`` is the bars' length in cells (the caller fits its terminal)."""
    width = max(width, 10)
    segs = segments(rank, budget)
    zoom = _zoom(segs)
    zoom_total = sum(max(s.nbytes, 0) for s in zoom)
    legend = Table(box=None, show_header=False, pad_edge=False)
    legend.add_column("")
    legend.add_column("segment")
    legend.add_column("bytes", justify="right")
    legend.add_column("of GPU", justify="right")
    for s in segs:
        if s.nbytes == 0 and s.key not in ("margin",):
            continue
        legend.add_row(
            Text(f" {s.letter} ", style=s.style),
            s.label + (" (overrun)" if s.key == "margin" and s.nbytes < 0 else ""),
            format_size(s.nbytes),
            f"{100 * s.nbytes / budget.total:5.2f}%",
        )
    head = Text(title or f"GPU {rank.gpu} (rank {rank.rank}) — {format_size(budget.total)}", style="bold")
    return Group(
        head,
        Text("whole GPU  ") + _bar(segs, width),
        Text("zoom       ") + _bar(zoom, width),
        Text(f"           zoom = everything but weights: {format_size(zoom_total)}", style="dim"),
        legend,
    )


# --- SVG -------------------------------------------------------------------------------------------

#: average advance of a sans-serif character, in px per px of font size (generous, so labels never spill)
_CHAR_EM = 0.62


def _text_px(text: str, size: float) -> float:
    return len(text) * size * _CHAR_EM


def _ink(fill: str) -> str:
    """Black or white, whichever reads better on ``fill`` (#rrggbb)."""
    r, g, b = (int(fill[i : i + 2], 16) for i in (1, 3, 5))
    return "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"


@dataclass(frozen=True, slots=True)
class SvgVerdict:
    """What the map says about the verdict: the status (its colour), the headline, and the lines under it."""

    status: str
    headline: str
    details: tuple[str, ...] = ()
    findings: tuple[tuple[str, str], ...] = ()  # (kind "blocker" | "caution", text)


def _svg_bar(
    segs: tuple[Segment, ...],
    x: float,
    y: float,
    w: float,
    h: float,
    *,
    capacity: int,
    name: str,
    demand: int = 0,
    room_name: str = "the device's end",
) -> tuple[list[str], set[str], list[str]]:
    """One bar of width ``w``: the device (``capacity`` bytes) and, past its end, what overruns it.

    The scale is the larger of the capacity and what the segments (and the runtime ``demand`` drawn
    after them, when given) add up to, so the bar never leaves its ``w`` however far a plan overruns
    the device (a configuration whose weights alone are twice the GPU). Returns the SVG lines, the keys
    of the segments whose numbers are on the bar (the others go to the group's legend line), and the
    notes to print under the bar (the overrun, the runtime demand).
    """
    # imported here: xml.sax.saxutils pulls in urllib.request, http.client and ssl (~7 ms of every
    # `plan`, which draws the SVG only with --svg)
    from glmlaunch.files import xml_text as escape

    drawn = [s for s in segs if s.key != "margin" and s.nbytes > 0]
    filled = sum(s.nbytes for s in drawn)
    room = max(capacity, 0)
    extent = max(room, filled, filled + max(demand, 0), 1)
    scale = w / extent
    out: list[str] = []
    notes: list[str] = []
    labelled: set[str] = set()
    margin = room - filled
    if margin > 0:
        drawn += [replace(s, nbytes=margin) for s in segs if s.key == "margin"]
    at = 0
    for s in drawn:
        sx = x + scale * at
        sw = max(scale * s.nbytes, 1.0)  # visible, however small
        size = format_size(s.nbytes)
        tip = f"{s.label}: {size} ({s.nbytes:,} B)"
        out.append(
            f'  <rect class="segment" data-segment="{s.key}" data-bar="{name}" x="{sx:.1f}" y="{y:.1f}" '
            f'width="{sw:.1f}" height="{h:.1f}" fill="{s.color}"><title>{escape(tip)}</title></rect>'
        )
        # the number on the bar when it fits (with the segment's name when that fits too)
        label = next((t for t in (f"{s.label} {size}", size) if _text_px(t, 11) + 6 <= sw), None)
        if label is not None:
            labelled.add(s.key)
            out.append(
                f'  <text class="bar-label" x="{sx + sw / 2:.1f}" y="{y + h / 2 + 4:.1f}" font-size="11" '
                f'text-anchor="middle" fill="{_ink(s.color)}">{escape(label)}</text>'
            )
        at += s.nbytes
    end = x + scale * room
    out.append(
        f'  <rect class="device" data-bar="{name}" x="{x:.1f}" y="{y:.1f}" width="{scale * room:.1f}" '
        f'height="{h:.1f}" fill="none" stroke="#333"/>'
    )
    if filled > room:
        over = filled - room
        ow = max(scale * over, 2.0)
        out.append(
            f'  <rect class="overrun" data-bar="{name}" x="{end:.1f}" y="{y - 3:.1f}" width="{ow:.1f}" '
            f'height="{h + 6:.1f}" fill="url(#overrun)" fill-opacity="0.75" stroke="{_OVERRUN}" '
            f'stroke-width="2"><title>'
            f"{escape(f'overrun: {format_size(over)} ({over:,} B) more than the device holds')}"
            "</title></rect>"
        )
        notes.append(f"overrun {format_size(over)} past {room_name} ({format_size(room)})")
    if demand > 0:
        # the runtime demand, after startup, out of what the margin leaves (past the end: it runs out)
        dx, dw = x + scale * filled, max(scale * demand, 1.0)
        out.append(
            f'  <rect class="runtime-demand" data-bar="{name}" x="{dx:.1f}" y="{y + h + 2:.1f}" '
            f'width="{dw:.1f}" height="6" fill="#263238"><title>'
            f"{escape(f'runtime demand: {format_size(demand)} ({demand:,} B) after startup')}</title></rect>"
        )
        if filled + demand > room:
            cut = max(end, dx)
            out.append(
                f'  <rect class="runtime-overrun" data-bar="{name}" x="{cut:.1f}" y="{y + h + 1:.1f}" '
                f'width="{max(dx + dw - cut, 2.0):.1f}" height="8" fill="{_OVERRUN}"/>'
            )
    return out, labelled, notes


def _wrap(text: str, px: float, size: float, indent: str = "") -> list[str]:
    return textwrap.wrap(text, max(int(px / (size * _CHAR_EM)), 20), subsequent_indent=indent) or [""]


def runtime_line(budget: Budget) -> str:
    """The runtime margin, the figure a runtime-oom verdict turns on: margin - D, against its minimum."""
    line = (
        f"runtime margin {format_size(budget.runtime_margin)} (minimum "
        f"{format_size(budget.min_runtime_margin)}) = margin {format_size(budget.margin)} - runtime demand "
        f"D {format_size(budget.runtime_demand)} ({budget.runtime_phase})"
    )
    if budget.runtime_deciding:
        line += f"; deciding: {budget.runtime_deciding}"
    return line


def svg(
    ranks: tuple[RankLedger, ...],
    budget: Budget,
    *,
    title: str,
    verdict: SvgVerdict | None = None,
    subtitle: str | None = None,
) -> str:
    """One SVG document: the verdict, then per group of identical ranks a whole-GPU bar and a zoom bar
    with the bytes on them, then the legend. ``title: rest`` is split at its first ": " unless
    ``subtitle`` is given. The picture is always WIDTH px wide: the bars scale to what they hold."""
    from xml.sax.saxutils import quoteattr

    from glmlaunch.files import xml_text as escape  # see _svg_bar

    x0, bar_w, bar_h = 170.0, 780.0, 24.0
    width = WIDTH
    verdict = verdict or SvgVerdict(budget.verdict, f"verdict: {budget.verdict}")
    groups = rank_groups(ranks)
    body: list[str] = []
    y = 0.0
    legend_segs: tuple[Segment, ...] = ()

    def small(text: str, cls: str, fill: str = "#444") -> None:
        nonlocal y
        for line in _wrap(text, bar_w, 11):
            body.append(
                f'  <text class="{cls}" x="{x0:.1f}" y="{y + 8:.1f}" font-size="11" '
                f'fill="{fill}">{escape(line)}</text>'
            )
            y += 14

    for head, members in groups:
        segs = segments(head, budget)
        legend_segs = legend_segs or segs
        zoom = _zoom(segs)
        zoom_cap = budget.total - budget.used_by_others - budget.w
        label = group_label(members)
        body.append(
            f'  <text class="group" x="20" y="{y + 17:.1f}" font-weight="bold">{escape(label)}</text>'
        )
        whole, on1, notes1 = _svg_bar(segs, x0, y + 2, bar_w, bar_h, capacity=budget.total, name="whole")
        body += whole
        body.append(f'  <text x="20" y="{y + 46:.1f}" fill="#666">zoom, no weights</text>')
        zoomed, on2, notes2 = _svg_bar(
            zoom,
            x0,
            y + 32,
            bar_w,
            bar_h,
            capacity=zoom_cap,
            name="zoom",
            demand=budget.runtime_demand,
            room_name="what the weights leave",
        )
        body += zoomed
        y += 2 * bar_h + 24
        for text in (*notes1, *notes2):
            small(text, "overrun-label", _OVERRUN)
        fill = _OVERRUN if budget.runtime_margin < budget.min_runtime_margin else "#263238"
        small(runtime_line(budget), "runtime-margin", fill)
        # a negative margin is on the bars already, as the overrun
        missing = [s for s in segs if s.nbytes > 0 and s.key not in on1 | on2]
        if missing:
            named = "; ".join(f"{s.label} {format_size(s.nbytes)}" for s in missing)
            small(f"not on the bars: {named}", "bar-legend")
        y += 18

    head_lines: list[str] = []
    hy = 30.0
    first, _, rest = title.partition(": ") if subtitle is None else (title, "", subtitle)
    # bold text runs about 10 % wider than _CHAR_EM: wrap it as if it were a size larger
    colon = ":" if rest and subtitle is None else ""
    for i, line in enumerate(_wrap(first + colon, width - 40, 18, "    ")):
        style = ' font-size="16" font-weight="bold"' if i == 0 else ' font-size="14" font-weight="bold"'
        head_lines.append(f'  <text class="title" x="20" y="{hy:.1f}"{style}>{escape(line)}</text>')
        hy += 20
    for line in _wrap(rest, width - 40, 13) if rest else []:
        head_lines.append(
            f'  <text class="subtitle" x="20" y="{hy:.1f}" font-size="13">{escape(line)}</text>'
        )
        hy += 18
    hy += 10
    colour = STATUS_COLOURS.get(verdict.status, "#333")
    for line in _wrap(verdict.headline, width - 40, 22, "  "):
        head_lines.append(
            f'  <text class="verdict" data-status={quoteattr(verdict.status)} x="20" y="{hy:.1f}" '
            f'font-size="20" font-weight="bold" fill="{colour}">{escape(line)}</text>'
        )
        hy += 26
    for detail in verdict.details:
        for line in _wrap(detail, width - 40, 12, "  "):
            head_lines.append(f'  <text class="detail" x="20" y="{hy:.1f}" fill="#444">{escape(line)}</text>')
            hy += 17
    for kind, finding in verdict.findings:
        mark, fill = ("- ", "#b00020") if kind == "blocker" else ("! ", "#b35900")
        for line in _wrap(mark + finding, width - 40, 12, "  "):
            head_lines.append(
                f'  <text class="{kind}" x="20" y="{hy:.1f}" fill="{fill}">{escape(line)}</text>'
            )
            hy += 17
    top = hy + 16

    legend: list[str] = []
    ly = top + y + 4
    for s in legend_segs:
        over = s.key == "margin" and s.nbytes < 0
        fill = "url(#overrun)" if over else s.color
        legend.append(f'  <rect x="20" y="{ly:.1f}" width="14" height="14" fill="{fill}" stroke="#333"/>')
        text = f"{s.label}: {format_size(s.nbytes)} ({100 * s.nbytes / budget.total:.2f}% of GPU)"
        text += " — overrun" if over else ""
        legend.append(f'  <text class="legend" x="42" y="{ly + 12:.1f}">{escape(text)}</text>')
        ly += 22
    height = ly + 20

    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="12">',
        "  <defs>",
        '    <pattern id="overrun" width="8" height="8" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)">',
        f'      <rect width="8" height="8" fill="#ffcdd2"/><rect width="4" height="8" fill="{_OVERRUN}"/>',
        "    </pattern>",
        "  </defs>",
        f'  <rect width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>',
        *head_lines,
        f'  <g transform="translate(0 {top:.1f})">',
        *("  " + line for line in body),
        "  </g>",
        *legend,
        "</svg>",
    ]
    return "\n".join(lines) + "\n"


def write_svg(
    path: Path,
    ranks: tuple[RankLedger, ...],
    budget: Budget,
    *,
    title: str,
    verdict: SvgVerdict | None = None,
    subtitle: str | None = None,
) -> None:
    write_text(path, svg(ranks, budget, title=title, verdict=verdict, subtitle=subtitle), key="--svg")
