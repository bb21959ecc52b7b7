"""Shell completion: ``--show-completion SHELL`` prints a script that works in that shell (driven here the way
the shell drives it, profile names for ``-p`` included), and ``--install-completion SHELL`` writes it under
``$HOME`` only (a temporary one here: the real home is never touched)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

SHELLS = ("bash", "zsh", "fish", "pwsh")


def _env_with_glmlaunch(env: dict[str, str]) -> dict[str, str]:
    # The scripts call `glmlaunch` by name, as an installed one is called.
    return dict(env, PATH=os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]]))


def _needs(shell: str) -> str:
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} is not installed")
    return path


@pytest.mark.parametrize("shell", SHELLS)
def test_show_completion_prints_the_script_for_each_shell(shell: str, clean_env: dict[str, str]) -> None:
    res = run_cli("--show-completion", shell, env=clean_env)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    # the script asks glmlaunch itself for candidates through Typer's protocol variable
    assert "_GLMLAUNCH_COMPLETE" in res.stdout
    assert "glmlaunch" in res.stdout


def test_an_unknown_shell_is_refused_in_one_line(clean_env: dict[str, str]) -> None:
    res = run_cli("--show-completion", "tcsh", env=clean_env)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    assert "bash, zsh, fish" in res.stderr


def _bash_complete(words: list[str], env: dict[str, str]) -> list[str]:
    """Complete the last of ``words`` as bash's programmable completion does: COMP_WORDS/COMP_CWORD set,
    the function the script registered with `complete -F` called with the command name."""
    bash = _needs("bash")
    script = run_cli("--show-completion", "bash", env=env).stdout
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    driver = (
        f"{script}\n"
        "complete -p glmlaunch >/dev/null || exit 99\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
        "_glmlaunch_completion glmlaunch\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    res = subprocess.run([bash, "--norc", "-c", driver], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return [line for line in res.stdout.splitlines() if line]


def test_bash_completes_commands_options_and_profile_names(clean_env: dict[str, str]) -> None:
    env = _env_with_glmlaunch(clean_env)
    assert _bash_complete(["glmlaunch", "pl"], env) == ["plan"]
    assert _bash_complete(["glmlaunch", "calibrate", "s"], env) == ["show", "search"]
    assert "--explain" in _bash_complete(["glmlaunch", "plan", "--"], env)
    # -p offers the shipped profiles, and the user's own from GLMLAUNCH_PROFILE_PATH
    shipped = ["exl3-tr3-3.25bpw", "exl3-tr3-3.36bpw", "exl3-tr3-3.42bpw", "gate", "r12-exl3", "turnkey"]
    assert _bash_complete(["glmlaunch", "plan", "-p", ""], env) == shipped
    assert _bash_complete(["glmlaunch", "plan", "-p", "t"], env) == ["turnkey"]
    mine = Path(env["HOME"]) / "profiles"
    mine.mkdir(parents=True)
    (mine / "tuned.yaml").write_text("extends: turnkey\n")
    with_mine = dict(env, GLMLAUNCH_PROFILE_PATH=str(mine))
    assert _bash_complete(["glmlaunch", "diff", "gate", "t"], with_mine) == ["tuned", "turnkey"]
    assert _bash_complete(["glmlaunch", "env", "--shell", "f"], env) == ["fish"]
    # a path is left to the shell's own file completion (`complete -o default`)
    assert _bash_complete(["glmlaunch", "plan", "-p", "./"], env) == []


def test_zsh_script_loads_and_answers(clean_env: dict[str, str]) -> None:
    zsh = _needs("zsh")
    env = _env_with_glmlaunch(clean_env)
    script = run_cli("--show-completion", "zsh", env=env).stdout
    # compdef and _arguments belong to zsh's completion system, which needs a terminal; stand-ins record
    # what the script registers and what it hands to _arguments for `glmlaunch plan -p t<TAB>`
    driver = (
        'compdef() { print -r -- "compdef $*" }\n'
        '_arguments() { print -r -- "_arguments $*" }\n'
        f"{script}\n"
        "words=(glmlaunch plan -p t); CURRENT=4\n"
        "_glmlaunch_completion\n"
    )
    res = subprocess.run([zsh, "-f", "-c", driver], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "compdef _glmlaunch_completion glmlaunch" in res.stdout
    assert '_arguments *: :(("turnkey":"built-in profile"))' in res.stdout


def test_fish_script_completes(clean_env: dict[str, str]) -> None:
    fish = _needs("fish")
    env = _env_with_glmlaunch(clean_env)
    driver = (
        "glmlaunch --show-completion fish | source\n"
        'complete -C "glmlaunch plan -p "\n'
        'complete -C "glmlaunch ca"\n'
    )
    res = subprocess.run(
        [fish, "--no-config", "-c", driver], env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "turnkey\tbuilt-in profile" in lines and "gate\tbuilt-in profile" in lines
    # the command's whole summary, as in `glmlaunch -h`
    assert any(
        line.startswith("calibrate\tLearn W, P, N, G_e and T-F0") and line.endswith(".") for line in lines
    )


@pytest.mark.parametrize(
    ("shell", "written"),
    [
        ("bash", ".bash_completions/glmlaunch.sh"),
        ("zsh", ".zfunc/_glmlaunch"),
        ("fish", ".config/fish/completions/glmlaunch.fish"),
    ],
)
def test_install_completion_writes_under_home_only(
    shell: str, written: str, tmp_path: Path, clean_env: dict[str, str]
) -> None:
    home = tmp_path / "fresh-home"
    home.mkdir()
    env = dict(clean_env, HOME=str(home))
    res = run_cli("--install-completion", shell, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""  # stdout carries data only; the confirmation is a note
    assert f"{shell} completion installed in {home / written}" in res.stderr
    script = run_cli("--show-completion", shell, env=env).stdout
    assert (home / written).read_text().strip() == script.strip()
    if shell == "bash":
        assert f"source '{home / written}'" in (home / ".bashrc").read_text()
    if shell == "zsh":
        assert "fpath+=~/.zfunc" in (home / ".zshrc").read_text()
    # nothing outside the given home
    assert all(str(p).startswith(str(home)) for p in home.rglob("*"))


def test_install_completion_without_a_shell_detects_it(tmp_path: Path, clean_env: dict[str, str]) -> None:
    bash = _needs("bash")
    home = tmp_path / "fresh-home"
    home.mkdir()
    env = _env_with_glmlaunch(dict(clean_env, HOME=str(home)))
    # run from bash, as a user types it: the parent shell is the one completed
    res = subprocess.run(
        [bash, "--norc", "-c", "glmlaunch --install-completion; echo rc=$?"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "rc=0" in res.stdout, res.stderr
    assert (home / ".bash_completions" / "glmlaunch.sh").is_file()
