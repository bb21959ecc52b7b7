"""The managed LMCache server beside vLLM: started first, waited for, watched while vLLM runs, drained last.

The lifecycle is upstream's wrapper's (malaiwah/glm52-exl3-vast@eba43a5:scripts/glm52_lmcache_wrapper.sh
L92-152; local-inference-lab/blackwell-llm-docker@3dd078a:launchers/lmcache-mp-wrapper.sh L284-370), run
with the supervisor's own process code (:mod:`.process`):

* :func:`start`: the server in its own session and process group, with the parent-death signal vLLM
  gets (should glmlaunch die, the server is asked to stop too); its stdout and stderr, masked line by line,
  into the boot directory's ``lmcache.log`` (0600; at most :data:`LOG_CAP` bytes, then the rest is read
  and dropped so the server never blocks on a full pipe);
* :func:`wait_ready`: every :data:`POLL_S`, ``/healthcheck`` or the ready line, until the start timeout
  (``GLMLAUNCH_LMCACHE_START_TIMEOUT``, the wrappers' ``LMCACHE_START_TIMEOUT``); a stopping signal meanwhile
  ends the wait, other signals are not passed on (vLLM is not running yet, and most would end the server);
* :func:`drain`: SIGTERM to the server (the wrappers' ``kill -TERM "$cache_pid"``), a grace, then SIGKILL to
  its process group; whatever it left behind is ended and reaped as vLLM's leftovers are.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from glmlaunch.config.units import MIB
from glmlaunch.lmcache.command import ServerCommand
from glmlaunch.lmcache.probe import LogScan, healthy, root_cause, tail
from glmlaunch.output import known_secrets
from glmlaunch.supervise import process
from glmlaunch.supervise.stream import open_private

LOG_CAP = 64 * MIB
POLL_S = 0.2
#: from SIGTERM to SIGKILL when the server is drained (kept inside GLMLAUNCH_STOP_GRACE as vLLM's step is)
DRAIN_S = 10.0
#: lines of the server's log shown on stderr when it fails
TAIL_LINES = 40

Waited = Literal["ready", "exited", "timeout", "signal"]


@dataclass
class LogCopy:
    """The server's output, masked line by line, into its private log file (on a thread)."""

    fd: int
    path: Path
    cap: int = LOG_CAP
    written: int = 0
    capped: bool = False
    _thread: threading.Thread | None = None
    _out: int | None = None

    def start(self) -> None:
        self._out = open_private(self.path)
        self._thread = threading.Thread(target=self._run, name="glmlaunch-lmcache-log", daemon=True)
        self._thread.start()

    def _write(self, data: bytes) -> None:
        if self.capped or self._out is None:
            return
        if self.written + len(data) > self.cap:
            self.capped = True
            data = b"[glmlaunch: lmcache.log capped here; the rest of the server's output was not kept]\n"
        view = memoryview(data)
        while view:
            view = view[os.write(self._out, view) :]
        self.written += len(data)

    def _line(self, raw: bytes, secrets: list[str]) -> None:
        text = raw.decode("utf-8", "replace")
        for secret in secrets:
            if secret in text:
                text = text.replace(secret, "****")
        self._write(text.encode())

    def _run(self) -> None:
        secrets = known_secrets()
        partial = b""
        try:
            while True:
                try:
                    chunk = os.read(self.fd, 65536)
                except InterruptedError:
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                data = partial + chunk
                *lines, partial = data.split(b"\n")
                for line in lines:
                    self._line(line + b"\n", secrets)
                if len(partial) > 256 * 1024:
                    self._line(partial, secrets)
                    partial = b""
            if partial:
                self._line(partial, secrets)
        finally:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            if self._out is not None:
                with contextlib.suppress(OSError):
                    os.close(self._out)

    def join(self, timeout_s: float) -> bool:
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


@dataclass
class CacheServer:
    """A started server: its process, its log, and what became of it."""

    command: ServerCommand
    child: process.Child
    log: LogCopy
    ready_s: float | None = None
    ready_by: str | None = None
    #: its wait status once reaped, and when (seconds after its start)
    status: int | None = None
    ended_s: float | None = None
    #: it died while vLLM ran (the boot's root cause)
    died_while_serving: bool = False
    ended: str | None = None  # "exited after SIGTERM", "killed (SIGKILL)", "died: exit 1"
    left_behind: list[process.LeftBehind] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.child.pid

    @property
    def alive(self) -> bool:
        return self.status is None

    def tree(self) -> frozenset[int]:
        """The server and everything below it (a subreaper's /proc view)."""
        return frozenset({self.pid, *process.descendants(self.pid)}) if self.alive else frozenset()

    def reaped(self, status: int) -> None:
        self.status = status
        self.ended_s = round(time.monotonic() - self.child.started, 3)
        self.child.popen.returncode = _returncode(status)

    def how(self) -> str:
        """``exit N`` / ``signal N (NAME)``; ``running`` before it was reaped."""
        if self.status is None:
            return "running"
        return process.describe_status(*process.status_of(self.status))

    def tail(self, lines: int = TAIL_LINES) -> list[str]:
        self.log.join(2.0)
        return tail(self.log.path, lines)

    def cause(self) -> str | None:
        return root_cause(self.tail(200))

    def to_json(self) -> dict[str, object]:
        code, sig = process.status_of(self.status) if self.status is not None else (None, None)
        return {
            "pid": self.pid,
            "command": self.command.command_line(),
            "endpoint": self.command.endpoint.to_json(),
            "source": self.command.source,
            "ready_s": self.ready_s,
            "ready_by": self.ready_by,
            "exit": None
            if self.status is None
            else {"code": code, "signal": sig, "status": process.describe_status(code, sig)},
            "ended_s": self.ended_s,
            "ended": self.ended,
            "died_while_serving": self.died_while_serving,
            "left_behind": [p.to_json() for p in self.left_behind],
            "log": self.command.log_name,
            "log_bytes": self.log.written,
            "log_capped": self.log.capped,
        }


def _returncode(status: int) -> int | None:
    code, sig = process.status_of(status)
    return -sig if sig is not None else code


def start(command: ServerCommand, boot_dir: Path) -> CacheServer:
    """Spawn the server (raises OSError when it cannot be executed) with its log copied into the boot."""
    if command.l2_path is not None:
        # the wrappers' mkdir -p of the disk tier (appliance L63, release L151); private like the cache
        Path(command.l2_path).mkdir(parents=True, exist_ok=True, mode=0o700)
    r, w = os.pipe()
    try:
        child = process.spawn(command.argv, command.env, stdout=w, stderr=w)
    except OSError:
        os.close(r)
        os.close(w)
        raise
    os.close(w)
    log = LogCopy(r, boot_dir / command.log_name)
    log.start()
    return CacheServer(command, child, log)


def wait_ready(
    server: CacheServer,
    *,
    on_reaped: Callable[[int, int], None] | None = None,
) -> tuple[Waited, int | None]:
    """Wait until the server is ready, exited, the start timeout passed, or a stopping signal came."""
    scan = LogScan(server.log.path, server.command.ready_text)
    url = server.command.endpoint.health_url
    deadline = server.child.started + server.command.start_timeout_s
    while True:
        for pid, status in process.reap():
            if pid == server.pid:
                server.reaped(status)
            elif on_reaped is not None:
                on_reaped(pid, status)
        if not server.alive:
            return "exited", None
        if healthy(url):
            server.ready_by = "healthcheck"
        elif scan.seen():
            server.ready_by = "log line"
        if server.ready_by is not None:
            server.ready_s = round(time.monotonic() - server.child.started, 3)
            return "ready", None
        now = time.monotonic()
        if now >= deadline:
            return "timeout", None
        sig = process.wait_signal(min(POLL_S, deadline - now))
        if sig is not None and sig in process.STOPPING:
            return "signal", sig


def drain_grace(stop_grace_s: float | None) -> float:
    return DRAIN_S if stop_grace_s is None else min(DRAIN_S, max(0.5, stop_grace_s / 4))


def drain(
    server: CacheServer,
    grace_s: float,
    *,
    on_reaped: Callable[[int, int], None] | None = None,
    poll_s: float = 0.05,
) -> None:
    """SIGTERM, ``grace_s``, then SIGKILL to its group; then its leftovers ended and reaped."""
    if server.alive:
        process.send(server.pid, signal.SIGTERM)
        killed = False
        deadline = time.monotonic() + grace_s
        hard = deadline + 5.0
        while server.alive:
            for pid, status in process.reap():
                if pid == server.pid:
                    server.reaped(status)
                elif on_reaped is not None:
                    on_reaped(pid, status)
            if not server.alive:
                break
            now = time.monotonic()
            if now >= deadline and not killed:
                process.send_group(server.child.pgid, signal.SIGKILL)
                killed = True
            if now >= hard:
                break
            time.sleep(poll_s)
        if server.alive:
            server.ended = "still running"
        else:
            server.ended = "killed (SIGKILL)" if killed else f"exited after SIGTERM ({server.how()})"
    elif server.ended is None:
        server.ended = f"had ended: {server.how()}"
    if not process.LINUX:  # no subreaper: its group is all glmlaunch can still reach
        process.send_group(server.child.pgid, signal.SIGKILL)
    # what it left (re-parented to glmlaunch, the subreaper): SIGTERM, then SIGKILL, as vLLM's leftovers
    server.left_behind = process.end_tree(min(grace_s, 5.0), on_reaped=on_reaped)
    server.log.join(5.0)
