"""vLLM's output to glmlaunch's stdout and stderr, byte for byte, and a copy of each chunk for the parser.

One reader thread per source (a pipe, or a pty's master): read what is there (``os.read``, up to 64 KiB),
write all of it to the destination descriptor, and only then hand the same bytes to the :class:`Backlog`.
Parsing, masking and the boot files happen on another thread (:mod:`glmlaunch.supervise.stream`), so
nothing but a ``poll`` and a ``write`` sits between vLLM writing a line and a reader of glmlaunch's output
seeing it.

The backlog is bounded (:data:`BACKLOG_BYTES`): a flood faster than the parser (vLLM at 100 MB/s, or
binary output) never grows glmlaunch's memory and never makes a reader wait. When it is full the oldest
chunks not yet parsed are dropped, counted per stream: the parser writes ``[glmlaunch: N bytes dropped]``
where they were, so the copy keeps its newest output. The lines that decide the outcome (the ready line,
an OOM, an exception, an engine's fatal error) are kept out of a dropped chunk (:data:`KEPT_RE`, bounded),
so a flood cannot hide vLLM becoming ready or why it died.

On a terminal, vLLM writes into a pty (:func:`open_pty`), so it keeps its colours and progress bars; the
pty's output translation is off, so the bytes are the ones vLLM wrote, as on a pipe. A destination that
goes away (a closed pipe: EPIPE) stops the forwarding to it, said once; the copy for the parser goes on,
so vLLM never blocks on a full pipe.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import os
import re
import select
import struct
import termios
import threading
from dataclasses import dataclass, field

from glmlaunch.config.units import KIB, MIB
from glmlaunch.vllmlog.events import (
    ENGINE_FATAL_MARKERS,
    EXCEPTION_LEADS,
    OOM_MARKERS,
    OUT_OF_MEMORY,
    STARTUP_COMPLETE,
)

CHUNK = 65536
#: How often an idle reader looks at its stop flag (no effect on latency: poll returns on data).
IDLE_POLL_MS = 200
#: The most bytes read but not yet parsed. A batch the parser has taken is at most a quarter of it, so
#: the copy's memory is bounded by about 1.25 times this whatever vLLM writes (bench/RESULTS.md, "Floods").
BACKLOG_BYTES = 16 * MIB
#: what one parser batch takes at most
BATCH_BYTES = BACKLOG_BYTES // 4
#: The lines of a dropped chunk that are kept all the same: they decide the outcome. At most
#: :data:`KEPT_LINE_BYTES` of each and :data:`KEPT_BYTES` per stream between two batches.
KEPT_RE = re.compile(
    b"|".join(
        re.escape(m.encode())
        for m in (STARTUP_COMPLETE, OUT_OF_MEMORY, *OOM_MARKERS, *ENGINE_FATAL_MARKERS, *EXCEPTION_LEADS)
    )
)
KEPT_LINE_BYTES = 4 * KIB
KEPT_BYTES = 256 * KIB


@dataclass(frozen=True)
class Dropped:
    """A gap in one stream, before its next chunk: ``size`` bytes dropped unparsed (the backlog was full), and
    the decisive lines that were in them (:data:`KEPT_RE`; one without its newline was cut)."""

    size: int
    kept: tuple[bytes, ...] = ()


#: (stream name, bytes; None = the end of that stream; Dropped = a gap in that stream)
Item = tuple[str, bytes | Dropped | None]


class Backlog:
    """What the readers read and the parser has not parsed: bounded, and a put never waits.

    ``put`` appends; past :data:`BACKLOG_BYTES` the oldest chunks go (their decisive lines kept, the rest
    counted). ``take`` waits for something and returns it in order, each stream's gap first (a stream's
    dropped chunks are older than every chunk of it still here).
    """

    def __init__(self, limit: int = BACKLOG_BYTES, batch: int = BATCH_BYTES) -> None:
        self.limit = limit
        self.batch = batch
        self.queued = 0
        #: bytes dropped per stream over the whole run
        self.dropped: dict[str, int] = {}
        self._items: collections.deque[Item] = collections.deque()
        self._gaps: dict[str, int] = {}
        self._kept: dict[str, list[bytes]] = {}
        self._kept_bytes: dict[str, int] = {}
        self._ready = threading.Condition(threading.Lock())

    def put(self, item: Item) -> None:
        data = item[1]
        with self._ready:
            self._items.append(item)
            if isinstance(data, bytes):
                self.queued += len(data)
                while self.queued > self.limit:
                    self._drop_oldest()
            self._ready.notify()

    def _drop_oldest(self) -> None:
        for i, (name, data) in enumerate(self._items):
            if isinstance(data, bytes):
                del self._items[i]
                self.queued -= len(data)
                lost = len(data) - self._keep(name, data)
                self._gaps[name] = self._gaps.get(name, 0) + lost
                self.dropped[name] = self.dropped.get(name, 0) + lost
                return

    def _keep(self, name: str, data: bytes) -> int:
        """Keep the decisive lines of a chunk about to be dropped; the bytes kept."""
        kept = self._kept.setdefault(name, [])
        covered = 0  # the end of the last line kept: a line with two markers is kept once
        total = 0
        for m in KEPT_RE.finditer(data):
            if m.start() < covered:
                continue
            start = data.rfind(b"\n", 0, m.start()) + 1
            end = data.find(b"\n", m.end())
            covered = len(data) if end < 0 else end + 1
            line = data[start:covered][:KEPT_LINE_BYTES]
            size = self._kept_bytes.get(name, 0) + len(line)
            if size > KEPT_BYTES:
                break
            self._kept_bytes[name] = size
            total += len(line)
            kept.append(line)
        return total

    def take(self, timeout_s: float | None = None) -> list[Item]:
        """The next batch (at most :attr:`batch` bytes but at least one item); [] after ``timeout_s``."""
        with self._ready:
            if not self._items and not self._gaps:
                self._ready.wait_for(lambda: bool(self._items or self._gaps), timeout_s)
            out: list[Item] = []
            for name, n in self._gaps.items():
                out.append((name, Dropped(n, tuple(self._kept.pop(name, [])))))
            self._gaps.clear()
            self._kept_bytes.clear()
            taken = 0
            while self._items and (taken < self.batch or not out):
                item = self._items.popleft()
                out.append(item)
                if isinstance(item[1], bytes):
                    taken += len(item[1])
                    self.queued -= len(item[1])
            return out


def open_pty(like_fd: int) -> tuple[int, int]:
    """A pty (master, slave) with the window size of ``like_fd`` and no output translation."""
    master, slave = os.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR  # "\n" stays "\n": the terminal downstream translates, as for any program
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    copy_window_size(like_fd, master)
    return master, slave


def copy_window_size(src_fd: int, dst_fd: int) -> None:
    with contextlib.suppress(OSError):
        size = fcntl.ioctl(src_fd, termios.TIOCGWINSZ, struct.pack("HHHH", 0, 0, 0, 0))
        fcntl.ioctl(dst_fd, termios.TIOCSWINSZ, size)


@dataclass
class Tee:
    """Reader threads from vLLM's descriptors to ours; every chunk also goes to ``out`` for the parser."""

    out: Backlog
    threads: list[threading.Thread] = field(default_factory=list)
    #: destinations that went away (EPIPE), by stream name
    broken: dict[str, str] = field(default_factory=dict)
    bytes_forwarded: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def add(self, name: str, src_fd: int, dst_fd: int) -> None:
        thread = threading.Thread(
            target=self._run, args=(name, src_fd, dst_fd), name=f"glmlaunch-tee-{name}", daemon=True
        )
        self.bytes_forwarded[name] = 0
        self.threads.append(thread)

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self, timeout_s: float) -> bool:
        """Ask the readers to end once their source is drained; True when every one has ended."""
        self._stop.set()
        deadline = timeout_s
        for thread in self.threads:
            thread.join(max(0.0, deadline))
        return not any(t.is_alive() for t in self.threads)

    def _run(self, name: str, src: int, dst: int) -> None:
        poller = select.poll()
        poller.register(src, select.POLLIN | select.POLLHUP | select.POLLERR)
        try:
            while True:
                try:
                    ready = poller.poll(IDLE_POLL_MS)
                except InterruptedError:
                    continue
                if not ready:
                    if self._stop.is_set():
                        break
                    continue
                try:
                    data = os.read(src, CHUNK)
                except InterruptedError:
                    continue
                except OSError as exc:
                    if exc.errno == errno.EIO:  # a pty whose last writer has gone: its end of file
                        break
                    raise
                if not data:
                    break
                if name not in self.broken:
                    self._write(name, dst, data)
                self.out.put((name, data))
        finally:
            self.out.put((name, None))
            with contextlib.suppress(OSError):
                os.close(src)

    def _write(self, name: str, dst: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(dst, view)
            except InterruptedError:
                continue
            except BlockingIOError:
                select.select([], [dst], [], 1.0)
                continue
            except OSError as exc:
                # EPIPE (the reader of glmlaunch's output went away), EIO (a terminal that closed)
                self.broken[name] = exc.strerror or str(exc)
                return
            view = view[n:]
            self.bytes_forwarded[name] += n
