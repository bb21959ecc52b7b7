"""The log lines the watch reads: vLLM's ready line and its OOMs.

Three sources, one interface (:meth:`LineSource.poll`: the complete lines seen up to a sample's time):

* :class:`FileFollower`: a sidecar's ``--log FILE`` (vLLM's output as a file: ``docker logs -f … >FILE``,
  a process manager's log), read from its start, then followed like ``tail -F`` (a truncated or
  replaced file is read again from its start);
* :class:`QueueLines`: lines handed over by another thread (``serve --supervise`` feeds the lines its
  stream parser sees);
* a replayed trace's recorded lines (:class:`glmlaunch.watch.trace.TracePlayer`).
"""

from __future__ import annotations

import os
import queue
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

#: a line longer than this without a newline (a progress bar redrawn with \r) is taken as it is
MAX_PARTIAL = 256 * 1024
#: read at most this much per poll: a huge backlog is caught up over several samples
CHUNK = 4 * 1024 * 1024


class LineSource(Protocol):
    def poll(self, t: float) -> list[str]: ...


@dataclass
class FileFollower:
    path: Path
    _fd: int | None = None
    _inode: tuple[int, int] | None = None
    _offset: int = 0
    _partial: bytes = b""
    missing: bool = False

    def poll(self, t: float) -> list[str]:
        del t  # a live file's lines are the lines written by now
        self._reopen_if_replaced()
        if self._fd is None:
            return []
        try:
            data = os.pread(self._fd, CHUNK, self._offset)
        except OSError:
            return []
        self._offset += len(data)
        buf = self._partial + data
        lines = buf.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_PARTIAL:
            lines.append(self._partial)
            self._partial = b""
        return [line.decode("utf-8", "replace").rstrip("\r") for line in lines if line.strip()]

    def _reopen_if_replaced(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError:
            self.missing = True
            return
        self.missing = False
        ident = (st.st_dev, st.st_ino)
        if self._fd is not None and ident == self._inode and st.st_size >= self._offset:
            return
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        try:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            self.missing = True
            return
        self._inode, self._offset, self._partial = ident, 0, b""

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class QueueLines:
    """Lines put by another thread (:meth:`put` never blocks); :meth:`poll` takes what is there."""

    items: queue.SimpleQueue[str] = field(default_factory=queue.SimpleQueue)

    def put(self, line: str) -> None:
        self.items.put(line)

    def poll(self, t: float) -> list[str]:
        del t
        out: list[str] = []
        while True:
            try:
                out.append(self.items.get_nowait())
            except queue.Empty:
                return out
