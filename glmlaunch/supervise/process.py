"""vLLM as a child: its own session, a parent-death signal, glmlaunch its subreaper; signals, reaping, exit.

The contract is tini's (krallin/tini ``src/tini.c``) and torchrun's ``PContext.close``:

* :func:`spawn` starts vLLM in a new session (so a terminal's Ctrl-C or a process-group signal reaches
  glmlaunch only, which forwards it) with ``PR_SET_PDEATHSIG`` = SIGTERM: should glmlaunch itself die,
  vLLM is asked to drain instead of running on unsupervised. The child's signal mask is cleared (the
  supervisor blocks the signals it forwards, and a mask survives exec).
* :func:`become_subreaper` makes glmlaunch a child subreaper (``PR_SET_CHILD_SUBREAPER``): EngineCore
  and the workers, whatever session or group they moved to, are re-parented to glmlaunch when their
  parent dies, so :func:`descendants` finds them and :func:`end_tree` terminates and reaps them.
* :data:`FORWARDED` is every signal glmlaunch passes on: all but SIGCHLD, the uncatchable ones, the
  synchronous faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS), the terminal's
  SIGTTIN/SIGTTOU, and SIGPIPE (Python ignores it; a broken output pipe is an error where it is written).
* :func:`exit_like` ends glmlaunch the way vLLM ended: its exit code, or death by its signal (with core
  dumps off, so the supervisor leaves no core file of its own); as PID 1, where a process cannot kill
  itself with a signal it does not handle, 128 + N, as tini does.

The kernel calls are Linux's (``prctl`` through ctypes; ``/proc`` for the process tree). Elsewhere
:func:`platform_note` says what is missing: no subreaper, so processes vLLM leaves outside its own
process group are not found; the process group is still signalled and the child still reaped.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
LINUX = sys.platform.startswith("linux")
PROC = Path("/proc")

_NOT_FORWARDED = {
    signal.SIGKILL,
    signal.SIGSTOP,
    signal.SIGCHLD,
    signal.SIGSEGV,
    signal.SIGBUS,
    signal.SIGFPE,
    signal.SIGILL,
    signal.SIGABRT,
    signal.SIGTRAP,
    signal.SIGSYS,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGPIPE,
}
#: Every signal glmlaunch forwards to vLLM (real-time signals included, as plain numbers).
FORWARDED: frozenset[int] = frozenset(int(s) for s in signal.valid_signals() if s not in _NOT_FORWARDED)
#: Signals that ask a process to stop: forwarding one starts the stop deadline.
STOPPING: frozenset[int] = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT})
#: Signals whose default action does not end a process: dying "by" one is impossible, so 128 + N.
_NOT_FATAL = {signal.SIGCHLD, signal.SIGCONT, signal.SIGURG, signal.SIGWINCH}


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def become_subreaper() -> str | None:
    """Make this process a child subreaper; None when it is one, else why not (said as a note)."""
    if not LINUX:
        return (
            f"not Linux ({sys.platform}): glmlaunch cannot be a child subreaper, so processes vLLM leaves "
            "outside its own process group are not found after it exits"
        )
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    except OSError as exc:
        return f"prctl(PR_SET_CHILD_SUBREAPER) failed ({exc.strerror}): orphans are not re-parented here"
    return None


def platform_note() -> str | None:
    if LINUX:
        return None
    return "not Linux: no parent-death signal for vLLM, and no /proc to find what it leaves behind"


@dataclass
class Child:
    """The vLLM process: its pid is its process group and session id (it leads both)."""

    pid: int
    popen: subprocess.Popen[bytes]
    started: float

    @property
    def pgid(self) -> int:
        return self.pid


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    stdout: int | None,
    stderr: int | None,
    death_signal: int = signal.SIGTERM,
) -> Child:
    """Start ``argv`` in its own session with a parent-death signal and an empty signal mask.

    ``stdout``/``stderr`` are file descriptors (a pipe's or a pty's write end) or None (inherit).
    Raises OSError when the program cannot be executed (the caller turns it into exit 6).
    """
    parent = os.getpid()

    def in_child() -> None:  # runs between fork and exec: async-signal-safe calls only in spirit
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        if LINUX:
            with contextlib.suppress(OSError):
                _prctl(PR_SET_PDEATHSIG, death_signal)
            if os.getppid() != parent:  # the parent died before the death signal was armed
                os.kill(os.getpid(), death_signal)

    popen = subprocess.Popen(
        list(argv),
        env=dict(env),
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
        preexec_fn=in_child,
        close_fds=True,
        restore_signals=True,
    )
    return Child(popen.pid, popen, time.monotonic())


def block_signals() -> None:
    """Block every forwarded signal and SIGCHLD in this thread (call before starting any thread)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, set(FORWARDED) | {signal.SIGCHLD})


def unblock_signals() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(FORWARDED) | {signal.SIGCHLD})


def wait_signal(timeout_s: float) -> int | None:
    """The next blocked signal (forwarded ones and SIGCHLD), or None after ``timeout_s``."""
    info = signal.sigtimedwait(set(FORWARDED) | {signal.SIGCHLD}, max(0.0, timeout_s))
    return None if info is None else int(info.si_signo)


def send(pid: int, sig: int) -> bool:
    """Signal one process; False when it is gone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def send_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False when no process is left in it."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap() -> list[tuple[int, int]]:
    """Every child that has exited, as (pid, wait status); never blocks."""
    out: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return out
        except InterruptedError:
            continue
        if pid == 0:
            return out
        out.append((pid, status))


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    name: str
    zombie: bool


def _read_proc(pid: int) -> Proc | None:
    try:
        stat = (PROC / str(pid) / "stat").read_bytes().decode("utf-8", "replace")
    except OSError:
        return None
    # comm is in parentheses and may itself hold spaces and parentheses: split at the last ')'.
    head, _, rest = stat.rpartition(")")
    fields = rest.split()
    if len(fields) < 2:
        return None
    name = proc_name = head.partition("(")[2]
    with contextlib.suppress(OSError):
        args = [
            a.decode("utf-8", "replace") for a in (PROC / str(pid) / "cmdline").read_bytes().split(b"\0") if a
        ]
        if args:
            # vLLM renames its processes (setproctitle: "VLLM::EngineCore"): the title is argv[0]; for an
            # interpreter, the script and its first arguments say more
            shown = args[:4] if os.path.basename(args[0]).startswith("python") else args[:1]
            name = " ".join(
                [os.path.basename(shown[0]), *(os.path.basename(a) for a in shown[1:2]), *shown[2:]]
            )
            name = name[:80] or proc_name
    return Proc(pid, int(fields[1]), name, fields[0] == "Z")


def descendants(root: int | None = None) -> dict[int, Proc]:
    """Every process below ``root`` (default: this one), whatever its session or group (Linux /proc)."""
    if not PROC.is_dir():
        return {}
    me = os.getpid() if root is None else root
    procs: dict[int, Proc] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(PROC):
            if entry.name.isdigit():
                p = _read_proc(int(entry.name))
                if p is not None:
                    procs[p.pid] = p
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out: dict[int, Proc] = {}
    stack = list(children.get(me, []))
    while stack:
        pid = stack.pop()
        if pid in out:
            continue
        out[pid] = procs[pid]
        stack.extend(children.get(pid, []))
    return out


@dataclass(frozen=True)
class LeftBehind:
    """A process vLLM left running after it exited, and how it ended."""

    pid: int
    name: str
    ended: str  # "exited after SIGTERM", "killed (SIGKILL)", "still running"

    def to_json(self) -> dict[str, object]:
        return {"pid": self.pid, "name": self.name, "ended": self.ended}


def end_tree(
    grace_s: float,
    *,
    on_reaped: Callable[[int, int], None] | None = None,
    poll_s: float = 0.05,
    spare: Callable[[], frozenset[int]] | None = None,
) -> list[LeftBehind]:
    """Terminate and reap every descendant still alive: SIGTERM, ``grace_s``, then SIGKILL.

    Each process is signalled individually (they may sit in other sessions and groups); a process whose
    parent dies meanwhile is re-parented here (subreaper) and found on the next pass. ``spare``: processes
    left alone (the LMCache server, drained after vLLM's leftovers, :mod:`.cache_server`).
    """
    seen: dict[int, Proc] = {}
    termed: set[int] = set()
    killed: set[int] = set()
    deadline = time.monotonic() + grace_s
    hard_deadline = deadline + max(2.0, grace_s)
    while True:
        for pid, status in reap():
            if on_reaped is not None:
                on_reaped(pid, status)
        spared = spare() if spare is not None else frozenset()
        alive = {pid: p for pid, p in descendants().items() if not p.zombie and pid not in spared}
        for pid, p in alive.items():
            seen.setdefault(pid, p)
        if not alive and not any(p.zombie and pid not in spared for pid, p in descendants().items()):
            break
        now = time.monotonic()
        for pid in alive:
            if pid not in termed:
                send(pid, signal.SIGTERM)
                termed.add(pid)
            elif now >= deadline and pid not in killed:
                send(pid, signal.SIGKILL)
                killed.add(pid)
        if now >= hard_deadline:
            break
        time.sleep(poll_s)
    spared = spare() if spare is not None else frozenset()
    still = {pid for pid, p in descendants().items() if not p.zombie and pid not in spared}
    out: list[LeftBehind] = []
    for pid, p in sorted(seen.items()):
        if pid in still:
            ended = "still running"
        elif pid in killed:
            ended = "killed (SIGKILL)"
        else:
            ended = "exited after SIGTERM"
        out.append(LeftBehind(pid, p.name, ended))
    return out


def exit_like(code: int | None, sig: int | None) -> NoReturn:
    """End this process as vLLM ended: exit ``code``, or die by ``sig`` (128 + N where that cannot be)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    if sig is None:
        raise SystemExit(code if code is not None else 0)
    if os.getpid() != 1 and sig not in _NOT_FATAL:
        with contextlib.suppress(OSError, ValueError, ImportError):
            import resource

            # vLLM's crash is vLLM's: glmlaunch relaying a SIGSEGV/SIGABRT must not dump a core of itself.
            resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no disposition to reset
            signal.signal(sig, signal.SIG_DFL)
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        with contextlib.suppress(OSError):
            os.kill(os.getpid(), sig)
            time.sleep(1.0)  # a signal to oneself is delivered before kill() returns; not reached
    os._exit(128 + sig)


def status_of(status: int) -> tuple[int | None, int | None]:
    """(exit code, None) or (None, signal) from a wait status."""
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None
    return None, None


def describe_status(code: int | None, sig: int | None) -> str:
    """``exit N`` or ``signal N (NAME)``: how a process ended, in the words outcome.json and the log use."""
    if sig is not None:
        return f"signal {sig} ({signal_name(sig)})"
    return f"exit {code}"
