"""The supervisor's parts on real inputs: the timeline of a real log, hangs, the stop deadlines, the
streaming copy and its masking, the one-line diagnoses of an OOM and a worker's traceback (through the
fake vLLM), and ending as vLLM ended (real processes dying by real signals)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES
from test_supervise import FAKE, INVENTORY, _stop_what_was_started, finish, outcome, start

from glmlaunch.output import MASK, register_secret, reset_secrets
from glmlaunch.plan.profile_import import build_profile
from glmlaunch.supervise.session import deadlines, shutdown_timeout
from glmlaunch.supervise.stream import MAX_PARTIAL, BootStream
from glmlaunch.supervise.tee import Backlog, Dropped
from glmlaunch.supervise.timeline import Timeline, expected_from_phases, fmt_seconds

OK_LOG = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp0-v1-server.log"
__all__ = ["_stop_what_was_started"]  # the autouse fixture, for the supervisors started here too
TRUNCATED_LOG = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v1-server.log"


def _fed(log: Path, step: float = 0.01) -> Timeline:
    timeline = Timeline()
    for i, line in enumerate(log.read_bytes().split(b"\n")):  # physical lines, as the stream splits them
        timeline.see(line.decode("utf-8", "replace"), i * step)
    return timeline


def test_the_timeline_of_a_real_boot() -> None:
    timeline = _fed(OK_LOG)
    phases = timeline.phases()
    assert [p.name for p in phases] == ["load", "profile", "graph capture", "api start"]
    # the marker lines (0-based): last rank's load 914, KV size 969, last capture 983, ready 1032
    assert [round(p.end_s, 2) for p in phases] == [9.14, 9.69, 9.83, 10.32]
    assert timeline.ready_s == pytest.approx(10.32)
    assert timeline.current() is None
    assert timeline.summary().endswith("; ready after 10 s")


def test_a_boot_cut_short_is_in_its_phase_and_a_long_phase_is_a_hang_said_once() -> None:
    timeline = _fed(TRUNCATED_LOG)  # loads, then ends before the KV-cache size
    assert timeline.current() == ("profile", pytest.approx(9.42))
    timeline.expected_s = {**timeline.expected_s, "profile": 60.0}
    assert timeline.check_hang(60.0) is None
    hang = timeline.check_hang(80.0)
    assert hang is not None and hang[0] == "profile" and hang[2] == 60.0
    assert timeline.check_hang(90.0) is None  # said once
    [load, profile] = timeline.phases(now_s=80.0)
    assert (load.name, profile.name, round(profile.seconds, 2)) == ("load", "profile", 70.58)


def test_expected_times_come_from_the_last_boot_of_the_configuration() -> None:
    phases = _fed(OK_LOG, step=1.0).phases()
    expected = expected_from_phases(phases)
    load = next(p for p in phases if p.name == "load")
    assert expected["load"] == max(3 * load.seconds, load.seconds + 300)
    assert fmt_seconds(expected["load"]) == "45 min 42 s"


def test_stop_deadlines_follow_the_drain_and_keep_inside_the_grace() -> None:
    assert shutdown_timeout(["vllm", "serve", "m", "--shutdown-timeout", "90"]) == 90.0
    assert shutdown_timeout(["vllm", "serve", "m", "--shutdown-timeout=12.5"]) == 12.5
    assert shutdown_timeout(["vllm", "serve", "m"]) == 0.0
    assert deadlines(["vllm", "--shutdown-timeout", "90"], None).deadline_s == 120.0
    graced = deadlines(["vllm", "--shutdown-timeout", "90"], 120.0)
    assert (graced.deadline_s, graced.kill_after_s) == (110.0, 5.0)
    tight = deadlines(["vllm"], 8.0)
    assert (tight.deadline_s, tight.kill_after_s) == (1.0, 2.0)


def test_the_copy_masks_registered_secrets_and_nothing_else(tmp_path: Path) -> None:
    reset_secrets()
    register_secret("hf_SECRETvalue123456")
    try:
        items = Backlog()
        stream = BootStream(items, tmp_path, 2, time.monotonic(), Timeline())
        stream.start()
        items.put(("stdout", b"token hf_SECRETvalue123456 in a line\nsparkinfer cache_key=41d942cb3bfd"))
        items.put(("stderr", b"Traceback (most recent call last):\n  raise ValueError('x')\nValueError: x\n"))
        items.put(("stdout", b" status=hit\n"))
        items.put(("stdout", None))
        items.put(("stderr", None))
        assert stream.join(10.0)
    finally:
        reset_secrets()
    text = (tmp_path / "boot.log").read_text()
    assert f"token {MASK} in a line\n" in text
    assert "sparkinfer cache_key=41d942cb3bfd status=hit\n" in text  # a line split across two chunks
    assert stream.findings["exception"].text == "ValueError: x"
    assert oct((tmp_path / "boot.log").stat().st_mode & 0o777) == "0o600"


SPLIT = "hf_SPLITsecretVALUE0123456789abcdef"


def _copied(tmp_path: Path, chunks: list[bytes], backlog: Backlog | None = None) -> bytes:
    """What the copy (boot.log) holds after the stream thread read ``chunks`` of one stream, in order."""
    reset_secrets()
    register_secret(SPLIT)
    items = backlog or Backlog()
    try:
        stream = BootStream(items, tmp_path, 1, time.monotonic(), Timeline())
        for chunk in chunks:
            items.put(("stdout", chunk))
        items.put(("stdout", None))
        stream.start()
        assert stream.join(10.0)
    finally:
        reset_secrets()
    return (tmp_path / "boot.log").read_bytes()


def test_a_secret_across_the_256_kib_cut_is_masked(tmp_path: Path) -> None:
    """A line without a newline is written in pieces; a secret the cut falls in is masked all the same."""
    half = len(SPLIT) // 2
    text = _copied(
        tmp_path, [b"z" * (MAX_PARTIAL - 5) + SPLIT[:half].encode(), SPLIT[half:].encode() + b" end\n"]
    )
    assert text == b"z" * (MAX_PARTIAL - 5) + MASK.encode() + b" end\n"


def test_a_flood_past_the_backlog_is_dropped_counted_and_secrets_at_the_gap_masked(tmp_path: Path) -> None:
    """The backlog keeps at most its limit: the oldest chunks go, counted on one line of the copy, their
    decisive lines kept; a secret cut by the gap is masked on both sides of it."""
    half = len(SPLIT) // 2
    backlog = Backlog(limit=1000, batch=1000)
    chunks = [
        b"first line\nthe line cut by the gap " + SPLIT[:half].encode(),  # dropped: the oldest
        SPLIT[half:].encode() + b" lost\n" + b"x" * 900 + b"\n",  # dropped
        b"noise\n(Worker_TP0 pid=1) ERROR torch.OutOfMemoryError: CUDA out of memory. Tried\nmore noise"
        + SPLIT[:half].encode(),  # dropped, but its OOM line is kept
        SPLIT[half:].encode() + b" the newest\n" + b"w" * 900 + b"\n",  # kept: it pushes the others out
    ]
    text = _copied(tmp_path, chunks, backlog)
    dropped = sum(map(len, chunks[:3])) - len(
        b"(Worker_TP0 pid=1) ERROR torch.OutOfMemoryError: CUDA out of memory. Tried\n"
    )
    assert backlog.dropped == {"stdout": dropped}
    assert text == (
        f"[glmlaunch: {dropped} bytes dropped]\n".encode()
        + b"(Worker_TP0 pid=1) ERROR torch.OutOfMemoryError: CUDA out of memory. Tried\n"
        + MASK.encode()
        + b" the newest\n"
        + b"w" * 900
        + b"\n"
    )
    assert SPLIT[:4].encode() not in text and SPLIT[-4:].encode() not in text


def test_the_backlog_never_waits_and_stays_bounded() -> None:
    backlog = Backlog(limit=64 * 1024, batch=16 * 1024)
    chunk = b"y" * 4096 + b"\n"
    started = time.monotonic()
    for _ in range(20_000):  # 80 MB, nobody taking
        backlog.put(("stdout", chunk))
    assert time.monotonic() - started < 10
    assert backlog.queued <= 64 * 1024
    batch = backlog.take()
    assert batch[0] == ("stdout", Dropped(sum(backlog.dropped.values())))
    assert sum(len(d) for _, d in batch[1:] if isinstance(d, bytes)) <= 16 * 1024 + len(chunk)


def _oom_log(tmp_path: Path) -> Path:
    head = OK_LOG.read_bytes().split(b"(Worker_TP0_DCP0 pid=116743) INFO 07-31 04:30:07")[0]
    oom = (
        b"(Worker_TP2_DCP2 pid=116852) ERROR 07-31 04:30:09 [multiproc_executor.py:839] WorkerProc hit an "
        b"exception.\n"
        b"(Worker_TP2_DCP2 pid=116852) ERROR 07-31 04:30:09 [multiproc_executor.py:839]"
        b" torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a total"
        b" capacity of 94.97 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process"
        b" has 93.72 GiB memory in use.\n"
        b"(EngineCore pid=116679) ERROR 07-31 04:30:10 [core.py:1017] EngineCore failed to start.\n"
        b"RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    path = tmp_path / "oom.log"
    path.write_bytes(head + oom)
    return path


@pytest.fixture(scope="module")
def ok_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("profile") / "ok.yaml"
    path.write_text(build_profile(OK_LOG, environ={}).text, encoding="utf-8")
    return path


@pytest.fixture
def env(clean_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return dict(
        clean_env,
        GLMLAUNCH_VLLM_BIN=str(FAKE),
        GLMLAUNCH_INVENTORY=str(INVENTORY),
        GLMLAUNCH_SKIP_PREFLIGHT="1",
    )


def test_an_oom_is_said_with_the_allocation_and_the_process(
    ok_profile: Path, env: dict[str, str], tmp_path: Path
) -> None:
    code, _, err = finish(start(ok_profile, env, log=str(_oom_log(tmp_path)), then="exit:1"))
    assert code == 1, err
    doc = outcome(env)
    assert doc["outcome"] == "oom"
    assert doc["diagnosis"] == (
        "CUDA out of memory in Worker_TP2_DCP2: tried to allocate 2.00 GiB on GPU 2 "
        "(1.23 GiB free of 94.97 GiB)"
    )
    assert doc["timeline"]["phases"][-1]["name"] == "profile"  # it died profiling, after the load
    # the boot never reached ready, and its log still calibrates (W, and what came before the OOM)
    assert doc["record"]["record_id"] is not None


def test_a_workers_traceback_is_the_diagnosis(ok_profile: Path, env: dict[str, str]) -> None:
    # the real boot that died loading the EXL3 extension (README of the fixtures: "truncated")
    code, out, err = finish(start(ok_profile, env, log=str(TRUNCATED_LOG), then="exit:1"))
    assert code == 1, err
    assert out == TRUNCATED_LOG.read_bytes()
    doc = outcome(env)
    assert doc["outcome"] == "failed"
    assert doc["diagnosis"] == (
        "Worker_TP3_DCP3: ModuleNotFoundError: No module named 'exllamav3_ext' (exited 1 during profile)"
    )
    assert f"failed: {doc['diagnosis']}" in err


@pytest.mark.parametrize(
    ("code", "sig", "expected"),
    [
        (3, None, 3),
        (0, None, 0),
        (None, signal.SIGTERM, -signal.SIGTERM),
        (None, signal.SIGKILL, -signal.SIGKILL),
    ],
)
def test_glmlaunch_ends_as_vllm_ended(
    code: int | None, sig: int | None, expected: int, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from glmlaunch.supervise.process import block_signals, exit_like; "
            f"block_signals(); exit_like({code}, {sig})",
        ],
        cwd=tmp_path,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == expected, done.stderr


def test_a_crash_signal_is_relayed_without_a_core_of_glmlaunch(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource; resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY,) * 2); "
            "from glmlaunch.supervise.process import exit_like; exit_like(None, 11)",
        ],
        cwd=tmp_path,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == -signal.SIGSEGV, done.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("core")]


def test_a_hang_then_a_stop_is_diagnosed_as_the_hang() -> None:
    from glmlaunch.supervise.outcome import classify

    timeline = _fed(TRUNCATED_LOG)
    timeline.expected_s = {**timeline.expected_s, "profile": 60.0}
    assert timeline.check_hang(80.0) is not None
    verdict = classify(
        code=None,
        sig=signal.SIGTERM,
        ready=False,
        timeline=timeline,
        findings={},
        boot=None,
        stopped_by="SIGTERM from glmlaunch's caller",
    )
    assert verdict.kind == "hung"
    assert verdict.diagnosis == (
        "no progress past profile for 1 min 11 s (expected at most 1 min, defaults); vLLM then killed by "
        "signal 15 (SIGTERM) after SIGTERM from glmlaunch's caller"
    )
