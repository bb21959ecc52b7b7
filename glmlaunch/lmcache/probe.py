"""Is the LMCache server there: the wrappers' ready probes, the external server's port, a log's root cause.

Both wrappers call a server ready when ``GET http://127.0.0.1:<http port>/healthcheck`` answers 2xx within
a second, or when its log holds ``LMCache ZMQ cache server is running``, whichever comes first
(malaiwah/glm52-exl3-vast@eba43a5:scripts/glm52_lmcache_wrapper.sh L102-112;
local-inference-lab/blackwell-llm-docker@3dd078a:launchers/lmcache-mp-wrapper.sh L304-321). The probes
never go through a proxy (``http_proxy`` would otherwise take 127.0.0.1 too).
"""

from __future__ import annotations

import contextlib
import re
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from glmlaunch.vllmlog.events import exception_name_re

#: each probe waits this long for an answer (the wrappers' ``curl --max-time 1``)
PROBE_TIMEOUT_S = 1.0
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
#: an exception line, by the log grammar's rule for a name (a name starts only where a dotted name can: a
#: search from every part of a long ``a.b.c.…`` chain was quadratic in the line); ``SystemExit`` too
_EXCEPTION_RE = exception_name_re("Error|Exception|Exit", r":? ?(.*)")
_FATAL_RE = re.compile(r"\b(ERROR|CRITICAL|FATAL|Traceback)\b")


def healthy(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """The health endpoint answered 2xx (``curl --fail``'s success)."""
    try:
        with _NO_PROXY.open(url, timeout=timeout_s) as resp:
            return 200 <= int(resp.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass
class LogScan:
    """Reads a growing log from where it stopped, for the ready line (a line may be split over reads)."""

    path: Path
    text: str
    offset: int = 0
    carry: bytes = b""
    found: bool = False
    _needle: bytes = field(init=False, default=b"")

    def __post_init__(self) -> None:
        self._needle = self.text.encode()

    def seen(self) -> bool:
        if self.found:
            return True
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except OSError:
            return False
        self.offset += len(chunk)
        data = self.carry + chunk
        if self._needle in data:
            self.found = True
        # keep enough to match a needle split across two reads
        self.carry = data[-len(self._needle) :] if self._needle else b""
        return self.found


def port_answers(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when a TCP connection to ``host:port`` is accepted; else why not (for the error line)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def tail(path: Path, lines: int = 40, max_bytes: int = 64 * 1024) -> list[str]:
    """The last ``lines`` lines of a log (at most ``max_bytes`` read), decoded leniently."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return []
    text = data.decode("utf-8", "replace").replace("\r", "\n")
    return [line for line in text.splitlines() if line.strip()][-lines:]


def root_cause(lines: list[str]) -> str | None:
    """The line that most likely says why the server stopped: the last exception line of a traceback, else
    the last error line, else None (the log said nothing that names a cause)."""
    for line in reversed(lines):
        m = _EXCEPTION_RE.search(line)
        if m is not None and not line.lstrip().startswith(("File ", "Traceback")):
            return " ".join(line.split())[:300]
    for line in reversed(lines):
        if _FATAL_RE.search(line) and not line.lstrip().startswith("Traceback"):
            return " ".join(line.split())[:300]
    return None


def port_taken(host: str, port: int) -> bool:
    """Something already accepts connections on the port a managed server is about to bind."""
    with contextlib.suppress(OSError):
        return port_answers(host, port, 0.5) is None
    return False
