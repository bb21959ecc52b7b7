"""``glmlaunch ARGS`` for the tests: in this process (the default) or as a new process.

Not a conftest, and not in conftest.py: conftest.py is imported twice by the suite (as ``conftest`` and as
``tests.conftest``), which would give each copy its own ``--cli-subprocess`` switch and app cache.

:func:`run_cli` runs the console entry point, ``glmlaunch.cli:main``, in this process inside Typer's
``CliRunner`` isolation: ``sys.argv`` is what the console script gets, stdin is ``input`` (empty when
None), stdout and stderr are separate byte streams, ``os.environ`` is exactly ``env``, the working
directory is ``cwd``. ``main`` ends in ``SystemExit`` with the documented exit code (``clikit.run`` turns
every failure into one), and an exception escaping it is what the interpreter would report: its traceback
on stderr and exit 1. Everything the call changed in this process is put back afterwards: the
environment, the working directory, signal handlers, the warning filters, the garbage collector's
thresholds, the root logger, glmlaunch's per-run output state and stand-in modules the run put into
``sys.modules``. What an interpreter reads once as it starts is this process's, whatever ``env`` says:
``PYTHON*`` variables, the locale of the standard streams, the imports a fresh start makes.

A new interpreter costs ~0.3-0.5 s per call on the 2-core CI machine (bench/RESULTS.md, "Start-up"); the
suite makes several hundred calls. :func:`run_cli_process` is the real process, for the tests that need
one: exec, signals, shells, terminals, PID namespaces, a subreaper (``serve --supervise``), inherited
stdin, what a fresh interpreter imports or does on its first use of a library.
``pytest --cli-subprocess`` sends every :func:`run_cli` call there too (the check that in-process and real
runs agree).

In process, a command may not replace or end the process: ``os.exec*``, ``os._exit`` and ``os.abort``
raise :class:`NeedsProcess` instead (the test belongs on :func:`run_cli_process`), so a test can never
exec into another program and end the test run with its exit status.
"""

from __future__ import annotations

import gc
import locale
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

_subprocess_only = False


def use_subprocess(on: bool) -> None:
    """``--cli-subprocess``: every :func:`run_cli` call as a new process."""
    global _subprocess_only
    _subprocess_only = on


def in_process() -> bool:
    """Whether :func:`run_cli` runs in this process (not under ``--cli-subprocess``)."""
    return not _subprocess_only


@dataclass(frozen=True)
class CliResult:
    """What ``subprocess.run(..., capture_output=True, text=True)`` gives back, for an in-process run."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def glmlaunch_exe() -> list[str]:
    exe = shutil.which("glmlaunch", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "glmlaunch"]


def run_cli_process(
    *args: str, env: Mapping[str, str], input: str | None = None, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``glmlaunch ARGS`` as a new process of the console script (stdin inherited when ``input`` is None)."""
    return subprocess.run(
        [*glmlaunch_exe(), *args],
        env=dict(env),
        input=input,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def run_cli(
    *args: str, env: Mapping[str, str], input: str | None = None, cwd: Path | None = None, timeout: float = 60
) -> CliResult | subprocess.CompletedProcess[str]:
    """``glmlaunch ARGS`` through the console entry point, in this process (module docstring)."""
    if _subprocess_only:
        return run_cli_process(*args, env=env, input=input, cwd=cwd, timeout=timeout)
    return _run_in_process(list(args), env=env, input=input, cwd=cwd, timeout=timeout)


class NeedsProcess(BaseException):
    """The command tried to replace or end the process: the test must use :func:`run_cli_process`.

    A BaseException, so that no ``except Exception`` in glmlaunch turns it into an ordinary failure."""


class _TimedOut(BaseException):
    pass


def _run_in_process(
    argv: list[str], *, env: Mapping[str, str], input: str | None, cwd: Path | None, timeout: float
) -> CliResult:
    from typer.testing import CliRunner

    from glmlaunch import cli

    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("run_cli runs the CLI in process: call it from the main thread")
    runner = CliRunner()
    code = 0
    out = err = b""
    with (
        _process_state(),
        _environment(env),
        _working_dir(cwd),
        _fd_capture() as fd_output,
        _no_process_exit(),
        _app_built_once(cli),
        _deadline(timeout, argv),
    ):
        from typer import _click

        width = _click.formatting.FORCED_WIDTH
        with runner.isolation(input=input, color=False) as (stdout, stderr, _mixed):
            # CliRunner pins click's help width to 80 columns; the console script asks the terminal
            # (COLUMNS), so the help a test reads is the help an operator gets.
            _click.formatting.FORCED_WIDTH = width
            _fresh_warnings()
            sys.argv = [glmlaunch_exe()[0], *argv]
            try:
                cli.main()
            except SystemExit as exc:
                code = _exit_status(exc.code)
            except (NeedsProcess, _TimedOut):
                raise
            except KeyboardInterrupt:
                traceback.print_exc()
                code = -int(signal.SIGINT)  # the interpreter re-raises SIGINT on itself
            except BaseException:
                traceback.print_exc()  # what the interpreter prints for an exception nothing caught
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                out, err = stdout.getvalue(), stderr.getvalue()
    # A child the command started wrote to the inherited descriptors: after what Python wrote.
    out, err = out + fd_output[0], err + fd_output[1]
    return CliResult(["glmlaunch", *argv], code, _text(out), _text(err))


def _exit_status(code: object) -> int:
    # As the interpreter ends on SystemExit: None is 0, an int is the status, anything else is printed
    # on stderr and the status is 1.
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _text(data: bytes) -> str:
    # What subprocess.run(text=True) does with a child's output: the locale's encoding, strictly, and
    # universal newlines.
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextmanager
def _working_dir(cwd: Path | None) -> Iterator[None]:
    before = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(before)


#: A new interpreter's warning filters (no -W, no PYTHONWARNINGS), the first one first.
_FRESH_FILTERS: tuple[tuple[Any, type[Warning], str], ...] = (
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
)


def _fresh_warnings() -> None:
    # The filters a real process starts with, and a warning printed on stderr as it would be: not
    # collected by pytest's recorder, which a real process never reaches.
    warnings.resetwarnings()
    for action, category, module in reversed(_FRESH_FILTERS):
        warnings.filterwarnings(action, category=category, module=module)

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show


@contextmanager
def _process_state() -> Iterator[None]:
    """Put back the interpreter-wide state a command may change (module docstring)."""
    from glmlaunch import output

    handlers = {s: signal.getsignal(s) for s in signal.valid_signals()}
    thresholds = gc.get_threshold()
    gc_enabled = gc.isenabled()
    root = logging.getLogger()
    root_state = (list(root.handlers), root.level, logging.root.manager.disable)
    modules = set(sys.modules)
    argv = sys.argv
    subreaper = _subreaper()
    try:
        with warnings.catch_warnings():
            yield
    finally:
        reaping = _subreaper() != subreaper
        if reaping:
            _set_subreaper(subreaper)
        sys.argv = argv
        for sig, handler in handlers.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
        gc.set_threshold(*thresholds)
        (gc.enable if gc_enabled else gc.disable)()
        root.handlers[:] = root_state[0]
        root.setLevel(root_state[1])
        logging.disable(root_state[2])
        for name in set(sys.modules) - modules:
            # A module the run made up rather than imported (glmlaunch's stand-in for pydantic's plugin
            # loader): gone with the process it was made for. Real imports stay, as a cache.
            if getattr(sys.modules[name], "__spec__", None) is None:
                del sys.modules[name]
        # The next run, and any test that uses glmlaunch.output directly, starts from a fresh state.
        output.begin_run()
        if reaping:
            # `serve --supervise` adopts orphans (PR_SET_CHILD_SUBREAPER): the test process would go on
            # adopting every process its children leave behind.
            raise NeedsProcess("glmlaunch made itself a child subreaper in process: use run_cli_process")


_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37


def _subreaper() -> int | None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        value = ctypes.c_int(0)
        if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
            return None
    except (OSError, AttributeError):  # not Linux
        return None
    return value.value


def _set_subreaper(value: int | None) -> None:
    import ctypes

    if value is not None:
        ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(value), 0, 0, 0)


@contextmanager
def _fd_capture() -> Iterator[list[bytes]]:
    """What children write to descriptors 1 and 2 (this process's real stdout and stderr), filled in on
    exit."""
    captured = [b"", b""]
    saved: list[tuple[int, int, Any]] = []
    for stream in (sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    for fd in (1, 2):
        tmp = tempfile.TemporaryFile(buffering=0)  # noqa: SIM115  # closed in the finally below
        saved.append((fd, os.dup(fd), tmp))
        os.dup2(tmp.fileno(), fd)
    try:
        yield captured
    finally:
        for i, (fd, old, tmp) in enumerate(saved):
            os.dup2(old, fd)
            os.close(old)
            tmp.seek(0)
            captured[i] = tmp.read()
            tmp.close()


_BLOCKED = ("execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "_exit", "abort")


@contextmanager
def _no_process_exit() -> Iterator[None]:
    saved = {name: getattr(os, name) for name in _BLOCKED}

    def blocked(name: str) -> Callable[..., Any]:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise NeedsProcess(f"glmlaunch called os.{name} in process: the test needs run_cli_process")

        return refuse

    for name in _BLOCKED:
        setattr(os, name, blocked(name))
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(os, name, fn)


class _BuiltApp:
    """``cli.app`` with its click command built once: Typer rebuilds it on every call (~20 ms). Calling it
    is what ``Typer.__call__`` does with the built command; the rest is the Typer app's."""

    def __init__(self, app: Any) -> None:
        import typer.main

        self.app = app
        self.command = typer.main.get_command(app)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.command(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)


_built: _BuiltApp | None = None


@contextmanager
def _app_built_once(cli: Any) -> Iterator[None]:
    global _built
    app = cli.app
    if _built is None or _built.app is not app:
        _built = _BuiltApp(app)
    cli.app = _built
    try:
        yield
    finally:
        cli.app = app


@contextmanager
def _deadline(seconds: float, argv: list[str]) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise _TimedOut

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _TimedOut:
        raise subprocess.TimeoutExpired(["glmlaunch", *argv], seconds) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
