#!/usr/bin/env python3
"""A stand-in for ``vllm serve`` that holds real GPU memory: the process tree of vllm issue 55510.

Run by ``bench/supervise_gpu.sh`` through ``GLMLAUNCH_VLLM_BIN`` (``glmlaunch serve --supervise``). The
API server process holds no GPU memory; it starts an "EngineCore" in a session of its own, which takes
``STANDIN_ENGINE_GIB`` GiB on ``cuda:0`` with torch and starts a "worker" (another session) that takes
``STANDIN_WORKER_GIB`` GiB. Neither watches its parent: when the API server is killed with SIGKILL they
keep the GPU memory, as vLLM's EngineCore and workers did in the reports. The API server then writes
``Application startup complete.`` (the supervisor's ready line) and its pid to ``STANDIN_PIDFILE``, and
waits. ``STANDIN_DEVICE=cpu`` takes host memory instead (to try the harness without a GPU).

With an LMCache connector in its arguments (``--kv-transfer-config``, bench/supervise_gpu_lmcache.sh), the
API server first connects to the LMCache server it names, as vLLM's connector does at start-up, and exits 1
when nothing listens there; it writes when it connected to ``STANDIN_PIDFILE``'s directory
(``lmcache-connected``, monotonic seconds).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

ROLE = sys.argv[2] if len(sys.argv) >= 3 and sys.argv[1] == "--role" else "api"
# The worker is not named like vLLM's (Worker_TP0): its lines must not read as a rank's memory lines.
PREFIX = {"api": "APIServer", "engine": "EngineCore", "worker": "GpuHolder"}[ROLE]


def say(text: str) -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    sys.stdout.write(f"({PREFIX} pid={os.getpid()}) INFO {stamp} [standin.py:1] {text}\n")
    sys.stdout.flush()


def child(role: str) -> None:
    """Start ``role`` in a new session and wait until it holds its memory."""
    r, w = os.pipe()
    subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--role", role],
        start_new_session=True,
        pass_fds=(w,),
        env={**os.environ, "STANDIN_READY_FD": str(w)},
    )
    os.close(w)
    if os.read(r, 1) != b"u":
        raise SystemExit(f"{role} did not come up")
    os.close(r)


def hold(gib: float) -> object:
    device = os.environ.get("STANDIN_DEVICE", "cuda")
    if device == "cpu":
        return bytearray(int(gib * 2**30))
    import torch

    block = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda:0")
    block.fill_(1)
    torch.cuda.synchronize()
    return block


CONNECTED: list[socket.socket] = []


def connect_lmcache() -> None:
    if "--kv-transfer-config" not in sys.argv:
        return
    extra = json.loads(sys.argv[sys.argv.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]
    host, port = str(extra["lmcache.mp.host"]).removeprefix("tcp://"), int(extra["lmcache.mp.port"])
    try:
        CONNECTED.append(socket.create_connection((host, port), timeout=2.0))
    except OSError as exc:
        say(f"ERROR no LMCache server at tcp://{host}:{port}: {exc}")
        raise SystemExit(1) from None
    where = os.path.join(os.path.dirname(os.environ["STANDIN_PIDFILE"]), "lmcache-connected")
    with open(where, "w") as fh:
        fh.write(f"{time.monotonic():.6f} {host}:{port}\n")
    say(f"connected to the LMCache server at tcp://{host}:{port}")


def main() -> None:
    if ROLE == "api":
        say("vLLM API server version standin (a torch stand-in, glmlaunch bench/supervise_gpu.sh)")
        connect_lmcache()
        child("engine")
        say("Starting vLLM server on http://0.0.0.0:8000")
        sys.stdout.write(f"({PREFIX} pid={os.getpid()}) INFO:     Application startup complete.\n")
        sys.stdout.flush()
        with open(os.environ["STANDIN_PIDFILE"], "w") as fh:
            fh.write(str(os.getpid()))
        while True:
            time.sleep(1)
    gib = float(os.environ.get("STANDIN_ENGINE_GIB" if ROLE == "engine" else "STANDIN_WORKER_GIB", "8"))
    held = hold(gib)
    say(f"holding {gib:g} GiB on {os.environ.get('STANDIN_DEVICE', 'cuda')}:0")
    if ROLE == "engine":
        child("worker")
    fd = int(os.environ.pop("STANDIN_READY_FD"))
    os.write(fd, b"u")
    os.close(fd)
    while held is not None:  # no parent watch: an orphan keeps its memory
        time.sleep(1)


if __name__ == "__main__":
    main()
