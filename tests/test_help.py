"""The help of every command and group, walked from the typer app (a command added later is held to the
same conventions): ``-h`` is ``--help``; metavars say what to type, never a Python type; an "Examples"
section of real command lines, each of which runs; whole summaries in the parent's command list."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from conftest import FIXTURES, run_cli
from typer.core import TyperGroup

from glmlaunch.cli import app


def _walk() -> list[tuple[str, ...]]:
    """Every visible command and group as its path of names: () is glmlaunch itself."""
    paths: list[tuple[str, ...]] = []

    def visit(cmd: object, path: tuple[str, ...]) -> None:
        paths.append(path)
        if isinstance(cmd, TyperGroup):
            for name, sub in cmd.commands.items():
                if not sub.hidden:
                    visit(sub, (*path, name))

    visit(typer.main.get_command(app), ())
    return paths


def _epilogs() -> dict[tuple[str, ...], str | None]:
    out: dict[tuple[str, ...], str | None] = {}

    def visit(cmd: Any, path: tuple[str, ...]) -> None:
        out[path] = cmd.epilog
        if isinstance(cmd, TyperGroup):
            for name, sub in cmd.commands.items():
                visit(sub, (*path, name))

    visit(typer.main.get_command(app), ())
    return out


PATHS = _walk()
Helps = dict[tuple[str, ...], str]
IDS = [" ".join(p) or "glmlaunch" for p in PATHS]

#: What click and Typer write when nobody chose a metavar: <str>, <list[str]>, <path>, {a}, [[X]]..., [X]...
PYTHON_METAVAR = re.compile(r"<[a-z][a-z_\[\]|, ]*>|\{[a-z_]+\}|\[\[|\]\]\.\.\.|\]\.\.\.")


@pytest.fixture(scope="module")
def helps(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, ...], str]:
    """``glmlaunch … -h`` of every command, run once (each is a real process)."""
    from conftest import _clean_env

    env = _clean_env(tmp_path_factory.mktemp("help"))
    out: dict[tuple[str, ...], str] = {}
    for path in PATHS:
        res = run_cli(*path, "-h", env=env)
        assert res.returncode == 0, (path, res.stderr)
        assert res.stderr == "", (path, res.stderr)
        out[path] = res.stdout
    return out


def test_the_walk_finds_every_command() -> None:
    # guards the walk itself: if it found nothing, every test below would pass vacuously
    assert {("plan",), ("serve",), ("profiles",), ("profiles", "import"), ("calibrate", "search")} <= set(
        PATHS
    )


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_dash_h_is_the_help(path: tuple[str, ...], helps: Helps, clean_env: dict[str, str]) -> None:
    text = helps[path]
    assert text.startswith("Usage: " + " ".join(("glmlaunch", *path)) + " ")
    assert "-h, --help" in text
    long = run_cli(*path, "--help", env=clean_env)
    assert long.returncode == 0 and long.stdout == text


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_metavars_say_what_to_type(path: tuple[str, ...], helps: Helps) -> None:
    text = helps[path]
    assert not PYTHON_METAVAR.search(text), PYTHON_METAVAR.search(text)
    # every option that takes a value names it in capitals: `-p, --profile NAME`, `--set KEY=VALUE`
    options = text.split("\nOptions:\n", 1)[1].split("\n\n", 1)[0]
    for line in options.splitlines():
        m = re.match(r"  ((?:-\w, )?--[\w-]+)(?: (\S+))?", line)
        if m and m.group(2) and m.group(2) != "/":  # `--supervise / --exec`: a flag pair takes no value
            assert re.fullmatch(r"\[?[\[A-Z_=\]]+\]?", m.group(2)), line


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_every_command_shows_examples_of_itself(path: tuple[str, ...], helps: Helps) -> None:
    text = helps[path]
    assert "\nExamples:\n" in text
    examples = _examples_in(text)
    assert examples, text
    for line in examples:
        words = _glmlaunch_words(line)
        # the example runs this very command (a group's examples run one of its commands)
        names = [w for w in words if not w.startswith("-")][: len(path)]
        assert tuple(names) == path, line
    # printed verbatim: the declared lines, not rewrapped into a paragraph
    declared = [ln.strip() for ln in (_epilogs()[path] or "").strip().splitlines()]
    assert [ln.strip() for ln in examples] == declared


@pytest.mark.parametrize("path", [p for p in PATHS if p in {(), ("profiles",), ("calibrate",)}], ids=str)
def test_command_summaries_are_whole(path: tuple[str, ...], helps: Helps) -> None:
    commands = helps[path].split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]
    # a summary wrapped onto several lines is joined back; none is cut short with "..."
    rows = re.findall(r"^  (\S+)\s+(.*(?:\n {4,}.*)*)", commands, re.MULTILINE)
    assert rows
    for name, summary in rows:
        summary = " ".join(summary.split())
        assert not summary.endswith("..."), (name, summary)
        assert summary.endswith((".", ")")), (name, summary)


def _glmlaunch_words(line: str) -> list[str]:
    """The words after ``glmlaunch`` in an example (which may sit inside ``eval "$(…)"``)."""
    m = re.search(r"(?:^|[\s(])glmlaunch((?: +[^\s#()\"']+)*)", line)
    assert m, f"not a glmlaunch command line: {line}"
    return m.group(1).split()


#: What makes a shell do more than split a line at blanks: quoting, expansion, redirection, pipes, lists.
_SHELL_SYNTAX = frozenset("|&;<>()$`\\\"'*?[]{}~!")


def _plain_words(line: str) -> list[str] | None:
    """The words of an example that is one ``glmlaunch`` command a shell only splits at blanks (a trailing
    comment aside), else None: that example needs the shell."""
    code = line.split(" #", 1)[0]
    words = code.split()
    if not words or words[0] != "glmlaunch" or any(c in _SHELL_SYNTAX for c in code):
        return None
    return words


def _needs_the_gpus(line: str) -> bool:
    """Examples that run on the target rig: they probe NVML (exit 8 where there is none)."""
    words = _glmlaunch_words(line)
    command = next((w for w in words if not w.startswith("-")), "")
    if command == "serve":  # a dry run notes a missing GPU (exit 0) and says what the launch would do
        return "--dry-run" not in words
    offline = "--inventory" in words or "cpu" in words or "--replay" in words
    return command in {"hw", "check", "preflight", "watch"} and not offline


def _examples_in(text: str) -> list[str]:
    section = text.split("\nExamples:\n", 1)[1]
    return [ln.strip() for ln in section.splitlines() if ln.strip()]


def _all_examples() -> list[tuple[tuple[str, ...], str]]:
    found: list[tuple[tuple[str, ...], str]] = []
    for path, epilog in _epilogs().items():
        for line in (epilog or "").strip().splitlines():
            if line.strip():
                found.append((path, line.strip()))
    return found


EXAMPLES = _all_examples()
RUNNABLE = list(dict.fromkeys(line for _, line in EXAMPLES))  # a group repeats some of its commands' examples
#: The files the examples name, as an operator would have them: a saved inventory of the target rig, one
#: vLLM boot log, a profile of their own.
EXAMPLE_FILES = {
    "rig.json": FIXTURES / "inventories" / "rtxpro6000x4.json",
    "boot.log": FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v1-server.log",
    # the watch's: the plan it recorded against, a recorded NVML trace, and a log that ended in an OOM
    "h200.yaml": FIXTURES / "watch" / "h200.yaml",
    "leak.json": FIXTURES / "watch" / "leak.json",
    "vllm.log": FIXTURES / "watch" / "oom.log",
}


def _gpu_visible() -> bool:
    smi = shutil.which("nvidia-smi")
    return smi is not None and subprocess.run([smi, "-L"], capture_output=True, check=False).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("line", RUNNABLE, ids=[line.split("#")[0].strip() for line in RUNNABLE])
def test_every_example_runs(line: str, tmp_path: Path, clean_env: dict[str, str]) -> None:
    needs_gpus = _needs_the_gpus(line)
    if needs_gpus and _gpu_visible():
        pytest.skip("runs on the target rig's GPUs")
    for name, source in EXAMPLE_FILES.items():
        shutil.copyfile(source, tmp_path / name)
    (tmp_path / "mine.yaml").write_text("extends: gate\ndescription: my own\n")
    # vllm and lmcache are installed where glmlaunch serves; stand-ins that `serve` finds but never reaches
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for exe in ("vllm", "lmcache"):
        (bin_dir / exe).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / exe).chmod(0o755)
    env = dict(
        clean_env, PATH=os.pathsep.join([str(Path(sys.executable).parent), str(bin_dir), clean_env["PATH"]])
    )
    words = _plain_words(line)
    if words is not None:  # what bash would run is these words: run them as the console script would
        res: Any = run_cli(*words[1:], env=env, cwd=tmp_path, timeout=120)
    else:
        res = subprocess.run(
            ["bash", "-o", "pipefail", "-c", line],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert "shows the usage" not in res.stderr and "internal error" not in res.stderr, res.stderr
    if needs_gpus:
        # without a GPU: the documented exit 8, said in one error line
        assert res.returncode == 8, (res.returncode, res.stderr[-2000:])
        assert res.stderr.splitlines()[-1].startswith("error: "), res.stderr
    else:
        assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
