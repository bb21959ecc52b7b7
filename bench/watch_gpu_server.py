#!/usr/bin/env python3
"""A serve-like torch process for issue 21's GPU run (bench/WATCH.md): real GPU memory in vLLM's pattern.

It takes the device memory a planned deployment holds after startup (``--resident``, NVML ``used`` terms:
``T - free`` as ``cudaMemGetInfo`` reads it), writing vLLM's ready line to stdout once it holds it, then
does what its ``--scenario`` says, each step a real torch allocation on cuda:0, kept (the caching
allocator keeps what a freed tensor held, as it does in vLLM), each step said on stdout:

* ``clean``: the long prefill's transients as the plan sizes them (``--transient BYTES``, repeatable, in
  firing order), then the same again (requests reuse the cached memory): the plan's own behaviour;
* ``leak``: ``--step`` bytes every ``--every`` seconds, for ``--steps`` steps: a slow leak;
* ``idle``: nothing after ready (the foreign scenario's deployment: the other process comes from outside);
* ``prefill``: startup takes ``--excess`` more than the plan, then prefill chunks of ``--step`` bytes,
  ``--steps`` of them: a long prefill eating the margin;
* ``oom``: chunks of ``--step`` bytes every ``--every`` seconds until CUDA says out of memory: its message
  goes to stdout the way vLLM's worker writes it, and the process exits 1.

``--role foreign``: a process outside the deployment: after ``--after`` seconds it holds ``--step`` bytes,
``--steps`` times ``--every`` seconds apart, holds them ``--hold`` seconds, and exits.

Run by bench/watch_gpu.py on the GPU machine; needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime

GIB = 1 << 30
MIB = 1 << 20
CHUNK = 4 * GIB


def say(process: str, level: str, text: str) -> None:
    stamp = datetime.now(UTC).strftime("%m-%d %H:%M:%S")
    sys.stdout.write(f"({process} pid={os.getpid()}) {level} {stamp} [watch_gpu_server.py] {text}\n")
    sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=("server", "foreign"), default="server")
    ap.add_argument("--scenario", choices=("clean", "leak", "idle", "prefill", "oom"), default="idle")
    ap.add_argument("--resident", type=int, default=0, help="bytes the deployment holds at ready (NVML used)")
    ap.add_argument("--excess", type=int, default=0, help="bytes more than --resident at ready")
    ap.add_argument("--transient", type=int, action="append", default=[])
    ap.add_argument("--step", type=int, default=64 * MIB)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--every", type=float, default=1.0)
    ap.add_argument("--after", type=float, default=0.0)
    ap.add_argument("--hold", type=float, default=10.0)
    ap.add_argument("--settle", type=float, default=4.0, help="seconds between ready and the scenario")
    args = ap.parse_args()

    if args.role == "foreign":
        time.sleep(args.after)  # before CUDA starts: no context of its own on the GPU until then
    import torch

    torch.cuda.init()
    kept: list[torch.Tensor] = []

    def take(n: int) -> None:
        kept.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()

    def used() -> int:
        free, total = torch.cuda.mem_get_info()
        return int(total - free)

    if args.role == "foreign":
        for i in range(args.steps):
            take(args.step)
            say("Foreign", "INFO", f"foreign step {i + 1}: holding {(i + 1) * args.step / GIB:.2f} GiB")
            time.sleep(args.every)
        time.sleep(args.hold)
        say("Foreign", "INFO", "foreign process exits")
        return 0

    say("APIServer", "INFO", f"scenario {args.scenario}: loading to {args.resident + args.excess:,} B")
    target = args.resident + args.excess
    while target - used() > CHUNK:  # "weights", then the pools: in chunks, as a load is seen
        take(CHUNK)
        time.sleep(0.05)
    rest = (target - used()) // (2 * MIB) * (2 * MIB)
    if rest > 0:
        take(rest)
    say("Worker_TP0", "INFO", f"resident {used():,} B (target {target:,} B)")
    say("APIServer", "INFO", "Starting vLLM API server 0 on http://0.0.0.0:8000")
    sys.stdout.write(f"(APIServer pid={os.getpid()}) INFO:     Application startup complete.\n")
    sys.stdout.flush()
    time.sleep(args.settle)

    try:
        if args.scenario == "clean":
            for request in (1, 2):
                scratch = []
                for n in args.transient:
                    scratch.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
                    torch.cuda.synchronize()
                    time.sleep(0.3)
                say("Worker_TP0", "INFO", f"long prefill {request} done; used {used():,} B")
                del scratch  # freed, and cached: NVML's used stays at the high-water mark
                time.sleep(args.hold)
        elif args.scenario in ("leak", "prefill"):
            for i in range(args.steps):
                take(args.step)
                say("Worker_TP0", "INFO", f"{args.scenario} step {i + 1}: used {used():,} B")
                time.sleep(args.every)
            time.sleep(args.hold)
        elif args.scenario == "oom":
            i = 0
            while True:
                take(args.step)
                i += 1
                say("Worker_TP0", "INFO", f"prefill chunk {i}: used {used():,} B")
                time.sleep(args.every)
        else:
            time.sleep(args.hold)
    except torch.OutOfMemoryError as exc:
        message = " ".join(str(exc).split())
        say("Worker_TP0", "ERROR", f"torch.OutOfMemoryError: {message}")
        return 1
    say("APIServer", "INFO", "scenario done; exiting")
    return 0


if __name__ == "__main__":
    sys.exit(main())
