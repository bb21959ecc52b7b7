"""How a snapshot is shown: a live table on a terminal, one JSON object per line with ``--json``, nothing
otherwise; and, in every mode, one stderr line per event (a state change is a ``warning:`` when it gets
worse and a note when it gets better, said once per change, never once per sample).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from glmlaunch.config.units import format_size
from glmlaunch.output import fit, note, out_json_line, warn
from glmlaunch.watch.snapshot import Event, Snapshot

Mode = Literal["live", "json", "quiet"]
_WORSE = ("warn", "critical", "foreign", "drift")


class Renderer(Protocol):
    def show(self, snap: Snapshot) -> None: ...

    def close(self) -> None: ...


def say(event: Event) -> None:
    """An event on stderr: a state that got worse, an OOM, the deployment gone: warnings; the rest notes."""
    text = f"watch: {event.message}"
    if event.kind == "oom" or (event.kind == "state" and event.data.get("to") in _WORSE):
        warn(text, repeat=True)
    else:
        note(text)


def _short(n: int | None) -> str:
    return "-" if n is None else format_size(n)


def table(snap: Snapshot) -> Any:
    from rich.table import Table

    t = Table(
        title=f"glmlaunch watch: {snap.profile} ({snap.source}, sample {snap.seq}, t {snap.t:.1f} s)",
        title_justify="left",
    )
    for name, justify, whole in (
        ("rank", "right", True),
        ("GPU", "right", True),
        ("state", "left", True),
        ("used", "right", True),
        ("free", "right", True),
        ("planned", "right", True),
        ("pending", "right", True),
        ("why", "left", False),
    ):
        t.add_column(name, justify=justify, no_wrap=whole)  # type: ignore[arg-type]
    for r in snap.readings:
        t.add_row(
            str(r.rank),
            str(r.rank_gpu.device.nvml_index),
            r.state,
            _short(r.used_bytes),
            _short(r.free_bytes),
            _short(r.expect.planned_resident_bytes),
            _short(r.largest_pending_bytes) if r.pending is not None else "-",
            r.why(),
        )
    if snap.vllm is not None:
        v = snap.vllm
        if v.up:
            facts = ", ".join(f"{k} {v.values[k]:g}" for k in v.values)
            t.caption = f"vLLM {v.url}: {facts or 'none of the scheduler facts'}"
        else:
            t.caption = f"vLLM {v.url}: not answering ({v.error})"
    return t


@dataclass
class LiveView:
    """A table redrawn in place on the terminal (stdout); events print above it."""

    _live: Any = None

    def show(self, snap: Snapshot) -> None:
        from glmlaunch import output

        view = fit(table(snap))
        if self._live is None:
            from rich.live import Live

            # stderr's lines print above the table only when they share its terminal; stderr sent
            # elsewhere (a file, a pipe, a log collector) keeps them
            self._live = Live(
                view,
                console=output.out_console,
                auto_refresh=False,
                redirect_stdout=False,
                redirect_stderr=sys.stderr.isatty(),
            )
            self._live.start()
        else:
            self._live.update(view)
        self._live.refresh()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


@dataclass
class JsonLines:
    """One object per sample on stdout (``schema_version`` first), flushed as it is written."""

    every: int = 1
    _n: int = field(default=0)

    def show(self, snap: Snapshot) -> None:
        self._n += 1
        if snap.events or (self._n - 1) % self.every == 0:
            out_json_line(snap.to_json())

    def close(self) -> None:
        return None


class Quiet:
    def show(self, snap: Snapshot) -> None:
        return None

    def close(self) -> None:
        return None


def renderer(mode: Mode | None, *, every: int = 1) -> Renderer:
    """``None``: a live view where stdout is a terminal, else quiet."""
    if mode is None:
        mode = "live" if sys.stdout.isatty() else "quiet"
    if mode == "live":
        return LiveView()
    if mode == "json":
        return JsonLines(every=every)
    return Quiet()
