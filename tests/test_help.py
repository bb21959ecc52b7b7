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


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_every_help_fits_80_columns_and_says_each_default_once(
    path: tuple[str, ...], clean_env: dict[str, str]
) -> None:
    text = run_cli(*path, "-h", env={**clean_env, "COLUMNS": "80"}).stdout
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert not wide, wide
    # one convention: the help text says the default in words; click's "[default: X]" would repeat it
    assert "[default:" not in text


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
#: The examples of one help, in order: they run as an operator reading that help would type them, one
#: after the other in one directory, so a file one example writes is there for the next.
BY_HELP: dict[tuple[str, ...], list[str]] = {}
for _path, _line in EXAMPLES:
    BY_HELP.setdefault(_path, []).append(_line)

#: What an example may read without writing it first: a vLLM log, the one input only the operator has
#: (a recorded one stands in for it here).
OPERATOR_LOGS = {
    "boot.log": FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v1-server.log",
    "vllm.log": FIXTURES / "watch" / "oom.log",
}
#: What an example that runs on the GPUs writes; here (no GPU) a recording of the same kind stands in.
GPU_WRITES = {"rig.json": FIXTURES / "inventories" / "rtxpro6000x4.json"}
_FILE_WORD = re.compile(r"^[\w./-]+\.(?:json|ya?ml|log|svg)$")
_WRITES_NEXT = {"-o", "--output", "--save", "--svg", "--record", "--readings", ">"}


def _files(line: str) -> tuple[list[str], list[str]]:
    """The files an example reads and the files it writes (after -o, --save, --svg, --record, ``>``)."""
    words = [w for w in re.split(r"\s+", line.split(" #", 1)[0].replace("$(", " ").replace(")", " ")) if w]
    reads: list[str] = []
    writes: list[str] = []
    for before, word in zip(["", *words], words, strict=False):
        if _FILE_WORD.match(word):
            (writes if before in _WRITES_NEXT else reads).append(os.path.normpath(word))
    return reads, writes


def _producers() -> dict[str, str]:
    """Each file some example writes, and the first example that writes it."""
    out: dict[str, str] = {}
    for _, line in EXAMPLES:
        for name in _files(line)[1]:
            out.setdefault(name, line)
    return out


def _gpu_visible() -> bool:
    smi = shutil.which("nvidia-smi")
    return smi is not None and subprocess.run([smi, "-L"], capture_output=True, check=False).returncode == 0


def test_every_file_an_example_reads_is_one_it_can_have() -> None:
    """A file named by an example is written by an earlier example of the same help, is a vLLM log of the
    operator's own, or is written by an example elsewhere that the line's comment names ("rig.json: hw
    --save"): never a file only this repository's tests have."""
    producers = _producers()
    for path, lines in BY_HELP.items():
        written: set[str] = set()
        for line in lines:
            reads, writes = _files(line)
            for name in reads:
                if name in written or name in OPERATOR_LOGS:
                    continue
                assert name in producers, f"{' '.join(path)}: {line}: nothing writes {name}"
                # the comment names the command and the option that write it: "rig.json: hw --save"
                words = _glmlaunch_words(producers[name].split(" #", 1)[0])
                command = next(w for w in words if not w.startswith("-"))
                option = words[words.index(name) - 1]
                comment = line.split(" #", 1)[1] if " #" in line else ""
                assert f"{command} {option}" in comment, (
                    f"{line}: say where {name} comes from: {producers[name]}"
                )
            written.update(writes)


@pytest.mark.slow
@pytest.mark.parametrize("path", list(BY_HELP), ids=[" ".join(p) or "glmlaunch" for p in BY_HELP])
def test_every_example_runs(path: tuple[str, ...], tmp_path: Path, clean_env: dict[str, str]) -> None:
    """The help's examples in order, in one empty directory: each runs (exit 0), or, where it needs the
    target rig's GPUs and none is here, stops with the documented exit 8; a file it reads is there
    because an earlier example wrote it (what a GPU example writes, a recording stands in for)."""
    gpus = _gpu_visible()
    # vllm and lmcache are installed where glmlaunch serves; stand-ins that `serve` finds but never reaches
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for exe in ("vllm", "lmcache"):
        (bin_dir / exe).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / exe).chmod(0o755)
    env = dict(
        clean_env, PATH=os.pathsep.join([str(Path(sys.executable).parent), str(bin_dir), clean_env["PATH"]])
    )
    work = tmp_path / "work"
    work.mkdir()
    producers = _producers()
    for line in BY_HELP[path]:
        needs_gpus = _needs_the_gpus(line)
        if needs_gpus and gpus:
            continue  # runs on the target rig's GPUs (tests/launch/test_serve_gpu.py and the like)
        reads, writes = _files(line)
        for name in reads:
            if not (work / name).exists():
                stand_in = OPERATOR_LOGS.get(name) or GPU_WRITES.get(name)
                # written by an example of another help (the comment names it; the test above checks)
                assert stand_in is not None and name in {**OPERATOR_LOGS, **producers}, (line, name)
                shutil.copyfile(stand_in, work / name)
        words = _plain_words(line)
        if words is not None:  # what bash would run is these words: run them as the console script would
            res: Any = run_cli(*words[1:], env=env, cwd=work, timeout=120)
        else:
            res = subprocess.run(
                ["bash", "-o", "pipefail", "-c", line],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        assert "shows the usage" not in res.stderr and "internal error" not in res.stderr, res.stderr
        if needs_gpus:
            # without a GPU: the documented exit 8, said in one error line
            assert res.returncode == 8, (line, res.returncode, res.stderr[-2000:])
            assert res.stderr.splitlines()[-1].startswith("error: "), res.stderr
            for name in writes:
                if name in GPU_WRITES:
                    shutil.copyfile(GPU_WRITES[name], work / name)
        else:
            assert res.returncode == 0, (line, res.returncode, res.stderr[-2000:])
            for name in writes:
                assert (work / name).exists(), f"{line}: wrote no {name}"
