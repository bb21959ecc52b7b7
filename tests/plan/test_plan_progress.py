"""`plan --library b12x` says what it waits for: a spinner on a terminal's stderr, nothing in a pipe.

Importing b12x takes ~3 s (torch, triton); the spinner starts after a second and erases itself.
"""

from __future__ import annotations

import json

import pytest

from glmlaunch.ledger.b12x_bridge import IMPORT_MESSAGE
from tests.conftest import run_cli_process
from tests.plan.ptyrun import run_on_tty

pytestmark = pytest.mark.b12x

SPINNER_FRAMES = "|/-\\"


@pytest.fixture(autouse=True)
def _needs_b12x() -> None:
    pytest.importorskip("b12x")


def test_terminal_stderr_shows_a_spinner_while_b12x_imports(clean_env: dict[str, str]) -> None:
    env = {k: v for k, v in clean_env.items() if k != "TERM"}
    run = run_on_tty("plan", "-p", "turnkey", "--library", "b12x", "--json", env=env, stream="stderr")
    assert run.returncode == 0, run.tty
    doc = json.loads(run.other)  # stdout is untouched: the document alone
    assert doc["library"]["source"] == "b12x"
    assert IMPORT_MESSAGE in run.tty
    frames = [seg[0] for seg in run.tty.split("\r") if seg.endswith(IMPORT_MESSAGE)]
    assert frames and set(frames) <= set(SPINNER_FRAMES)
    # erased at the end: the next message starts on a clean line
    assert run.tty.rfind("\r\x1b[2K") > run.tty.rfind(IMPORT_MESSAGE)


def test_piped_stderr_gets_no_spinner(clean_env: dict[str, str]) -> None:
    # a new process: it imports b12x while the spinner would run (in this process it may be imported already)
    out = run_cli_process("plan", "-p", "turnkey", "--library", "b12x", "--json", env=clean_env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert IMPORT_MESSAGE not in out.stderr and "\r" not in out.stderr
    assert "library: b12x" in out.stderr  # the run still says which library it used


def test_the_interpreters_shutdown_prints_no_nanobind_leak_report(clean_env: dict[str, str]) -> None:
    """Issue 31, item 14: triton's nanobind module listed its live objects at exit (~30 lines of
    "nanobind: leaked …") after the plan; a real process, since the report comes at its finalization."""
    out = run_cli_process("plan", "-p", "turnkey", "--library", "b12x", env=clean_env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "nanobind" not in out.stderr and "leaked" not in out.stderr, out.stderr[-2000:]
    assert "library: b12x" in out.stderr and "verdict: ok" in out.stdout
