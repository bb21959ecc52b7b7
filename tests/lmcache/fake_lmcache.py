#!/usr/bin/env python3
"""A stand-in for ``lmcache server`` that keeps the contract glmlaunch and vLLM rely on.

The real server (``lmcache server --host H --port P … --http-port HP``) listens for vLLM's
``LMCacheMPConnector`` on ``H:P`` (ZMQ over TCP), answers ``GET /healthcheck`` on ``127.0.0.1:HP`` and logs
``LMCache ZMQ cache server is running`` once it listens; on SIGTERM it stops its workers and exits 0. This
stand-in does the same with plain sockets (a TCP listener that accepts and holds connections, an HTTP
server), and has one worker child in its own process group, as the server's GPU workers are.

Environment (all optional):

* ``FAKE_LMCACHE_READY``: ``both`` (default), ``http`` (health endpoint only, no ready line), ``line``
  (ready line only, no HTTP server), ``never`` (listens nowhere and logs no ready line, as a server stuck in
  its start-up);
* ``FAKE_LMCACHE_DELAY_S``: seconds before it listens (default 0.2);
* ``FAKE_LMCACHE_CRASH``: ``start`` (exit 1 with a traceback before it listens);
* ``FAKE_LMCACHE_IGNORE_TERM=1``: SIGTERM is ignored (a drain that never ends: only SIGKILL stops it);
* ``FAKE_LMCACHE_HOLD_MIB``: with torch importable and a GPU, allocate this much CUDA memory in the
  worker (the device run: bench/supervise_gpu_lmcache.sh);
* ``FAKE_LMCACHE_RECORD``: a directory; the server writes ``lmcache-<pid>.json`` there (argv, pid, pgid,
  sid, the worker's pid, the environment's LMCACHE_/PYTORCH_ names, when it listened) and appends every
  signal it receives and every connection it accepts to ``lmcache-events-<pid>`` (monotonic time first).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RECORD = os.environ.get("FAKE_LMCACHE_RECORD")
READY_TEXT = "LMCache ZMQ cache server is running"


def event(text: str) -> None:
    if RECORD:
        with open(os.path.join(RECORD, f"lmcache-events-{os.getpid()}"), "a") as fh:
            fh.write(f"{time.monotonic():.6f} {text}\n")


def worker_main() -> None:
    """A GPU worker: holds its memory until its parent goes or it is told to stop."""
    hold = int(os.environ.get("FAKE_LMCACHE_HOLD_MIB", "0") or 0)
    held = None
    if hold:
        import torch  # the device run only

        held = torch.empty(hold * 2**20, dtype=torch.uint8, device="cuda")
        held.fill_(1)
        torch.cuda.synchronize()
    parent = os.getppid()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    fd = int(os.environ.pop("FAKE_LMCACHE_READY_FD"))
    os.write(fd, b"u")  # up, its memory held: the server listens only now, as the real one registers first
    os.close(fd)
    sys.stdout.write(
        f"worker {os.getpid()}: up{f', holding {hold} MiB on cuda' if held is not None else ''}\n"
    )
    sys.stdout.flush()
    while os.getppid() == parent:
        time.sleep(0.05)


class Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/healthcheck":
            body = b'{"status":"healthy"}'
            self.send_response(200)
        else:
            body = b"not found"
            self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        worker_main()
        return
    parser = argparse.ArgumentParser(prog="lmcache")
    parser.add_argument("command", choices=["server"])
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--chunk-size", type=int, required=True)
    parser.add_argument("--max-gpu-workers", type=int, required=True)
    args, _rest = parser.parse_known_args()
    ready = os.environ.get("FAKE_LMCACHE_READY", "both")
    stopping = threading.Event()

    def on_term(sig: int, _frame: object) -> None:
        event(f"signal {signal.Signals(sig).name}")
        if os.environ.get("FAKE_LMCACHE_IGNORE_TERM") == "1":
            return
        stopping.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    print(f"[fake lmcache] starting: {' '.join(sys.argv[1:])}", flush=True)
    r, w = os.pipe()
    worker = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--worker"],
        process_group=0,
        pass_fds=(w,),
        env={**os.environ, "FAKE_LMCACHE_READY_FD": str(w)},
    )
    os.close(w)
    if os.read(r, 1) != b"u":
        print("RuntimeError: fake lmcache: the worker did not come up", flush=True)
        sys.exit(1)
    os.close(r)
    time.sleep(float(os.environ.get("FAKE_LMCACHE_DELAY_S", "0.2")))
    if os.environ.get("FAKE_LMCACHE_CRASH") == "start":
        print("Traceback (most recent call last):", flush=True)
        print('  File "lmcache/v1/multiprocess/server.py", line 1, in <module>', flush=True)
        print("RuntimeError: fake lmcache: cannot register the L1 arena (pinned memory)", flush=True)
        worker.terminate()
        worker.wait()
        sys.exit(1)
    facts: dict[str, object] = {
        "argv": sys.argv,
        "pid": os.getpid(),
        "pgid": os.getpgrp(),
        "sid": os.getsid(0),
        "worker_pid": worker.pid,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("LMCACHE_", "PYTORCH_", "CUDA_"))},
    }
    conns: list[socket.socket] = []
    if ready != "never":
        listener = socket.create_server((args.host, args.port))

        def accept() -> None:
            while True:
                conn, peer = listener.accept()
                conns.append(conn)
                event(f"connection from {peer[0]}:{peer[1]}")

        threading.Thread(target=accept, daemon=True).start()
        if ready in ("both", "http"):
            http = ThreadingHTTPServer(("127.0.0.1", args.http_port), Health)
            threading.Thread(target=http.serve_forever, daemon=True).start()
        facts["listening_at"] = time.monotonic()
        if ready in ("both", "line"):
            print(f"[fake lmcache] {READY_TEXT} on {args.host}:{args.port}", flush=True)
    if RECORD:
        with open(os.path.join(RECORD, f"lmcache-{os.getpid()}.json"), "w") as fh:
            json.dump(facts, fh)
    while not stopping.wait(0.05):
        pass
    print("[fake lmcache] SIGTERM: stopping the workers", flush=True)
    worker.terminate()
    worker.wait()
    print("[fake lmcache] stopped", flush=True)
    event("exit 0")


if __name__ == "__main__":
    main()
