"""Issue 22, item 14: the tables of `calibrate search`, `calibrate list`, `hw` and `diff` read at 80 columns,
as `plan` and `check` do: every table line fits, nothing is cut with "…", ids, dates and figures stay whole
(output.fit: wide tables are stacked one row per section). Real subprocesses on a pseudo-terminal."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, run_cli
from tests.plan.ptyrun import run_on_tty

INVENTORY = str(FIXTURES / "inventories" / "rtxpro6000x4.json")
BOX = "┏┃│┡└┌├┗┣"
GMU = "memory.gpu_memory_utilization=0.93"


@pytest.fixture
def with_records(clean_env: dict[str, str]) -> dict[str, str]:
    for log in sorted((FIXTURES / "boot-logs").glob("*.log")):
        assert run_cli("-q", "calibrate", "ingest", str(log), env=clean_env).returncode == 0
    return clean_env


def _tty(args: tuple[str, ...], env: dict[str, str], columns: int = 80) -> str:
    env = {k: v for k, v in env.items() if k != "COLUMNS"}
    run = run_on_tty(*args, env=env, stream="stdout", columns=columns)
    assert run.returncode in (0, 4), run.other
    text = "\n".join(run.tty_lines)
    assert "…" not in text, text
    too_long = [line for line in run.tty_lines if line[:1] in BOX and len(line) > columns]
    assert not too_long, too_long[:3]
    return text


@pytest.mark.parametrize(
    "args",
    [
        ("calibrate", "search", "-p", "turnkey", "--no-write"),
        ("calibrate", "search", "-p", "turnkey", "--no-write", "--objective", "max-kv-bytes"),
        ("calibrate", "search", "-p", "r12-exl3", "--no-write", "--objective", "max-gmu"),
        ("hw", "--inventory", INVENTORY),
        ("diff", "gate", "turnkey"),
        ("diff", "gate", "turnkey", f"--set={GMU}", "--set=scheduler.max_num_seqs=2"),
        ("calibrate", "show", "-p", "r12-exl3"),
        ("profiles", "list"),
    ],
)
def test_tables_fit_80_columns_and_cut_nothing(args: tuple[str, ...], with_records: dict[str, str]) -> None:
    text = _tty(args, with_records)
    if args[0] == "diff":
        doc = json.loads(run_cli(*args, "--json", env=with_records).stdout)
        for entry in doc["entries"]:
            if entry["left_device_bytes"] != entry["right_device_bytes"]:
                assert entry["name"] in text
    if args[:2] == ("calibrate", "search"):
        doc = json.loads(run_cli(*args, "--json", env=with_records).stdout)
        assert f"{doc['best']['value']:,}" in text.replace("\n", " ") or str(doc["best"]["value"]) in text


def test_calibrate_list_keeps_ids_and_dates_whole(with_records: dict[str, str]) -> None:
    doc = json.loads(run_cli("calibrate", "list", "--json", env=with_records).stdout)
    for columns in (80, 60):
        text = _tty(("calibrate", "list"), with_records, columns)
        for record in doc["records"]:
            assert record["record_id"] in text
            assert re.search(record["created_at"][:10] + r" \d\d:\d\d", text)


def test_a_wide_terminal_keeps_one_row_per_record(with_records: dict[str, str]) -> None:
    text = _tty(("calibrate", "list"), with_records, 200)
    header = next(line for line in text.splitlines() if " id " in line)
    for column in ("created", "profile", "usable", "ranks", "W", "log"):
        assert f" {column} " in header


def test_piped_output_keeps_the_full_tables(with_records: dict[str, str], tmp_path: Path) -> None:
    res = run_cli("diff", "gate", "turnkey", env=with_records)
    header = next(line for line in res.stdout.splitlines() if "entry" in line)
    assert "gate" in header and "turnkey" in header and "delta" in header
