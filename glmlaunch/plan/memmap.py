"""A per-GPU memory map: where every byte of one rank goes, drawn in the terminal and as an SVG file.

Segments, in address-free "stacking" order: other processes, runtime (CUDA context, NCCL, non-torch),
weights, PCIe comm pools (IPC slabs and ``rank_data``), indexer workspace, activations and the graph
pool, KV cache, unbudgeted (X), and the margin that is left. Weights dominate a 96 GB card, so each map
has two bars: the whole GPU, and a zoom on everything but the weights.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

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
    sums = dict.fromkeys((s[0] for s in _SEGMENTS), 0)
    sums["others"] = budget.used_by_others
    for e in rank.entries:
        sums[_category(e)] += e.device_bytes
    if budget.kv != sums["kv"]:
        sums["kv"] = budget.kv  # the budget may have been computed for another T than the ledger's KV entry
    used = sum(v for k, v in sums.items() if k != "margin")
    sums["margin"] = budget.total - used
    return tuple(
        Segment(key, label, sums[key], color, f"black on {style}", letter)
        for key, label, color, style, letter in _SEGMENTS
    )


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
    segs = segments(rank, budget)
    zoom = tuple(s for s in segs if s.key not in ("weights", "others"))
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
            s.label,
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


def _svg_bar(segs: tuple[Segment, ...], x: float, y: float, w: float, h: float) -> list[str]:
    total = sum(max(s.nbytes, 0) for s in segs) or 1
    out: list[str] = []
    cursor = x
    for s in segs:
        if s.nbytes <= 0:
            continue
        sw = max(w * s.nbytes / total, 1.0)
        tip = f"{s.label}: {format_size(s.nbytes)} ({s.nbytes:,} B)"
        out.append(
            f'  <rect x="{cursor:.1f}" y="{y:.1f}" width="{sw:.1f}" height="{h:.1f}" fill="{s.color}">'
            f"<title>{escape(tip)}</title></rect>"
        )
        cursor += sw
    out.append(f'  <rect x="{x}" y="{y}" width="{w}" height="{h}" fill="none" stroke="#333"/>')
    return out


def svg(ranks: tuple[RankLedger, ...], budget: Budget, *, title: str) -> str:
    """One SVG document: a whole-GPU bar and a zoom bar per rank, a legend, and the verdict."""
    width, bar_w, x0 = 1000, 820, 150
    row_h = 70
    # Long titles and findings wrap to the picture's width (about 6.5 px per character at 12 px).
    head, _, rest = title.partition(": ")
    title_lines = [head + (":" if rest else ""), *textwrap.wrap(rest, 130)]
    verdict = (
        f"verdict: {budget.verdict} — margin {format_size(budget.margin)} (minimum "
        f"{format_size(budget.min_margin)}), T = {format_size(budget.total)}"
    )
    findings = [("#b00020", f"- {r}") for r in budget.reasons] + [
        ("#b35900", f"! {c}") for c in budget.cautions
    ]
    finding_lines = [
        (colour, line) for colour, f in findings for line in textwrap.wrap(f, 150, subsequent_indent="  ")
    ]
    top = 30 + 18 * len(title_lines) + 18 * (1 + len(finding_lines)) + 10
    height = top + row_h * len(ranks) + 40 + 22 * len(_SEGMENTS) + 40
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'  <rect width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    y = 28
    for i, line in enumerate(title_lines):
        style = ' font-size="16" font-weight="bold"' if i == 0 else ' font-size="13"'
        lines.append(f'  <text x="20" y="{y}"{style}>{escape(line)}</text>')
        y += 18
    lines.append(f'  <text x="20" y="{y}" fill="#444">{escape(verdict)}</text>')
    y += 18
    for colour, line in finding_lines:
        lines.append(f'  <text x="20" y="{y}" fill="{colour}">{escape(line)}</text>')
        y += 18
    y = top
    for rank in ranks:
        segs = segments(rank, budget)
        zoom = tuple(s for s in segs if s.key not in ("weights", "others"))
        lines.append(f'  <text x="20" y="{y + 16}">GPU {rank.gpu} (rank {rank.rank})</text>')
        lines += _svg_bar(segs, x0, y + 2, bar_w, 22)
        lines.append(f'  <text x="20" y="{y + 44}" fill="#666">zoom, no weights</text>')
        lines += _svg_bar(zoom, x0, y + 30, bar_w, 22)
        y += row_h
    y += 20
    segs0 = segments(ranks[0], budget)
    for s in segs0:
        lines.append(f'  <rect x="20" y="{y}" width="14" height="14" fill="{s.color}" stroke="#333"/>')
        lines.append(
            f'  <text x="42" y="{y + 12}">{escape(s.label)}: {escape(format_size(s.nbytes))} '
            f"({100 * s.nbytes / budget.total:.2f}% of GPU)</text>"
        )
        y += 22
    lines.append("</svg>")
    return "\n".join(lines) + "\n"


def write_svg(path: Path, ranks: tuple[RankLedger, ...], budget: Budget, *, title: str) -> None:
    write_text(path, svg(ranks, budget, title=title), key="--svg")
