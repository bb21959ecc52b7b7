"""One supervised run of vLLM: start it, relay its output and signals, learn from it, clean up after it.

:func:`supervise` is called by ``glmlaunch serve --supervise`` (:mod:`glmlaunch.launch.serve`) with the
same argv and environment the exec hand-off would use, and returns how glmlaunch must end
(:class:`Result`, passed to :func:`glmlaunch.supervise.process.exit_like`):

1. the boot directory (:mod:`.boots`) gets the launch, the resolved configuration, the plan, the
   preflight and the inventory; the GPUs' free memory is read (the baseline) when NVML answers;
2. glmlaunch becomes a child subreaper, blocks the signals it forwards; where the profile has a managed
   LMCache server (``Launch.lmcache``), starts it and waits until it is ready (:mod:`.cache_server`; not
   ready within its start timeout, or dead before: its log tail, a root cause, exit 12, vLLM never
   started); then starts vLLM in its own session (:mod:`.process`), its output on pipes, or a pty where
   glmlaunch's own is a terminal;
3. reader threads forward the bytes (:mod:`.tee`); one more thread parses them (:mod:`.stream`); the
   main thread waits for signals: it forwards each one but SIGCHLD, reaps, and after a stopping signal
   (TERM, INT, HUP, QUIT) keeps the deadline: vLLM's drain time (``--shutdown-timeout``) plus a margin,
   inside ``GLMLAUNCH_STOP_GRACE`` when given; then SIGTERM, and later SIGKILL, to vLLM's process group;
   the LMCache server dying meanwhile stops vLLM (SIGTERM, the same deadline) and ends the boot with 12;
4. at the ready line: the calibration record (keyed on the launch) and the plan-vs-boot block;
5. when vLLM has exited: every process it left behind is terminated and reaped, then the LMCache server
   is drained (SIGTERM, a grace, SIGKILL to its group; its leftovers reaped), the readers drain, the
   outcome is classified (:mod:`.outcome`), the record written or updated, the GPUs checked back at
   their baseline (skipped with a note without NVML; never changes the exit status), ``outcome.json``
   written, and stderr says ``vllm exited N``.

Once vLLM has started, glmlaunch's exit status is vLLM's (its code, or death by its signal), except with
``--strict-exit`` when vLLM exited 0 after a fatal engine error in its log (exit 9), and when the LMCache
server died while vLLM ran (exit 12: vLLM was stopped because of it; upstream's wrappers exit 1, which is
glmlaunch's internal error). A problem in this module after the start (a full disk, a bug) is a warning:
it never takes vLLM's status away.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from glmlaunch import __version__
from glmlaunch.errors import ExitCode, GlmlaunchError, LaunchError, LmcacheError
from glmlaunch.output import debug_enabled, note, warn
from glmlaunch.supervise import cache_server, process
from glmlaunch.supervise.boots import BootDir, last_timeline
from glmlaunch.supervise.outcome import Verdict, classify, plan_vs_boot
from glmlaunch.supervise.stream import BootStream
from glmlaunch.supervise.tee import Backlog, Tee, copy_window_size, open_pty
from glmlaunch.supervise.timeline import Timeline, expected_from_phases, fmt_seconds

if TYPE_CHECKING:
    from glmlaunch.calibrate.records import Calibration, SupervisedBoot
    from glmlaunch.config.schema import DeploymentConfig
    from glmlaunch.hardware.baseline import GpuMemory
    from glmlaunch.hardware.inventory import Inventory
    from glmlaunch.lmcache.command import ServerCommand
    from glmlaunch.supervise.watching import Watching, WatchSetup
    from glmlaunch.vllmlog.boot import BootLog

#: added to vLLM's own drain time (``--shutdown-timeout``) before glmlaunch signals its process group
DRAIN_MARGIN_S = 30.0
#: from SIGTERM to the process group to SIGKILL
KILL_AFTER_S = 5.0
#: what the deadline leaves of GLMLAUNCH_STOP_GRACE for the escalation, the reaping and the GPU check
GRACE_RESERVE_S = 10.0
#: how long the GPUs may take to give memory back after the last process exited
BASELINE_WAIT_S = 15.0
#: free memory that may differ from the baseline without a warning (as after the preflight)
BASELINE_SLACK_BYTES = 2 * 1024 * 1024
TICK_S = 1.0
SWITCH_INTERVAL_S = 0.001
#: After a stop signal from glmlaunch's caller, how long the steps after vLLM's exit that read its output
#: (draining it, parsing boot.log, the record) may take together before they are abandoned: the caller
#: asked glmlaunch to stop, and outcome.json is written either way.
STOPPING_BUDGET_S = 5.0


@dataclass(frozen=True)
class Launch:
    """What ``serve`` hands the supervisor: the exec hand-off's argv and environment, and the evidence."""

    argv: tuple[str, ...]
    env: Mapping[str, str]  # vLLM's environment (the launch environment)
    caller_env: Mapping[str, str]  # glmlaunch's own (where the cache is)
    profile: str
    config: DeploymentConfig
    inventory: Inventory | None
    command_line: str  # masked, as printed
    documents: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # name.json -> document
    plan_terms: Mapping[str, int] | None = None
    plan_kv_tokens: int | None = None
    calibration: str = ""
    strict_exit: bool = False
    stop_grace_s: float | None = None
    #: serve --watch: the watch on a thread, against the plan the serve stage judged
    watch: WatchSetup | None = None
    #: the managed LMCache server, started before vLLM and drained after it (glmlaunch.lmcache)
    lmcache: ServerCommand | None = None


@dataclass(frozen=True)
class Result:
    """How glmlaunch ends: ``code`` or death by ``sig``; and the outcome document."""

    code: int | None
    sig: int | None
    outcome: Mapping[str, Any]


@dataclass(frozen=True)
class Deadlines:
    deadline_s: float
    kill_after_s: float
    drain_s: float

    def to_json(self) -> dict[str, float]:
        return {"deadline_s": self.deadline_s, "kill_after_s": self.kill_after_s, "drain_s": self.drain_s}


def shutdown_timeout(argv: Sequence[str]) -> float:
    """vLLM's ``--shutdown-timeout`` (seconds it drains requests on SIGTERM) from its argv; 0 if absent."""
    for i, arg in enumerate(argv):
        value: str | None = None
        if arg == "--shutdown-timeout" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--shutdown-timeout="):
            value = arg.split("=", 1)[1]
        if value is not None:
            with contextlib.suppress(ValueError):
                return max(0.0, float(value))
    return 0.0


def deadlines(argv: Sequence[str], stop_grace_s: float | None) -> Deadlines:
    """The stop deadline and the SIGTERM-to-SIGKILL step, kept inside the runtime's stop grace."""
    drain = shutdown_timeout(argv)
    deadline, kill_after = drain + DRAIN_MARGIN_S, KILL_AFTER_S
    if stop_grace_s is not None:
        deadline = min(deadline, max(1.0, stop_grace_s - GRACE_RESERVE_S))
        kill_after = min(kill_after, max(0.5, stop_grace_s / 4))
    return Deadlines(deadline, kill_after, drain)


def config_digest(config: DeploymentConfig) -> str:
    text = json.dumps(config.model_dump(mode="json"), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _safely(what: str, fn: Callable[[], Any]) -> Any:
    """Run a step after vLLM started: a failure is a warning, never glmlaunch's exit status."""
    try:
        return fn()
    except GlmlaunchError as exc:
        warn(f"supervise: {what}: {exc.one_line()}")
    except Exception as exc:
        if debug_enabled():
            raise
        warn(f"supervise: {what} failed: {type(exc).__name__}: {exc}")
    return None


@dataclass
class _Run:
    """The mutable state of one run (the main thread and the stream thread share it)."""

    launch: Launch
    boot: BootDir
    timeline: Timeline
    started_at: str = ""
    pid: int | None = None
    record: Calibration | None = None
    record_path: str | None = None
    record_problem: str | None = None
    ready_at: str | None = None
    forwarded: list[dict[str, object]] = field(default_factory=list)
    escalations: list[dict[str, object]] = field(default_factory=list)
    tree: dict[int, str] = field(default_factory=dict)
    reaped_other: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    baseline_note: str | None = None
    watching: Watching | None = None
    lmcache: cache_server.CacheServer | None = None
    #: the monotonic time the steps after vLLM's exit are abandoned at (a stop signal was forwarded)
    steps_deadline: float | None = None
    #: a stopping signal after vLLM's exit: every later step is abandoned
    abandoned: str | None = None
    #: why the last step given up was (that signal, or the stop budget spent)
    skipped: str | None = None


def _step(
    run: _Run,
    what: str,
    fn: Callable[[], Any],
    on_reaped: Callable[[int, int], None],
    *,
    budgeted: bool = True,
) -> Any:
    """``fn`` (after vLLM exited) on a thread, while this one keeps answering signals; None when abandoned.

    Signals stay blocked here, so without this a long step (a large boot.log parsed) left glmlaunch deaf
    to them. A stopping signal abandons the step and every later one; the stop budget
    (:data:`STOPPING_BUDGET_S`) running out abandons the ``budgeted`` ones (reading vLLM's output), not
    the GPU check, which keeps its own bound. SIGCHLD is reaped as the wait loop reaps it.
    """
    if run.abandoned is not None:
        return None
    deadline = run.steps_deadline if budgeted else None
    why: str | None = None
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # raised again on the main thread
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"glmlaunch-{what.replace(' ', '-')}", daemon=True)
    thread.start()
    while thread.is_alive():
        wait = 0.2
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
            if wait <= 0:
                why = f"the {fmt_seconds(STOPPING_BUDGET_S)} after the stop signal ran out"
                break
        sig = process.wait_signal(wait)
        if sig in process.STOPPING:
            why = run.abandoned = f"{process.signal_name(sig)} after vLLM exited"
            break
        if sig == signal.SIGCHLD:
            for pid, status in process.reap():
                on_reaped(pid, status)
        thread.join(0.0)
    if why is not None:
        line = f"stopped waiting for {what}: {why}"
        warn(f"supervise: {line}; outcome.json is written without it")
        run.notes.append(line)
        run.skipped = why
        return None
    if "error" in box:
        raise box["error"]
    return box.get("value")


def supervise(launch: Launch) -> Result:
    """Run vLLM under supervision and return how glmlaunch must end (see the module docstring)."""
    boot = BootDir.create(launch.caller_env)
    digest = config_digest(launch.config)
    timeline = Timeline()
    previous = _safely(
        "reading earlier boots", lambda: last_timeline(launch.profile, digest, launch.caller_env)
    )
    if previous:
        timeline.expected_s = expected_from_phases(previous[1])
        timeline.expected_from = f"3x boot {previous[0]} of this configuration"
    run = _Run(launch, boot, timeline, started_at=_now_iso())
    for name, doc in launch.documents.items():
        boot.write_json(name, doc)
    boot.write_json(
        "launch.json",
        {
            "boot_id": boot.boot_id,
            "started_at": run.started_at,
            "profile": launch.profile,
            "config_digest": digest,
            "command": launch.command_line,
            "argv": list(launch.argv),
            "glmlaunch_version": __version__,
            "host": socket.gethostname(),
            "supervisor_pid": os.getpid(),
            "strict_exit": launch.strict_exit,
            "stop_grace_s": launch.stop_grace_s,
            "lmcache": launch.lmcache.to_json() if launch.lmcache is not None else None,
        },
    )
    reaper_note = process.become_subreaper()
    for line in (reaper_note, process.platform_note()):
        if line:
            note(f"supervise: {line}")
            run.notes.append(line)
    before = _baseline_before(launch, run)
    if launch.lmcache is not None:
        stopped = _start_lmcache(run, launch.lmcache)
        if stopped is not None:
            return stopped
    return _run_child(run, before)


def _lmcache_reaped(run: _Run) -> Callable[[int, int], None]:
    """The reaping callback of the loops that reap on vLLM's behalf: LMCache's own status is kept."""

    def on_reaped(pid: int, status: int) -> None:
        server = run.lmcache
        if server is not None and pid == server.pid:
            server.reaped(status)
        else:
            run.reaped_other.append(pid)

    return on_reaped


def _start_lmcache(run: _Run, command: ServerCommand) -> Result | None:
    """Start the LMCache server and wait until it is ready; None then. A stop signal meanwhile: the
    server drained and the result to end with (130). Not ready: its log tail, the root cause, exit 12."""
    from glmlaunch.lmcache.probe import port_taken

    ep = command.endpoint
    process.block_signals()
    sys.stdout.flush()
    sys.stderr.flush()
    if port_taken(ep.host, ep.port):
        why = (
            f"the LMCache port {ep.host}:{ep.port} already accepts connections before the server was started "
            "(another LMCache, or another deployment with the same server.port)"
        )
        _write_early_outcome(run, "lmcache-failed", why)
        process.unblock_signals()
        raise LmcacheError(
            why + "; nothing was started",
            key="lmcache_config.port",
            value=ep.port,
            hint="stop that process, move this deployment (server.port or lmcache_config.port), or use "
            "it with lmcache_config.server=external",
        )
    try:
        server = cache_server.start(command, run.boot.path)
    except OSError as exc:
        process.unblock_signals()
        raise LaunchError(
            f"cannot execute {command.argv[0]}: {exc.strerror or exc}",
            key="lmcache",
            hint="a script needs a #! line and execute permission; a binary must match this machine",
        ) from None
    run.lmcache = server
    note(f"supervise: LMCache server pid {server.pid}: {command.command_line()}")
    note(f"supervise: LMCache's log: {server.log.path}")
    on_reaped = _lmcache_reaped(run)
    waited, sig = cache_server.wait_ready(server, on_reaped=on_reaped)
    grace = cache_server.drain_grace(run.launch.stop_grace_s)
    if waited == "ready":
        note(
            f"supervise: LMCache ready after {fmt_seconds(server.ready_s or 0.0)} ({server.ready_by}): "
            f"{command.summary()}"
        )
        return None
    if waited == "signal" and sig is not None:
        name = process.signal_name(sig)
        run.forwarded.append({"t_s": 0.0, "signal": name, "to": "lmcache"})
        warn(f"supervise: {name} while the LMCache server was starting: it is stopped; vLLM is not started")
        cache_server.drain(server, grace, on_reaped=on_reaped)
        doc = _write_early_outcome(
            run,
            "exited",
            f"stopped by {name} from glmlaunch's caller while the LMCache server was starting; vLLM was not "
            "started",
        )
        process.unblock_signals()
        return Result(int(ExitCode.INTERRUPTED), None, doc)
    if waited == "timeout":
        what = (
            f"the LMCache server was not ready within {fmt_seconds(command.start_timeout_s)} (no answer "
            f"from {ep.health_url}, no {command.ready_text!r} in its log)"
        )
    else:
        what = f"the LMCache server exited before it was ready ({server.how()})"
    cache_server.drain(server, grace, on_reaped=on_reaped)
    cause = server.cause()
    diagnosis = f"{what}: {cause}" if cause else f"{what}; its log names no cause"
    _show_lmcache_tail(server)
    _write_early_outcome(run, "lmcache-failed", diagnosis)
    process.unblock_signals()
    raise LmcacheError(
        diagnosis + "; vLLM was not started",
        key="lmcache",
        hint=f"its log: {server.log.path}; GLMLAUNCH_LMCACHE_START_TIMEOUT gives it longer"
        if waited == "timeout"
        else f"its log: {server.log.path}",
    )


def _show_lmcache_tail(server: cache_server.CacheServer) -> None:
    """The server's last lines on stderr, as the wrappers print its log when it fails (appliance L114-115,
    release L323-324); masked already (they are the boot's copy)."""
    lines = server.tail()
    if not lines:
        warn(f"supervise: LMCache's log is empty ({server.log.path})")
        return
    warn(f"supervise: the last {len(lines)} line(s) of LMCache's log ({server.log.path}):")
    for line in lines:
        sys.stderr.write(f"  lmcache| {line}\n")
    sys.stderr.flush()


def _write_early_outcome(run: _Run, kind: str, diagnosis: str) -> dict[str, Any]:
    """outcome.json of a boot that ended before vLLM started (the LMCache server failed, or a stop)."""
    server = run.lmcache
    doc: dict[str, Any] = {
        "boot_id": run.boot.boot_id,
        "profile": run.launch.profile,
        "pid": None,
        "started_at": run.started_at,
        "ready_at": None,
        "ended_at": _now_iso(),
        "running": False,
        "ready": False,
        "outcome": kind,
        "diagnosis": diagnosis,
        "exit": None,
        "glmlaunch_exit": {
            "code": int(ExitCode.LMCACHE if kind == "lmcache-failed" else ExitCode.INTERRUPTED),
            "signal": None,
            "status": f"exit {int(ExitCode.LMCACHE if kind == 'lmcache-failed' else ExitCode.INTERRUPTED)}",
        },
        "timeline": run.timeline.to_json(0.0),
        "findings": [],
        "record": {"record_id": None, "path": None, "problem": "vLLM was not started"},
        "signals_forwarded": run.forwarded,
        "escalations": [],
        "left_behind": [],
        "processes_seen": [],
        "gpu_baseline": None,
        "log": {"lines": 0, "boot_log_bytes": 0, "boot_log_capped": False},
        "notes": run.notes,
        "watch": None,
        "lmcache": server.to_json() if server is not None else None,
    }
    _safely("writing outcome.json", lambda: run.boot.write_json("outcome.json", doc))
    say = warn if kind == "lmcache-failed" else note
    say(f"supervise: boot {run.boot.boot_id}: {kind}: {diagnosis}")
    return doc


def _baseline_before(launch: Launch, run: _Run) -> list[GpuMemory] | None:
    from glmlaunch.hardware.baseline import read_gpu_memory

    try:
        return read_gpu_memory(launch.env)
    except GlmlaunchError as exc:
        why = exc.message
    except Exception as exc:  # an NVML binding failure is a note here, never a reason not to start
        why = f"{type(exc).__name__}: {exc}"
    run.baseline_note = f"no baseline before vLLM started ({why})"
    note(f"supervise: no GPU baseline ({why}): the GPU check after vLLM exits is skipped")
    return None


def _output_fds() -> tuple[list[tuple[str, int, int]], int | None, int | None, list[int], int | None]:
    """(sources: name, read fd, our fd), the child's stdout and stderr, fds to close after the spawn, pty."""
    out_tty, err_tty = os.isatty(1), os.isatty(2)
    sources: list[tuple[str, int, int]] = []
    close_after: list[int] = []
    pty_master: int | None = None
    child_out: int | None
    child_err: int | None
    if out_tty or err_tty:
        master, slave = open_pty(1 if out_tty else 2)
        pty_master = master
        sources.append(("pty", master, 1 if out_tty else 2))
        close_after.append(slave)
    if out_tty:
        child_out = close_after[0]
    else:
        r, w = os.pipe()
        sources.append(("stdout", r, 1))
        close_after.append(w)
        child_out = w
    if err_tty:
        child_err = close_after[0]
    else:
        r, w = os.pipe()
        sources.append(("stderr", r, 2))
        close_after.append(w)
        child_err = w
    return sources, child_out, child_err, close_after, pty_master


def _run_child(run: _Run, before: list[GpuMemory] | None) -> Result:
    launch = run.launch
    stops = deadlines(launch.argv, launch.stop_grace_s)
    sources, child_out, child_err, close_after, pty_master = _output_fds()
    process.block_signals()
    # The readers forward vLLM's bytes; the parser and this thread only keep records. A thread waiting for
    # the GIL gets it after the switch interval at worst: 1 ms instead of CPython's 5 keeps a reader's turn
    # short (bench/RESULTS.md, "Supervised launch").
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        child = process.spawn(launch.argv, launch.env, stdout=child_out, stderr=child_err)
    except OSError as exc:
        for fd in close_after + [s[1] for s in sources]:
            with contextlib.suppress(OSError):
                os.close(fd)
        process.unblock_signals()
        raise LaunchError(
            f"cannot execute {launch.argv[0]}: {exc.strerror or exc}",
            key="exec",
            hint="a script needs a #! line and execute permission; a binary must match this machine",
        ) from None
    for fd in close_after:
        os.close(fd)
    run.pid = child.pid
    items = Backlog()
    tee = Tee(items)
    for name, src, dst in sources:
        tee.add(name, src, dst)
    stream = BootStream(items, run.boot.path, len(sources), child.started, run.timeline)
    stream.on_ready = lambda: _safely("the ready report", lambda: _on_ready(run, stream))
    if launch.watch is not None:
        run.watching = _safely("starting the watch", lambda: _start_watch(run))
        if run.watching is not None:
            stream.on_watch_line = run.watching.feed
    tee.start()
    stream.start()
    note(f"supervise: vLLM pid {child.pid} (boot {run.boot.boot_id}: {run.boot.path})")

    status = _wait(run, child, stops, pty_master)
    code, sig = process.status_of(status)
    child.popen.returncode = -sig if sig is not None else code  # reaped here, not by Popen
    return _after_exit(run, child, stream, tee, before, code, sig, stops)


def _start_watch(run: _Run) -> Watching | None:
    from glmlaunch.supervise import watching

    launch = run.launch
    assert launch.watch is not None
    return watching.start(
        launch.watch,
        profile=launch.profile,
        config=launch.config,
        env=launch.env,
        boot_dir=run.boot.path,
        known_pids=lambda: deployment_pids(run.lmcache),
    )


def deployment_pids(server: cache_server.CacheServer | None) -> frozenset[int]:
    """The processes the watch counts as the deployment: everything under glmlaunch (vLLM and whatever it
    started: glmlaunch is their subreaper), the LMCache server and its workers included: its GPU workers
    hold CUDA memory of the deployment, not a foreign process's."""
    pids = set(process.descendants())
    if server is not None and server.alive:
        pids |= server.tree()
    return frozenset(pids)


def _stop_watch(run: _Run) -> dict[str, Any] | None:
    """The watch's summary; its runtime events go into the boot's calibration record."""
    if run.watching is None:
        return None
    summary, events = run.watching.finish()
    _safely("writing watch.json", lambda: run.boot.write_json("watch.json", summary))
    record = run.record
    if record is not None and events:
        from glmlaunch.calibrate.store import Store

        boot = record.boot.model_copy(update={"runtime_events": [*record.boot.runtime_events, *events]})
        updated = record.model_copy(update={"boot": boot})
        if _safely(
            "the watch's readings in the record", lambda: Store.default(run.launch.caller_env).save(updated)
        ):
            run.record = updated
            lows = sum(1 for e in events if e.kind == "free")
            ooms = len(events) - lows
            note(
                f"supervise: calibration record {record.record_id} keeps the watch's runtime evidence "
                f"({lows} lowest free reading(s), {ooms} OOM(s) after ready)"
            )
    return summary


def _wait(run: _Run, child: process.Child, stops: Deadlines, pty_master: int | None) -> int:
    """Forward signals, reap, keep the deadlines and watch for hangs until vLLM exits; its wait status."""
    escalate_at: float | None = None
    kill_at: float | None = None
    next_tick = time.monotonic()
    while True:
        now = time.monotonic()
        wake = min(t for t in (next_tick, escalate_at, kill_at) if t is not None)
        sig = process.wait_signal(max(0.0, wake - now))
        now = time.monotonic()
        # reaped before a signal is forwarded: when vLLM has exited, its SIGCHLD can be pending behind a
        # lower-numbered signal (SIGTERM 15 is taken before SIGCHLD 17), which then came after vLLM's exit
        reaped = process.reap()
        exited = any(pid == child.pid for pid, _ in reaped)
        if sig is not None and sig != signal.SIGCHLD and exited:
            if sig in process.STOPPING:
                # not forwarded: pending again (signals stay blocked), the first step after the exit takes
                # it as one that came during that step
                signal.pthread_kill(threading.get_ident(), sig)
        elif sig is not None and sig != signal.SIGCHLD:
            if sig == signal.SIGWINCH and pty_master is not None:
                copy_window_size(1 if os.isatty(1) else 2, pty_master)  # the terminal the pty stands for
            process.send(child.pid, sig)
            run.forwarded.append({"t_s": round(now - child.started, 3), "signal": process.signal_name(sig)})
            if sig in process.STOPPING and escalate_at is None:
                escalate_at = now + stops.deadline_s
        vllm_status: int | None = None
        for pid, status in reaped:
            if pid == child.pid:
                vllm_status = status
            elif run.lmcache is not None and pid == run.lmcache.pid:
                run.lmcache.reaped(status)
                if vllm_status is None and _lmcache_died(run, child):
                    process.send(child.pid, signal.SIGTERM)
                    run.forwarded.append(
                        {"t_s": round(now - child.started, 3), "signal": "SIGTERM", "why": "LMCache died"}
                    )
                    if escalate_at is None:
                        escalate_at = now + stops.deadline_s
            else:
                run.reaped_other.append(pid)
        if vllm_status is not None:
            return vllm_status
        if escalate_at is not None and kill_at is None and now >= escalate_at:
            warn(
                f"supervise: vLLM did not exit within {fmt_seconds(stops.deadline_s)} of the stop signal: "
                "SIGTERM to its process group"
            )
            process.send_group(child.pgid, signal.SIGTERM)
            run.escalations.append({"t_s": round(now - child.started, 3), "signal": "SIGTERM", "to": "group"})
            kill_at = now + stops.kill_after_s
            escalate_at = float("inf")
        if kill_at is not None and now >= kill_at:
            later = fmt_seconds(stops.kill_after_s)
            warn(f"supervise: vLLM is still running {later} later: SIGKILL to its process group")
            process.send_group(child.pgid, signal.SIGKILL)
            run.escalations.append({"t_s": round(now - child.started, 3), "signal": "SIGKILL", "to": "group"})
            kill_at = float("inf")
        if now >= next_tick:
            next_tick = now + TICK_S
            _tick(run, child, now)


def _lmcache_died(run: _Run, child: process.Child) -> bool:
    """The LMCache server ended while vLLM ran: said with its log, and vLLM is to be stopped (upstream's
    wrappers: "LMCache exited while vLLM was running", then stop vLLM, exit 1; appliance L139-145, release
    L360-366). False when glmlaunch was already stopping vLLM (then the server's end is no cause)."""
    server = run.lmcache
    assert server is not None
    if any(str(f["signal"]) in _STOP_NAMES and "why" not in f for f in run.forwarded):
        return False
    server.died_while_serving = True
    server.ended = f"died while vLLM ran: {server.how()}"
    warn(
        f"supervise: the LMCache server (pid {server.pid}) exited while vLLM was running ({server.how()}): "
        f"SIGTERM to vLLM (pid {child.pid}); glmlaunch will exit {int(ExitCode.LMCACHE)}"
    )
    _show_lmcache_tail(server)
    return True


def _tick(run: _Run, child: process.Child, now: float) -> None:
    for pid, proc in process.descendants().items():
        if not proc.zombie:
            run.tree.setdefault(pid, proc.name)
    hang = run.timeline.check_hang(now - child.started)
    if hang is not None:
        phase, spent, limit = hang
        warn(
            f"supervise: vLLM has been in phase {phase} for {fmt_seconds(spent)}, past its expected "
            f"{fmt_seconds(limit)} ({run.timeline.expected_from}); still waiting"
        )


def _supervised(
    run: _Run, outcome: str, status: str | None = None, diagnosis: str | None = None
) -> SupervisedBoot:
    from glmlaunch.calibrate.records import SupervisedBoot

    return SupervisedBoot(boot_id=run.boot.boot_id, outcome=outcome, exit_status=status, diagnosis=diagnosis)


def _ingest(run: _Run, supervised: SupervisedBoot, parsed: BootLog | None = None) -> Calibration | None:
    """The record of boot.log, keyed on the launch; saved. None (with the reason kept) when there is none.
    ``parsed``: boot.log as parsed already (after vLLM exited), so the log is parsed once."""
    from glmlaunch.calibrate.ingest import ingest_launched
    from glmlaunch.calibrate.store import Store

    path = run.boot.path / "boot.log"
    launch = run.launch
    try:
        item = ingest_launched(
            path,
            launched=launch.config,
            profile=launch.profile,
            inventory=launch.inventory,
            store=Store.default(launch.caller_env),
            supervised=supervised,
            parsed=parsed,
        )
    except GlmlaunchError as exc:
        run.record_problem = exc.message
        return None
    run.record = item.record
    run.record_path = str(item.saved.path) if item.saved is not None else None
    return item.record


def _on_ready(run: _Run, stream: BootStream) -> None:
    run.ready_at = _now_iso()
    note(f"supervise: vLLM is ready: {run.timeline.summary()}")
    record = _ingest(run, _supervised(run, "running"))
    if record is None:
        note(f"supervise: no calibration record from this boot: {run.record_problem}")
    elif record.evidence_refused is not None:
        warn(
            f"supervise: this boot's log is no evidence ({record.evidence_refused}); its record "
            f"{record.record_id} is kept ({run.record_path}) and no plan learns from it"
        )
    elif not record.usable:
        note(
            f"supervise: calibration record {record.record_id} written ({run.record_path}); not usable "
            f"on its own: {record.unusable_reason()}"
        )
    else:
        launch = run.launch
        for line in plan_vs_boot(launch.plan_terms, launch.plan_kv_tokens, record, launch.calibration):
            note(f"supervise: {line}")
        note(
            f"supervise: calibration record {record.record_id} written ({run.record_path}); the next plan "
            "of this rig shape uses it"
        )
    run.boot.write_json("outcome.json", _outcome_doc(run, stream, None, None, None, [], None, running=True))


def _after_exit(
    run: _Run,
    child: process.Child,
    stream: BootStream,
    tee: Tee,
    before: list[GpuMemory] | None,
    code: int | None,
    sig: int | None,
    stops: Deadlines,
) -> Result:
    status_text = process.describe_status(code, sig)
    server = run.lmcache
    on_reaped = _lmcache_reaped(run)
    if any(str(f["signal"]) in _STOP_NAMES for f in run.forwarded):
        # the caller asked glmlaunch to stop: what follows vLLM's exit is bounded (and a second stop
        # signal ends it at once, :func:`_step`)
        run.steps_deadline = time.monotonic() + STOPPING_BUDGET_S
    left = process.end_tree(
        stops.kill_after_s,
        on_reaped=on_reaped,
        spare=(lambda: server.tree()) if server is not None else None,
    )
    if not process.LINUX:
        process.send_group(child.pgid, signal.SIGKILL)
    if server is not None:
        # vLLM and its leftovers are gone: the LMCache server drains now (appliance L150-151, release L368)
        if server.alive:
            note(f"supervise: vLLM exited: draining the LMCache server (pid {server.pid})")
        cache_server.drain(server, cache_server.drain_grace(run.launch.stop_grace_s), on_reaped=on_reaped)
        note(f"supervise: LMCache server: {server.ended}")
        if server.left_behind:
            shown = ", ".join(f"{p.name} pid {p.pid} ({p.ended})" for p in server.left_behind)
            warn(f"supervise: LMCache left {len(server.left_behind)} process(es) behind; reaped: {shown}")
    if _step(run, "vLLM's output to end", lambda: tee.stop(10.0), on_reaped) is False:
        warn("supervise: vLLM's output is still open after it exited (a process outside glmlaunch's reach)")
    if _step(run, "the boot log to be written", lambda: stream.join(30.0), on_reaped) is False:
        warn("supervise: the boot log was still being written when glmlaunch stopped waiting for it")
    if stream.error is not None:
        warn(f"supervise: reading vLLM's output failed: {type(stream.error).__name__}: {stream.error}")
    for name, why in tee.broken.items():
        warn(f"supervise: vLLM's {name} could not be forwarded after a point: {why}")
    ready = stream.ready.is_set()
    parsed: BootLog | None = (
        None
        if ready
        else _step(
            run,
            "the boot log's parse",
            lambda: _safely("parsing the boot log", lambda: _parse(run)),
            on_reaped,
        )
    )
    stopping = dict.fromkeys(
        str(f["signal"]) for f in run.forwarded if str(f["signal"]) in _STOP_NAMES and "why" not in f
    )
    stopped_by = ", ".join(stopping) or None
    verdict: Verdict = classify(
        code=code,
        sig=sig,
        ready=ready,
        timeline=run.timeline,
        findings=stream.findings,
        boot=parsed,
        stopped_by=f"{stopped_by} from glmlaunch's caller" if stopped_by else None,
    )
    lmcache_failed = server is not None and server.died_while_serving
    if lmcache_failed and server is not None:
        cause = server.cause()
        verdict = Verdict(
            "lmcache-failed",
            f"the LMCache server exited while vLLM was running ({server.how()}"
            f"{', ' + cause if cause else ''}); vLLM was stopped and {status_text.replace('exit', 'exited')}",
        )
    final = _supervised(run, verdict.kind, status_text, verdict.diagnosis)
    watch_summary = _step(
        run, "the watch to stop", lambda: _safely("stopping the watch", lambda: _stop_watch(run)), on_reaped
    )
    if run.record is not None:
        from glmlaunch.calibrate.store import Store

        updated = run.record.model_copy(update={"supervised": final})
        store = Store.default(run.launch.caller_env)
        _step(
            run,
            "the calibration record",
            lambda: _safely("updating the calibration record", lambda: store.save(updated)),
            on_reaped,
        )
        run.record = updated
    elif not ready:
        _step(
            run,
            "the calibration record",
            lambda: _safely("the calibration record", lambda: _ingest(run, final, parsed)),
            on_reaped,
        )
        if run.skipped is not None and run.record is None:
            run.record_problem = f"not made: {run.skipped}"
    baseline: dict[str, Any] = _step(
        run,
        "the GPUs' baseline",
        lambda: _baseline_after(run, before, child.pid, left),
        on_reaped,
        budgeted=False,
    ) or {"checked": False, "note": f"not checked: {run.abandoned}"}
    glm_code, glm_sig = code, sig
    if lmcache_failed:
        glm_code, glm_sig = int(ExitCode.LMCACHE), None
    elif run.launch.strict_exit and verdict.kind == "engine-error":
        glm_code, glm_sig = int(ExitCode.ENGINE_FAILED), None
    elif sig is not None and os.getpid() == 1:
        glm_code, glm_sig = 128 + sig, None
    doc = _outcome_doc(
        run, stream, code, sig, verdict, left, baseline, glm=(glm_code, glm_sig), tee=tee, watch=watch_summary
    )
    _safely("writing outcome.json", lambda: run.boot.write_json("outcome.json", doc))
    _report(run, verdict, left, baseline)
    if lmcache_failed:
        note(f"vllm exited: {status_text}")
        warn(f"the LMCache server died while vLLM was running; glmlaunch exits {glm_code}")
    elif glm_code == int(ExitCode.ENGINE_FAILED) and verdict.kind == "engine-error":
        warn(f"vllm exited 0 after a fatal engine error; --strict-exit: glmlaunch exits {glm_code}")
    elif sig is not None:
        note(
            f"vllm exited: {status_text}"
            + (f"; glmlaunch exits {glm_code} (PID 1)" if glm_sig is None else "")
        )
    else:
        note(f"vllm exited {code}")
    return Result(glm_code, glm_sig, doc)


_STOP_NAMES = {process.signal_name(s) for s in process.STOPPING}


def _parse(run: _Run) -> BootLog | None:
    from glmlaunch.vllmlog.boot import parse_log_file

    path = run.boot.path / "boot.log"
    return parse_log_file(path) if path.exists() else None


def _baseline_after(
    run: _Run, before: list[GpuMemory] | None, child_pid: int, left: list[process.LeftBehind]
) -> dict[str, Any]:
    from glmlaunch.hardware.baseline import baseline_problems, read_gpu_memory

    if before is None:
        return {"checked": False, "note": run.baseline_note}
    pids = sorted({child_pid, *run.tree, *(p.pid for p in left)})
    wait = BASELINE_WAIT_S
    if run.launch.stop_grace_s is not None:
        wait = min(wait, max(1.0, run.launch.stop_grace_s / 4))
    deadline = time.monotonic() + wait
    problems: list[str] = []
    now: list[GpuMemory] = []
    while True:
        try:
            now = read_gpu_memory(run.launch.env)
        except Exception as exc:
            return {"checked": False, "note": f"NVML failed after vLLM exited: {exc}"}
        problems = baseline_problems(
            before, now, pids, [], BASELINE_SLACK_BYTES, since="vLLM started", who="vLLM"
        )
        if not problems or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    return {
        "checked": True,
        "ok": not problems,
        "problems": problems,
        "before": [g.to_json() for g in before],
        "after": [g.to_json() for g in now],
        "waited_s": round(wait - max(0.0, deadline - time.monotonic()), 1),
    }


def _report(run: _Run, verdict: Verdict, left: list[process.LeftBehind], baseline: Mapping[str, Any]) -> None:
    say = note if verdict.kind in ("served",) else warn
    say(f"supervise: boot {run.boot.boot_id}: {verdict.kind}: {verdict.diagnosis}")
    if left:
        shown = ", ".join(f"{p.name} pid {p.pid} ({p.ended})" for p in left)
        warn(f"supervise: vLLM left {len(left)} process(es) behind; terminated and reaped: {shown}")
    if baseline.get("checked"):
        if baseline.get("ok"):
            note("supervise: every GPU is back at its free memory from before vLLM started")
        else:
            for problem in baseline.get("problems", []):
                warn(f"supervise: GPU memory not back at its baseline: {problem}")
    elif baseline.get("note") and baseline["note"] != run.baseline_note:  # a missing baseline: said at start
        note(f"supervise: GPU check skipped: {baseline['note']}")
    if run.record is not None and not run.ready_at:
        note(f"supervise: calibration record {run.record.record_id} written ({run.record_path})")
    elif run.record is None and run.record_problem and not run.ready_at:  # (at ready it was said then)
        note(f"supervise: no calibration record: {run.record_problem}")


def _outcome_doc(
    run: _Run,
    stream: BootStream,
    code: int | None,
    sig: int | None,
    verdict: Verdict | None,
    left: list[process.LeftBehind],
    baseline: Mapping[str, Any] | None,
    *,
    running: bool = False,
    glm: tuple[int | None, int | None] | None = None,
    tee: Tee | None = None,
    watch: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    now_s = time.monotonic() - stream.started
    return {
        "boot_id": run.boot.boot_id,
        "profile": run.launch.profile,
        "pid": run.pid,
        "started_at": run.started_at,
        "ready_at": run.ready_at,
        "ended_at": None if running else _now_iso(),
        "running": running,
        "ready": stream.ready.is_set(),
        "outcome": "running" if verdict is None else verdict.kind,
        "diagnosis": None if verdict is None else verdict.diagnosis,
        "exit": None
        if running
        else {
            "code": code,
            "signal": sig,
            "signal_name": process.signal_name(sig) if sig is not None else None,
            "status": process.describe_status(code, sig),
        },
        "glmlaunch_exit": None
        if glm is None
        else {
            "code": glm[0],
            "signal": glm[1],
            "status": process.describe_status(glm[0], glm[1]),
        },
        "timeline": run.timeline.to_json(None if stream.ready.is_set() else now_s),
        "findings": [f.to_json() for f in stream.findings.values()],
        "record": {
            "record_id": run.record.record_id if run.record is not None else None,
            "path": run.record_path,
            "problem": run.record_problem,
        },
        "signals_forwarded": run.forwarded,
        "escalations": run.escalations,
        "left_behind": [p.to_json() for p in left],
        "processes_seen": [{"pid": pid, "name": name} for pid, name in sorted(run.tree.items())],
        "gpu_baseline": dict(baseline) if baseline is not None else None,
        "log": {
            "lines": stream.lines,
            "boot_log_bytes": stream.boot_log.written,
            "boot_log_capped": stream.boot_log.capped,
            "serve_log_rotations": stream.serve_rotations,
            "dropped_bytes": stream.dropped,
            "forwarded_bytes": dict(tee.bytes_forwarded) if tee is not None else None,
        },
        "notes": run.notes,
        "watch": dict(watch) if watch is not None else None,
        "lmcache": run.lmcache.to_json() if run.lmcache is not None else None,
    }
