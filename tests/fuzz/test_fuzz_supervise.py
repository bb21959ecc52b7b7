"""Hostile fake vLLMs under ``serve --supervise`` (issue 31): real processes writing what hypothesis draws.

The fake (tests/fuzz/hostile_vllm.py) writes binary junk, vLLM's own lines and pieces of them, carriage
returns and colour codes, lines of 300 KiB without a newline, the caller's secret whole and cut in two,
bursts of thousands of lines, ends mid-line, exits with any small status or waits for SIGTERM. Whatever
it wrote, the supervisor keeps the contract: glmlaunch ends as vLLM ended (SIGTERM: promptly), never with
a traceback of its own, ``outcome.json`` is written and valid, the boot files and glmlaunch's own messages
never hold the secret, and it is done within the deadline. Few cases: each is two real processes (CI has
two cores; the whole suite stays under its budget).
"""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from fuzzkit import FIXTURES, HF_SECRET, base_environ, fuzz_settings, glmlaunch_exe, seeded
from hypothesis import given
from hypothesis import strategies as st

HOSTILE_VLLM = Path(__file__).resolve().parent / "hostile_vllm.py"
INVENTORY = FIXTURES / "inventories" / "rtxpro6000x4.json"
OK_LOG = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp0-v1-server.log"
#: a case's limit: glmlaunch's start (~1 s here), the fake's writes, the end-of-boot read of boot.log
DEADLINE_S = 30.0

READY = b"(APIServer pid=7) INFO 12-04 04:00:00 [launcher.py:1] Application startup complete.\n"
OOM = (
    b"(Worker_TP0 pid=8) ERROR 12-04 04:00:00 [multiproc_executor.py:839] torch.OutOfMemoryError:"
    b" CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 94.97 GiB of which"
    b" 1.23 GiB is free.\n"
)
_HALF = len(HF_SECRET) // 2
PIECES = st.one_of(
    st.binary(max_size=300),
    st.sampled_from(
        [
            READY,
            OOM,
            OOM[:90],
            OOM[90:],
            b"\r",
            b"\x1b[31m",
            b"\n",
            f"token {HF_SECRET} in a line\n".encode(),
            HF_SECRET[:_HALF].encode(),
            HF_SECRET[_HALF:].encode(),
            b"RuntimeError: Engine core initialization failed.\n",
            b"q" * (300 * 1024),  # longer than the copy's 256 KiB cut, no newline
            b"(Worker_TP1 pid=9) INFO 12-04 04:00:00 [x.py:1] a line\n" * 5000,
        ]
    ),
)


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from glmlaunch.plan.profile_import import build_profile

    path = tmp_path_factory.mktemp("profile") / "ok.yaml"
    path.write_text(build_profile(OK_LOG, environ={}).text, encoding="utf-8")
    return path


@seeded
@fuzz_settings(6)
@given(
    pieces=st.lists(PIECES, max_size=12),
    code=st.integers(0, 3),
    to_stderr=st.booleans(),
    sigterm=st.booleans(),
)
def test_hostile_output_keeps_the_supervisors_contract(
    profile: Path, pieces: list[bytes], code: int, to_stderr: bool, sigterm: bool
) -> None:
    root = Path(tempfile.mkdtemp(prefix="glmfuzz-sup-"))
    (root / "home").mkdir()
    payload = root / "payload"
    payload.write_bytes(b"".join(len(p).to_bytes(4, "big") + p for p in pieces))
    env = {
        **base_environ(root),
        "GLMLAUNCH_VLLM_BIN": str(HOSTILE_VLLM),
        "GLMLAUNCH_INVENTORY": str(INVENTORY),
        "GLMLAUNCH_SKIP_PREFLIGHT": "1",
        "FUZZ_PAYLOAD": str(payload),
        "FUZZ_EXIT": str(code),
        "FUZZ_STDERR": "1" if to_stderr else "0",
        "FUZZ_THEN": "wait" if sigterm else "exit",
    }
    started = time.monotonic()
    proc = subprocess.Popen(
        [*glmlaunch_exe(), "serve", "-p", str(profile), "--supervise"],
        env=env,
        cwd=root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        if sigterm:
            boots = root / "glmlaunch-cache" / "boots"
            # the fake has written everything once its boot directory exists and a moment passed
            while not boots.is_dir() and time.monotonic() - started < DEADLINE_S:
                time.sleep(0.05)
            time.sleep(0.5)
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
        _, err_bytes = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    took = time.monotonic() - started
    err = err_bytes.decode("utf-8", "replace")
    assert proc.returncode == (0 if sigterm else code), err[-3000:]
    assert took < DEADLINE_S
    if sigterm:
        assert time.monotonic() - signalled < 10, err[-3000:]
    [boot] = list((root / "glmlaunch-cache" / "boots").iterdir())
    doc = json.loads((boot / "outcome.json").read_text())
    assert doc["outcome"] in {"served", "exited", "oom", "engine-error", "killed", "refused", "failed"}, doc
    own = err if not to_stderr else "\n".join(line for line in err.splitlines() if "supervise:" in line)
    assert "Traceback" not in own, own[-3000:]
    assert HF_SECRET not in own
    for path in boot.iterdir():
        assert HF_SECRET.encode() not in path.read_bytes(), path.name


# --- the log grammar on hostile lines ---------------------------------------------------------------


def _openings() -> list[str]:
    """The opening words of every line the grammar reads, and the pieces its patterns repeat."""
    from glmlaunch.vllmlog.boot import LEADS

    return sorted(
        {
            *LEADS.values(),
            "A.",
            "a_b.",
            "torch.OutOfMemoryError: ",
            "CUDA out of memory. Tried to allocate 1.00 GiB. GPU ",
            "GPU 0: 1",
            "(Worker_TP0 pid=1) ",
            "EXL3 mixed Trellis runtime planned: tiers=((",
            "non-default args: {'a': ",
            ">>> profile runtime: A=",
            "  A = [",
            "\x1b[1;",
        }
    )


@seeded
@fuzz_settings(40)
@given(
    opening=st.sampled_from(_openings()),
    filler=st.text(max_size=3),
    size=st.sampled_from([64 * 1024, 256 * 1024]),
    prefixed=st.booleans(),
)
def test_a_line_repeating_a_patterns_opening_parses_in_linear_time(
    opening: str, filler: str, size: int, prefixed: bool
) -> None:
    """A line of up to 256 KiB (the copy's cut) repeating what a pattern starts with: a pattern retried
    at every repetition that scans to the line's end is quadratic (a 256 KiB ``A.A.…`` took minutes)."""
    from glmlaunch.vllmlog.boot import parse_log_text

    unit = opening + filler
    line = (unit * (size // len(unit) + 1))[:size]
    if prefixed:
        line = "(Worker_TP0 pid=3) INFO 12-04 04:00:00 [x.py:1] " + line
    started = time.monotonic()
    parse_log_text(line + "\n")
    took = time.monotonic() - started
    assert took < 5.0, f"{took:.1f} s for a {size // 1024} KiB line of {unit!r}"
