#!/usr/bin/env python3
"""A hostile stand-in for ``vllm serve``: it floods its output, as fast as a pipe takes it.

For the supervisor's flood and signal tests (tests/supervise/test_flood.py) and the fuzz suite. Environment:

* ``FLOOD_KIND``: ``lines`` (default: 100-byte lines, numbered), ``oom`` (distinct CUDA OOM lines, as a
  worker logs them), ``binary`` (random bytes, a fixed seed), ``long`` (one line without a newline),
  ``secret`` (``FLOOD_SECRET`` placed across the supervisor's 256 KiB cut of a long line);
* ``FLOOD_BYTES``: how much (default 64 MiB; ``oom``: ``FLOOD_LINES`` lines, default 20,000);
* ``FLOOD_READY=1``: vLLM's ready line first (the flood goes to serve.log);
* ``FLOOD_THEN``: ``exit`` (default: exit 0 after the last line), ``wait`` (wait for a signal; SIGTERM
  ends it at once with 0), ``midline`` (exit 0 in the middle of a line);
* ``FLOOD_LAST``: the last line written (default ``the last line of the flood``);
* ``FLOOD_DONE``: a file that gets ``time.monotonic()`` once the last byte is written
  (bench/supervise_flood.py measures the drain after vLLM's exit from it).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time

KIND = os.environ.get("FLOOD_KIND", "lines")
TOTAL = int(os.environ.get("FLOOD_BYTES", str(64 * 2**20)))
THEN = os.environ.get("FLOOD_THEN", "exit")
LAST = os.environ.get("FLOOD_LAST", "the last line of the flood").encode()
PID = os.getpid()
OUT = sys.stdout.buffer


def on_term(signum: int, frame: object) -> None:
    os._exit(0)


def write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def done() -> None:
    if os.environ.get("FLOOD_DONE"):
        with open(os.environ["FLOOD_DONE"], "w") as fh:
            fh.write(repr(time.monotonic()))


def lines() -> None:
    written, n = 0, 0
    while written < TOTAL:
        block = b"".join(
            f"(Worker_TP0 pid={PID}) INFO 12-04 04:00:00 [flood.py:1] line {n + i:012d} {'x' * 40}\n".encode()
            for i in range(1000)
        )
        write(block)
        written += len(block)
        n += 1000


def oom() -> None:
    count = int(os.environ.get("FLOOD_LINES", "20000"))
    for start in range(0, count, 500):
        write(
            b"".join(
                f"(Worker_TP0 pid={PID}) ERROR 12-04 04:00:00 [multiproc_executor.py:839]"
                " torch.OutOfMemoryError:"
                f" CUDA out of memory. Tried to allocate {i + 1}.00 MiB. GPU 0 has a total capacity of"
                f" 94.97 GiB of which {i % 97}.00 MiB is free.\n".encode()
                for i in range(start, min(count, start + 500))
            )
        )


def binary() -> None:
    rng = random.Random(31)
    written = 0
    while written < TOTAL:
        block = rng.randbytes(65536)
        write(block)
        written += len(block)


def long_line() -> None:
    written = 0
    block = b"y" * 65536
    while written < TOTAL:
        write(block)
        written += len(block)


def secret() -> None:
    # The supervisor cuts a line without a newline once it holds more than 256 KiB of it: at the read
    # that brings byte 256 Ki + 1, which is inside the secret's first half here; the rest comes later.
    value = os.environ["FLOOD_SECRET"].encode()
    half = len(value) // 2
    write(b"z" * (256 * 1024 - 10) + value[:half])
    time.sleep(0.5)
    write(value[half:] + b" after the secret")


def main() -> None:
    signal.signal(signal.SIGTERM, on_term)
    if os.environ.get("FLOOD_READY") == "1":
        write(
            f"(APIServer pid={PID}) INFO 12-04 04:00:00 [launcher.py:1]"
            " Application startup complete.\n".encode()
        )
    {"lines": lines, "oom": oom, "binary": binary, "long": long_line, "secret": secret}[KIND]()
    if THEN == "midline":
        write(b"cut off in the middle of a li")
        done()
        os._exit(0)
    write(b"\n" + LAST + b"\n")
    done()
    if THEN == "wait":
        while True:
            signal.pause()


if __name__ == "__main__":
    main()
