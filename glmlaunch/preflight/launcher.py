"""Start one worker per GPU of the TP group, follow them, and tear every one down on any fault.

Each rank is a fresh interpreter (``python -m glmlaunch.preflight.worker``: the spawn start method's
semantics, nothing inherited from the parent but the environment) started in its own session, so the
rank and everything it starts (ninja, nvcc) form one process group the parent can kill at once. The
parent imports no torch and never initialises CUDA.

The parent polls every rank's result file: a phase that outlives its limit, a rank that raises, exits
non-zero or dies by a signal, or SIGINT / SIGTERM to the parent, all end the run: every rank's process
group gets SIGTERM, then SIGKILL after a short grace, and the parent checks that none is left. The
root cause is the earliest failure (torchrun's rule): rank, phase, message; signals are shown as
``Signal 9 (SIGKILL)``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from glmlaunch.preflight.types import (
    DEFAULT_PHASE_LIMITS,
    PHASES,
    BackendName,
    DeviceMode,
    FaultSpec,
    PlannedAllocation,
    RankResult,
    WorkerSpec,
    read_rank_result,
)

FailureKind = Literal["error", "signal", "exit", "timeout", "interrupted", "vanished"]

#: Prefix of the working directory each run makes under the system temporary directory.
WORKDIR_PREFIX = "glmlaunch-preflight-"
POLL_S = 0.05
#: After the first failure, keep listening this long so a peer's earlier error is not missed.
SETTLE_S = 0.5
TERM_GRACE_S = 2.0
KILL_WAIT_S = 5.0


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached the parent."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum


def signal_name(signum: int) -> str:
    try:
        return f"Signal {signum} ({signal.Signals(signum).name})"
    except ValueError:
        return f"Signal {signum}"


@dataclass(frozen=True)
class LaunchRequest:
    world_size: int
    device_mode: DeviceMode
    backend: BackendName
    config: dict[str, Any]
    allocations: tuple[PlannedAllocation, ...]
    env: dict[str, str]
    phase_limits: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_PHASE_LIMITS))
    fault: FaultSpec | None = None
    free_before: tuple[int | None, ...] = ()
    python: str = sys.executable
    workdir: str | None = None


@dataclass(frozen=True)
class Failure:
    rank: int
    phase: str
    kind: FailureKind
    message: str
    time: float
    traceback: str | None = None

    def line(self) -> str:
        if self.kind == "interrupted":
            return f"{self.message} while the ranks were in {self.phase}"
        return f"rank {self.rank}, phase {self.phase}: {self.message}"


@dataclass(frozen=True)
class LaunchOutcome:
    results: tuple[RankResult | None, ...]
    failures: tuple[Failure, ...]
    root_cause: Failure | None
    interrupted: int | None
    survivors: tuple[int, ...]
    phase_wall: dict[str, float]
    wall_s: float
    log_tails: tuple[str, ...]
    workdir: str
    #: whether ``workdir`` is still on disk: kept after a failed run (its rank logs are the evidence),
    #: removed after a successful one unless the caller named it (``LaunchRequest.workdir``)
    workdir_kept: bool = True

    @property
    def ok(self) -> bool:
        return self.root_cause is None and self.interrupted is None and not self.survivors


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen[bytes]
    result_path: Path
    log_path: Path
    started: float
    started_wall: float
    result: RankResult | None = None
    seen_phase: str = "spawn"
    first_report: float | None = None


Progress = Callable[[str], None]


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """Turn SIGINT/SIGTERM into :class:`Interrupted` while workers run (main thread only)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _ignore_signals() -> None:
    import threading

    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)


def _spawn(request: LaunchRequest, workdir: Path, ranks: list[_Rank]) -> None:
    """Start the ranks, appending each as soon as it exists (so an interrupt mid-way still tears it down)."""
    env = dict(os.environ)
    # The worker must import this very package, wherever the parent found it.
    pkg_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    init_file = workdir / "store"
    for rank in range(request.world_size):
        spec = WorkerSpec(
            rank=rank,
            world_size=request.world_size,
            local_device=rank,
            device_mode=request.device_mode,
            backend=request.backend,
            init_file=str(init_file),
            result_path=str(workdir / f"rank{rank}.json"),
            config=request.config,
            allocations=request.allocations,
            env=request.env,
            free_before_bytes=request.free_before[rank] if rank < len(request.free_before) else None,
            fault=request.fault,
            parent_pid=os.getpid(),
        )
        spec_path = workdir / f"rank{rank}.spec.json"
        spec_path.write_text(spec.to_json())
        log_path = workdir / f"rank{rank}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [request.python, "-m", "glmlaunch.preflight.worker", str(spec_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        ranks.append(_Rank(rank, proc, Path(spec.result_path), log_path, time.monotonic(), time.time()))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def teardown(ranks: list[_Rank]) -> tuple[int, ...]:
    """SIGTERM every rank's process group, SIGKILL what is left; return pids of groups still alive."""
    for r in ranks:
        if r.proc.poll() is None:
            _killpg(r.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    while time.monotonic() < deadline and any(r.proc.poll() is None for r in ranks):
        time.sleep(POLL_S)
    # Children of a rank (a compiler, a helper) may outlive its leader: kill the whole group regardless.
    for r in ranks:
        _killpg(r.proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    for r in ranks:
        with contextlib.suppress(subprocess.TimeoutExpired):
            r.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    while time.monotonic() < deadline and any(_group_alive(r.proc.pid) for r in ranks):
        time.sleep(POLL_S)
    return tuple(r.proc.pid for r in ranks if r.proc.poll() is None or _group_alive(r.proc.pid))


def _failure_of(r: _Rank, now: float) -> Failure | None:
    rc = r.proc.poll()
    res = r.result
    phase = res.phase if res is not None else "spawn"
    if res is not None and res.status == "failed":
        return Failure(
            rank=r.rank,
            phase=phase,
            kind="error",
            message=f"{res.error_type}: {res.error_message}",
            time=res.error_time or now,
            traceback=res.error_traceback,
        )
    if rc is None:
        return None
    # A rank that dies without a word is ordered by its last sign of life: peers that raise after it are
    # usually its victims (their collective lost a member), and a victim does not die silently.
    last_seen = res.phase_started if res is not None else r.started_wall
    if rc < 0:
        return Failure(r.rank, phase, "signal", f"{signal_name(-rc)} killed the worker", last_seen)
    if rc != 0:
        return Failure(r.rank, phase, "exit", f"worker exited with code {rc}", last_seen)
    if res is None or res.status != "ok":
        return Failure(r.rank, phase, "vanished", "worker exited 0 without reporting success", last_seen)
    return None


def _timeout_of(r: _Rank, limits: dict[str, float], now_wall: float, now_mono: float) -> Failure | None:
    if r.proc.poll() is not None:
        return None
    if r.result is None:
        phase, elapsed = "spawn", now_mono - r.started
    else:
        phase, elapsed = r.result.phase, now_wall - r.result.phase_started
    limit = limits.get(phase)
    if limit is None or elapsed <= limit:
        return None
    return Failure(r.rank, phase, "timeout", f"phase {phase} exceeded its {limit:g} s limit (hung)", now_wall)


def _blame_laggard(fail: Failure, ranks: list[_Rank]) -> Failure:
    """A rank stuck in a collective is usually waiting for a peer that is further behind: blame that peer."""
    if fail.kind != "timeout":
        return fail
    order = {p: i for i, p in enumerate(PHASES)}
    alive = [r for r in ranks if r.proc.poll() is None]
    if not alive:
        return fail
    lag = min(alive, key=lambda r: (order.get(r.result.phase if r.result else "spawn", 0),
                                    r.result.phase_started if r.result else 0.0))
    lag_phase = lag.result.phase if lag.result else "spawn"
    if order.get(lag_phase, 0) >= order.get(fail.phase, 0) or lag.rank == fail.rank:
        return fail
    since = time.time() - (lag.result.phase_started if lag.result else time.time())
    return Failure(
        lag.rank,
        lag_phase,
        "timeout",
        f"no progress in phase {lag_phase} for {since:.0f} s (hung); rank {fail.rank} waited for it in "
        f"{fail.phase} past that phase's limit",
        fail.time,
    )


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _phase_wall(ranks: list[_Rank]) -> dict[str, float]:
    wall: dict[str, float] = {}
    for r in ranks:
        if r.first_report is not None:
            wall["spawn"] = max(wall.get("spawn", 0.0), round(r.first_report - r.started, 4))
        if r.result is None:
            continue
        for phase, seconds in r.result.timings.items():
            wall[phase] = max(wall.get(phase, 0.0), seconds)
    return wall


def launch(request: LaunchRequest, progress: Progress | None = None) -> LaunchOutcome:
    """Run the workers to completion or first failure; never leaves a worker behind."""
    say = progress or (lambda _msg: None)
    owned = request.workdir is None
    workdir = Path(request.workdir or tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    ranks: list[_Rank] = []
    failures: list[Failure] = []
    interrupted: int | None = None
    survivors: tuple[int, ...] = ()
    with _signals_raise():
        try:
            _spawn(request, workdir, ranks)
            # Where the results and logs are is said once, by the error of a failed run (which keeps them).
            say(f"started {len(ranks)} worker(s): {request.backend} backend, {request.device_mode} mode")
            first_failure_at: float | None = None
            while True:
                now_mono, now_wall = time.monotonic(), time.time()
                for r in ranks:
                    res = read_rank_result(r.result_path)
                    if res is not None:
                        if r.first_report is None:
                            r.first_report = now_mono
                        r.result = res
                        if res.phase != r.seen_phase:
                            done = res.timings.get(r.seen_phase)
                            took = f" ({done:.2f} s)" if done is not None else ""
                            say(f"rank {r.rank}: {r.seen_phase} done{took}; {res.phase}")
                            r.seen_phase = res.phase
                    fail = _failure_of(r, now_wall)
                    if fail is None:
                        late = _timeout_of(r, request.phase_limits, now_wall, now_mono)
                        fail = _blame_laggard(late, ranks) if late is not None else None
                    if fail is not None and all(f.rank != fail.rank for f in failures):
                        failures.append(fail)
                        say(f"rank {fail.rank} failed in {fail.phase}: {fail.message}")
                        first_failure_at = first_failure_at or now_mono
                if first_failure_at is not None and now_mono - first_failure_at >= SETTLE_S:
                    break
                if all(r.proc.poll() == 0 for r in ranks) and not failures:
                    # A final read so the last phase's result is the one reported.
                    for r in ranks:
                        r.result = read_rank_result(r.result_path) or r.result
                    stragglers = [r for r in ranks if r.result is None or r.result.status != "ok"]
                    if not stragglers:
                        break
                    failures.extend(f for r in stragglers if (f := _failure_of(r, time.time())))
                    break
                time.sleep(POLL_S)
        except Interrupted as exc:
            interrupted = exc.signum
            say(f"{signal_name(exc.signum)} received: tearing down every worker")
        except KeyboardInterrupt:
            interrupted = signal.SIGINT
            say("interrupted: tearing down every worker")
        finally:
            _ignore_signals()  # a second Ctrl-C must not cut the teardown short
            survivors = teardown(ranks)
    for r in ranks:
        r.result = read_rank_result(r.result_path) or r.result
    root = min(failures, key=lambda f: (f.time, f.rank)) if failures else None
    if root is None and interrupted is not None:
        phases = {r.result.phase if r.result else "spawn" for r in ranks}
        root = Failure(
            -1, "/".join(sorted(phases)), "interrupted", f"{signal_name(interrupted)} to the parent",
            time.time(),
        )
    tails = tuple(_tail(r.log_path) for r in ranks)
    ok = root is None and interrupted is None and not survivors
    kept = True
    if ok and owned:
        # Everything the report needs (results, log tails) is in memory now; a successful run leaves
        # nothing behind in /tmp. A failed one keeps the directory: the rank logs say what went wrong.
        shutil.rmtree(workdir, ignore_errors=True)
        kept = workdir.exists()
    return LaunchOutcome(
        results=tuple(r.result for r in ranks),
        failures=tuple(sorted(failures, key=lambda f: (f.time, f.rank))),
        root_cause=root,
        interrupted=interrupted,
        survivors=survivors,
        phase_wall=_phase_wall(ranks),
        wall_s=round(time.monotonic() - t0, 3),
        log_tails=tails,
        workdir=str(workdir),
        workdir_kept=kept,
    )
