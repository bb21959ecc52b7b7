"""Shared harness of the hostile-input fuzz suite (issue 13): settings, strategies, runners, the contract.

Not a conftest: tests/conftest.py is imported as ``conftest`` by other test modules, and a second
conftest.py would replace it in ``sys.modules``. The fuzz test modules import this file instead (pytest puts
tests/fuzz on ``sys.path`` for them).

Size: ``GLMLAUNCH_FUZZ_SCALE`` multiplies every test's number of cases (CI: 1, about 9,000 cases in total,
about 3 minutes of one core: issue 22 added test_fuzz_files.py and took the difference from the two costliest
tests; issue 31 added the supervise, boots, watch, evidence and explain-oom surfaces and took the
difference from the in-process volume, so that the whole suite keeps its 8 minutes; nightly:
``GLMLAUNCH_FUZZ_SCALE=10``). ``GLMLAUNCH_FUZZ_SEED`` picks another deterministic campaign;
``GLMLAUNCH_FUZZ_RANDOM=1`` draws fresh random cases (and keeps hypothesis's example database).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
PROFILES = REPO / "profiles"
INVENTORIES = sorted((FIXTURES / "inventories").glob("*.json"))
BOOT_LOGS = sorted((FIXTURES / "boot-logs").glob("*.log")) + sorted((FIXTURES / "logs").glob("*.log"))
ARGV_FIXTURE = FIXTURES / "r12-exl3.argv"

#: The documented exit codes (README "Exit codes"); 1 is an internal error, i.e. a bug.
DOCUMENTED_EXIT_CODES = frozenset({0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 130})
#: The per-case deadline (issue 13: every run under 5 s).
DEADLINE_S = 5.0
#: A real secret in the caller's environment, and planted secret-named values: never in any output.
HF_SECRET = "hf_fuzz_SECRET_9876"
PLANTED = "pl_fuzz_PLANTED_5432"
SECRET_NAMES = ("MY_API_KEY", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "X_CREDENTIALS")
SECRETS = (HF_SECRET, PLANTED)

SCALE = float(os.environ.get("GLMLAUNCH_FUZZ_SCALE", "1") or "1")
_RANDOM = os.environ.get("GLMLAUNCH_FUZZ_RANDOM", "") == "1"
_SEED = os.environ.get("GLMLAUNCH_FUZZ_SEED")

settings.register_profile(
    "glmlaunch-fuzz",
    # CI must not be flaky: the same cases every run, no example database carried between runs.
    derandomize=not _RANDOM and _SEED is None,
    database=None if not _RANDOM else settings.default.database,
    deadline=DEADLINE_S * 1000,
    phases=(Phase.explicit, Phase.generate, Phase.target, Phase.shrink),
    suppress_health_check=list(HealthCheck),
    print_blob=True,
    report_multiple_bugs=True,
)

T = TypeVar("T")


def cases(make_one: Callable[[], Any]) -> Iterator[Callable[[], Any]]:
    """A fixture body: a factory of fresh cases (hypothesis runs many examples per test function), each
    closed when the test ends."""
    made: list[Any] = []

    def make() -> Any:
        c = make_one()
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def fuzz_settings(examples: int) -> settings:
    """Settings for one fuzz test: ``examples`` cases at scale 1."""
    return settings(settings.get_profile("glmlaunch-fuzz"), max_examples=max(1, round(examples * SCALE)))


def seeded(test: Callable[..., T]) -> Callable[..., T]:
    """Apply GLMLAUNCH_FUZZ_SEED when given (another deterministic campaign)."""
    if _SEED is None:
        return test
    from hypothesis import seed

    return seed(int(_SEED))(test)


# --- running glmlaunch ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    argv: tuple[str, ...]
    code: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return (
            f"glmlaunch {' '.join(repr(a) if len(a) < 200 else repr(a[:200]) + '…' for a in self.argv)}\n"
            f"exit {self.code} in {self.seconds:.2f} s\n--- stdout (tail)\n{self.stdout[-1500:]}\n"
            f"--- stderr (tail)\n{self.stderr[-3000:]}"
        )


_KEEP = ("PATH", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "SYSTEMROOT")


def base_environ(tmp: Path) -> dict[str, str]:
    """A clean environment for one case: no deployment variables, a private cache, the HF_TOKEN secret."""
    env = {k: v for k, v in os.environ.items() if k in _KEEP}
    env.update(
        {
            "HOME": str(tmp / "home"),
            "XDG_CACHE_HOME": str(tmp / "xdg-cache"),
            "GLMLAUNCH_CACHE_DIR": str(tmp / "glmlaunch-cache"),
            "NO_COLOR": "1",
            "COLUMNS": "200",
            "PYTHONDONTWRITEBYTECODE": "1",
            "HF_TOKEN": HF_SECRET,
        }
    )
    return env


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


class _CachedApp:
    """``cli.app`` with its click command built once: typer rebuilds it on every call (~20 ms), which
    would dominate the in-process cases. Calling it is what ``Typer.__call__`` does with the built command."""

    def __init__(self, app: Any) -> None:
        import typer.main

        self.app = app
        self.command = typer.main.get_command(app)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.command(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # The rest is the Typer app's (a completion request builds the command from it).
        return getattr(self.app, name)


_cached: _CachedApp | None = None

#: Extra address space one in-process case may take: a runaway allocation becomes a MemoryError (exit 1,
#: reported with its reproducer) instead of the kernel killing the whole test run.
CASE_MEMORY_BYTES = 3 * 2**30


@contextlib.contextmanager
def _memory_cap() -> Iterator[None]:
    try:
        import resource

        vm = next(
            int(line.split()[1]) * 1024
            for line in Path("/proc/self/status").read_text().splitlines()
            if line.startswith("VmSize:")
        )
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = vm + CASE_MEMORY_BYTES
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ImportError, OSError, StopIteration, ValueError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def run_inprocess(args: Sequence[str], env: Mapping[str, str], cwd: Path) -> Outcome:
    """``glmlaunch ARGS`` through ``glmlaunch.cli.main`` (the console script), in this process.

    An exception escaping ``main`` is what a real process reports as a traceback and exit 1.
    """
    from glmlaunch import cli

    global _cached
    if _cached is None or _cached.app is not cli.app:
        _cached = _CachedApp(cli.app)
    real_app = cli.app
    cli.app = _cached  # type: ignore[assignment]  # restored below: other tests see the real app
    out, err = io.StringIO(), io.StringIO()
    argv_before = sys.argv
    sys.argv = ["glmlaunch", *args]
    started = time.monotonic()
    code: int
    try:
        with (
            _environ(env),
            _cwd(cwd),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            _memory_cap(),
        ):
            try:
                cli.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # what the interpreter would print: a traceback, exit 1
                err.write(traceback.format_exc())
                code = 1
    finally:
        sys.argv = argv_before
        cli.app = real_app
    return Outcome(tuple(args), code, out.getvalue(), err.getvalue(), time.monotonic() - started)


def glmlaunch_exe() -> list[str]:
    exe = Path(sys.executable).parent / "glmlaunch"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "glmlaunch"]


def run_subprocess(args: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float = 30) -> Outcome:
    import subprocess

    started = time.monotonic()
    proc = subprocess.run(
        [*glmlaunch_exe(), *args],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        errors="surrogateescape",
        timeout=timeout,
        check=False,
    )
    return Outcome(tuple(args), proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)


# --- the contract ---------------------------------------------------------------------------------


def assert_contract(o: Outcome, *, secrets: Sequence[str] = SECRETS, deadline: float = DEADLINE_S) -> None:
    """Issue 13: a documented exit code and never 1, no traceback, no secret, under the deadline."""
    assert o.code in DOCUMENTED_EXIT_CODES and o.code != 1, f"undocumented exit code\n{o.describe()}"
    both = o.stdout + o.stderr
    assert "Traceback" not in both, f"traceback in the output\n{o.describe()}"
    for secret in secrets:
        assert secret not in both, f"secret {secret!r} leaked into the output\n{o.describe()}"
    assert o.seconds < deadline, f"took {o.seconds:.1f} s (limit {deadline} s)\n{o.describe()}"
    if o.code == 0 and _asks_for_json(o.argv):
        json.loads(o.stdout)  # one strict JSON document


_TAKES_VALUE = frozenset(
    {
        "-p",
        "--profile",
        "--set",
        "-s",
        "--svg",
        "-o",
        "--output",
        "--save",
        "--explain",
        "--shell",
        "--inventory",
        "--vllm-bin",
        "--base",
        "--max",
        "--step",
        "--min-margin",
        "--objective",
        "--backend",
    }
)


def _asks_for_json(argv: Sequence[str]) -> bool:
    """``--json`` given as the option (not as another option's value, nor after ``--``)."""
    for i, arg in enumerate(argv):
        if arg == "--":
            return False
        if arg == "--json" and (i == 0 or argv[i - 1] not in _TAKES_VALUE):
            return True
    return False


def new_files(root: Path, before: set[Path]) -> set[Path]:
    return {p for p in root.rglob("*")} - before


# --- strategies -----------------------------------------------------------------------------------

SENTINEL_DIR_TOKEN = "@SENTINEL@"
#: Fragments that a shell or a formatter might execute or expand. ``@SENTINEL@`` becomes a tmp dir that
#: must stay empty.
HOSTILE = (
    "$(touch @SENTINEL@/dollar)",
    "`touch @SENTINEL@/backtick`",
    "(touch @SENTINEL@/fish)",
    "; touch @SENTINEL@/semi",
    "&& touch @SENTINEL@/and",
    "| touch @SENTINEL@/pipe",
    "\ntouch @SENTINEL@/newline\n",
    "=touch",
    "$HF_TOKEN",
    "${HF_TOKEN}",
    "$(printenv HF_TOKEN)",
    "$((1+1))",
    "'",
    '"',
    "\\",
    "\\'",
    "'\\''",
    "\\n",
    "!",
    "!!",
    "~",
    "*",
    "?",
    "[a]",
    "{a,b}",
    "#",
    "%",
    "%s",
    "{0}",
    "{}",
    "\t",
    "\r",
    " ",
    "--",
    "-x",
    "\x1b[31m",
    "\u00e9",
    "\u2018",
    "\u2019",
    "\U0001f600",
    "null",
    "~",
    "[",
    "{",
    "FOO_KEY=bar",
    "HF_TOKEN=x",
    "a=b",
    "0",
    "-1",
    "1e400",
    "nan",
)


def hostile_text(min_size: int = 0, max_size: int = 6) -> st.SearchStrategy[str]:
    """Strings made of shell metacharacters, injection attempts and odd unicode."""
    piece = st.one_of(
        st.sampled_from(HOSTILE),
        st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=4),
        st.text(alphabet="abcXYZ019_-./:=,;", min_size=1, max_size=8),
    )
    return st.lists(piece, min_size=min_size, max_size=max_size).map("".join)


def resolve_sentinel(text: str, sentinel: Path) -> str:
    return text.replace(SENTINEL_DIR_TOKEN, str(sentinel))


HUGE_NUMBERS = (
    "0",
    "-1",
    "-0",
    "1",
    "2",
    "3",
    "7",
    "1023",
    "65536",
    "2147483648",
    "9223372036854775808",
    "18446744073709551617",
    "1" + "0" * 40,
    "9" * 400,
    "1e3",
    "1e308",
    "1e400",
    "-1e400",
    "inf",
    "-inf",
    "nan",
    "0.5",
    "0.0001",
    "1.0000001",
    "0x10",
    "0b1",
    "1_000",
    " 4 ",
    "true",
    "false",
    "yes",
    "off",
    "auto",
    "",
)
SIZES = (
    "1GiB",
    "0B",
    "-1KB",
    "84KB",
    "96GiB",
    "1e400GiB",
    "nanGiB",
    "infMiB",
    "1EiB",
    "99999999999999999999999YiB",
    "1.5",
    "1.5KB",
    "GiB",
    "12 GiB",
    "1 2GiB",
    "-0.0GiB",
    "1e-9MiB",
    "0x10MB",
)


def scalar_value() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(HUGE_NUMBERS),
        st.sampled_from(SIZES),
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        hostile_text(max_size=3),
        st.sampled_from(
            ["[1, 2]", "[]", "{}", "{a: 1}", "[[[[[[]]]]]]", "[1, [2, {x: y}]]", "{a: [", "[" * 60]
        ),
    )


def config_keys() -> list[str]:
    from glmlaunch.config.resolve import _all_setting_keys

    return sorted(set(_all_setting_keys()))


def shipped_profiles() -> dict[str, dict[str, Any]]:
    return {p.stem: yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(PROFILES.glob("*.yaml"))}


def leaves(data: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[tuple[str | int, ...], Any]]:
    if isinstance(data, dict) and data:
        out: list[tuple[tuple[str | int, ...], Any]] = []
        for k, v in data.items():
            out += leaves(v, (*prefix, k))
        return out
    if isinstance(data, list) and data:
        out = []
        for i, v in enumerate(data):
            out += leaves(v, (*prefix, i))
        return out
    return [(prefix, data)]


def set_at(data: Any, path: Sequence[str | int], value: Any) -> Any:
    """A copy of ``data`` with ``path`` set to ``value`` (creating maps on the way)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(data, list) and isinstance(head, int) and head < len(data):
        out_list = list(data)
        out_list[head] = set_at(data[head], rest, value)
        return out_list
    base = dict(data) if isinstance(data, dict) else {}
    base[head] = set_at(base.get(head), rest, value)  # type: ignore[index]
    return base


def yaml_value() -> st.SearchStrategy[Any]:
    """Typed values for profile structures: wrong types, extremes, nesting, hostile strings."""
    atoms = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.floats(allow_nan=True, allow_infinity=True),
        scalar_value(),
        hostile_text(max_size=3),
    )
    return st.recursive(
        atoms,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(hostile_text(1, 2), inner, max_size=3)
        ),
        max_leaves=6,
    )


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
    return path


def text_mutations(text: str) -> st.SearchStrategy[str]:
    """Byte/line level mutations of a real file: cut, splice, duplicate, flip, inject."""
    lines = text.splitlines(keepends=True)
    n = len(lines)

    @st.composite
    def mutate(draw: st.DrawFn) -> str:
        out = list(lines)
        for _ in range(draw(st.integers(1, 4))):
            if not out:
                out = [""]
            kind = draw(
                st.sampled_from(["cut", "truncate", "dup", "delete", "inject", "replace-num", "swap", "byte"])
            )
            i = draw(st.integers(0, max(0, len(out) - 1)))
            if kind == "cut":
                j = draw(st.integers(i, min(len(out), i + 400)))
                out = out[i:j] or out[:1]
            elif kind == "truncate":
                line = out[i]
                out = [*out[:i], line[: draw(st.integers(0, len(line)))]]
            elif kind == "dup":
                out.insert(i, out[i] * draw(st.integers(1, 50)))
            elif kind == "delete":
                del out[i]
            elif kind == "inject":
                out.insert(i, draw(hostile_text(1, 8)) + "\n")
            elif kind == "replace-num":
                import re

                nums = list(re.finditer(r"\d+(\.\d+)?", out[i]))
                if nums:
                    m = draw(st.sampled_from(nums))
                    new = draw(st.sampled_from(HUGE_NUMBERS))
                    out[i] = out[i][: m.start()] + new + out[i][m.end() :]
            elif kind == "swap" and len(out) > 1:
                j = draw(st.integers(0, len(out) - 1))
                out[i], out[j] = out[j], out[i]
            elif kind == "byte" and out[i]:
                pos = draw(st.integers(0, len(out[i]) - 1))
                ch = draw(st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.just("\x00"))
                out[i] = out[i][:pos] + ch + out[i][pos + 1 :]
        return "".join(out)

    del n
    return mutate()


def json_mutations(doc: Any) -> st.SearchStrategy[Any]:
    """Structural mutations of a JSON document: replace a leaf, drop a key, change a container."""
    paths = [p for p, _ in leaves(doc)]

    @st.composite
    def mutate(draw: st.DrawFn) -> Any:
        out = doc
        for _ in range(draw(st.integers(1, 3))):
            path = draw(st.sampled_from(paths))
            cut = draw(st.integers(0, len(path)))
            out = set_at(out, path[: max(1, cut)] if path else path, draw(yaml_value()))
        return out

    return mutate()
