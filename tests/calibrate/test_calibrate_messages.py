"""What the calibrate commands say (issue 11): each fact once, the hint that fixes the real blocker, and a
``calibrate list`` table whose ids and dates stay whole at any width.

Real subprocesses of ``glmlaunch`` on the real boot logs of ``tests/fixtures/boot-logs``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, _clean_env, glmlaunch_exe, run_cli

REAL = FIXTURES / "boot-logs"
REFUSED = "vllm-current210-unset-mtp3-v1-server.log"
TRUNCATED = "vllm-current210-cap1024-mtp3-v1-server.log"
COTENANT = FIXTURES / "inventories" / "rtxpro6000x4-cotenant-40g.json"


@pytest.fixture(scope="module")
def ingested(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[dict[str, str], subprocess.CompletedProcess[str]]:
    """A store holding the five real boots, and what ``ingest`` said while filling it."""
    tmp = tmp_path_factory.mktemp("store")
    (tmp / "home").mkdir()
    env = _clean_env(tmp)
    done = run_cli("calibrate", "ingest", *map(str, sorted(REAL.glob("*.log"))), env=env)
    assert done.returncode == 0, done.stderr
    return env, done


def _lines_about(stderr: str, name: str) -> list[str]:
    return [line for line in stderr.splitlines() if name in line]


# --- ingest: each fact once -----------------------------------------------------------------------------


def test_ingest_says_the_refusal_once_in_vllms_unit(
    ingested: tuple[dict[str, str], subprocess.CompletedProcess[str]],
) -> None:
    _, done = ingested
    said = done.stderr
    # one line for the refusal, in the GiB figures vLLM printed, with what the record still serves for
    assert said.count("131072-token request") == 1, said
    (refusal,) = [line for line in said.splitlines() if "131072-token request" in line]
    assert "0.98 GiB of KV, 0.82 GiB available" in refusal and "MiB" not in refusal
    assert "still calibrate the term model" in refusal
    assert said.count("vLLM refused to start") == 0


def test_ingest_says_a_truncated_log_once(
    ingested: tuple[dict[str, str], subprocess.CompletedProcess[str]],
) -> None:
    _, done = ingested
    about = [line for line in _lines_about(done.stderr, TRUNCATED) if "vLLM " not in line]
    assert len(about) == 1, about
    assert "truncated" in about[0] and "activation_peak_bytes, non_torch_bytes" in about[0]
    assert done.stderr.count("activation_peak_bytes") == 1
    assert "the log ends before every expected line was written" not in done.stderr
    # no line of what ingest said is said twice
    lines = done.stderr.splitlines()
    assert len(lines) == len(set(lines))


def test_show_of_a_refused_record_says_the_refusal_once(
    ingested: tuple[dict[str, str], subprocess.CompletedProcess[str]],
) -> None:
    env, _ = ingested
    listed = json.loads(run_cli("calibrate", "list", "--json", env=env).stdout)["records"]
    refused = next(r["record_id"] for r in listed if r["log"]["source"].endswith(REFUSED))
    shown = run_cli("calibrate", "show", refused, env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr.count("131072-token request") == 1, shown.stderr


@pytest.mark.parametrize("log", ["/nonexistent-glmlaunch.log", "EMPTY"])
def test_an_ingest_error_stands_alone(log: str, clean_env: dict[str, str], tmp_path: Path) -> None:
    if log == "EMPTY":
        log = str(tmp_path / "empty.log")
        Path(log).write_text("hello\n")
    done = run_cli("calibrate", "ingest", log, env=clean_env)
    assert done.returncode == 2
    # no "no inventory: …" note about a record that was never made
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
    assert done.stderr.startswith("error: LOG: ")


@pytest.mark.parametrize(
    "command",
    [["calibrate", "show", "-p", "turnkey"], ["calibrate", "search", "-p", "turnkey", "--no-write"]],
)
def test_records_that_do_not_apply_are_listed_once(
    ingested: tuple[dict[str, str], subprocess.CompletedProcess[str]], command: list[str]
) -> None:
    env, _ = ingested
    done = run_cli(*command, env=env)
    assert done.returncode == 0, done.stderr
    ids = [
        r["record_id"] for r in json.loads(run_cli("calibrate", "list", "--json", env=env).stdout)["records"]
    ]
    assert len(ids) == 5
    for record_id in ids:
        assert done.stderr.count(record_id) == 1, done.stderr
    assert "more)" not in done.stderr


# --- search: a hint per blocker, said once ------------------------------------------------------------------


def _verdict(env: dict[str, str], *sets: str) -> dict[str, Any]:
    args = ["plan", "-p", "turnkey", "--json"]
    for s in sets:
        args += ["--set", s]
    done = run_cli(*args, env=env)
    assert done.returncode in (0, 4), done.stderr
    verdict = json.loads(done.stdout)["verdict"]
    assert isinstance(verdict, dict)
    return verdict


def test_the_start_gate_hint_names_the_gmu_that_passes(clean_env: dict[str, str]) -> None:
    done = run_cli(
        "calibrate", "search", "-p", "turnkey", "--set", "memory.gpu_memory_utilization=0.99", "--no-write",
        env=clean_env,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert "blocked by the start gate" in error
    hint = error.split("; hint: ", 1)[1]
    parts = hint.split("; ")
    assert len(parts) == len(set(parts)), hint
    # nobody else holds memory (U_oth 0): freeing it is no remedy
    assert "free memory" not in hint and "glmlaunch hw" not in hint
    assert hint.startswith(
        "for the start gate and the negative margin: lower memory.gpu_memory_utilization: "
    )
    gate, margin = (float(x) for x in re.findall(r"(0\.\d{3}) (?:is )?the highest", hint))
    # the GMUs it names are the real boundaries, as plan judges them
    assert "start-gate" not in [
        b["id"] for b in _verdict(clean_env, f"memory.gpu_memory_utilization={gate}")["blockers"]
    ]
    above = _verdict(clean_env, f"memory.gpu_memory_utilization={gate + 0.001:.3f}")
    assert "start-gate" in [b["id"] for b in above["blockers"]]
    assert _verdict(clean_env, f"memory.gpu_memory_utilization={margin}")["ok"]
    assert not _verdict(clean_env, f"memory.gpu_memory_utilization={margin + 0.001:.3f}")["ok"]


def test_freeing_memory_is_offered_only_when_others_hold_some(clean_env: dict[str, str]) -> None:
    done = run_cli(
        "calibrate", "search", "-p", "turnkey", "--inventory", str(COTENANT), "--no-write", env=clean_env
    )
    assert done.returncode == 4, done.stderr
    hint = done.stderr.strip().splitlines()[-1].split("; hint: ", 1)[1]
    assert hint.count("free memory on the GPUs") == 1, hint
    assert "held by other processes" in hint


def test_a_margin_hint_gives_each_remedy_once(clean_env: dict[str, str]) -> None:
    done = run_cli(
        "calibrate", "search", "-p", "turnkey", "--min-margin", "3GiB", "--no-write", env=clean_env
    )
    assert done.returncode == 4, done.stderr
    hint = done.stderr.strip().splitlines()[-1].split("; hint: ", 1)[1]
    assert hint.count("for the margin") == 1, hint
    assert "lower the required margin" in hint and "free memory" not in hint


# --- calibrate list: ids and dates whole, long text wrapped ----------------------------------------------


def _check_list_table(text: str, ids: list[str]) -> None:
    header = next(line for line in text.splitlines() if "┃" in line and " id " in line)
    cells = [c.strip() for c in header.strip("┃ \n").split("┃")]
    assert cells == ["id", "created", "profile", "usable", "ranks", "W", "log"], header
    for record_id in ids:
        assert record_id in text, (record_id, text)
    dates = re.findall(r"│ \d{4}-\d{2}-\d{2} \d{2}:\d{2} │", text)
    assert len(dates) == len(ids), text


def test_list_is_readable_when_piped(
    ingested: tuple[dict[str, str], subprocess.CompletedProcess[str]],
) -> None:
    env, _ = ingested
    ids = [
        r["record_id"] for r in json.loads(run_cli("calibrate", "list", "--json", env=env).stdout)["records"]
    ]
    done = run_cli("calibrate", "list", env=env)
    assert done.returncode == 0, done.stderr
    _check_list_table(done.stdout, ids)


@pytest.mark.parametrize("columns", [150, 120])
def test_list_is_readable_on_a_terminal(
    ingested: tuple[dict[str, str], subprocess.CompletedProcess[str]], columns: int
) -> None:
    env, _ = ingested
    ids = [
        r["record_id"] for r in json.loads(run_cli("calibrate", "list", "--json", env=env).stdout)["records"]
    ]
    leader, follower = os.openpty()
    try:
        proc = subprocess.run(
            [*glmlaunch_exe(), "calibrate", "list"],
            env={**env, "COLUMNS": str(columns), "LINES": "50", "TERM": "xterm"},
            stdin=subprocess.DEVNULL,
            stdout=follower,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal's other end is closed: everything is read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
    assert proc.returncode == 0, proc.stderr
    text = re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode()).replace("\r\n", "\n")
    assert max(len(line) for line in text.splitlines()) <= columns
    _check_list_table(text, ids)


# --- issue 22, item 15: data on stdout (and in --json), the same figures everywhere ---------------------


def test_show_says_where_each_term_came_from_on_stdout_also_when_quiet(
    ingested: tuple[dict[str, str], subprocess.CompletedProcess[str]],
) -> None:
    env, _ = ingested
    quiet = run_cli("-q", "calibrate", "show", "-p", "r12-exl3", env=env)
    assert quiet.returncode == 0, quiet.stderr
    doc = json.loads(run_cli("calibrate", "show", "-p", "r12-exl3", "--json", env=env).stdout)
    for line in doc["term_model"]["explain"].values():
        assert line in quiet.stdout
    assert quiet.stderr == ""


@pytest.mark.parametrize("version", ["dev", None])
def test_show_table_and_explanation_agree_on_n(
    ingested: tuple[dict[str, str], subprocess.CompletedProcess[str]], version: str | None
) -> None:
    """N of the plan's vLLM build: the table's records and figure are the explanation's."""
    env, _ = ingested
    sets = ["--set", f"vllm_version={version}"] if version else []
    doc = json.loads(run_cli("calibrate", "show", "-p", "r12-exl3", *sets, "--json", env=env).stdout)
    n = doc["term_model"]["terms"]["n"]
    explain = doc["term_model"]["explain"]["n"]
    for record in n["records"]:
        assert record in explain
    assert f"{', '.join(n['records'])}" in explain
    coefficient = next(iter(n["coefficients_bytes"].values()))
    assert f"{abs(coefficient) / 2**20:,.1f} MiB" in explain
    text = run_cli("calibrate", "show", "-p", "r12-exl3", *sets, env=env).stdout
    row = next(line for line in text.splitlines() if line.startswith("│ n "))
    assert f"│ {len(n['records'])} " in row


def test_search_prints_the_pinned_alternative_on_stdout_also_when_quiet(clean_env: dict[str, str]) -> None:
    # half the turnkey's context: at its own, the fixed pool the band's low edge leaves holds less than one
    # request, and no pinned alternative is offered (tests/plan/test_advice.py)
    args = ("calibrate", "search", "-p", "turnkey", "--set", "scheduler.max_model_len=262144", "--no-write")
    doc = json.loads(run_cli(*args, "--json", env=clean_env).stdout)
    assert isinstance(doc["kv_cache_memory_bytes"], int)
    quiet = run_cli("-q", *args, env=clean_env)
    assert quiet.returncode == 0, quiet.stderr
    assert f"--kv-cache-memory-bytes={doc['kv_cache_memory_bytes']}" in quiet.stdout
