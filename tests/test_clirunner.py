"""The in-process runner stands for the console script: the same status, stdout and stderr as a new process,
and nothing of the run left behind in the test process (tests/clirunner.py)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from clirunner import NeedsProcess, in_process
from conftest import FIXTURES, run_cli, run_cli_process

from glmlaunch.errors import ExitCode

#: One of each way a run ends: data, a note, a warning, a usage error, a configuration error, the help,
#: the version, a bare group, a missing file, a secret masked in a message.
CASES: list[tuple[str, ...]] = [
    ("args", "-p", "gate"),
    ("env", "-p", "turnkey", "--shell", "json"),
    ("config", "-p", "turnkey", "--set", "env.VLLM_FOO_BAR=1"),
    ("plan", "-p", "turnkey", "--bogus"),
    ("plan", "-p", "no-such-profile"),
    ("plan", "--help"),
    ("--version",),
    ("profiles",),
    ("check", "-p", "turnkey", "--inventory", "/nonexistent/rig.json"),
    ("config", "-p", "gate", "--set", "env.HF_TOKEN=hf_secretvalue_1234", "--set", "parallel.tp=3"),
    ("check", "-p", "turnkey", "--inventory", str(FIXTURES / "inventories" / "rtxpro6000x4.json"), "--json"),
]


@pytest.mark.parametrize("args", CASES, ids=[" ".join(a)[:60] for a in CASES])
def test_in_process_is_the_console_script(args: tuple[str, ...], clean_env: dict[str, str]) -> None:
    mine = run_cli(*args, env=clean_env)
    real = run_cli_process(*args, env=clean_env)
    assert (mine.returncode, mine.stdout, mine.stderr) == (real.returncode, real.stdout, real.stderr)


def test_the_exit_codes_are_the_documented_ones(clean_env: dict[str, str]) -> None:
    assert run_cli("plan", "-p", "turnkey", "--bogus", env=clean_env).returncode == ExitCode.CONFIG
    assert run_cli("plan", "-p", "no-such-profile", env=clean_env).returncode == ExitCode.CONFIG
    debug = run_cli("config", "-p", "nope", env=dict(clean_env, GLMLAUNCH_DEBUG="1"))
    # the exception escapes main(): what the interpreter reports, a traceback and exit 1
    assert debug.returncode == 1 and debug.stderr.startswith("Traceback (most recent call last):")


def test_nothing_of_a_run_stays_in_this_process(tmp_path: Path, clean_env: dict[str, str]) -> None:
    environ, cwd, argv = dict(os.environ), os.getcwd(), list(sys.argv)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    work = tmp_path / "work"
    work.mkdir()
    done = run_cli("-q", "plan", "-p", "turnkey", env=dict(clean_env, MARKER_VAR="1"), cwd=work)
    assert done.returncode == 0, done.stderr
    assert dict(os.environ) == environ and "MARKER_VAR" not in os.environ
    assert os.getcwd() == cwd and sys.argv == argv
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    from glmlaunch.output import is_quiet

    assert not is_quiet()  # -q was that run's


@pytest.mark.skipif(not in_process(), reason="--cli-subprocess: run_cli is a new process")
def test_a_command_that_would_exec_needs_a_real_process(tmp_path: Path, clean_env: dict[str, str]) -> None:
    vllm = tmp_path / "vllm"
    vllm.write_text("#!/bin/sh\necho 'vllm ran'\n")
    vllm.chmod(0o755)
    # no LMCache: a managed server would make the launch supervised (exec is what this is about)
    args = ("serve", "-p", "turnkey", "--set", "lmcache=false", "--skip-preflight", "--vllm-bin", str(vllm))
    inventory = str(FIXTURES / "inventories" / "rtxpro6000x4.json")
    with pytest.raises(NeedsProcess, match=r"os\.execvpe"):
        run_cli(*args, "--inventory", inventory, env=clean_env)
    real = run_cli_process(*args, "--inventory", inventory, env=clean_env)
    assert real.returncode == 0 and real.stdout == "vllm ran\n", real.stderr
