"""Free ports for a deployment with an LMCache server: its API port and the three ports derived from it."""

from __future__ import annotations

import os
import socket


def is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_offset() -> int:
    """k with 8000+k, 5555+k, 8089+k and 9090+k all free (the API port and the LMCache ports it moves)."""
    for k in (int.from_bytes(os.urandom(2), "big") % 400 + 100 for _ in range(200)):
        if all(is_free(b + k) for b in (8000, 5555, 8089, 9090)):
            return k
    raise RuntimeError("no free port offset")
