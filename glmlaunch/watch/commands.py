"""``glmlaunch watch`` (the sidecar) and ``glmlaunch explain-oom``: the plain functions behind the commands.

``watch`` plans the profile for the GPUs it watches (their usable memory is the plan's T unless
``--gpu-memory`` says otherwise), maps the ranks to GPUs by UUID through the deployment's
``CUDA_VISIBLE_DEVICES`` (``--gpus``, default the profile's), and runs a :class:`~.session.Watcher` on live
NVML or on a recorded trace (``--replay``) until SIGINT/SIGTERM, ``--duration``, ``--samples`` or the
trace's end; it exits 0 then (a stop is how a monitor ends). ``explain-oom`` reads a log's OOMs and
explains each against the plan (:mod:`.oom`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glmlaunch import __version__, output
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import format_size, parse_size_option
from glmlaunch.errors import ConfigError
from glmlaunch.hardware.memory import MemorySource
from glmlaunch.output import fit, note, out_json, warn
from glmlaunch.plan.plan import Plan
from glmlaunch.watch.expect import expectation
from glmlaunch.watch.ranks import RankGpu, map_ranks
from glmlaunch.watch.states import Settings

#: ``explain-oom --json``'s version (docs/schemas/explain-oom.schema.json)
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class WatchArgs:
    profile: str | None = None
    overrides: tuple[str, ...] = ()
    gpu_memory: str | None = None
    gpus: str | None = None
    interval_s: float = 0.5
    duration_s: float | None = None
    samples: int | None = None
    drift_window_s: float = 600.0
    settle_s: float = 60.0
    endpoint: str | None = None
    log: Path | None = None
    readings: Path | None = None
    record: Path | None = None
    note: str = ""
    replay: Path | None = None
    speed: float | None = None
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    as_json: bool = False
    command: str = "glmlaunch watch"


def _positive(value: float | None, key: str, *, allow_zero: bool = False) -> None:
    if value is None:
        return
    if (
        value != value
        or value in (float("inf"), float("-inf"))
        or value < 0
        or (value == 0 and not allow_zero)
    ):
        raise ConfigError("must be a positive number of seconds", key=key, value=value)


def deployment_visible(config: DeploymentConfig, gpus: str | None) -> str:
    """The deployment's CUDA_VISIBLE_DEVICES: ``--gpus``, else what glmlaunch exports for the profile."""
    if gpus is not None:
        if not gpus.strip():
            raise ConfigError("an empty list hides every GPU", key="--gpus", value=gpus)
        return gpus
    return ",".join(str(g) for g in config.gpu_list)


def _source(args: WatchArgs) -> tuple[MemorySource, str, bool, Any]:
    """(source, its name, whether the loop paces itself, the trace or None)."""
    if args.replay is not None:
        from glmlaunch.watch.trace import TracePlayer, load_trace

        trace = load_trace(args.replay)
        player = TracePlayer(trace, realtime=args.speed is not None, speed=args.speed or 1.0)
        return player, "replay", False, trace
    from glmlaunch.errors import NoGpuError
    from glmlaunch.hardware.probe import NvmlMemorySource

    try:
        return NvmlMemorySource(), "nvml", True, None
    except NoGpuError as exc:
        raise NoGpuError(
            exc.message,
            hint="run where the GPUs are (a sidecar container needs them too), or replay a recorded trace "
            "with --replay TRACE",
        ) from None


def describe(plan: Plan, profile: str, ranks: Sequence[RankGpu]) -> list[str]:
    e = expectation(profile, plan)
    largest = e.largest
    lines = [
        f"watch: profile {profile}: T {format_size(e.total_bytes)}; planned resident "
        f"{format_size(e.planned_resident_bytes)}, margin {format_size(e.margin_bytes)} (minimum "
        f"{format_size(e.min_margin_bytes)}); runtime demand {format_size(e.runtime_peak_bytes)} "
        f"({e.runtime_phase}), its largest transient "
        + (f"{largest.name} {format_size(largest.bytes)}" if largest is not None else "none")
        + f"; verdict {e.verdict}",
    ]
    lines += [
        f"watch: rank {g.rank} -> GPU {g.device.nvml_index} ({g.device.uuid}, bus {g.device.pci_bus_id})"
        for g in ranks
    ]
    return lines


@contextlib.contextmanager
def _stops_on_signals(stop: Any) -> Iterator[None]:
    """SIGINT and SIGTERM end the watch as its normal end (exit 0), after the loop's own cleanup."""
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread
            previous[sig] = signal.signal(sig, lambda *_: stop())
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_watch(args: WatchArgs) -> None:
    from glmlaunch.config.commands import resolve
    from glmlaunch.plan.plan import checkpoint_for, make_plan
    from glmlaunch.watch.follow import FileFollower, LineSource
    from glmlaunch.watch.metrics import MetricsServer
    from glmlaunch.watch.render import JsonLines, renderer
    from glmlaunch.watch.session import Options, Watcher
    from glmlaunch.watch.trace import Recorder, save_trace
    from glmlaunch.watch.vllm import Scraper, metrics_url

    for value, key in (
        (args.interval_s, "--interval"),
        (args.duration_s, "--duration"),
        (args.drift_window_s, "--drift-window"),
        (args.speed, "--speed"),
    ):
        _positive(value, key)
    _positive(args.settle_s, "--settle", allow_zero=True)
    if args.samples is not None and args.samples < 1:
        raise ConfigError("must be at least 1", key="--samples", value=args.samples)
    if args.replay is not None and args.record is not None:
        raise ConfigError("a replay cannot be recorded again", key="--record", hint="record on live NVML")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise ConfigError(
            "not a TCP port", key="--metrics-port", value=args.metrics_port, allowed=["0..65535"]
        )
    if args.log is not None and args.replay is not None:
        raise ConfigError("a replay brings the log lines it recorded", key="--log")
    total = (
        parse_size_option(args.gpu_memory, key="--gpu-memory", what="a device total", minimum=1)
        if (args.gpu_memory is not None)
        else None
    )

    resolved = resolve(args.profile, args.overrides)
    config = resolved.config
    source, source_name, paced, trace = _source(args)
    try:
        ranks = map_ranks(source.devices, deployment_visible(config, args.gpus), config.parallel.tp)
        if total is None:
            total = min(g.device.usable_bytes for g in ranks)
        # the plan on the watched GPUs' T (as `plan --gpu-memory` plans); calibrated for the profile as given
        plan = make_plan(config, device_total=total, checkpoint=checkpoint_for(config, os.environ))
        for line in plan.warnings:
            warn(line)
        note(plan.message)
        for line in describe(plan, resolved.profile_name, ranks):
            note(line)
        lines: LineSource | None = None
        has_ready: bool | None = None
        if trace is not None:
            lines = source  # type: ignore[assignment]  # the player hands out its recorded lines
            has_ready = bool(trace.log)
        elif args.log is not None:
            lines = FileFollower(args.log)
        scraper = None
        if args.endpoint is not None:
            scraper = Scraper(metrics_url(args.endpoint))
            scraper.start()
        recorder = None
        if args.record is not None:
            from glmlaunch.hardware.probe import nvml_binding

            recorder = Recorder(
                source,
                command=args.command,
                note=args.note,
                interval_s=args.interval_s,
                host=socket.gethostname(),
                origin=f"glmlaunch {__version__} watch --record (nvidia-ml-py {nvml_binding()})",
                driver_version=getattr(source, "driver_version", None),
            )
        watcher = Watcher(
            plan,
            source,
            ranks,
            profile=resolved.profile_name,
            options=Options(
                interval_s=args.interval_s,
                duration_s=args.duration_s,
                samples=args.samples,
                settings=Settings(drift_window_s=args.drift_window_s, settle_s=args.settle_s),
                readings=args.readings,
            ),
            lines=lines,
            has_ready_signal=has_ready,
            scraper=scraper,
            renderer=JsonLines() if args.as_json else renderer(None),
            source_name=source_name,
            host=socket.gethostname(),
            recorder=recorder,
            paced=paced,
        )
        server = None
        if args.metrics_port is not None:
            server = MetricsServer(args.metrics_host, args.metrics_port, lambda: watcher.latest)
            server.start()
            note(f"watch: metrics on {server.url}")
        try:
            with _stops_on_signals(watcher.stop):
                watcher.run()
        finally:
            if server is not None:
                server.stop()
            watcher.close()
            if recorder is not None and args.record is not None:
                path = save_trace(recorder.trace(), args.record)
                note(f"watch: {len(recorder.samples)} samples recorded in {path}")
        for r in watcher.summary()["ranks"]:
            low = r["lowest_free_bytes"]
            note(
                f"watch: rank {r['rank']}: {watcher.seq} samples; worst state {r['worst_state']}, now "
                f"{r['state']}; lowest free since ready "
                + (format_size(low) if low is not None else "- (never ready)")
            )
    finally:
        with contextlib.suppress(Exception):
            source.close()


# --- explain-oom ------------------------------------------------------------------------------------


def run_explain_oom(
    log: Path, profile: str | None, overrides: Sequence[str], *, as_json: bool, ingest: bool
) -> None:
    from glmlaunch.calibrate.ingest import _logged_config
    from glmlaunch.config.commands import resolve
    from glmlaunch.vllmlog.boot import parse_log_file
    from glmlaunch.watch.oom import distinct, explain

    boot = parse_log_file(log)
    events = distinct(boot.runtime_events)
    if not events:
        raise ConfigError(
            "no CUDA out-of-memory line (`Tried to allocate X … of which Y is free`) in the log",
            key="LOG",
            value=str(log),
            hint="give the vLLM log of the run that died (all ranks' output)",
        )
    config: DeploymentConfig | None = None
    name = ""
    if profile is None and not overrides:
        config = _logged_config(boot, log)
        if config is not None:
            name = f"the configuration {log.name} booted"
    if config is None:
        resolved = resolve(profile, overrides)
        config, name = resolved.config, resolved.profile_name
    from glmlaunch.plan.plan import checkpoint_for, make_plan

    plan = make_plan(config, checkpoint=checkpoint_for(config, os.environ))
    for line in plan.warnings:
        warn(line)
    note(plan.message)
    explained = [explain(e, plan, source=f"{log.name}'s OOM") for e in events]
    record_id = None
    if ingest:
        from glmlaunch.calibrate.ingest import ingest_logs
        from glmlaunch.calibrate.store import Store

        got = ingest_logs(
            [log],
            config=config if (profile is not None or overrides) else None,
            profile=name if (profile is not None or overrides) else None,
            inventory=None,
            store=Store.default(),
        )
        record_id = got[0].record.record_id if got else None
        if got and got[0].saved is not None:
            note(
                f"explain-oom: record {record_id} saved ({got[0].saved.path}); the next plan of this "
                "configuration carries the demand this log proves"
            )
    if as_json:
        out_json(
            {
                "schema_version": SCHEMA_VERSION,
                "log": str(log),
                "profile": name,
                "calibration": plan.message,
                "plan": {
                    "total_bytes": plan.budget.total,
                    "margin_bytes": plan.budget.margin,
                    "runtime_demand_bytes": plan.ledger.runtime.peak_bytes,
                    "runtime_phase": plan.ledger.runtime.peak_phase,
                    "verdict": plan.verdict.status,
                },
                "ooms": [x.to_json() for x in explained],
                "ingested_record": record_id,
            }
        )
        return
    for x in explained:
        _print_explanation(x)
    if not ingest:
        note(
            f"explain-oom: to keep this demand for the next plans: glmlaunch explain-oom {log} --ingest "
            f"(or glmlaunch calibrate ingest {log})"
        )


def _print_explanation(x: Any) -> None:
    from rich.table import Table

    e = x.event
    output.out_console.print(x.headline().split("; most likely")[0])
    if e.after_ready:
        output.out_console.print(
            f"  the plan: {format_size(x.margin_bytes)} free after startup; runtime demand "
            f"{format_size(x.plan_demand_bytes)}; at the OOM {format_size(x.realized_bytes)} of it was "
            f"allocated, so the demand is at least {format_size(x.floor_bytes)}"
        )
    for n in x.notes:
        output.out_console.print(f"  note: {n}")
    m = x.match
    if m is not None:
        t = Table(title="most likely", title_justify="left", show_header=False)
        t.add_column("", no_wrap=True)
        t.add_column("")
        t.add_row("entry", m.entry.name)
        t.add_row("size", f"{format_size(m.entry.device_bytes)} ({m.entry.device_bytes:,} B)")
        t.add_row("phase", m.phase or f"startup ({m.entry.lifetime})")
        t.add_row("reader", m.entry.reader)
        t.add_row("trigger", m.entry.condition)
        t.add_row("formula", m.entry.formula)
        t.add_row("matched", f"{m.how}: {m.reason}")
        output.out_console.print(fit(t))
    if x.fixes:
        t = Table(title="would have kept it", title_justify="left")
        t.add_column("--set", no_wrap=True)
        t.add_column("what")
        t.add_column("runtime margin", justify="right", no_wrap=True)
        for f in x.fixes:
            t.add_row(f.setting, f.effect, format_size(f.runtime_margin_bytes))
        output.out_console.print(fit(t))
    else:
        output.out_console.print("  no pool pin, GMU or batched-token count keeps it by the plan's figures")
    sys.stdout.flush()
