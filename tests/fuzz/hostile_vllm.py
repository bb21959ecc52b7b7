#!/usr/bin/env python3
"""A hostile ``vllm serve`` for the supervise fuzz cases: it writes the pieces of ``FUZZ_PAYLOAD`` (a file:
4-byte big-endian lengths, each followed by that many bytes), one ``write`` per piece, to stdout (or to
stderr where ``FUZZ_STDERR=1`` and the piece's index is odd), then exits with ``FUZZ_EXIT``; with
``FUZZ_THEN=wait`` it waits for a signal instead (SIGTERM: exit 0)."""

from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    with open(os.environ["FUZZ_PAYLOAD"], "rb") as fh:
        data = fh.read()
    i, n = 0, 0
    while i < len(data):
        size = int.from_bytes(data[i : i + 4], "big")
        piece = data[i + 4 : i + 4 + size]
        fd = 2 if os.environ.get("FUZZ_STDERR") == "1" and n % 2 else 1
        view = memoryview(piece)
        while view:
            view = view[os.write(fd, view) :]
        i += 4 + size
        n += 1
    if os.environ.get("FUZZ_THEN") == "wait":
        while True:
            signal.pause()
    sys.exit(int(os.environ.get("FUZZ_EXIT", "0")))


if __name__ == "__main__":
    main()
