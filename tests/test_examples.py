"""Every example in README.md and in scripts/ runs in bash as a reader would run it, and ends as documented.

Which text is an example (found anew on every run, so a new example is covered without editing this file):

1. README.md, fenced blocks tagged ``sh``, ``bash``, ``shell`` or ``console``: every line of a ``sh``
   block is script (a leading ``$ `` prompt is dropped); in a ``console`` block only ``$ `` lines are
   commands, the rest is their output. An untagged fence (or ``text``) is a synopsis or an output and is
   never run, so a synopsis such as ``glmlaunch hw [--json] [--save FILE]`` goes in an untagged fence.
2. README.md, indented code blocks: lines that start with four spaces and ``$ ``.
3. Inline code in README prose and in comments under scripts/: a span that is a complete command line.
   It starts with a command (``glmlaunch``, ``eval "$(glmlaunch``, ``docker``, ``python3``/``python``,
   a path such as ``scripts/…`` or ``.venv/bin/…``), optionally after ``NAME=value`` assignments; it has
   an argument beyond the command words (an option, a redirection or a pipe: ``glmlaunch preflight``
   alone names a command); and it holds no placeholder: no ``…``/``...``, ``[-``/``[WORD``, ``<word>``,
   ``\\|`` (alternatives in a table), ALL-CAPS words (``NAME``, ``FILE``), ``--set`` with a key that has
   no dot (``k=v``). Anything else in backticks is prose about a command, not a command.
4. scripts/* (every file but Python, whose usage lives in docstrings run by their own tests): comment
   lines ``#   command`` (``#`` and three or more spaces); consecutive ones are one block (an ``export``
   line carries over), taken when one of them starts with a command. Prose continues with fewer spaces.

How each ends, said on the example itself, machine-readably (so a reader learns it too):

* nothing: exit 0, and no command inside it fails (loops, pipes and ``$(…)`` included);
* ``# needs: gpu`` as (the start of) its trailing comment: it needs an NVIDIA GPU; here, with none
  visible, it must stop with exit 8. Where a GPU is visible it must only not exit 1 or 2;
* ``# exits: N``: it ends with exit N (a documented failure such as 4, a margin below the minimum).
  N may not be 1 (an internal error is a bug, never documented behaviour);
* on an inline span the same marker is an HTML comment right after it: `` `cmd` <!-- exits: 4 --> ``.

No example may print a Python traceback.

How it runs: ``bash`` with ``set -E -o pipefail``, one script per block (later lines use what earlier
ones wrote or exported), each complete command's status checked on its own, stdin closed. The working
directory is a fresh copy of the repository's files (relative paths such as tests/fixtures/… work and
whatever an example writes stays there), with ``.venv`` linking to the environment running the tests.
The environment is a fresh login's: ``HOME``, caches and ``GLMLAUNCH_CACHE_DIR`` in a temp dir, no
``GLMLAUNCH_*``/``VLLM_*``/old launcher variables, ``PATH`` = fakes : the venv's bin : /usr/bin : /bin.
The fakes (tests/fixtures/examples/bin) are real programs: ``vllm`` prints its argv; ``docker`` runs
``docker build`` and ``docker compose run`` against the real Dockerfile and compose file without a
daemon (see its docstring). Not run, checked instead: install steps in an ``&&`` chain (``python3 -m
venv``, ``pip install``: the extras they name must exist in pyproject.toml; the rest of the chain runs),
and the test suite itself (``pytest`` runs with ``--collect-only``). A command that uses an optional tool
not installed here (``jq``, ``curl``, ``zsh``, ``fish``, ``nvidia-smi``) skips its block, saying which.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, REPO

EXAMPLE_BIN = FIXTURES / "examples" / "bin"
VENV = Path(sys.prefix)
WRAPPER = REPO / "scripts" / "serve-glm52.sh"
INVENTORY = FIXTURES / "inventories" / "rtxpro6000x4.json"

NO_GPU_EXIT = 8
# Tools an example may pipe into that a test machine may lack: their absence skips the block. Any other
# program that is not found fails the example (bash's 127), so a synopsis in a ``sh`` fence cannot pass.
OPTIONAL_TOOLS = {"jq", "curl", "zsh", "fish", "nvidia-smi"}
SHELL_FENCES = {"sh", "bash", "shell", "console"}
SHELL_WORDS = {
    ".", ":", "[", "[[", "case", "cd", "do", "done", "echo", "elif", "else", "esac", "eval", "exec",
    "export", "fi", "for", "if", "in", "local", "printf", "read", "set", "source", "test", "then",
    "true", "false", "unset", "until", "while", "{", "}", "!",
}


# --- what is an example ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """Lines that run as one bash script; ``where`` is file:line of the first."""

    where: str
    lines: tuple[tuple[int, str], ...]  # (line number, text)


_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)(\s*<!--\s*((?:needs|exits):[^>]*?)\s*-->)?")
_ASSIGN = r"(?:[A-Za-z_][A-Za-z0-9_]*=(?:'[^']*'|\"[^\"]*\"|\S*)\s+)*"
_COMMAND_START = re.compile(
    rf"^{_ASSIGN}(?:glmlaunch\s|eval \"\$\(glmlaunch\s|docker\s|python3?\s|(?:\./|\.venv/bin/|scripts/)\S)"
)
_PLACEHOLDER = re.compile(
    r"…|\.\.\.|\[-|\[[A-Z]|<[A-Za-z][^>]*>|\\\||(?<![\w$={/.-])[A-Z][A-Z0-9_]*(?![\w=])|--set\s+[\w-]+="
)
_ARGUMENT = re.compile(r"(?:^|\s)-{1,2}[A-Za-z]|[|>]|\$\(")


def is_inline_command(span: str) -> bool:
    span = span.strip()
    return bool(_COMMAND_START.match(span)) and not _PLACEHOLDER.search(span) and bool(_ARGUMENT.search(span))


def _inline_blocks(where: str, number: int, text: str) -> Iterator[Block]:
    for match in _INLINE.finditer(text):
        if is_inline_command(match.group(1)):
            marker = f"  # {match.group(3)}" if match.group(3) else ""
            yield Block(f"{where}:{number}", ((number, match.group(1).strip() + marker),))


def markdown_examples(path: Path, name: str | None = None) -> list[Block]:
    name = name or path.name
    blocks: list[Block] = []
    fence: tuple[str, str] | None = None  # (marker, tag) of the open fence
    current: list[tuple[int, str]] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        found = _FENCE.match(line)
        if fence is not None:
            marker, tag = fence
            if found and found.group(2).startswith(marker) and not found.group(3):
                if current:
                    blocks.append(Block(f"{name}:{current[0][0]}", tuple(current)))
                fence, current = None, []
            elif tag in SHELL_FENCES:
                stripped = line.strip()
                if tag == "console":
                    if stripped.startswith("$ ") or (current and current[-1][1].endswith("\\")):
                        current.append((number, stripped.removeprefix("$ ")))
                elif stripped:
                    current.append((number, line.removeprefix("$ ")))
            continue
        if found:
            fence = (found.group(2), found.group(3).lower())
            continue
        if line.startswith("    $ "):
            blocks.append(Block(f"{name}:{number}", ((number, line.strip().removeprefix("$ ")),)))
        else:
            blocks.extend(_inline_blocks(name, number, line))
    return blocks


_COMMENT_COMMAND = re.compile(r"^\s*#\s{3,}(\S.*)$")


def script_examples(path: Path) -> list[Block]:
    where = f"scripts/{path.name}"
    blocks: list[Block] = []
    run: list[tuple[int, str]] = []  # consecutive `#   …` lines: one block when one of them is a command

    def close() -> None:
        if any(_COMMAND_START.match(text) for _, text in run):
            blocks.append(Block(f"{where}:{run[0][0]}", tuple(run)))
        run.clear()

    for number, line in enumerate(path.read_text().splitlines(), start=1):
        usage = _COMMENT_COMMAND.match(line)
        if usage:
            run.append((number, usage.group(1)))
            continue
        close()
        if line.lstrip().startswith("#"):
            blocks.extend(_inline_blocks(where, number, line))
    close()
    return blocks


def all_examples() -> list[Block]:
    blocks = markdown_examples(REPO / "README.md")
    for path in sorted((REPO / "scripts").iterdir()):
        if path.is_file() and path.suffix != ".py":
            blocks += script_examples(path)
    return blocks


EXAMPLES = all_examples()


def _ids(blocks: list[Block]) -> list[str]:
    """file:line, with #2, #3 for a second and third command on one line of prose."""
    seen: dict[str, int] = {}
    ids = []
    for block in blocks:
        seen[block.where] = seen.get(block.where, 0) + 1
        ids.append(block.where if seen[block.where] == 1 else f"{block.where}#{seen[block.where]}")
    return ids


# --- commands, their expected ends, and the steps that are checked instead of run ------------------------


@dataclass(frozen=True)
class Command:
    line: int
    text: str  # as written (continuation lines joined with newlines), marker comment included
    run: str  # what runs: install steps dropped, pytest collecting only
    expect: int | None  # None: needs a GPU and one is visible (only 1 and 2 are wrong)
    needs_gpu: bool


def _comment_start(line: str) -> int | None:
    """Index of the ``#`` that starts a shell comment on the line, if any (outside quotes)."""
    quote: str | None = None
    escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return i
    return None


_MARKER = re.compile(r"^#\s*(needs:\s*gpu|exits:\s*(\d+))\b")


def expected_end(text: str, gpu_visible: bool) -> tuple[int | None, bool]:
    last = text.splitlines()[-1]
    start = _comment_start(last)
    marker = _MARKER.match(last[start:]) if start is not None else None
    if marker is None:
        return 0, False
    if marker.group(2) is not None:
        code = int(marker.group(2))
        assert code != 1, f"`# exits: 1` documents a bug (1 is the internal-error exit): {text}"
        return code, False
    return (None if gpu_visible else NO_GPU_EXIT), True


def _complete(text: str) -> bool:
    return subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode == 0


def commands_of(block: Block, gpu_visible: bool) -> list[Command]:
    """The block's complete commands: lines are joined until bash parses them (continuations, loops)."""
    out: list[Command] = []
    pending: list[tuple[int, str]] = []
    for number, line in block.lines:
        pending.append((number, line))
        text = "\n".join(t for _, t in pending)
        if line.rstrip().endswith("\\") or not _complete(text):
            continue
        expect, needs_gpu = expected_end(text, gpu_visible)
        out.append(Command(pending[0][0], text, checked_instead(text), expect, needs_gpu))
        pending = []
    assert not pending, f"{block.where}: an incomplete command: {pending}"
    return out


def _split_top_level(text: str, separator: str) -> list[str]:
    parts, quote, depth, i, start = [], None, 0, 0, 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and text.startswith(separator, i):
            parts.append(text[start:i])
            i += len(separator)
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return parts


_INSTALL = re.compile(
    r"^(?:\S*/)?(?:python3?(?:\.\d+)? -m (?:venv|pip install)|pip3? install|uv pip install)\b"
)
_PYTEST = re.compile(r"^((?:\S*/)?pytest|python3? -m pytest)\b")


def _extras_exist(step: str) -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
    for group in re.findall(r"\.\[([\w,-]+)\]", step):
        for extra in group.split(","):
            assert extra in extras, f"`{step}` installs {extra!r}, an extra pyproject.toml does not define"


def checked_instead(text: str) -> str:
    """Install steps are checked (their extras exist) and dropped; pytest only collects."""
    steps = []
    for step in _split_top_level(text, "&&"):
        bare = step.strip()
        if _INSTALL.match(bare):
            _extras_exist(bare)
            continue
        pytest_cmd = _PYTEST.match(bare)
        if pytest_cmd:
            bare = f"{pytest_cmd.group(1)} --collect-only -q -p no:cacheprovider{bare[pytest_cmd.end():]}"
        steps.append(bare)
    return " && ".join(steps) if steps else ":"


def programs_of(text: str) -> set[str]:
    """The programs a command line starts (by name, not by path), to skip when one is not installed."""
    body = text.splitlines()[-1]
    start = _comment_start(body)
    lines = [*text.splitlines()[:-1], body[:start] if start is not None else body]
    names: set[str] = set()
    for piece in re.split(r"\|\||&&|[|;]|\$\(|`", "\n".join(lines).replace("\\\n", " ")):
        try:
            words = shlex.split(piece)
        except ValueError:
            continue
        words = [w for w in words if not re.match(r"^[A-Za-z_]\w*=", w)]
        if words and "/" not in words[0] and "$" not in words[0] and words[0] not in SHELL_WORDS:
            names.add(words[0])
    return names


# --- running ---------------------------------------------------------------------------------------------


def example_env(tmp: Path) -> dict[str, str]:
    """A fresh login's environment: no deployment or old-launcher variables, fakes first on PATH."""
    env = {
        "PATH": os.pathsep.join([str(EXAMPLE_BIN), str(VENV / "bin"), "/usr/bin", "/bin"]),
        "HOME": str(tmp / "home"),
        "TMPDIR": str(tmp / "tmp"),
        "XDG_CACHE_HOME": str(tmp / "cache"),
        "GLMLAUNCH_CACHE_DIR": str(tmp / "glmlaunch-cache"),
        "FAKE_DOCKER_STATE": str(tmp.parent / "fake-docker"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "COLUMNS": "200",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    # What pip needs to reach its index (the fake docker builds a wheel) and a PYTHONPATH the suite
    # itself may run under; nothing that configures glmlaunch or the old launchers.
    for name, value in os.environ.items():
        if name.startswith("PIP_") or name.lower().endswith("_proxy") or name in {
            "PYTHONPATH", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
        }:
            env[name] = value
    for name in ("home", "tmp", "cache"):
        (tmp / name).mkdir(parents=True, exist_ok=True)
    return env


@pytest.fixture(scope="session")
def repo_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's files (tracked and untracked, not ignored), copied once; each block copies this."""
    dest = tmp_path_factory.mktemp("repo-files")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=False,
    )
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.decode().split("\0")):
            src = REPO / name
            if src.is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / name)
    else:  # not a git checkout (an unpacked sdist): everything but the environment and caches
        shutil.copytree(
            REPO, dest, dirs_exist_ok=True,
            ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", ".*_cache", ".hypothesis"),
        )
    return dest


@pytest.fixture(scope="session")
def gpu_visible(tmp_path_factory: pytest.TempPathFactory) -> bool:
    env = example_env(tmp_path_factory.mktemp("gpu-probe"))
    done = subprocess.run([str(VENV / "bin" / "glmlaunch"), "hw", "--json"], env=env, capture_output=True)
    return done.returncode == 0


def _ignored(name: str) -> bool:
    """Whether git ignores ``name`` by a .gitignore pattern (caches such as .hypothesis/ are not copied)."""
    import fnmatch

    patterns = [
        line.strip().rstrip("/")
        for line in (REPO / ".gitignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return any(fnmatch.fnmatch(part, pat) for part in Path(name).parts for pat in patterns)


def _files_under(root: Path) -> set[str]:
    """Every path under ``root`` (not following the .venv link), relative: what an example may not add."""
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        names = [*dirnames, *filenames]
        if rel == Path("."):
            dirnames[:] = [d for d in dirnames if d != ".venv"]
            names = [n for n in names if n != ".venv"]
        out.update(str(rel / name) for name in names)
    return out


def run_block(commands: list[Command], cwd: Path, env: dict[str, str]) -> tuple[dict[int, list[int]], str]:
    """Runs the commands as one bash script; returns each command's statuses (failures inside it, then
    its own status last) and the combined output."""
    status = cwd.parent / f"{cwd.name}.status"
    record = 'printf "%s %s\\n" "$__example" "$?" >>"$__EXAMPLE_STATUS"'
    script = ["set -E -o pipefail", f"trap {shlex.quote(record)} ERR"]
    for i, command in enumerate(commands):
        script += [
            f"__example={i}",
            f"printf '\\n$ %s\\n' {shlex.quote(command.text)} >&2",
            command.run,
            f"printf 'end %s %s\\n' {i} \"$?\" >>\"$__EXAMPLE_STATUS\"",
        ]
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=cwd,
        env={**env, "__EXAMPLE_STATUS": str(status)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    statuses: dict[int, list[int]] = {i: [] for i in range(len(commands))}
    ended: set[int] = set()
    for record in status.read_text().splitlines() if status.exists() else []:
        parts = record.split()
        if parts[0] == "end":
            statuses[int(parts[1])].append(int(parts[2]))
            ended.add(int(parts[1]))
        elif int(parts[0]) not in ended:
            statuses[int(parts[0])].append(int(parts[1]))
    return statuses, done.stdout


@pytest.mark.parametrize("block", EXAMPLES, ids=_ids(EXAMPLES))
def test_example(block: Block, repo_files: Path, gpu_visible: bool, tmp_path: Path) -> None:
    commands = commands_of(block, gpu_visible)
    env = example_env(tmp_path)
    wanted = {p for c in commands for p in programs_of(c.run) & OPTIONAL_TOOLS}
    missing = sorted(p for p in wanted if shutil.which(p, path=env["PATH"]) is None)
    if missing:
        pytest.skip(f"{block.where} runs {', '.join(missing)}, not installed here")
    cwd = tmp_path / "work"
    shutil.copytree(repo_files, cwd, symlinks=True)
    (cwd / ".venv").unlink(missing_ok=True)
    (cwd / ".venv").symlink_to(VENV, target_is_directory=True)
    before = _files_under(cwd)
    statuses, output = run_block(commands, cwd, env)
    problems = []
    # An example writes under a temporary directory, never into the checkout: a file it left there is
    # copied into every later test run (the README's test command) and can change what examples do.
    left = sorted(name for name in _files_under(cwd) - before if not _ignored(name))
    if left:
        problems.append(f"wrote into the checkout (write under $(mktemp -d) instead): {', '.join(left)}")
    for i, command in enumerate(commands):
        codes = statuses[i]
        if not codes:
            problems.append(f"line {command.line}: never finished: {command.text}")
            continue
        end, inside = codes[-1], codes[:-1]
        if command.expect is None:
            ok = end not in (1, 2)
            want = "anything but 1 or 2 (a GPU is visible)"
        elif command.expect == 0:
            ok = end == 0 and not inside
            want = "0"
        else:
            ok = end == command.expect
            want = str(command.expect) + (" (needs: gpu, and none is visible)" if command.needs_gpu else "")
        if not ok:
            problems.append(
                f"line {command.line}: exit {end} (inside it: {inside}), documented: {want}: {command.text}"
            )
    assert "Traceback (most recent call last)" not in output, output
    assert not problems, "\n".join(problems) + "\n--- output ---\n" + output


# --- the rules above, on a fixture, and what the README promises about its own commands ------------------


def test_extraction_rules_on_a_fixture() -> None:
    found = markdown_examples(FIXTURES / "examples" / "rules.md")
    got = [[text for _, text in block.lines] for block in found]
    assert got == [
        ["glmlaunch plan -p turnkey"],
        ["glmlaunch hw --json   # needs: gpu", "glmlaunch check -p gate --inventory x.json  # exits: 4"],
        ["glmlaunch env -p turnkey --shell fish"],
        ["glmlaunch config -p gate --json | jq .schema_version"],
        ["glmlaunch hw --save hw.json  # needs: gpu"],
        ['eval "$(glmlaunch env -p turnkey)"'],
        ["GLMLAUNCH_STRICT=1 glmlaunch check -p turnkey --inventory x.json"],
        ["glmlaunch calibrate search -p gate \\", "    --objective max-gmu --no-write"],
        ["glmlaunch profiles list --json"],
    ]


def test_markers_and_install_steps() -> None:
    assert expected_end("glmlaunch hw  # needs: gpu, the NVML inventory", False) == (8, True)
    assert expected_end("glmlaunch hw  # needs: gpu", True) == (None, True)
    assert expected_end("glmlaunch plan -p x  # exits: 4 (below the margin)", False) == (4, False)
    assert expected_end("glmlaunch plan -p x  # the needs: gpu of others", False) == (0, False)
    assert expected_end("echo '# exits: 3'", False) == (0, False)
    with pytest.raises(AssertionError, match="documents a bug"):
        expected_end("glmlaunch plan  # exits: 1", False)
    quick = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/pytest"
    assert checked_instead(quick) == ".venv/bin/pytest --collect-only -q -p no:cacheprovider"
    assert checked_instead("python3 -m venv .venv && .venv/bin/pip install -e .") == ":"
    with pytest.raises(AssertionError, match="does not define"):
        checked_instead(".venv/bin/pip install -e '.[nosuchextra]' && glmlaunch plan")
    assert programs_of("glmlaunch plan --json | jq .x && FOO=1 docker build .  # x | y") == {
        "glmlaunch", "jq", "docker",
    }


def test_examples_are_found_in_the_readme_and_the_scripts() -> None:
    wheres = {block.where.split(":")[0] for block in EXAMPLES}
    assert {"README.md", "scripts/serve-glm52.sh", "scripts/Dockerfile.glmlaunch", "scripts/compose.yaml",
            "scripts/capture_inventory.sh"} <= wheres
    texts = [text for block in EXAMPLES for _, text in block.lines]
    assert any(t.startswith("MODEL_FAMILY=glm52 TP=4 DCP=2 MTP=5 scripts/serve-glm52.sh") for t in texts)
    assert any("docker compose" in t for t in texts) and any("docker build" in t for t in texts)


def test_quick_start_commands_are_what_ci_runs() -> None:
    readme = (REPO / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    fenced = [b for b in markdown_examples(REPO / "README.md") if b.where.startswith("README.md:")]
    commands = [text for block in fenced for _, text in block.lines if text in quick]
    assert len(commands) == 2, commands
    install_plan, install_test = commands
    assert install_plan.endswith("glmlaunch plan -p turnkey")
    assert install_test.endswith("pytest")
    assert install_test in (REPO / ".ci" / "run").read_text(), "README's test command must be the one CI runs"


# --- scripts/serve-glm52.sh: the documented migration path ------------------------------------------------


def wrapper(env_vars: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**example_env(tmp_path), **env_vars}
    return subprocess.run(
        ["bash", str(WRAPPER), *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def dry_run_argv(done: subprocess.CompletedProcess[str]) -> list[str]:
    return shlex.split(done.stdout.strip().splitlines()[-1])


def test_wrapper_usage_example_reaches_vllm_on_the_default_profile(tmp_path: Path, gpu_visible: bool) -> None:
    """The usage line (turnkey's own TP/DCP/MTP) resolves on glmlaunch's default profile and execs vLLM.

    The turnkey runs LMCache; a managed server would make the launch supervised (tests/lmcache): here the
    server is an external one, a listener of the test's, so the wrapper's exec is what is tested."""
    import socket

    usage = {"MODEL_FAMILY": "glm52", "TP": "4", "DCP": "2", "MTP": "5"}
    checked = {"GLMLAUNCH_INVENTORY": str(INVENTORY), "GLMLAUNCH_SKIP_PREFLIGHT": "1"}
    fits = {"MAX_MODEL_LEN": "262144"}  # 524288 does not fit the constructed rig's budget (exit 4)
    with socket.create_server(("127.0.0.1", 0)) as lmcache:
        external = {
            "GLMLAUNCH_LMCACHE_CONFIG__SERVER": "external",
            "GLMLAUNCH_LMCACHE_CONFIG__PORT": str(lmcache.getsockname()[1]),
        }
        done = wrapper({**usage, **checked, **fits, **external}, tmp_path, "--", "--enable-lora")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("fake vllm: serve "), done.stdout
    assert done.stdout.rstrip().endswith("--enable-lora")
    first = done.stderr.splitlines()[0]
    assert first == (
        "serve-glm52.sh: TP=4 -> parallel.tp=4, DCP=2 -> parallel.dcp=2, MTP=5 -> "
        "speculative.num_speculative_tokens=5, MAX_MODEL_LEN=262144 -> scheduler.max_model_len=262144"
    )
    if not gpu_visible:  # without an inventory there is no GPU to check: the documented `# needs: gpu`
        assert wrapper(usage, tmp_path).returncode == NO_GPU_EXIT


def test_wrapper_profile_is_glmlaunchs_choice(tmp_path: Path) -> None:
    anywhere = {"GLMLAUNCH_INVENTORY": str(INVENTORY), "GLMLAUNCH_SKIP_PREFLIGHT": "1"}
    base = {"DRY_RUN": "1", "MAX_MODEL_LEN": "262144", **anywhere}
    plain = subprocess.run(
        [str(VENV / "bin" / "glmlaunch"), "serve", "--dry-run", "--set", "scheduler.max_model_len=262144"],
        env={**example_env(tmp_path), **anywhere},
        cwd=tmp_path, capture_output=True, text=True,
    )
    via_wrapper = wrapper(base, tmp_path)
    assert via_wrapper.returncode == plain.returncode, via_wrapper.stderr
    assert dry_run_argv(via_wrapper) == dry_run_argv(plain)  # the same default: turnkey
    argv = dry_run_argv(via_wrapper)
    assert argv[argv.index("--decode-context-parallel-size") + 1] == "2"
    gate = dry_run_argv(wrapper({**base, "GLMLAUNCH_PROFILE": "gate"}, tmp_path))
    assert gate[gate.index("--max-num-seqs") + 1] == "1"
    assert "--profile" not in WRAPPER.read_text().split("exec glmlaunch", 1)[1]


@pytest.mark.parametrize(
    ("env_vars", "message"),
    [
        ({"TP": "4", "GLMLAUNCH_PARALLEL__TP": "2"},
         "TP=4 and GLMLAUNCH_PARALLEL__TP=2 both set parallel.tp; unset one of them"),
        ({"MTP": "3", "GLMLAUNCH_SET": "server.port=9000; speculative.num_speculative_tokens=5"},
         "MTP=3 and GLMLAUNCH_SET's speculative.num_speculative_tokens=5 both set "
         "speculative.num_speculative_tokens; remove one of them"),
        ({"DCP_QUERY_SPLIT": "1", "VLLM_DCP_QUERY_SPLIT": "0"},
         "DCP_QUERY_SPLIT=1 and VLLM_DCP_QUERY_SPLIT=0 both set dcp_policy.query_split; unset one of them"),
        ({"GPUS": "0,1,2,3", "CUDA_VISIBLE_DEVICES": "4,5,6,7"},
         "GPUS=0,1,2,3 and CUDA_VISIBLE_DEVICES=4,5,6,7 both set parallel.gpus; unset one of them"),
        ({"PCIE_DMA_MIN_BYTES": "8MB", "VLLM_PCIE_DMA_MIN_BYTES": "6MB"},
         "PCIE_DMA_MIN_BYTES=8MB and VLLM_PCIE_DMA_MIN_BYTES=6MB both set comm.dma_min_bytes"),
        ({"B12X_PCIE_DMA": "0", "PCIE_DMA_MIN_BYTES": "6MB"},
         "B12X_PCIE_DMA=0 (no DMA) and PCIE_DMA_MIN_BYTES=6MB (a crossover) both set comm.dma_min_bytes"),
        ({"B12X_PCIE_DMA": "0", "GLMLAUNCH_COMM__DMA_MIN_BYTES": "6MB"},
         "B12X_PCIE_DMA=0 and GLMLAUNCH_COMM__DMA_MIN_BYTES=6MB both set comm.dma_min_bytes"),
        ({"GRAPH": "48", "CUDAGRAPH_CAPTURE_SIZES": "6,12"},
         "GRAPH=48 and CUDAGRAPH_CAPTURE_SIZES=6,12 both set the capture sizes"),
        ({"GRAPH": "48", "GLMLAUNCH_CUDAGRAPH__CAPTURE_SIZES": "6,12"},
         "GRAPH=48 and GLMLAUNCH_CUDAGRAPH__CAPTURE_SIZES=6,12 both set cudagraph.capture_sizes"),
    ],
    ids=["glmlaunch-variable", "glmlaunch-set", "v19-vllm-alias", "gpus-alias", "dma-alias", "dma-off",
         "dma-off-glmlaunch", "graph-sizes", "graph-glmlaunch-sizes"],
)
def test_wrapper_refuses_two_spellings_of_one_setting(
    env_vars: dict[str, str], message: str, tmp_path: Path
) -> None:
    done = wrapper({**env_vars, "DRY_RUN": "1"}, tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("serve-glm52.sh: error: " + message), done.stderr


def test_wrapper_accepts_agreeing_spellings_and_reads_the_v19_aliases(tmp_path: Path) -> None:
    agreeing = {
        "TP": "4", "GLMLAUNCH_PARALLEL__TP": "4",  # the same value twice is not a conflict
        "DCP_CKV_GATHER": "1", "GLMLAUNCH_SET": "dcp_policy.ckv_gather=true",
        "VLLM_DCP_QUERY_SPLIT": "1",  # v19 read it when DCP_QUERY_SPLIT was unset
        "VLLM_B12X_MLA_CKV_GATHER_MAX_TOKENS": "140000",
        "DRY_RUN": "1", "GLMLAUNCH_INVENTORY": str(INVENTORY), "GLMLAUNCH_SKIP_PREFLIGHT": "1",
        "MAX_MODEL_LEN": "262144",
    }
    done = wrapper(agreeing, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "VLLM_DCP_QUERY_SPLIT=1 -> dcp_policy.query_split=true" in done.stderr.splitlines()[0]
    exports = done.stdout
    assert "VLLM_DCP_QUERY_SPLIT=1" in exports and "VLLM_B12X_MLA_CKV_GATHER_MAX_TOKENS=140000" in exports
    assert "from your environment is replaced" not in done.stderr  # the same values: nothing shadowed


# --- issue 31, item 12: the old chain's own exports, through the drop-in, serve what the old chain served --

UPSTREAM = FIXTURES / "upstream"
OFFLINE = {"DRY_RUN": "1", "GLMLAUNCH_INVENTORY": str(INVENTORY), "GLMLAUNCH_SKIP_PREFLIGHT": "1"}


def _recorded(name: str) -> dict[str, Any]:
    """A launcher chain's recorded resolution (scripts/record_launcher_chain.py): the environment the chain
    exported just before it exec'd vLLM, and that argv."""
    doc: dict[str, Any] = json.loads((UPSTREAM / f"{name}.json").read_text(encoding="utf-8"))
    return doc


@pytest.mark.parametrize("name", ["old-chain-r12", "old-chain-gate"])
def test_the_old_chains_exported_environment_gives_the_old_chains_argv(name: str, tmp_path: Path) -> None:
    """Everything the old chain exported (ONLINE_QUANT=none, MOE_MODE=a16, its VLLM_* names, …), in a real
    bash running the drop-in: accepted, and the argv is the one the old chain exec'd, flag for flag."""
    chain = _recorded(name)
    assert chain["env"]["MODEL_FAMILY"] == "glm52-exl3" and chain["env"]["ONLINE_QUANT"] == "none"
    done = wrapper({**chain["env"], **OFFLINE}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr
    assert dry_run_argv(done)[1:] == chain["argv"][1:]  # the program's path aside: the fake vllm's
    assert done.stderr.splitlines()[0].startswith("serve-glm52.sh: MODEL_FAMILY=glm52-exl3 -> -p r12-exl3, ")


def test_an_r7_chains_environment_is_accepted_under_its_profile(tmp_path: Path) -> None:
    chain = _recorded("r34-exl3-r7")
    assert chain["env"]["ONLINE_QUANT"] == "exl3-b6"
    done = wrapper({**chain["env"], **OFFLINE, "GLMLAUNCH_PROFILE": "r34-exl3-r7"}, tmp_path)
    assert done.returncode == 0, done.stderr
    plain = subprocess.run(
        [str(VENV / "bin" / "glmlaunch"), "serve", "--dry-run", "-p", "r34-exl3-r7"],
        env={**example_env(tmp_path), **OFFLINE}, cwd=tmp_path, capture_output=True, text=True,
    )
    assert dry_run_argv(done) == dry_run_argv(plain)


def test_model_family_glm52_exl3_alone_serves_the_r12_preset(tmp_path: Path) -> None:
    r12 = _recorded("old-chain-r12")["argv"]
    done = wrapper({"MODEL_FAMILY": "glm52-exl3", **OFFLINE}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert dry_run_argv(done)[1:] == r12[1:]
    # glmlaunch's own choice still wins where it is made
    gate = wrapper({"MODEL_FAMILY": "exl3", "GLMLAUNCH_PROFILE": "gate", **OFFLINE}, tmp_path)
    argv = dry_run_argv(gate)
    assert argv[argv.index("--max-num-seqs") + 1] == "1" and "-p r12-exl3" not in gate.stderr


NEUTRAL = {
    "PCIE_CALIBRATION": "0", "PCIE_CALIBRATION_ONLY": "0", "PCIE_CALIBRATION_TIMEOUT": "600",
    "PCIE_CALIBRATION_CACHE_DIR": "/cache/pcie-calibration", "DCP_CKV_PREFETCH_TOPOLOGY": "auto",
    "ONLINE_QUANT": "none", "ONLINE_MXFP8": "0", "ONLINE_FP8": "0", "ONLINE_FP8_MXFP4": "0",
    "QUANTIZATION_CONFIG_JSON": "", "LINEAR_BACKEND": "auto", "NF3_GRID188": "1",
    "DCP_A2A_LARGE_BACKEND": "ag_rs", "MOE_MODE": "a16",
}  # fmt: skip


def test_the_old_defaults_of_retired_variables_are_accepted_and_named(tmp_path: Path) -> None:
    r12 = _recorded("old-chain-r12")["argv"]
    done = wrapper({"MODEL_FAMILY": "glm52-exl3", **NEUTRAL, **OFFLINE}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert dry_run_argv(done)[1:] == r12[1:]
    said = next(line for line in done.stderr.splitlines() if "nothing to do" in line)
    for name in ("PCIE_CALIBRATION=0", "QUANTIZATION_CONFIG_JSON=", "LINEAR_BACKEND=auto", "ONLINE_FP8=0"):
        assert name in said
    assert "MOE_MODE=a16 -> env.B12X_MOE_FORCE_A16=1" in done.stderr.splitlines()[0]


def test_retired_variables_asking_for_what_glmlaunch_does_not_do_are_refused_together(tmp_path: Path) -> None:
    asks = {
        "PCIE_CALIBRATION": "force", "ONLINE_QUANT": "mxfp8", "QUANTIZATION_CONFIG_JSON": '{"linear":{}}',
        "ONLINE_FP8": "1", "LINEAR_BACKEND": "cutlass", "DCP_CKV_PREFETCH_TOPOLOGY": "safe",
    }  # fmt: skip
    done = wrapper({"MODEL_FAMILY": "glm52-exl3", **NEUTRAL, **asks, **OFFLINE}, tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    errors = done.stderr.splitlines()
    assert len(errors) == len(asks) + 1
    for name, value in asks.items():
        assert any(line.startswith(f"serve-glm52.sh: error: {name}={value}: ") for line in errors), name
    assert errors[-1].startswith(f"serve-glm52.sh: error: {len(asks)} old variable(s) above")


# --- examples that need the GPUs: what they name exists (issue 31: run here, they stop at exit 8) ---------

_READS = {"-p", "--profile", "--inventory", "--replay", "--log"}
_WRITES = {"--save", "-o", "--output", "--record", "--svg"}


def test_the_files_and_profiles_gpu_examples_name_exist() -> None:
    """A `# needs: gpu` example stops at exit 8 here before it reads much: each profile it names is shipped
    (or a file of the repository) and each file it reads is in the repository or written by an earlier
    command of its block (vllm.log: the log the served vLLM writes, which `watch --log` waits for)."""
    shipped = {p.stem for p in (REPO / "profiles").glob("*.yaml")}
    checked = 0
    for block in EXAMPLES:
        written: set[str] = set()
        for command in commands_of(block, gpu_visible=False):
            code = command.text.splitlines()[-1]
            start = _comment_start(code)
            words = shlex.split("\n".join([*command.text.splitlines()[:-1], code[:start] if start else code]))
            pairs = list(itertools.pairwise(words))
            written |= {value for flag, value in pairs if flag in _WRITES}
            if not command.needs_gpu or "glmlaunch" not in words:
                continue
            for flag, value in pairs:
                if flag in {"-p", "--profile"}:
                    assert value in shipped or (REPO / value).is_file(), f"{block.where}: no profile {value}"
                    checked += 1
                elif flag in _READS and value != "vllm.log":
                    assert value in written or (REPO / value).exists(), f"{block.where}: no file {value}"
                    checked += 1
    assert checked >= 5  # the README's GPU examples were found
