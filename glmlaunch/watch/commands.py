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
import math
import os
import shlex
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
from glmlaunch.output import fit, mask_secrets, note, out_json, warn
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


#: (option, least, most, what it counts): the range of each number the watch takes; beyond it a wait
#: overflows (``threading`` refuses timeouts past ~9e9 s), a replay sleeps for ages, or a loop spins
RANGES: dict[str, tuple[float, float, str]] = {
    "--interval": (0.01, 3600.0, "seconds"),
    "--duration": (0.01, 10 * 365 * 86400.0, "seconds"),
    "--drift-window": (0.01, 30 * 86400.0, "seconds"),
    "--settle": (0.0, 30 * 86400.0, "seconds"),
    "--speed": (0.01, 10000.0, "times the recorded pace"),
}


def _in_range(value: float | None, key: str) -> None:
    if value is None:
        return
    low, high, unit = RANGES[key]
    if not math.isfinite(value) or not low <= value <= high:
        raise ConfigError(
            f"must be a finite number of {unit} from {low:g} to {high:g}",
            key=key,
            value=value,
            allowed=[f"{low:g}..{high:g}"],
        )


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
    from glmlaunch.files import check_writable_target
    from glmlaunch.plan.plan import checkpoint_for, make_plan
    from glmlaunch.watch.follow import FileFollower, LineSource
    from glmlaunch.watch.metrics import MetricsServer, metrics_host
    from glmlaunch.watch.render import JsonLines, renderer
    from glmlaunch.watch.session import Options, Watcher
    from glmlaunch.watch.trace import Recorder, save_trace
    from glmlaunch.watch.vllm import Scraper, metrics_url

    for value, key in (
        (args.interval_s, "--interval"),
        (args.duration_s, "--duration"),
        (args.drift_window_s, "--drift-window"),
        (args.settle_s, "--settle"),
        (args.speed, "--speed"),
    ):
        _in_range(value, key)
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
    host = metrics_host(args.metrics_host)
    if args.readings is not None:
        check_writable_target(args.readings, key="--readings")
    if args.record is not None:
        check_writable_target(args.record, key="--record")
    url = metrics_url(args.endpoint) if args.endpoint is not None else None
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
        if url is not None:
            scraper = Scraper(url)
            scraper.start()
        recorder = None
        if args.record is not None:
            from glmlaunch.hardware.probe import nvml_binding

            recorder = Recorder(
                source,
                command=mask_secrets(args.command),
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
            server = MetricsServer(host, args.metrics_port, lambda: watcher.latest)
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
    from glmlaunch.calibrate.learn import logged_config
    from glmlaunch.config.commands import resolve
    from glmlaunch.config.limits import MAX_BOOT_LOG_BYTES
    from glmlaunch.config.safeload import read_file
    from glmlaunch.vllmlog.boot import parse_log_file
    from glmlaunch.vllmlog.events import is_ready_line
    from glmlaunch.vllmlog.lines import iter_messages
    from glmlaunch.watch.oom import explain, the_oom, when_of

    boot = parse_log_file(log)
    event, others = the_oom(boot.runtime_events)
    if event is None:
        raise ConfigError(
            "no CUDA out-of-memory line (`Tried to allocate X … of which Y is free`) in the log",
            key="LOG",
            value=str(log),
            hint="give the vLLM log of the run that died (all ranks' output)",
        )
    # a ready line after the OOMs says they came during startup (the parse marks only those after it)
    text = read_file(log, limit=MAX_BOOT_LOG_BYTES, key="LOG", what="boot log").decode("utf-8", "replace")
    ready_in_log = any(is_ready_line(m.text) for m in iter_messages(text))
    config: DeploymentConfig | None = None
    name = ""
    named = profile is not None or bool(overrides)
    from_log = False
    try:
        logged = logged_config(boot, log)
    except ConfigError:
        if not named:
            raise
        logged = None  # named: the profile is what this reads the log against and keys a record on
    if not named and logged is not None:
        config, name, from_log = logged, f"the configuration {log.name} booted", True
    assumed = False
    profile_ref = profile
    if config is None:
        resolved = resolve(profile, overrides)
        config, name = resolved.config, resolved.profile_name
        assumed = not named
        profile_ref = profile or resolved.profile_name
    from glmlaunch.plan.plan import checkpoint_for, make_plan

    checkpoint = checkpoint_for(config, os.environ)
    plan = make_plan(config, checkpoint=checkpoint)
    for line in plan.warnings:
        warn(line)
    note(plan.message)
    explained = [
        explain(event, plan, source=f"{log.name}'s OOM", when=when_of(event, boot, ready_in_log=ready_in_log))
    ]
    against = (
        name
        if from_log
        else f"profile {name}"
        + (f" (assumed: {log.name} shows no configuration; -p NAME for another)" if assumed else "")
    )
    record_id = None
    if ingest:
        record_id = _ingest_explained(
            log,
            boot,
            explained,
            config,
            name,
            shows_config=logged is not None,
            named=named,
            before=plan,
            ref=profile_ref,
            overrides=overrides,
        )
    if as_json:
        out_json(
            {
                "schema_version": SCHEMA_VERSION,
                "log": str(log),
                "profile": name,
                "profile_assumed": assumed,
                "calibration": plan.message,
                "plan": {
                    "total_bytes": plan.budget.total,
                    "margin_bytes": plan.budget.margin,
                    "runtime_demand_bytes": plan.ledger.runtime.peak_bytes,
                    "runtime_phase": plan.ledger.runtime.peak_phase,
                    "runtime_margin_bytes": plan.budget.runtime_margin,
                    "verdict": plan.verdict.status,
                },
                "ooms": [x.to_json() for x in explained],
                "other_ooms": others.to_json(),
                "ingested_record": record_id,
            }
        )
        return
    output.out_console.print(f"against {against}", markup=False, highlight=False)
    for x in explained:
        _print_explanation(x)
    counted = others.text()
    if counted is not None:
        output.out_console.print(counted, markup=False, highlight=False)
    if not ingest and any(x.best.phase == "runtime" for x in explained):
        hint = _ingest_command(log, None if from_log else profile_ref, overrides)
        more = f" (or glmlaunch calibrate ingest {shlex.quote(str(log))})" if from_log else ""
        note(f"explain-oom: to keep this demand for the next plans: {hint}{more}")


def _ingest_command(log: Path, profile: str | None, overrides: Sequence[str]) -> str:
    """The ``explain-oom … --ingest`` command that stores what this run read (masked, quoted)."""
    from glmlaunch.output import mask_secrets

    words = ["glmlaunch", "explain-oom"]
    if profile is not None:
        words += ["-p", profile]
    for o in overrides:
        words += ["--set", o]
    words += [str(log), "--ingest"]
    return mask_secrets(" ".join(shlex.quote(w) for w in words))


def _ingest_explained(
    log: Path,
    boot: Any,
    explained: Sequence[Any],
    config: DeploymentConfig,
    name: str,
    *,
    shows_config: bool,
    named: bool,
    before: Plan,
    ref: str | None,
    overrides: Sequence[str],
) -> str | None:
    """Store the log as a record; then plan again and say what the next plan carries (None: nothing
    was stored). A log that shows its configuration is ingested as ``calibrate ingest`` would; one that
    shows none is keyed on the profile named with ``-p``/``--set``, its OOMs read as the explanation
    read them."""
    from glmlaunch.calibrate.ingest import ingest_logs, ingest_named
    from glmlaunch.calibrate.store import Store
    from glmlaunch.plan.plan import checkpoint_for, make_plan

    store = Store.default()
    if shows_config:
        got = ingest_logs(
            [log],
            config=config if named else None,
            profile=name if named else None,
            inventory=None,
            store=store,
        )
        record = got[0].record if got else None
        saved = got[0].saved if got else None
    else:
        if not named:
            raise ConfigError(
                "the log shows no configuration: --ingest keys its record on a profile you name",
                key="--profile",
                value=None,
                hint=f"name the profile it ran: {_ingest_command(log, ref, overrides)}",
            )
        runtime = {x.event.line for x in explained if x.best.phase == "runtime"}
        if not runtime:
            note(
                "explain-oom: nothing stored: a startup OOM proves no runtime demand (the fixes above are "
                "what changes the next plan)"
            )
            return None
        read = [x for x in explained if x.best.phase == "runtime" and x.when == "unknown"]
        events = [
            e.model_copy(update={"after_ready": True}) if e.kind == "oom" and e.line in runtime else e
            for e in boot.runtime_events
        ]
        notes = (
            [
                "explain-oom read the OOM(s) with no ready line in the log as after ready: the plan's "
                "runtime demand explains them best"
            ]
            if read
            else []
        )
        got1 = ingest_named(boot, config=config, profile=name, store=store, events=events, notes=notes)
        record, saved = got1.record, got1.saved
    if record is None:
        return None
    if saved is not None:
        after = make_plan(config, checkpoint=checkpoint_for(config, os.environ))
        d0, d1 = before.ledger.runtime.peak_bytes, after.ledger.runtime.peak_bytes
        what = (
            f"runtime demand {format_size(d0)} -> {format_size(d1)}, verdict {before.verdict.status} -> "
            f"{after.verdict.status}"
            if d1 != d0
            else f"its runtime demand {format_size(d0)} already covers what the log proves"
        )
        note(f"explain-oom: record {record.record_id} saved ({saved.path}); the next plan of {name}: {what}")
    return str(record.record_id)


def _print_explanation(x: Any) -> None:
    out = output.out_console
    out.print(x.headline().split("; most likely")[0], markup=False, highlight=False)
    for n in x.notes:
        out.print(f"  note: {n}", markup=False, highlight=False)
    for i, c in enumerate(x.candidates):
        if len(x.candidates) > 1:
            what = "while serving (after startup)" if c.phase == "runtime" else "during startup"
            head = "most likely" if i == 0 else "less likely"
            out.print(f"{head}: {what}", markup=False, highlight=False, style="bold")
        _print_candidate(x, c)
    sys.stdout.flush()


def _print_candidate(x: Any, c: Any) -> None:
    from rich.table import Table

    out = output.out_console
    if c.phase == "runtime":
        out.print(
            f"  the plan: {format_size(x.margin_bytes)} free after startup; runtime demand "
            f"{format_size(x.plan_demand_bytes)}; at the OOM {format_size(c.realized_bytes)} of it was "
            f"allocated, so the demand is at least {format_size(c.floor_bytes)}",
            markup=False,
            highlight=False,
        )
    for n in c.notes:
        out.print(f"  note: {n}", markup=False, highlight=False)
    m = c.match
    if m is not None:
        t = Table(
            title="entry" if len(x.candidates) > 1 else "most likely", title_justify="left", show_header=False
        )
        t.add_column("", no_wrap=True)
        t.add_column("")
        t.add_row("entry", m.entry.name)
        t.add_row("size", f"{format_size(m.entry.device_bytes)} ({m.entry.device_bytes:,} B)")
        t.add_row("phase", m.phase or f"startup ({m.entry.lifetime})")
        t.add_row("reader", m.entry.reader)
        t.add_row("trigger", m.entry.condition)
        t.add_row("formula", m.entry.formula)
        t.add_row("matched", f"{m.how}: {m.reason}")
        out.print(fit(t))
    if c.fixes:
        t = Table(title="would have kept it", title_justify="left")
        t.add_column("--set", no_wrap=True)
        t.add_column("what")
        t.add_column("verdict", no_wrap=True)
        t.add_column("runtime margin", justify="right", no_wrap=True)
        for f in c.fixes:
            t.add_row("\n".join(f.settings), f.effect, f.verdict, format_size(f.runtime_margin_bytes))
        out.print(fit(t))
    elif c.phase == "startup":
        out.print(
            "  no GMU, nor a pool pin that still holds one max_model_len request, leaves that much more "
            "free after startup by the plan's figures"
        )
    else:
        out.print("  no pool pin, GMU or batched-token count keeps it by the plan's figures")
