"""Shell completion: ``--show-completion SHELL`` prints a script that works in that shell (driven here the way
the shell drives it, profile names for ``-p`` included), and ``--install-completion SHELL`` writes it under
``$HOME`` only (a temporary one here: the real home is never touched)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

SHELLS = ("bash", "zsh", "fish", "pwsh")

#: the shipped profiles, in the order completion offers them
SHIPPED = (
    "exl3-tr3-3.25bpw",
    "exl3-tr3-3.36bpw",
    "exl3-tr3-3.42bpw",
    "gate",
    "ii-r18-exl3-r7",
    "r12-exl3",
    "r34-exl3-r7",
    "turnkey",
)


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
    return _bash_complete_in(words, env, None)


def _bash_complete_in(words: list[str], env: dict[str, str], cwd: Path | None) -> list[str]:
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
    res = subprocess.run(
        [bash, "--norc", "-c", driver], env=env, capture_output=True, text=True, timeout=60, cwd=cwd
    )
    assert res.returncode == 0, res.stderr
    return [line for line in res.stdout.splitlines() if line]


def test_bash_completes_commands_options_and_profile_names(clean_env: dict[str, str]) -> None:
    env = _env_with_glmlaunch(clean_env)
    assert _bash_complete(["glmlaunch", "pl"], env) == ["plan"]
    assert _bash_complete(["glmlaunch", "calibrate", "s"], env) == ["show", "search"]
    assert "--explain" in _bash_complete(["glmlaunch", "plan", "--"], env)
    # -p offers the shipped profiles, and the user's own from GLMLAUNCH_PROFILE_PATH
    shipped = list(SHIPPED)
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
    # compdef and compadd belong to zsh's completion system, which needs a terminal (the interactive test
    # below has one); stand-ins record what the script registers and what it hands to compadd
    driver = (
        'compdef() { print -r -- "compdef $*" }\n'
        'compadd() { print -rl -- "values: ${values[@]}" "displays: ${displays[@]}" }\n'
        f"{script}\n"
        "words=(glmlaunch plan -p t); CURRENT=4\n"
        "_glmlaunch_completion\n"
    )
    res = subprocess.run([zsh, "-f", "-c", driver], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "compdef _glmlaunch_completion glmlaunch" in res.stdout
    assert "values: turnkey" in res.stdout
    assert "displays: turnkey  -- built-in profile" in res.stdout


# --- issue 22, item 1: a profile's name is a candidate, never code, in every shell --------------------------

#: Profile names that broke Typer's zsh script: a trailing backslash flips its quoting, and the candidate
#: list is evaluated by _arguments, which runs the process substitution.
HOSTILE_PROFILES = ("l\\.yaml", "m <(touch PWN9) .yaml", "n\\.yaml", "o $(touch PWN8) `touch PWN7`.yaml")


def _hostile_profile_dir(root: Path) -> Path:
    profiles = root / "profiles"
    profiles.mkdir()
    for name in HOSTILE_PROFILES:
        (profiles / name).write_text("extends: gate\n")
    return profiles


def _read_until(fd: int, wanted: str, seen: bytearray, timeout: float = 60) -> str:
    """Read the terminal until ``wanted`` appears (escape sequences removed); what was read, as text."""
    import re
    import select
    import time

    end = time.monotonic() + timeout
    while True:
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]", "", seen.decode("utf-8", "replace"))
        if wanted in text:
            return text
        left = end - time.monotonic()
        assert left > 0, f"{wanted!r} never appeared on the terminal:\n{text[-3000:]}"
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            assert chunk, f"the shell exited before {wanted!r}:\n{text[-3000:]}"
            seen += chunk


def _interactive_zsh(env: dict[str, str], cwd: Path, rc: str) -> tuple[int, int]:
    """An interactive zsh on a pseudo-terminal, its start-up file ``rc``; (pid, terminal fd)."""
    import pty

    zdot = cwd.parent / "zdotdir"
    zdot.mkdir()
    (zdot / ".zshrc").write_text(rc)
    zsh = _needs("zsh")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the shell, on the terminal
        os.chdir(cwd)
        os.execve(zsh, [zsh, "-i"], dict(env, ZDOTDIR=str(zdot), TERM="xterm", COLUMNS="120", LINES="40"))
    return pid, fd


def test_zsh_tab_completion_runs_nothing_a_profile_name_holds(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """A real interactive zsh, the completion sourced as a user does, <Tab> after `-p`: the hostile names
    are listed as names; none of them runs; choosing one inserts it quoted, as one argument."""
    import signal

    env = _env_with_glmlaunch(dict(clean_env, GLMLAUNCH_PROFILE_PATH=str(_hostile_profile_dir(tmp_path))))
    work = tmp_path / "work"
    work.mkdir()
    rc = (
        "PS1='READY> '\n"
        "autoload -Uz compinit && compinit -u\n"
        "source <(glmlaunch --show-completion zsh)\n"
        "zstyle ':completion:*' list-prompt ''\n"
        # Enter then runs this function, not glmlaunch: it shows the arguments the line holds
        "glmlaunch() { print -r -- \"ARGC=$# LAST=${(q)@[-1]}\" }\n"
    )
    pid, fd = _interactive_zsh(env, work, rc)
    seen = bytearray()
    try:
        _read_until(fd, "READY> ", seen)
        os.write(fd, b"glmlaunch plan -p \t")
        listing = _read_until(fd, "r12-exl3", seen)
        for shown in ("l\\", "m <(touch PWN9) ", "n\\", "o $(touch PWN8) `touch PWN7`", "turnkey"):
            assert shown in listing, listing[-2000:]
        os.write(fd, b"\x15")  # Ctrl-U: a fresh line
        os.write(fd, b"glmlaunch plan -p m\t")
        _read_until(fd, "PWN9", seen)
        os.write(fd, b"\r")
        ran = _read_until(fd, "ARGC=", seen)
        assert "ARGC=3 LAST=m\\ \\<\\(touch\\ PWN9\\)\\ " in ran, ran[-2000:]
        os.write(fd, b"exit\r")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
    assert sorted(p.name for p in work.iterdir()) == [], "a candidate ran a command"


def test_bash_candidates_are_inserted_as_one_word_and_run_nothing(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    env = _env_with_glmlaunch(dict(clean_env, GLMLAUNCH_PROFILE_PATH=str(_hostile_profile_dir(tmp_path))))
    work = tmp_path / "work"
    work.mkdir()
    (work / "PWN9.yaml").write_text("")  # a glob of the old unquoted COMPREPLY would have matched files
    got = _bash_complete_in(["glmlaunch", "plan", "-p", ""], env, work)
    # bash inserts a candidate as it is: each must read back, as a shell word, as the profile's name
    names = set()
    for word in got:
        done = subprocess.run(["bash", "-c", f"printf '%s' {word}"], capture_output=True, text=True, cwd=work)
        names.add(done.stdout)
    stems = {Path(n).stem for n in HOSTILE_PROFILES}
    assert names == stems | set(SHIPPED)
    assert sorted(p.name for p in work.iterdir()) == ["PWN9.yaml"]


def test_fish_lists_hostile_names_and_runs_nothing(tmp_path: Path, clean_env: dict[str, str]) -> None:
    fish = _needs("fish")
    env = _env_with_glmlaunch(dict(clean_env, GLMLAUNCH_PROFILE_PATH=str(_hostile_profile_dir(tmp_path))))
    work = tmp_path / "work"
    work.mkdir()
    driver = 'glmlaunch --show-completion fish | source\ncomplete -C "glmlaunch plan -p "\n'
    res = subprocess.run(
        [fish, "--no-config", "-c", driver], env=env, capture_output=True, text=True, timeout=60, cwd=work
    )
    assert res.returncode == 0, res.stderr
    listed = {line.split("\t", 1)[0] for line in res.stdout.splitlines()}
    assert {Path(n).stem for n in HOSTILE_PROFILES} <= listed
    assert list(work.iterdir()) == []


def test_a_name_with_a_control_character_is_not_offered(tmp_path: Path, clean_env: dict[str, str]) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "x\x1b]0;t\x07.yaml").write_text("extends: gate\n")
    (profiles / "y\nz.yaml").write_text("extends: gate\n")
    (profiles / "plain.yaml").write_text("extends: gate\n")
    env = _env_with_glmlaunch(dict(clean_env, GLMLAUNCH_PROFILE_PATH=str(profiles)))
    got = _bash_complete(["glmlaunch", "plan", "-p", ""], env)
    assert got == ["plain", *SHIPPED]


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
        assert f"source {home / written}" in (home / ".bashrc").read_text()
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


@pytest.mark.parametrize("home_name", ["it's home", "h'$(touch PWN6)'", "a b;touch PWN5", "q\"`touch PWN4`"])
def test_install_completion_quotes_home_in_the_bashrc_line(
    home_name: str, tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """Item 7: the `source …` line names the script by a quoted path: a quote in $HOME runs nothing at login,
    and the login still loads the completion."""
    bash = _needs("bash")
    home = tmp_path / home_name
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    env = _env_with_glmlaunch(dict(clean_env, HOME=str(home)))
    assert run_cli("--install-completion", "bash", env=env).returncode == 0
    again = run_cli("--install-completion", "bash", env=env)  # idempotent: one line, not two
    assert again.returncode == 0
    assert (home / ".bashrc").read_text().count("source ") == 1
    # an interactive login reads ~/.bashrc
    res = subprocess.run(
        [bash, "-i", "-c", "complete -p glmlaunch"], env=env, cwd=work, capture_output=True, text=True,
        timeout=60,
    )
    assert "complete -o default -F _glmlaunch_completion glmlaunch" in res.stdout, res.stderr
    assert list(work.iterdir()) == [] and not list(tmp_path.glob("PWN*"))
