"""vLLM's output to glmlaunch's stdout and stderr, byte for byte, and a copy of each chunk for the parser.

One reader thread per source (a pipe, or a pty's master): read what is there (``os.read``, up to 64 KiB),
write all of it to the destination descriptor, and only then hand the same bytes to a queue. Parsing,
masking and the boot files happen on another thread (:mod:`glmlaunch.supervise.stream`), so nothing but
a ``poll`` and a ``write`` sits between vLLM writing a line and a reader of glmlaunch's output seeing it.

On a terminal, vLLM writes into a pty (:func:`open_pty`), so it keeps its colours and progress bars; the
pty's output translation is off, so the bytes are the ones vLLM wrote, as on a pipe. A destination that
goes away (a closed pipe: EPIPE) stops the forwarding to it, said once; the copy for the parser goes on,
so vLLM never blocks on a full pipe.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import queue
import select
import struct
import termios
import threading
from dataclasses import dataclass, field

CHUNK = 65536
#: How often an idle reader looks at its stop flag (no effect on latency: poll returns on data).
IDLE_POLL_MS = 200

Item = tuple[str, bytes | None]  # (stream name, bytes; None = the end of that stream)


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

    out: queue.SimpleQueue[Item]
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
