"""Issue 22, items 5 and 16: a value never becomes a vLLM option, and the argv glmlaunch shows is the argv
that runs (one argument per line in `args`, a bash command line in `serve --dry-run`), whatever a value
holds."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES, run_cli

INVENTORY = FIXTURES / "inventories" / "rtxpro6000x4.json"
BOOT = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log"


@pytest.mark.parametrize(
    "key",
    ["model.path", "model.revision", "model.served_name", "server.host", "server.tool_call_parser"],
)
@pytest.mark.parametrize(
    "command", [("args",), ("config",), ("serve", "--dry-run", "--vllm-bin", "/bin/true")]
)
def test_a_value_that_starts_with_a_dash_is_refused_naming_the_key(
    key: str, command: tuple[str, ...], clean_env: dict[str, str]
) -> None:
    res = run_cli(*command, "-p", "gate", "--set", f"{key}=--chat-template=/etc/passwd", env=clean_env)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(f"error: {key}: starts with '-'"), res.stderr
    assert "--chat-template" not in res.stdout


def test_a_path_that_only_contains_a_dash_is_fine(clean_env: dict[str, str]) -> None:
    res = run_cli("args", "-p", "gate", "--set", "model.path=./-odd/GLM-5.2", "--json", env=clean_env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["argv"][2] == "./-odd/GLM-5.2"


def test_an_imported_log_cannot_set_an_option_through_the_model(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    text = BOOT.read_text(encoding="utf-8").replace(
        "'model': '/workspace/GLM-5.2-EXL3-TR3-3.25bpw'", "'model': '--chat-template=/etc/passwd'", 1
    )
    log = tmp_path / "boot.log"
    log.write_text(text, encoding="utf-8")
    res = run_cli("profiles", "import", str(log), env=clean_env)
    assert res.returncode == 2, res.stderr
    assert "model.path" in res.stderr and res.stdout == ""


HOSTILE_ARGS = ["a\nb", "tab\there", "esc\x1b[31m", "sep\u2028x", "$'looks-quoted'", "plain", "it's"]


def _profile(tmp_path: Path) -> Path:
    prof = tmp_path / "p.yaml"
    argv = [x for pair in (("--x", v) for v in HOSTILE_ARGS) for x in pair]
    prof.write_text(yaml.safe_dump({"extends": "gate", "vllm_args": argv}, allow_unicode=True))
    return prof


def _bash_words(text: str, tmp_path: Path) -> list[str]:
    """The words bash reads from ``text`` (one command line), each exactly."""
    done = subprocess.run(
        ["bash", "-c", f"for w in {text}; do printf '%s\\0' \"$w\"; done"],
        capture_output=True,
        cwd=tmp_path,
        env={"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    return done.stdout.decode().split("\0")[:-1]


def test_args_text_is_one_line_per_argument_and_says_each_exactly(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    prof = _profile(tmp_path)
    exact = json.loads(run_cli("args", "-p", str(prof), "--json", env=clean_env).stdout)["argv"]
    text = run_cli("args", "-p", str(prof), env=clean_env)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert len(lines) == len(exact)  # no value spills onto a second line
    for line, arg in zip(lines, exact, strict=True):
        if line == arg:
            assert "\n" not in arg and "\x1b" not in arg and not arg.startswith("$'")
        else:  # quoted as bash reads it back
            assert _bash_words(line, tmp_path) == [arg], (line, arg)


def test_serve_dry_run_shows_the_argv_that_runs(tmp_path: Path, clean_env: dict[str, str]) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    prof = _profile(tmp_path)
    common = ("serve", "-p", str(prof), "--set", "scheduler.max_model_len=262144", "--dry-run")
    common += ("--inventory", str(INVENTORY), "--vllm-bin", "/bin/true")
    exact = json.loads(run_cli(*common, "--json", env=clean_env).stdout)["argv"]
    res = run_cli(*common, env=clean_env)
    assert "\x1b" not in res.stdout + res.stderr and "\u2028" not in res.stdout
    lines = res.stdout.splitlines()
    command = lines[lines.index("# command") + 1]
    assert _bash_words(command, tmp_path) == exact
