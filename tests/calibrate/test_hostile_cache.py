"""Issue 13: a bad file in the calibration cache is skipped with one warning, never fatal (items 9, 12, 14);
a boot log with absurd numbers is parsed with the line reported, never a crash (item 11)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from glmlaunch.calibrate.store import Store
from glmlaunch.config import limits
from glmlaunch.vllmlog.boot import parse_log_file, parse_log_text
from tests.conftest import FIXTURES, run_cli

TIMEOUT = 15
BOOT_LOG = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v1-server.log"


def _make_bad_files(directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (directory / "utf8.json").write_bytes(b"\xff")
    (directory / "bigint.json").write_text('{"kind": ' + "9" * 5000 + "}")
    (directory / "zero.json").symlink_to("/dev/zero")
    os.mkfifo(directory / "fifo.json")
    with (directory / "huge.json").open("wb") as fh:
        fh.truncate(limits.MAX_RECORD_BYTES + 1)
    (directory / "dir.json").mkdir()
    return ["deep", "utf8", "bigint", "zero", "fifo", "huge", "dir"]


def test_store_skips_every_bad_file_with_one_warning(tmp_path: Path) -> None:
    names = _make_bad_files(tmp_path / "calibration")
    loaded = Store(tmp_path / "calibration").load()
    assert loaded.records == ()
    assert len(loaded.warnings) == len(names)
    for name in names:
        assert sum(f"{name}.json:" in w for w in loaded.warnings) == 1, loaded.warnings


def test_store_with_a_name_too_long(tmp_path: Path) -> None:
    loaded = Store(tmp_path / ("c" * 300) / "calibration").load()
    assert loaded.records == () and len(loaded.warnings) == 1 and "NAME_MAX" in loaded.warnings[0]


@pytest.mark.parametrize("command", [["plan", "-p", "turnkey"], ["calibrate", "list"]])
def test_commands_survive_a_hostile_cache(
    tmp_path: Path, clean_env: dict[str, str], command: list[str]
) -> None:
    _make_bad_files(Path(clean_env["GLMLAUNCH_CACHE_DIR"]) / "calibration")
    proc = run_cli(*command, env=clean_env, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("skipped ") == 7


def test_plan_with_cache_dir_name_too_long(tmp_path: Path, clean_env: dict[str, str]) -> None:
    env = {**clean_env, "GLMLAUNCH_CACHE_DIR": str(tmp_path / ("c" * 300))}
    proc = run_cli("plan", "-p", "turnkey", env=env, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "NAME_MAX" in proc.stderr


@pytest.mark.parametrize("number", ["1e400", "1" + "0" * 400, "1" + "0" * 5000])
def test_boot_log_with_absurd_numbers(tmp_path: Path, clean_env: dict[str, str], number: str) -> None:
    text = BOOT_LOG.read_text(encoding="utf-8", errors="surrogateescape")
    text = re.sub(r"Model loading took [0-9.]+ GiB", f"Model loading took {number} GiB", text)
    text = text.replace("pid=", "pid=" + "9" * 5000, 2)
    log = tmp_path / "boot.log"
    log.write_text(text, encoding="utf-8", errors="surrogateescape")
    boot = parse_log_file(log)  # never raises
    assert all(r.weights_bytes is None or r.weights_bytes < 2**63 for r in boot.ranks)
    proc = run_cli("calibrate", "ingest", str(log), env=clean_env, timeout=TIMEOUT)
    assert proc.returncode in (0, 2), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_boot_log_number_out_of_range_is_reported() -> None:
    line = (
        "(Worker_TP0 pid=1) INFO 07-31 05:18:36 [x.py:1] Model loading took 1" + "0" * 400 + " GiB and 3 s\n"
    )
    boot = parse_log_text(line)
    assert any("out of range" in u for r in boot.ranks for u in r.unparsed)


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
def test_ingest_refuses_non_regular_logs(tmp_path: Path, clean_env: dict[str, str], kind: str) -> None:
    path = tmp_path / "x.log"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    proc = run_cli("calibrate", "ingest", str(path), "--dry-run", env=clean_env, timeout=TIMEOUT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")]
