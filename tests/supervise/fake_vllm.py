#!/usr/bin/env python3
"""A stand-in for ``vllm serve`` that replays a real boot log: for ``glmlaunch serve --supervise`` tests.

It behaves as the parts of vLLM the supervisor deals with do: an API server process that writes the log,
an EngineCore child in its process group, and two workers under the engine, one of them in a session of
its own (so only a subreaper finds it once its parent is gone). The log's lines are written byte for byte
to stdout, one write per line, with the pauses between the log's own timestamps compressed.

Environment (all optional but the log):

* ``FAKE_VLLM_LOG``: the boot log to replay.
* ``FAKE_VLLM_SPEED``: log seconds per real second (default 5000); a pause never exceeds 0.05 s.
* ``FAKE_VLLM_THEN``: what the API server does after the replay: ``serve`` (default: wait for a signal),
  ``exit:N`` (exit N, stopping its children first), ``sigkill`` (die by SIGKILL at once, children left
  running: vllm issue 55510), ``engine-error`` (write an engine's fatal error, then exit 0: vllm issue
  48966).
* ``FAKE_VLLM_AT``: ``end`` (default: after the whole log) or ``ready`` (right after the ready line).
* ``FAKE_VLLM_ORPHANS``: ``1``: the children do not notice their parent's death and outlive it;
  ``stubborn``: they also ignore SIGTERM (only SIGKILL ends them).
* ``FAKE_VLLM_IGNORE_TERM=1``: the API server ignores SIGTERM (a drain that never ends).
* ``FAKE_VLLM_DRAIN_S``: seconds the SIGTERM drain takes (default 0.2).
* ``FAKE_VLLM_RECORD``: a directory; each process writes ``<role>-<pid>.json`` there (its pid, parent,
  session, whether stdout is a terminal) and appends every signal it receives to ``signals-<pid>``.

With ``--kv-transfer-config`` (an LMCache connector) in its arguments, the API server connects to the
LMCache server the connector names before it writes a line of the log, as vLLM's ``LMCacheMPConnector``
does at engine start-up, long before the ready line; no server there: an error line and exit 1. It records
when it connected (``lmcache_connected_at``, monotonic) and holds the connection while it runs.

On SIGTERM (``serve``), the API server writes its drain to stderr (stdout stays the log), asks the
engine to stop (the engine stops its workers), waits for them and exits 0, as vLLM's shutdown does.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime

STAMP = re.compile(rb" ([0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.[0-9]+)? \[")
READY = b"Application startup complete"
RECORD = os.environ.get("FAKE_VLLM_RECORD")
ORPHANS = os.environ.get("FAKE_VLLM_ORPHANS", "")
ROLE = "api"
CHILDREN: list[subprocess.Popen[bytes]] = []


def record(**facts: object) -> None:
    if not RECORD:
        return
    facts.update(
        role=ROLE,
        pid=os.getpid(),
        ppid=os.getppid(),
        pgid=os.getpgrp(),
        sid=os.getsid(0),
        stdout_tty=os.isatty(1),
        argv=sys.argv,
    )
    with open(os.path.join(RECORD, f"{ROLE}-{os.getpid()}.json"), "w") as fh:
        json.dump(facts, fh)


def note_signal(sig: int) -> None:
    if RECORD:
        with open(os.path.join(RECORD, f"signals-{os.getpid()}"), "a") as fh:
            fh.write(signal.Signals(sig).name + "\n")


def spawn(role: str, *, new_session: bool = False) -> subprocess.Popen[bytes]:
    """Start a child and wait until it is up (as vLLM waits for its engine and workers)."""
    r, w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--role", role],
        start_new_session=new_session,
        pass_fds=(w,),
        env={**os.environ, "FAKE_VLLM_READY_FD": str(w)},
    )
    os.close(w)
    os.read(r, 1)
    os.close(r)
    CHILDREN.append(proc)
    return proc


def up() -> None:
    fd = int(os.environ.pop("FAKE_VLLM_READY_FD"))
    os.write(fd, b"u")
    os.close(fd)


def stop_children() -> None:
    if ORPHANS and ROLE == "api":
        return  # the API server goes without its engine and workers (vllm issue 55510)
    for child in CHILDREN:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGTERM)
    for child in CHILDREN:
        child.wait()


def child_main(role: str) -> None:
    """EngineCore or a worker: hold on (as if holding GPU memory) until told to stop."""
    global ROLE
    ROLE = role
    parent = os.getppid()

    def on_term(sig: int, _frame: object) -> None:
        note_signal(sig)
        if ORPHANS == "stubborn":
            return
        stop_children()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    if role == "engine":
        spawn("worker0")
        spawn("worker1", new_session=True)  # another session: found only by a subreaper
    record()
    up()
    while True:
        time.sleep(0.05)
        if not ORPHANS and os.getppid() != parent:
            # vLLM's workers and engine exit when their parent is gone
            stop_children()
            raise SystemExit(0)


def pauses(lines: list[bytes], speed: float) -> list[float]:
    out, last = [], None
    for line in lines:
        m = STAMP.search(line)
        pause = 0.0
        if m:
            when = datetime.strptime("2026-" + m.group(1).decode(), "%Y-%m-%d %H:%M:%S")
            if last is not None:
                pause = min(max(0.0, (when - last).total_seconds() / speed), 0.05)
            last = when
        out.append(pause)
    return out


def then(action: str) -> None:
    out = sys.stdout.buffer
    if action == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "engine-error":
        out.write(
            b"(EngineCore pid=4242) ERROR 07-31 12:00:00 [core.py:1017]"
            b" EngineCore encountered a fatal error.\n"
            b"(APIServer pid=4241) ERROR 07-31 12:00:00 [async_llm.py:480] AsyncLLM output_handler failed.\n"
            b"(APIServer pid=4241) vllm.v1.engine.exceptions.EngineDeadError:"
            b" EngineCore encountered an issue. See stack trace (above) for the root cause.\n"
        )
        out.flush()
        stop_children()
        raise SystemExit(0)
    if action.startswith("exit:"):
        stop_children()
        raise SystemExit(int(action.split(":", 1)[1]))
    while True:  # serve: until a signal
        time.sleep(0.1)


def connect_lmcache() -> dict[str, object] | None:
    """Connect to the LMCache server ``--kv-transfer-config`` names, as vLLM's connector does."""
    if "--kv-transfer-config" not in sys.argv:
        return None
    conf = json.loads(sys.argv[sys.argv.index("--kv-transfer-config") + 1])
    extra = conf["kv_connector_extra_config"]
    host, port = str(extra["lmcache.mp.host"]).removeprefix("tcp://"), int(extra["lmcache.mp.port"])
    try:
        sock = socket.create_connection((host, port), timeout=2.0)
    except OSError as exc:
        sys.stderr.write(
            f"(EngineCore pid={os.getpid()}) ERROR [lmcache_mp_connector.py] ConnectionRefusedError: "
            f"no LMCache server at tcp://{host}:{port}: {exc}\n"
        )
        sys.stderr.flush()
        raise SystemExit(1) from None
    CONNECTIONS.append(sock)
    return {"host": host, "port": port, "connected_at": time.monotonic()}


CONNECTIONS: list[socket.socket] = []


def api_main() -> None:
    drain_s = float(os.environ.get("FAKE_VLLM_DRAIN_S", "0.2"))

    def on_term(sig: int, _frame: object) -> None:
        note_signal(sig)
        if os.environ.get("FAKE_VLLM_IGNORE_TERM") == "1":
            return
        sys.stderr.write(f"fake vllm: {signal.Signals(sig).name}: draining for {drain_s} s\n")
        sys.stderr.flush()
        time.sleep(drain_s)
        stop_children()
        sys.stderr.write("fake vllm: drained, exiting 0\n")
        sys.stderr.flush()
        if RECORD:  # when the drain ended (monotonic): what a supervisor does after it comes later
            with open(os.path.join(RECORD, f"drained-{os.getpid()}"), "w") as fh:
                fh.write(f"{time.monotonic():.6f}\n")
        os._exit(0)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_term)
    for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH):
        signal.signal(sig, lambda s, _f: note_signal(s))
    lmcache = connect_lmcache()
    spawn("engine")
    record(
        env={k: v for k, v in os.environ.items() if k.startswith(("CUDA_", "VLLM_", "HF_", "PYTORCH_"))},
        lmcache=lmcache,
    )
    with open(os.environ["FAKE_VLLM_LOG"], "rb") as fh:
        lines = fh.read().split(b"\n")
    body = [line + b"\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    speed = float(os.environ.get("FAKE_VLLM_SPEED", "5000"))
    action = os.environ.get("FAKE_VLLM_THEN", "serve")
    at_ready = os.environ.get("FAKE_VLLM_AT", "end") == "ready"
    out = sys.stdout.buffer
    for line, pause in zip(body, pauses(body, speed), strict=True):
        if pause:
            time.sleep(pause)
        out.write(line)
        out.flush()
        if at_ready and READY in line:
            then(action)
    then(action)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--role":
        child_main(sys.argv[2])
    else:
        api_main()
