"""`glmlaunch env` output evaluated by real shells reproduces every value exactly."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import glmlaunch_exe, run_cli

from glmlaunch.config.shells import render_exports

HOSTILE = {
    "SPACES": "a b  c",
    "QUOTES": 'it\'s "quoted"',
    "DOLLAR": "$HOME ${PATH} $(echo pwned) `echo pwned`",
    "BACKSLASH": "C:\\path\\to\\ \\n not a newline",
    "NEWLINES": "line1\nline2\n\nline4",
    "UNICODE": "naïve — 日本語 ‘curly’ emoji 🚀",
    "GLOBS": "* ? [a-z] ~ ! # ; & | < >",
    "EMPTY": "",
    "LEADING_DASH": "-n -e",
    "PERCENT": "%PATH% 100%",
}
DUMP = "import json, os, sys; json.dump({k: os.environ.get(k) for k in sys.argv[1:]}, sys.stdout)"


def _shell_cmd(shell: str, script: Path, names: list[str]) -> list[str]:
    py = sys.executable
    if shell in {"bash", "zsh", "sh"}:
        return [shell, "-c", f'. "{script}" && exec "{py}" -c \'{DUMP}\' ' + " ".join(names)]
    if shell == "fish":
        return ["fish", "-c", f"source {script}; and {py} -c '{DUMP}' " + " ".join(names)]
    return ["pwsh", "-NoProfile", "-Command", f". {script}; & '{py}' -c '{DUMP}' " + " ".join(names)]


@pytest.mark.parametrize("shell", ["bash", "sh", "zsh", "fish", "pwsh"])
def test_round_trip_hostile_values(shell: str, tmp_path: Path) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    script = tmp_path / "env.sh"
    script.write_text(render_exports(HOSTILE, shell), encoding="utf-8")  # type: ignore[arg-type]
    out = subprocess.run(_shell_cmd(shell, script, list(HOSTILE)), capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == HOSTILE


def test_eval_of_cli_output_in_bash(clean_env: dict[str, str], tmp_path: Path) -> None:
    """eval "$(glmlaunch env …)" reproduces the exact values, including a hostile passthrough value."""
    prof = tmp_path / "p.yaml"
    prof.write_text('extends: turnkey\nenv:\n  MY_VALUE: "it\'s $(rm -rf /) `x`\\nnext"\n', encoding="utf-8")
    exe = " ".join(glmlaunch_exe())
    names = "MY_VALUE VLLM_PCIE_DMA_FP8 CUDA_VISIBLE_DEVICES"
    script = f'eval "$({exe} env -p {prof} --shell bash)" && "{sys.executable}" -c \'{DUMP}\' {names}'
    out = subprocess.run(["bash", "-c", script], env=clean_env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {
        "MY_VALUE": "it's $(rm -rf /) `x`\nnext",
        "VLLM_PCIE_DMA_FP8": "0",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
    }


def test_json_and_dotenv_shells(clean_env: dict[str, str]) -> None:
    res = run_cli("env", "-p", "gate", "--shell", "json", env=clean_env)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    dotenv = run_cli("env", "-p", "gate", "--shell", "dotenv", env=clean_env).stdout
    assert 'PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"' in dotenv.splitlines()


def test_detected_shell_falls_back_to_SHELL(clean_env: dict[str, str]) -> None:
    env = dict(clean_env, SHELL="/usr/bin/fish")
    # Under pytest the parent is python, which shellingham does not report as a shell.
    res = run_cli("env", "-p", "gate", env=env)
    assert res.returncode == 0
    assert res.stdout.splitlines()[0].startswith(("set -gx ", "export "))


def test_unknown_shell(clean_env: dict[str, str]) -> None:
    res = run_cli("env", "-p", "gate", "--shell", "tcsh", env=clean_env)
    assert res.returncode == 2
    assert "allowed: bash, zsh, sh, fish, pwsh, dotenv, json" in res.stderr


DOTENV_VALUES = {
    "D_BACKTICK": "`touch PWN_BT`",
    "D_DOLLAR": "$(touch PWN_D) ${HOME} $HOME",
    "D_QUOTES": "it's \"quoted\" \\ back\\slash \\",
    "D_GLOB": "* ? [a] ~ ~/x",
    "D_SEMI": "a; touch PWN_S & b | c",
    "D_UNICODE": "é ✓ \u2028",
}


@pytest.mark.parametrize("shell", ["bash", "sh", "zsh"])
def test_dotenv_loaded_with_set_a_and_dot_runs_nothing_and_keeps_every_value(
    shell: str, tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """Issue 22, item 4: `set -a; . ./file` is how a dotenv file is usually loaded into a shell."""
    exe = shutil.which(shell)
    if exe is None:
        pytest.skip(f"{shell} is not installed")
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump({"extends": "gate", "env": DOTENV_VALUES}, allow_unicode=True))
    res = run_cli("env", "-p", str(prof), "--shell", "dotenv", env=clean_env)
    assert res.returncode == 0, res.stderr
    work = tmp_path / "work"
    work.mkdir()
    (work / "glm.env").write_text(res.stdout, encoding="utf-8")
    names = " ".join(DOTENV_VALUES)
    script = f'set -a; . ./glm.env; set +a; "{sys.executable}" -c \'{DUMP}\' {names}'
    out = subprocess.run([exe, "-c", script], env=clean_env, cwd=work, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == DOTENV_VALUES
    assert sorted(p.name for p in work.iterdir()) == ["glm.env"]
