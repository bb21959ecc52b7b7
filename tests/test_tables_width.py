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
        # the best value, or (nothing feasible: the turnkey's pins all fail at the band's low edge) the
        # closest one that failed, whole in the table
        shown = doc["best"] or doc["closest_failed"]
        assert shown is not None, doc
        assert f"{shown['value']:,}" in text.replace("\n", " ") or str(shown["value"]) in text


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


# --- issue 31, item 11: every table command over every shipped profile at 80 and 140 columns ---------------

PROFILES = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "profiles").glob("*.yaml"))
#: the ends of the range where cells were cut (a layout that keeps cells whole at both keeps them between)
WIDTHS = (80, 140)


def _every_line_fits(args: tuple[str, ...], env: dict[str, str], columns: int) -> str:
    """``glmlaunch ARGS`` on a terminal of ``columns``: nothing cut with "…", no line wider than it."""
    env = {k: v for k, v in env.items() if k != "COLUMNS"}
    run = run_on_tty(*args, env=env, stream="stdout", columns=columns)
    assert run.returncode in (0, 4), run.other
    text = "\n".join(run.tty_lines)
    assert "…" not in text, [line for line in run.tty_lines if "…" in line][:5]
    too_long = [line for line in run.tty_lines if len(line) > columns]
    assert not too_long, too_long[:3]
    return text


def _column_texts(text: str) -> list[str]:
    """Each column of the boxed tables in ``text``, its lines joined without blanks: a value wrapped or
    folded over several lines of its column reads whole again."""
    columns: dict[int, str] = {}
    for line in text.splitlines():
        if "│" in line:
            for i, cell in enumerate(line.split("│")[1:-1]):
                columns[i] = columns.get(i, "") + "".join(cell.split())
    return list(columns.values())


@pytest.mark.slow
@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("profile", PROFILES)
def test_config_cuts_no_value_and_no_source(profile: str, columns: int, clean_env: dict[str, str]) -> None:
    text = _every_line_fits(("config", "-p", profile), clean_env, columns)
    doc = json.loads(run_cli("config", "-p", profile, "--json", env=clean_env).stdout)
    cells = "".join(_column_texts(text))
    for key, source in doc["sources"].items():
        assert key in text  # keys are never wrapped
        assert "".join(source.split()) in cells, (key, source)
    path = doc["config"]["model"]["path"]
    assert f'"{path}"' in cells


@pytest.mark.slow
@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("profile", PROFILES)
def test_plan_and_audit_cut_nothing(profile: str, columns: int, clean_env: dict[str, str]) -> None:
    plan = _every_line_fits(("plan", "-p", profile), clean_env, columns)
    assert "budget per rank" in plan and "verdict:" in plan
    audit = _every_line_fits(("audit", "-p", profile), clean_env, columns)
    doc = json.loads(run_cli("audit", "-p", profile, "--json", env=clean_env).stdout)
    for finding in doc["findings"]:
        assert f" {finding['id']} " in audit, finding["id"]  # an id is whole, on one line


@pytest.mark.slow
@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize(
    "args",
    [
        ("diff", "gate", "turnkey"),
        ("diff", "turnkey", "r12-exl3"),
        ("diff", "ii-r18-exl3-r7", "r34-exl3-r7"),
        ("diff", "turnkey", "--set", "comm.single_channel=true"),
        ("check", "-p", "turnkey", "--inventory", INVENTORY),
        ("profiles", "list"),
    ],
)
def test_other_tables_cut_nothing(args: tuple[str, ...], columns: int, clean_env: dict[str, str]) -> None:
    _every_line_fits(args, clean_env, columns)


def test_a_two_column_table_that_cannot_keep_its_whole_columns_folds_them() -> None:
    from rich.console import Console
    from rich.table import Table

    from glmlaunch.output import fit

    table = Table()
    table.add_column("id", no_wrap=True)
    table.add_column("what", no_wrap=True)
    table.add_row("x" * 50, "y" * 50)
    console = Console(width=60, record=True, color_system=None)
    console.print(fit(table, width=60))
    text = console.export_text()
    assert "…" not in text
    assert "".join(text.replace("│", "").split()).count("x") == 50  # folded, not cut


def test_stderr_messages_wrap_at_words_on_a_terminal(clean_env: dict[str, str]) -> None:
    env = {k: v for k, v in clean_env.items() if k != "COLUMNS"}
    run = run_on_tty("config", "-p", "no-such-profile", env=env, stream="stderr", columns=60)
    assert run.returncode == 2
    lines = [line for line in run.tty_lines if line]
    assert len(lines) > 1 and all(len(line) <= 60 for line in lines), lines
    assert lines[0].startswith("error: ") and all(line.startswith("  ") for line in lines[1:])
    words = " ".join(lines).split()
    piped = run_cli("config", "-p", "no-such-profile", env=clean_env).stderr
    assert words == piped.split()  # the same words, broken between them, never inside one
    assert len(piped.splitlines()) == 1  # a pipe or a log keeps one message on one line
