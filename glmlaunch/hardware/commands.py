"""The plain function behind ``glmlaunch hw``, and the tables of ``hw`` and ``check``.

``check`` itself is ``glmlaunch.plan.check.run_check``: its memory verdict row is a plan's. Data (tables,
JSON) goes to stdout; notes go to stderr. Nothing here imports pynvml itself: the inventory comes from
``hardware.get_inventory`` (a saved file, or NVML on the spot).
"""

from __future__ import annotations

from pathlib import Path

from rich.table import Table
from rich.text import Text

from glmlaunch.config.registry import CUDA_VISIBLE_DEVICES
from glmlaunch.config.units import format_size
from glmlaunch.errors import ExitCode, NoGpuError
from glmlaunch.hardware.checks import PURPOSES, CheckReport, CheckResult
from glmlaunch.hardware.inventory import Gpu, Inventory, P2PCaps, save_inventory
from glmlaunch.hardware.probe import get_inventory
from glmlaunch.output import fit, note, out_console, out_json


def _size(n: int | None) -> str:
    return format_size(n) if n is not None else "?"


def _opt(value: object) -> str:
    return "?" if value is None else str(value)


def _link(g: Gpu) -> str:
    p = g.pcie
    cur = f"Gen{_opt(p.current_generation)} x{_opt(p.current_width)}"
    top = f"Gen{_opt(p.max_generation)} x{_opt(p.max_width)}"
    return cur if cur == top else f"{cur} (max {top})"


def _procs(g: Gpu) -> str:
    if not g.processes:
        return "-"
    return ", ".join(f"{p.pid} {p.name or '?'} {_size(p.used_bytes)}" for p in g.processes)


def _p2p_cell(caps: P2PCaps) -> str:
    flags = [
        ("r", caps.read),
        ("w", caps.write),
        ("a", caps.atomics),
    ]
    shown = "".join(k if v == "ok" else "-" for k, v in flags)
    if caps.nvlink == "ok":
        shown += " NV"
    return shown


def inventory_tables(inv: Inventory) -> list[Table]:
    head = Table(title=inv.describe(), show_header=False, expand=False)
    head.add_column("key", no_wrap=True)
    head.add_column("value")
    head.add_row("driver", _opt(inv.driver_version))
    head.add_row("CUDA (driver)", _opt(inv.cuda_driver_version))
    head.add_row("GPUs", f"{len(inv.gpus)} visible of {inv.host_gpu_count}")
    if inv.cuda_visible_devices is not None:
        head.add_row(CUDA_VISIBLE_DEVICES, inv.cuda_visible_devices)
    head.add_row("source", inv.source)
    if inv.notes:
        head.add_row("notes", inv.notes)

    gpus = Table(title="GPUs (index = PCI bus order)", expand=False)
    for col in (
        "gpu",
        "name",
        "cc",
        "SMs",
        "total",
        "used",
        "free",
        "PCIe",
        "BAR1",
        "NUMA",
        "CPUs",
        "processes",
    ):
        gpus.add_column(col, no_wrap=col not in ("name", "CPUs", "processes"))  # figures whole
    for g in inv.gpus:
        gpus.add_row(
            str(g.index),
            _opt(g.name),
            _opt(g.compute_capability),
            _opt(g.sm_count),
            _size(g.memory_total),
            _size(g.memory_used),
            _size(g.memory_free),
            _link(g),
            _size(g.bar1_total),
            _opt(g.numa_node),
            _opt(g.cpu_affinity),
            _procs(g),
        )
    tables = [head, gpus]

    if len(inv.gpus) > 1:
        topo = Table(title="topology / P2P (row -> column: r read, w write, a atomics, NV over NVLink)")
        topo.add_column("", no_wrap=True)
        order = [g.index for g in inv.gpus]
        for b in order:
            topo.add_column(f"GPU {b}", no_wrap=True)
        for a in order:
            cells = []
            for b in order:
                pair = inv.pair(a, b)
                if a == b:
                    cells.append("X")
                elif pair is None:
                    cells.append("?")
                else:
                    caps = pair.forward if a < b else pair.reverse
                    cells.append(f"{pair.topology_label} {_p2p_cell(caps)}")
            topo.add_row(f"GPU {a}", *cells)
        tables.append(topo)

    problems = [(f"GPU {g.index}", e.field, e.error) for g in inv.gpus for e in g.errors]
    problems += [(f"GPU {p.a}-{p.b}", e.field, e.error) for p in inv.pairs for e in p.errors]
    problems += [("system", e.field, e.error) for e in inv.errors]
    if problems:
        errs = Table(title="what NVML could not read", expand=False)
        for col in ("where", "field", "NVML said"):
            errs.add_column(col, no_wrap=col != "NVML said")
        for row in problems:
            errs.add_row(*row)
        tables.append(errs)
    return tables


def show_hw(inventory_file: Path | None, save: Path | None, *, as_json: bool) -> Inventory:
    """Probe (or load) the inventory, optionally save it, and print it."""
    inv = get_inventory(inventory_file)
    if save is not None:
        save_inventory(inv, save)
        note(f"saved {inv.describe()} to {save}")
    if as_json:
        out_json(inv.model_dump(mode="json"))
    else:
        for table in inventory_tables(inv):
            out_console.print(fit(table))
    return inv


_STATUS_STYLE = {"OK": "green", "WARN": "yellow", "FAIL": "red", "SKIP": "dim"}


def check_table(report: CheckReport) -> Table:
    title = f"checks: profile {report.profile}, purpose {report.purpose}, GPUs {list(report.gpus)}"
    caption = report.inventory + (f"\ncalibration: {report.calibration}" if report.calibration else "")
    table = Table(title=title, caption=caption, expand=False)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("message")
    for r in report.results:
        table.add_row(r.name, Text(r.status, style=_STATUS_STYLE[r.status]), r.message)
    return table


def no_gpu_report(profile: str, purpose: str, exc: NoGpuError) -> CheckReport:
    """The report of a check that found no NVML or no GPU: one FAIL row (``gpu_probe``, exit 8)."""
    return CheckReport(
        profile=profile,
        purpose=purpose if purpose in PURPOSES else "serve",
        inventory=f"none: {exc.message}",
        gpus=(),
        results=(
            CheckResult(name="gpu_probe", status="FAIL", message=exc.one_line(), fail_code=ExitCode.NO_GPU),
        ),
    )
