"""Conventions of a well-made CLI (issue 11): a closed pipe is not an error, bare ``glmlaunch`` (or a bare
group) is help, a device total needs its unit, YAML's bare ``off`` means off, every failure is one
``error: …`` line (click's usage errors included), and ``--quiet`` silences the narration but not warnings
or errors. Completion and help have their own files (test_completion.py, test_help.py)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import glmlaunch_exe, run_cli


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "-p", "turnkey"),
        ("plan", "-p", "turnkey", "--json"),
        ("config", "-p", "gate"),
        ("profiles", "list"),
    ],
)
def test_a_reader_that_stops_early_is_not_an_error(args: tuple[str, ...], clean_env: dict[str, str]) -> None:
    command = " ".join(shlex.quote(a) for a in [*glmlaunch_exe(), *args])
    # PIPESTATUS[0]: glmlaunch's own exit status, after `head -1` has closed the pipe
    script = f"{command} 2>/dev/null | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}"
    res = subprocess.run(["bash", "-c", script], env=clean_env, capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "0", res.stderr


def test_bare_glmlaunch_prints_help_and_exits_0(clean_env: dict[str, str]) -> None:
    res = run_cli(env=clean_env)
    assert res.returncode == 0 and res.stdout.startswith("Usage: glmlaunch") and "plan" in res.stdout


def test_a_device_total_without_a_unit_is_refused(clean_env: dict[str, str]) -> None:
    res = run_cli("plan", "-p", "turnkey", "--gpu-memory", "96", env=clean_env)
    assert res.returncode == 2 and "error: --gpu-memory: a device total needs a unit" in res.stderr
    assert "96GiB" in res.stderr
    assert run_cli("plan", "-p", "turnkey", "--gpu-memory", "96GiB", env=clean_env).returncode == 0


def test_yaml_bare_off_turns_the_dma_crossover_off(tmp_path: Path, clean_env: dict[str, str]) -> None:
    profile = tmp_path / "off.yaml"
    profile.write_text("extends: gate\ncomm:\n  dma_min_bytes: off\n")
    res = run_cli("config", "-p", str(profile), "--json", env=clean_env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["config"]["comm"]["dma_min_bytes"] is None


# --- one error style -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "names", "hint_path"),
    [
        (("plan", "--bogus"), "--bogus", "glmlaunch plan"),
        (("plann",), "plann", "glmlaunch"),
        (("diff",), "missing argument 'A'", "glmlaunch diff"),
        (("plan", "-p"), "-p", "glmlaunch plan"),
        (("calibrate", "search", "--step", "x"), "--step", "glmlaunch calibrate search"),
        (("check", "--strict=3"), "--strict", "glmlaunch check"),
        (("--show-completion", "tcsh"), "tcsh", None),
    ],
)
def test_usage_errors_are_one_error_line_with_the_way_to_the_help(
    args: tuple[str, ...], names: str, hint_path: str | None, clean_env: dict[str, str]
) -> None:
    res = run_cli(*args, env=clean_env)
    assert res.returncode == 2 and res.stdout == ""
    lines = res.stderr.splitlines()
    # click writes "Usage: …", "Try '… --help' for help.", "Error: …" on three lines
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert names in lines[0]
    if hint_path is not None:
        assert f"hint: `{hint_path} -h` shows the usage" in lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "-p", "no-such-profile"),
        ("plan", "-p", "turnkey", "--set", "scheduler.max_num_seqs=lots"),
        ("plan", "-p", "turnkey", "--gpu-memory", "96"),
        ("calibrate", "ingest", "/nonexistent/boot.log"),
        ("hw", "--inventory", "/nonexistent/rig.json"),
        ("env", "--shell", "tcsh"),
        ("profiles", "show", "nope"),
        ("serve", "-p", "turnkey", "--json"),
    ],
)
def test_every_failure_speaks_with_the_same_prefix(args: tuple[str, ...], clean_env: dict[str, str]) -> None:
    res = run_cli(*args, env=clean_env)
    assert res.returncode != 0
    lines = res.stderr.splitlines()
    assert lines and lines[-1].startswith("error: "), res.stderr
    for line in lines:
        assert not line.startswith(("Error", "ERROR", "Usage:", "Try ", "glmlaunch:", "Warning", "WARN")), (
            line
        )


@pytest.mark.parametrize("group", ["profiles", "calibrate"])
def test_a_bare_group_prints_its_help_and_exits_0(group: str, clean_env: dict[str, str]) -> None:
    res = run_cli(group, env=clean_env)
    assert res.returncode == 0 and res.stderr == ""
    assert res.stdout.startswith(f"Usage: glmlaunch {group} ") and "Commands:" in res.stdout


# --- --quiet -------------------------------------------------------------------------------------------


def test_quiet_silences_the_notes_of_diff(clean_env: dict[str, str]) -> None:
    loud = run_cli("diff", "gate", "turnkey", env=clean_env)
    assert loud.returncode == 0 and loud.stderr != ""  # the test means something: diff does narrate
    for res in (
        run_cli("-q", "diff", "gate", "turnkey", env=clean_env),
        run_cli("--quiet", "diff", "gate", "turnkey", env=clean_env),
        run_cli("diff", "gate", "turnkey", env=dict(clean_env, GLMLAUNCH_QUIET="1")),
    ):
        assert res.returncode == 0 and res.stderr == ""
        assert res.stdout == loud.stdout  # data is never quieted


def test_quiet_silences_progress_too(clean_env: dict[str, str]) -> None:
    # the CPU preflight reports each worker's progress as it goes
    loud = run_cli("preflight", "-p", "turnkey", "--device", "cpu", env=clean_env, timeout=120)
    assert loud.returncode == 0 and "started 4 worker(s)" in loud.stderr
    quiet = run_cli("-q", "preflight", "-p", "turnkey", "--device", "cpu", env=clean_env, timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_quiet_keeps_warnings_and_errors(clean_env: dict[str, str]) -> None:
    warned = run_cli("-q", "config", "-p", "turnkey", "--set", "env.VLLM_FOO_BAR=1", env=clean_env)
    assert warned.returncode == 0
    assert warned.stderr.splitlines() == [
        line for line in warned.stderr.splitlines() if line.startswith("warning: ")
    ]
    assert "env.VLLM_FOO_BAR" in warned.stderr
    failed = run_cli("-q", "plan", "-p", "no-such-profile", env=clean_env)
    assert failed.returncode == 2 and failed.stderr.startswith("error: profile: profile not found")
    failed = run_cli("plan", "-p", "no-such-profile", env=dict(clean_env, GLMLAUNCH_QUIET="1"))
    assert failed.returncode == 2 and failed.stderr.startswith("error: ")


_BUG = """
import sys
import glmlaunch.plan.planner as planner

def plan_profile(*args, **kwargs):
    raise RuntimeError("a bug in the planner")

planner.plan_profile = plan_profile  # the command imports it when it runs
from glmlaunch.cli import main
sys.argv = ["glmlaunch", "plan", "-p", "turnkey"]
main()
"""


def test_a_bug_is_one_error_line_exit_1_and_a_traceback_on_request(clean_env: dict[str, str]) -> None:
    import sys

    res = subprocess.run(
        [sys.executable, "-c", _BUG], env=clean_env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        "error: internal error: RuntimeError: a bug in the planner; hint: run again with GLMLAUNCH_DEBUG=1 "
        "for the traceback, and report it"
    ]
    debug = dict(clean_env, GLMLAUNCH_DEBUG="1")
    res = subprocess.run([sys.executable, "-c", _BUG], env=debug, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "Traceback" in res.stderr and "a bug in the planner" in res.stderr
