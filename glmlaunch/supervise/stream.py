"""The streaming side of the boot-log parser: vLLM's output, line by line, off the forwarding path.

One thread consumes what the readers (:mod:`glmlaunch.supervise.tee`) queued and, per complete line:

* masks secrets (every registered value: the caller's secret-named variables, the configuration's, the
  values of ``--api-key``-like flags; :func:`mask_line`) and appends the line to the boot's private
  copy: ``boot.log`` up to and including the ready line (the boot, which the calibration record is
  built from; at most :data:`BOOT_LOG_CAP` bytes), ``serve.log`` after it
  (rotated to ``serve.log.1`` every :data:`SERVE_LOG_CAP` / 2 bytes, so the newest output is kept);
* feeds the :class:`~glmlaunch.supervise.timeline.Timeline` its markers;
* keeps the first line of each kind of failure (:class:`Finding`): a Python exception, a CUDA
  out-of-memory, an engine's fatal error;
* at the ready line, closes ``boot.log`` and calls ``on_ready`` (the record and the plan-vs-boot block),
  still on this thread.

Lines from vLLM's stdout and stderr are kept whole (each stream is split on its own); their order in the
copy is the order they reached glmlaunch. A "line" cut at :data:`MAX_PARTIAL` bytes without a newline is
masked before the cut, and the cut leaves any start of a secret for the next piece, so a secret split by
the cut is masked all the same. A gap the bounded backlog made under a flood
(:class:`~glmlaunch.supervise.tee.Backlog`) is one ``[glmlaunch: N bytes dropped]`` line in the copy, the
fragments of a secret on either side of it masked. What a line says is read by :mod:`glmlaunch.vllmlog` (the
failures, the ready line, the milestones); the boot's own parser (:mod:`glmlaunch.vllmlog.boot`) reads
``boot.log`` once it is closed: the record is exactly what ``calibrate ingest`` makes of that file.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from glmlaunch.config.units import MIB
from glmlaunch.output import MASK, known_secrets
from glmlaunch.supervise.tee import Backlog, Dropped
from glmlaunch.supervise.timeline import Timeline
from glmlaunch.vllmlog.events import (
    FAILURE_LEAD_RE,
    OUT_OF_MEMORY,
    STARTUP_COMPLETE,
    exception_of,
    is_engine_fatal,
    is_oom_line,
    may_state_exception,
)
from glmlaunch.vllmlog.lines import process_of, strip_ansi

BOOT_LOG_CAP = 64 * MIB
SERVE_LOG_CAP = 64 * MIB
#: how long the parser waits after a batch before taking the next (it is never on the forwarding path)
BATCH_WAIT_S = 0.01
#: a "line" longer than this without a newline (a progress bar redrawn with \r) is written as it is
MAX_PARTIAL = 256 * 1024

FindingKind = Literal["exception", "oom", "engine-fatal"]


@dataclass(frozen=True)
class Finding:
    """The first line of one kind of failure, with the process that wrote it."""

    kind: FindingKind
    process: str | None
    text: str
    t: float
    after_ready: bool

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "process": self.process,
            "text": self.text,
            "t_s": round(self.t, 3),
            "after_ready": self.after_ready,
        }


def gap_line(dropped: int) -> bytes:
    """The copy's line where ``dropped`` bytes of a flood were never parsed (nor kept)."""
    return f"[glmlaunch: {dropped} bytes dropped]\n".encode()


def secret_start_at_end(text: str, secrets: list[str]) -> int:
    """How many of ``text``'s last characters may begin a secret (a proper prefix of one); 0: none."""
    longest = 0
    for secret in secrets:
        for k in range(min(len(secret) - 1, len(text)), longest, -1):
            if text.endswith(secret[:k]):
                longest = k
                break
    return longest


def secret_end_at_start(data: bytes, secrets: list[bytes]) -> int:
    """How many of ``data``'s first bytes may end a secret (a proper suffix of one); 0: none."""
    longest = 0
    for secret in secrets:
        for k in range(min(len(secret) - 1, len(data)), longest, -1):
            if data.startswith(secret[-k:]):
                longest = k
                break
    return longest


def open_private(path: Path) -> int:
    """A new file only the user can read (0600), never through a link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    return os.open(path, flags, 0o600)


def mask_line(text: str, secrets: list[str]) -> str:
    """``text`` with every registered secret value replaced (longest first); the same object when none.

    Only values: vLLM's lines are vLLM's, and a name pattern would also take ``cache_key=41d9…`` for a
    credential. Every secret the launch holds is registered (the caller's secret-named variables, the
    configuration's, the values of secret flags), so that is every secret vLLM can have from glmlaunch.
    """
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


@dataclass
class _Copy:
    """One capped, private file of the copy."""

    path: Path
    cap: int
    fd: int | None = None
    written: int = 0
    capped: bool = False

    pending: list[bytes] = field(default_factory=list)

    def write(self, data: bytes) -> None:
        if self.capped:
            return
        if self.written + len(data) > self.cap:
            self.capped = True
            return
        self.pending.append(data)
        self.written += len(data)

    def flush(self) -> None:
        if not self.pending:
            return
        if self.fd is None:
            self.fd = open_private(self.path)
        view = memoryview(b"".join(self.pending))
        self.pending.clear()
        while view:
            view = view[os.write(self.fd, view) :]

    def close(self) -> None:
        self.flush()
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(self.fd)
            os.close(self.fd)
            self.fd = None


@dataclass
class BootStream:
    """The consumer thread: the private copy, the timeline, the findings, the ready event."""

    items: Backlog
    directory: Path
    sources: int
    started: float  # the monotonic time vLLM was started
    timeline: Timeline
    on_ready: Callable[[], None] | None = None
    #: the watch's feed (serve --supervise --watch): the ready line and every OOM line, still on this thread
    on_watch_line: Callable[[str], None] | None = None
    boot_cap: int = BOOT_LOG_CAP
    serve_cap: int = SERVE_LOG_CAP
    findings: dict[FindingKind, Finding] = field(default_factory=dict)
    lines: int = 0
    #: bytes of vLLM's output never parsed nor copied (a flood the bounded backlog dropped)
    dropped: int = 0
    ready: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    boot_log: _Copy = field(init=False)
    serve_log: _Copy = field(init=False)
    serve_rotations: int = 0
    _secrets: list[str] = field(default_factory=list)
    _secret_bytes: list[bytes] = field(default_factory=list)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.boot_log = _Copy(self.directory / "boot.log", self.boot_cap)
        self.serve_log = _Copy(self.directory / "serve.log", self.serve_cap // 2)
        self._secrets = known_secrets()
        self._secret_bytes = [s.encode("utf-8", "surrogateescape") for s in self._secrets]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="glmlaunch-boot-stream", daemon=True)
        self._thread.start()

    def join(self, timeout_s: float) -> bool:
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self.done.is_set()

    def _run(self) -> None:
        partial: dict[str, bytes] = {}
        after_gap: set[str] = set()
        open_streams = self.sources
        try:
            while open_streams:
                # everything queued meanwhile (up to a batch) is handled in one go, one write per file
                for name, data in self.items.take():
                    if data is None:
                        rest = partial.pop(name, b"")
                        if rest:
                            self._line(rest)
                        open_streams -= 1
                        continue
                    if isinstance(data, Dropped):
                        self._gap(partial.pop(name, b""), data)
                        after_gap.add(name)
                        continue
                    if name in after_gap:
                        # the chunk after a gap starts mid-line: what may end a secret is masked
                        after_gap.discard(name)
                        cut = secret_end_at_start(data, self._secret_bytes)
                        if cut:
                            data = MASK.encode() + data[cut:]
                    buf = partial.get(name, b"") + data
                    start = 0
                    while True:
                        nl = buf.find(b"\n", start)
                        if nl < 0:
                            break
                        self._line(buf[start : nl + 1])
                        start = nl + 1
                    rest = buf[start:]
                    if len(rest) > MAX_PARTIAL:
                        rest = self._cut(rest)
                    partial[name] = rest
                self._flush()
                # A pause lets lines gather: a batch per wake-up instead of a wake-up per line, which at
                # 10,000 lines/s is most of the cost (the readers forward meanwhile; nothing waits on this)
                time.sleep(BATCH_WAIT_S)
        except BaseException as exc:  # kept for the session to report; the readers go on forwarding
            self.error = exc
            self._drain()
        finally:
            self.boot_log.close()
            self.serve_log.close()
            self.done.set()

    def _flush(self) -> None:
        self.boot_log.flush()
        self.serve_log.flush()

    def _drain(self) -> None:
        # After a failure here the readers must still never block: take what they queue until they end.
        open_streams = self.sources
        while open_streams:
            open_streams -= sum(1 for _, data in self.items.take() if data is None)

    def _cut(self, rest: bytes) -> bytes:
        """Write a line too long to wait for its newline; what is kept back for the next piece.

        Masked whole before the cut; the characters that may begin a secret continued in the next piece
        stay behind (a secret split by the cut is masked when the piece completes it)."""
        text = mask_line(rest.decode("utf-8", "surrogateescape"), self._secrets)
        keep = secret_start_at_end(text, self._secrets)
        head, tail = (text[:-keep], text[-keep:]) if keep else (text, "")
        self._line(head.encode("utf-8", "surrogateescape"))
        return tail.encode("utf-8", "surrogateescape")

    def _gap(self, before: bytes, gap: Dropped) -> None:
        """The line cut by a gap, the gap's own line, the decisive lines kept from it: each piece with
        what may be part of a secret at its cut ends masked."""
        if before:
            self._line(self._mask_ends(before) + b"\n")
        self.dropped += gap.size
        line = gap_line(gap.size)
        if self.ready.is_set():
            self._serve_write(line)
        else:
            self.boot_log.write(line)
        for kept in gap.kept:
            whole = kept.endswith(b"\n")
            self._line(self._mask_ends(kept, head=True, tail=not whole) + (b"" if whole else b"\n"))

    def _mask_ends(self, piece: bytes, *, head: bool = False, tail: bool = True) -> bytes:
        """``piece`` masked, and its cut ends (``head``: its start, ``tail``: its end) where they may hold
        part of a secret."""
        if head:
            cut = secret_end_at_start(piece, self._secret_bytes)
            if cut:
                piece = MASK.encode() + piece[cut:]
        text = mask_line(piece.decode("utf-8", "surrogateescape"), self._secrets)
        keep = secret_start_at_end(text, self._secrets) if tail else 0
        if keep:
            text = text[:-keep] + MASK
        return text.encode("utf-8", "surrogateescape")

    def _line(self, raw: bytes) -> None:
        self.lines += 1
        t = time.monotonic() - self.started
        text = raw.decode("utf-8", "surrogateescape")
        masked = mask_line(text, self._secrets)
        out = raw if masked is text else masked.encode("utf-8", "surrogateescape")
        plain = strip_ansi(text) if "\x1b" in text else text
        ready_line = not self.ready.is_set() and STARTUP_COMPLETE in plain
        if self.ready.is_set():
            self._serve_write(out)
        else:
            self.boot_log.write(out)
        self.timeline.see(plain, t)
        self._find(plain, t)
        if self.on_watch_line is not None and (ready_line or OUT_OF_MEMORY in plain):
            self.on_watch_line(plain)
        if ready_line:
            self.boot_log.close()
            self.ready.set()
            if self.on_ready is not None:
                self.on_ready()

    def _serve_write(self, data: bytes) -> None:
        log = self.serve_log
        if log.written + len(data) > log.cap and log.written:
            log.close()
            os.replace(log.path, log.path.with_name(log.path.name + ".1"))
            self.serve_rotations += 1
            # created at once, not at the next flush: glmlaunch ending meanwhile (a stop signal after
            # vLLM exited abandons the drain) still leaves a serve.log, the newest output
            self.serve_log = log = _Copy(log.path, log.cap, fd=open_private(log.path))
        log.write(data)

    def _find(self, text: str, t: float) -> None:
        if FAILURE_LEAD_RE.search(text) is None:  # one scan for the common line, which holds none
            return
        after = self.ready.is_set()
        if "oom" not in self.findings and is_oom_line(text):
            self._keep("oom", text, t, after)
        if "engine-fatal" not in self.findings and is_engine_fatal(text):
            self._keep("engine-fatal", text, t, after)
        if "exception" not in self.findings and may_state_exception(text):
            stated = exception_of(text)
            if stated is not None:
                self._keep("exception", text, t, after, message=stated)

    def _keep(self, kind: FindingKind, text: str, t: float, after: bool, message: str | None = None) -> None:
        process, rest = process_of(text)
        body = message if message is not None else rest
        shown = mask_line(" ".join(body.split()), self._secrets)[:300]
        self.findings[kind] = Finding(kind, process, shown, t, after)
