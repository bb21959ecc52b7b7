"""Conventions of a well-made CLI (issue 11, the parts done so far): a closed pipe is not an error, bare
``glmlaunch`` is help, a device total needs its unit, YAML's bare ``off`` means off."""

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
