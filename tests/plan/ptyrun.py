"""Run the real ``glmlaunch`` with one of its streams on a pseudo-terminal, as an operator's shell would.

Only the chosen stream is a terminal; the other goes to a file (a pipe could fill up while the test
reads the terminal and deadlock the two processes).
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import tempfile
import termios
from dataclasses import dataclass
from typing import Literal

from tests.conftest import glmlaunch_exe

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(frozen=True)
class PtyRun:
    returncode: int
    tty: str  # what the terminal received, raw (carriage returns and escape sequences kept)
    other: str  # the other stream, from its file

    @property
    def tty_lines(self) -> list[str]:
        """The terminal's lines with colour and style sequences removed."""
        return _ANSI.sub("", self.tty.replace("\r\n", "\n")).split("\n")


def run_on_tty(
    *args: str,
    env: dict[str, str],
    stream: Literal["stdout", "stderr"],
    columns: int | None = None,
    timeout: float = 120,
) -> PtyRun:
    """``glmlaunch ARGS`` with ``stream`` on a terminal of ``columns`` columns (its window size)."""
    master, slave = pty.openpty()
    if columns is not None:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    with tempfile.TemporaryFile("w+") as other:
        proc = subprocess.Popen(
            [*glmlaunch_exe(), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=slave if stream == "stdout" else other,
            stderr=slave if stream == "stderr" else other,
        )
        os.close(slave)
        chunks: list[bytes] = []
        try:
            while True:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed its end
                    break
                if not data:
                    break
                chunks.append(data)
            returncode = proc.wait(timeout=timeout)
        finally:
            os.close(master)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        other.seek(0)
        return PtyRun(returncode, b"".join(chunks).decode("utf-8", "replace"), other.read())
