"""``serve --supervise`` under a flood (issue 31, items 3 and 5): real glmlaunch processes supervising a
hostile fake vLLM (tests/supervise/flood_vllm.py) that writes as fast as its pipe takes it.

* SIGTERM is honoured at any moment: while 20,000 distinct OOM lines are parsed, and after vLLM exited
  while glmlaunch reads a large boot log (outcome.json is written, glmlaunch exits within seconds);
* memory stays bounded whatever vLLM writes (the peak RSS of the glmlaunch process, its ``VmHWM``),
  and the newest output is kept: serve.log ends with the flood's last line;
* a secret cut by the copy's 256 KiB cut of a line without a newline never reaches the boot files.

Bounds are generous (CI has two cores): they tell a bounded supervisor from the unbounded one it
replaced (0.8-1.4 GB for a 1 GB flood; minutes to parse 20,000 OOM lines), not a speed; the speeds are
in bench/RESULTS.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, glmlaunch_exe
from test_supervise import INVENTORY, _stop_what_was_started, boots_dir, outcome, wait_for

from glmlaunch.plan.profile_import import build_profile

FLOOD = Path(__file__).resolve().parent / "flood_vllm.py"
OK_LOG = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp0-v1-server.log"
MIB = 2**20
__all__ = ["_stop_what_was_started"]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux (/proc)")


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("profile") / "ok.yaml"
    path.write_text(build_profile(OK_LOG, environ={}).text, encoding="utf-8")
    return path


@pytest.fixture
def env(clean_env: dict[str, str]) -> dict[str, str]:
    return dict(
        clean_env,
        GLMLAUNCH_VLLM_BIN=str(FLOOD),
        GLMLAUNCH_INVENTORY=str(INVENTORY),
        GLMLAUNCH_SKIP_PREFLIGHT="1",
    )


class Supervisor:
    """``glmlaunch serve --supervise`` with the flooding fake; its stdout to /dev/null (as fast as can be)."""

    def __init__(self, profile: Path, env: dict[str, str], **flood: str) -> None:
        self.home = Path(env["HOME"])
        self.stderr = self.home / "stderr"
        with self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                [*glmlaunch_exe(), "serve", "-p", str(profile), "--supervise"],
                env={**env, **{f"FLOOD_{k.upper()}": v for k, v in flood.items()}},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=self.home,
            )

    def vllm_pid(self) -> int | None:
        m = re.search(r"vLLM pid ([0-9]+)", self.stderr.read_text(errors="replace"))
        return int(m.group(1)) if m else None

    def wait(self, timeout: float) -> tuple[int, int]:
        """(the wait status, glmlaunch's peak RSS in KiB), within ``timeout``.

        The peak is the kernel's high-water mark of glmlaunch's own memory (``VmHWM``), read every 50 ms
        until it exits (wait4's ru_maxrss would count the test process's memory at the fork too)."""
        deadline = time.monotonic() + timeout
        peak = 0
        while True:
            with contextlib.suppress(OSError):
                status_text = Path(f"/proc/{self.proc.pid}/status").read_text()
                m = re.search(r"^VmHWM:\s+([0-9]+) kB", status_text, re.M)
                peak = max(peak, int(m.group(1))) if m else peak
            pid, status = os.waitpid(self.proc.pid, os.WNOHANG)
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                return status, peak
            assert time.monotonic() < deadline, f"glmlaunch still running after {timeout} s"
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            self.proc.wait()


def the_boot(env: dict[str, str]) -> Path:
    [boot] = list(boots_dir(env).iterdir())
    return boot


def boot_log_has(env: dict[str, str], text: bytes) -> bool:
    root = boots_dir(env)
    if not root.is_dir():
        return False
    for boot in root.iterdir():
        log = boot / "boot.log"
        if log.exists():
            with log.open("rb") as fh:
                fh.seek(max(0, log.stat().st_size - 4096))
                if text in fh.read():
                    return True
    return False


def test_sigterm_is_honoured_after_20000_distinct_oom_lines(profile: Path, env: dict[str, str]) -> None:
    """The reproducer: 20,000 OOM lines (600 KB) before the ready line kept glmlaunch past 120 s, deaf to
    SIGTERM, with no outcome.json (the parse of boot.log after the stop was quadratic)."""
    sup = Supervisor(profile, env, kind="oom", lines="20000", then="wait")
    try:
        wait_for(lambda: boot_log_has(env, b"the last line of the flood"), timeout=60)
        sent = time.monotonic()
        sup.proc.send_signal(signal.SIGTERM)
        status, _ = sup.wait(timeout=30)
        took = time.monotonic() - sent
    finally:
        sup.kill()
    doc = outcome(env)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0  # the fake drains and exits 0
    assert doc["signals_forwarded"][0]["signal"] == "SIGTERM"
    assert doc["findings"][0]["kind"] == "oom"
    assert took < 15, f"glmlaunch took {took:.1f} s to end after SIGTERM"


def test_sigterm_after_vllm_exited_ends_the_boot_log_reading(profile: Path, env: dict[str, str]) -> None:
    """vLLM exits on its own after a 48 MiB boot; glmlaunch parses that boot.log; a SIGTERM meanwhile ends
    the reading at once, outcome.json says so."""
    sup = Supervisor(profile, env, kind="lines", bytes=str(48 * MIB), then="exit")
    try:
        wait_for(lambda: sup.vllm_pid() is not None, timeout=60)
        pid = sup.vllm_pid()
        assert pid is not None
        # reaped, not merely a zombie: a SIGTERM sent while glmlaunch has yet to reap vLLM is taken before
        # the SIGCHLD (the lower signal first) and forwarded to vLLM, a stop before its exit (CI, stop 36)
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=60)
        assert not (the_boot(env) / "outcome.json").exists(), "the boot log was read before the signal"
        sent = time.monotonic()
        sup.proc.send_signal(signal.SIGTERM)
        status, _ = sup.wait(timeout=30)
        took = time.monotonic() - sent
    finally:
        sup.kill()
    doc = outcome(env)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0  # vLLM's own exit status, still
    assert any("SIGTERM after vLLM exited" in n for n in doc["notes"]), doc["notes"]
    assert took < 5, f"glmlaunch took {took:.1f} s to end after SIGTERM"


def test_a_sigterm_queued_behind_vllms_exit_is_not_forwarded(profile: Path, env: dict[str, str]) -> None:
    """The race CI met (stop 36): vLLM has exited but glmlaunch has not yet taken its SIGCHLD when SIGTERM
    comes; with both pending, the lower-numbered SIGTERM is taken first. glmlaunch is stopped (SIGSTOP)
    to hold that order for certain: it must see that vLLM had already exited, forward nothing, and note
    the signal as one after the exit."""
    sup = Supervisor(profile, env, kind="lines", bytes=str(MIB), then="wait")
    try:
        wait_for(lambda: boot_log_has(env, b"the last line of the flood"), timeout=60)
        pid = sup.vllm_pid()
        assert pid is not None
        os.kill(sup.proc.pid, signal.SIGSTOP)
        try:
            os.kill(pid, signal.SIGTERM)  # the fake exits 0 on it: vLLM ends on its own, for glmlaunch
            wait_for(lambda: Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z")
            sup.proc.send_signal(signal.SIGTERM)  # pending beside the SIGCHLD while glmlaunch is stopped
        finally:
            os.kill(sup.proc.pid, signal.SIGCONT)
        status, _ = sup.wait(timeout=30)
    finally:
        sup.kill()
    doc = outcome(env)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert doc["signals_forwarded"] == [], doc["signals_forwarded"]
    assert any("SIGTERM after vLLM exited" in n for n in doc["notes"]), doc["notes"]


def test_after_a_forwarded_sigterm_the_log_reading_is_bounded(profile: Path, env: dict[str, str]) -> None:
    """SIGTERM while vLLM floods a 64 MiB boot (the copy's cap): vLLM drains and exits; reading that
    boot.log (the parse, the record) gets STOPPING_BUDGET_S, then outcome.json is written."""
    from glmlaunch.supervise.session import STOPPING_BUDGET_S

    sup = Supervisor(profile, env, kind="lines", bytes=str(64 * MIB), then="wait")
    try:
        wait_for(lambda: boot_log_has(env, b"the last line of the flood"), timeout=120)
        sent = time.monotonic()
        sup.proc.send_signal(signal.SIGTERM)
        status, _ = sup.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        sup.kill()
    doc = outcome(env)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert doc["signals_forwarded"][0]["signal"] == "SIGTERM"
    assert took < STOPPING_BUDGET_S + 7, f"glmlaunch took {took:.1f} s to end after SIGTERM"


def _serve_logs(boot: Path) -> bytes:
    return b"".join(
        (boot / name).read_bytes() for name in ("serve.log.1", "serve.log") if (boot / name).exists()
    )


def test_a_flood_keeps_memory_bounded_and_the_newest_output(profile: Path, env: dict[str, str]) -> None:
    sup = Supervisor(profile, env, kind="lines", bytes=str(384 * MIB), ready="1", then="exit")
    try:
        status, peak_kib = sup.wait(timeout=240)
    finally:
        sup.kill()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert peak_kib < 150 * 1024, f"glmlaunch peaked at {peak_kib // 1024} MiB"
    boot = the_boot(env)
    assert (boot / "serve.log").read_bytes().endswith(b"\nthe last line of the flood\n")
    doc: dict[str, Any] = outcome(env)
    shown = [int(n) for n in re.findall(rb"\[glmlaunch: ([0-9]+) bytes dropped\]\n", _serve_logs(boot))]
    # what the copy says it dropped is what outcome.json counts (an older rotation may hold more)
    assert sum(shown) <= doc["log"]["dropped_bytes"]
    assert bool(shown) == (doc["log"]["dropped_bytes"] > 0) or doc["log"]["serve_log_rotations"] > 1


def test_binary_output_keeps_memory_bounded(profile: Path, env: dict[str, str]) -> None:
    sup = Supervisor(profile, env, kind="binary", bytes=str(16 * MIB), ready="1", then="midline")
    try:
        status, peak_kib = sup.wait(timeout=120)
    finally:
        sup.kill()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert peak_kib < 150 * 1024, f"glmlaunch peaked at {peak_kib // 1024} MiB"
    assert _serve_logs(the_boot(env)).endswith(b"cut off in the middle of a li")
    assert json.loads((the_boot(env) / "outcome.json").read_text())["outcome"] == "served"


def test_a_secret_cut_at_256_kib_never_reaches_the_boot_log(profile: Path, env: dict[str, str]) -> None:
    secret = "hf_SPLITsecretVALUE0123456789abcdef"
    sup = Supervisor(profile, {**env, "HF_TOKEN": secret}, kind="secret", secret=secret, then="exit")
    try:
        status, _ = sup.wait(timeout=60)
    finally:
        sup.kill()
    assert os.WIFEXITED(status)
    text = (the_boot(env) / "boot.log").read_bytes()
    assert b"after the secret" in text  # the line was copied, across the cut
    for piece in (secret, secret[:8], secret[-8:]):
        assert piece.encode() not in text
    assert b"****" in text
