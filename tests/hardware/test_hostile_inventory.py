"""Issue 13: hostile --inventory files give one line and exit 2 (items 7, 8, 11, 12)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import run_cli

TIMEOUT = 15


def _refused(env: dict[str, str], path: Path) -> str:
    proc = run_cli("check", "-p", "turnkey", "--inventory", str(path), env=env, timeout=TIMEOUT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--inventory" in errors[0], proc.stderr[-2000:]
    return errors[0]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nests deeper"),
        (b"\xff", "not UTF-8"),
        (b'{"schema_version": 1, "x": ' + b"9" * 5000 + b"}", "digits"),
        (b"[" * 65 + b"]" * 65, "nests deeper"),
    ],
    ids=["deep", "not-utf8", "huge-int", "just-too-deep"],
)
def test_hostile_inventory_file(
    tmp_path: Path, clean_env: dict[str, str], content: bytes, expected: str
) -> None:
    path = tmp_path / "inv.json"
    path.write_bytes(content)
    assert expected in _refused(clean_env, path)


def test_inventory_that_is_a_device_or_fifo(tmp_path: Path, clean_env: dict[str, str]) -> None:
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    assert "character device" in _refused(clean_env, zero)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert "FIFO" in _refused(clean_env, fifo)


def test_inventory_name_too_long(tmp_path: Path, clean_env: dict[str, str]) -> None:
    assert "NAME_MAX" in _refused(clean_env, tmp_path / ("i" * 300 + ".json"))
