"""What a person sees: the live table on a terminal, explain-oom's tables, at 80 columns with nothing cut
(output.fit), and stderr's one line per change. Real processes on a pseudo-terminal."""

from __future__ import annotations

from tests.conftest import FIXTURES, run_cli
from tests.plan.ptyrun import run_on_tty

WATCH = FIXTURES / "watch"
PROFILE = str(WATCH / "h200.yaml")
BOX = "┏┃│┡└┌├┗┣┳╇━"


def _fits(lines: list[str], columns: int = 80) -> None:
    # the live view returns to a line's start ("\r") before it redraws: what is shown is each part
    lines = [part for line in lines for part in line.split("\r")]
    text = "\n".join(lines)
    assert "…" not in text, text
    wide = [line for line in lines if line[:1] in BOX and len(line) > columns]
    assert not wide, wide[:3]


def test_the_live_view_redraws_one_table_that_fits(clean_env: dict[str, str]) -> None:
    env = {k: v for k, v in clean_env.items() if k != "COLUMNS"}
    run = run_on_tty(
        "watch",
        "-p",
        PROFILE,
        "--replay",
        str(WATCH / "foreign.json"),
        "--speed",
        "40",
        env=env,
        stream="stdout",
        columns=80,
    )
    assert run.returncode == 0, run.other
    _fits(run.tty_lines)
    assert "glmlaunch watch: h200 (replay" in run.tty
    for state in ("starting", "ok", "warn", "critical"):
        assert f" {state} " in run.tty
    # stderr, a file here, says each change once, not once per redraw
    assert run.other.count("ok -> warn") == 1 and run.other.count("warn -> critical") == 1


def test_explain_oom_tables_fit_80_columns(clean_env: dict[str, str]) -> None:
    env = {k: v for k, v in clean_env.items() if k != "COLUMNS"}
    run = run_on_tty(
        "explain-oom", "-p", PROFILE, str(WATCH / "oom.log"), env=env, stream="stdout", columns=80
    )
    assert run.returncode == 0, run.other
    _fits(run.tty_lines)
    text = " ".join(" ".join(run.tty_lines).split())
    assert "demand.prefill_growth" in text and "memory.num_gpu_blocks_override=8192" in text


def test_piped_and_quiet_a_watch_prints_no_data_but_still_warns(clean_env: dict[str, str]) -> None:
    done = run_cli("-q", "watch", "-p", PROFILE, "--replay", str(WATCH / "prefill.json"), env=clean_env)
    assert done.returncode == 0 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert [line.split(": ")[3].split(" ->")[0] for line in lines if "->" in line] == ["ok", "warn"]
    assert all(line.startswith("warning: watch: rank 0") for line in lines)
