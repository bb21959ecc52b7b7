"""The conventions every glmlaunch command is held to, apart from the commands themselves (``cli.py``).

* Help: ``-h``/``--help``; metavars that say what to type (``-p NAME``, ``--set KEY=VALUE``), never a
  Python type; an "Examples" section of real command lines printed verbatim; the whole first sentence of
  each summary in the parent's command list (:class:`Command`, :class:`Group`).
* Shell completion: ``--show-completion`` / ``--install-completion [SHELL]`` and the candidates for
  profile names, shells and search objectives (Typer's variables, ``_GLMLAUNCH_COMPLETE``, with scripts
  and answers of glmlaunch's own: a candidate is data in every shell, never code; see "shell completion").
* Running: :func:`run` turns every failure into one ``error: …`` line on stderr and the exit code README
  documents (a usage error, a ``GlmlaunchError``, Ctrl-C, a closed pipe, a bug); a traceback only with
  ``GLMLAUNCH_DEBUG=1``.

tests/test_help.py, tests/test_completion.py and tests/test_cli_conventions.py hold every command to them.
"""

import inspect
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import typer
from typer._click import Command as ClickCommand
from typer._click import Context, HelpFormatter
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer._click.shell_completion import CompletionItem
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from glmlaunch import no_plugin_scan, without_plugin_loader
from glmlaunch.errors import ExitCode, GlmlaunchError
from glmlaunch.output import begin_run, debug_enabled, line_text, note, set_quiet, write_stderr

PROG = "glmlaunch"
#: The variable the completion scripts set when they ask glmlaunch for candidates (Typer's protocol).
COMPLETE_VAR = "_GLMLAUNCH_COMPLETE"
COMPLETION_SHELLS = ("bash", "zsh", "fish", "pwsh", "powershell")


# --- help and error conventions (the click classes every command and group is built with) ------------
def _argument_usage(param: TyperArgument) -> str:
    """``NAME``, ``[NAME]``, ``NAME...``: what to type, as man pages write it (Typer writes ``{name}``)."""
    name = param.metavar or (param.name or "ARG").upper()
    if name.startswith("["):  # already written in full, e.g. "[-- VLLM_ARG...]"
        return name
    if param.nargs != 1:
        name += "..."
    return name if param.required else f"[{name}]"


def _usage_pieces(ctx: Context, pieces: list[str]) -> list[str]:
    # Typer's pieces are [OPTIONS], one per argument, then (for a group) the subcommand metavar.
    args = [_argument_usage(p) for p in ctx.command.get_params(ctx) if isinstance(p, TyperArgument)]
    return [pieces[0], *args, *pieces[1 + len(args) :]]


def _format_params(ctx: Context, formatter: HelpFormatter) -> None:
    """Arguments by what to type (no ``<list[str]>``), then the options, whose metavars are declared."""
    args: list[tuple[str, str]] = []
    opts: list[tuple[str, str]] = []
    for param in ctx.command.get_params(ctx):
        # One convention for defaults: the help text says it, in words ("default 0.5: 2 Hz"); click's
        # "[default: 0.5]" after it would say it twice.
        if isinstance(param, TyperOption | TyperArgument):
            param.show_default = False
        record = param.get_help_record(ctx)
        if record is None:
            continue
        if isinstance(param, TyperArgument):
            args.append((_argument_usage(param).strip("[]"), record[1]))
        else:
            opts.append(record)
    if ctx.parent is not None and opts:  # every command takes -q where the root does (_take_quiet)
        at = len(opts) - 1 if opts[-1][0].startswith("-h") else len(opts)
        opts.insert(at, (", ".join(QUIET_FLAGS), QUIET_HELP))
    for title, rows in (("Arguments", args), ("Options", opts)):
        if rows:
            with formatter.section(title):
                formatter.write_dl(rows)


def _format_examples(epilog: str | None, formatter: HelpFormatter) -> None:
    # The epilog holds example command lines, one per line; click would rewrap them into one paragraph.
    if not epilog:
        return
    with formatter.section("Examples"):
        for line in inspect.cleandoc(epilog).splitlines():
            formatter.write(f"{'':>{formatter.current_indent}}{line}\n")


def _with_context(exc: UsageError, ctx: Context) -> UsageError:
    # Some parser errors ("option '-p' requires an argument") carry no context; the hint needs the
    # command's path to point at the right `-h`.
    if exc.ctx is None:
        exc.ctx = ctx
        exc.cmd = ctx.command
    return exc


def _parse(ctx: Context, parse: Callable[[], list[str]]) -> list[str]:
    """Parse a command line as a command or group does, with glmlaunch's usage errors."""
    try:
        # Typer builds a pydantic adapter per parameter here: no plugin scan (glmlaunch/__init__.py)
        with no_plugin_scan():
            return parse()
    except UsageError as exc:
        raise _with_context(exc, ctx) from None


QUIET_FLAGS = ("-q", "--quiet")
QUIET_HELP = "no notes or progress on stderr; warnings and errors stay (also GLMLAUNCH_QUIET=1)"


def _take_quiet(ctx: Context, args: list[str], *, group: bool) -> list[str]:
    """``args`` without ``-q``/``--quiet``, which then sets quiet: ``glmlaunch plan -q`` means what
    ``glmlaunch -q plan`` does. Never after ``--`` (vLLM's own ``-q``), never as an option's value, and
    for a group only before its command's name."""
    takes_value = {
        opt
        for param in ctx.command.get_params(ctx)
        if not isinstance(param, TyperArgument) and not getattr(param, "is_flag", False)
        for opt in param.opts
    }
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or (group and not arg.startswith("-")):
            out += args[i:]
            break
        if arg in QUIET_FLAGS:
            set_quiet(True)
        elif arg in takes_value:
            out += args[i : i + 2]
            i += 1
        else:
            out.append(arg)
        i += 1
    return out


class _Held(ClickCommand):
    """What commands and groups share: glmlaunch's usage errors, man-page usage lines, examples verbatim."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        if ctx.parent is not None:  # the root declares -q itself
            args = _take_quiet(ctx, args, group=isinstance(self, TyperGroup))
        return _parse(ctx, partial(super().parse_args, ctx, args))

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        return _usage_pieces(ctx, super().collect_usage_pieces(ctx))

    def format_epilog(self, ctx: Context, formatter: HelpFormatter) -> None:
        _format_examples(self.epilog, formatter)


class Command(_Held, TyperCommand):
    """A command held to the help conventions, ending quietly on a closed pipe."""

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        _format_params(ctx, formatter)

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # `glmlaunch plan | head -1`: the reader stopped early, which is not an error (`git log | head`
            # exits 0). Caught here because Typer turns a broken pipe into exit 1 before main() sees it.
            _silence_stdout()
            raise typer.Exit(0) from None
        except KeyboardInterrupt:
            # Typer would exit 130 without a word; say it in the one error style.
            _error("interrupted")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None


class Group(_Held, TyperGroup):
    """A group held to the help conventions, listing each command with its whole summary."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        if self.subcommand_metavar == "COMMAND [ARGS]...":
            self.subcommand_metavar = "COMMAND [ARGS...]"  # as every other repeatable is written

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        _format_params(ctx, formatter)
        self.format_commands(ctx, formatter)

    def shell_complete(self, ctx: Context, incomplete: str) -> list[CompletionItem]:
        # The same whole summaries in zsh's and fish's candidate lists.
        items = super().shell_complete(ctx, incomplete)
        for item in items:
            if item.type == "plain" and (cmd := self.get_command(ctx, item.value)) is not None:
                item.help = cmd.get_short_help_str(limit=10_000)
        return items

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        # click cuts each summary at 45 columns ("Print the resolved configuration and where every
        # value came..."); the whole first sentence is what tells the commands apart.
        rows = [
            (name, cmd.get_short_help_str(limit=10_000))
            for name in self.list_commands(ctx)
            if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden
        ]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _silence_stdout() -> None:
    # Point stdout at /dev/null so the interpreter's final flush cannot fail again (Python's recipe).
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


# --- shell completion ------------------------------------------------------------------------------------
def complete_profile(incomplete: str) -> list[tuple[str, str]]:
    """Profile names on the search path (``GLMLAUNCH_PROFILE_PATH``, then the shipped ones) for ``-p``.

    A word with a path separator gets nothing, so the shell falls back to completing file names.
    """
    if "/" in incomplete or incomplete.startswith("."):
        return []
    from glmlaunch.config.profiles import PROFILE_SUFFIXES, search_dirs

    names: dict[str, str] = {}
    for directory, builtin in search_dirs():
        try:
            paths = sorted(directory.iterdir())
        except OSError:
            continue
        for path in paths:
            if path.suffix in PROFILE_SUFFIXES and path.stem.startswith(incomplete):
                names.setdefault(path.stem, "built-in profile" if builtin else str(path))
    return list(names.items())


def complete_shell(incomplete: str) -> list[str]:
    from glmlaunch.config.shells import SHELLS

    return [s for s in SHELLS if s.startswith(incomplete)]


def complete_objective(incomplete: str) -> list[str]:
    from glmlaunch.plan.search import OBJECTIVES

    return [o for o in OBJECTIVES if o.startswith(incomplete)]


def complete_completion_shell(incomplete: str) -> list[str]:
    return [s for s in COMPLETION_SHELLS if s.startswith(incomplete)]


def _completion_shell(value: str) -> str:
    if value != "auto":
        return value
    from typer._completion_shared import _get_shell_name

    detected = _get_shell_name()
    if detected not in COMPLETION_SHELLS:
        from glmlaunch.errors import ConfigError

        raise ConfigError(
            "cannot tell which shell this is",
            key="--install-completion/--show-completion",
            value=detected,
            allowed=COMPLETION_SHELLS,
            hint="name it: --show-completion bash",
        )
    return str(detected)


def _check_completion_shell(value: str) -> str:
    if value not in (*COMPLETION_SHELLS, "auto"):
        from glmlaunch.errors import ConfigError

        raise ConfigError(
            "no completion for this shell",
            key="--install-completion/--show-completion",
            value=value,
            allowed=COMPLETION_SHELLS,
        )
    return _completion_shell(value)


# Typer's scripts hand the candidates to the shell as code: zsh's `eval $(…)` of an `_arguments` spec ran a
# profile named `m <(touch x) .yaml` (and a trailing backslash flipped its quoting), bash word-split and
# globbed them. These take them as data: NUL-separated, read into arrays, inserted quoted by the shell.
_BASH_SCRIPT = """\
_glmlaunch_completion() {
    local -a reply=()
    mapfile -t -d '' reply < <(env COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD="$COMP_CWORD" \\
        _GLMLAUNCH_COMPLETE=complete_bash "$1" 2>/dev/null)
    COMPREPLY=("${reply[@]}")
    return 0
}

complete -o default -F _glmlaunch_completion glmlaunch
"""
_ZSH_SCRIPT = """\
#compdef glmlaunch

_glmlaunch_completion() {
  local -a reply values displays
  local i
  reply=(${(0)"$(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" _GLMLAUNCH_COMPLETE=complete_zsh \\
    glmlaunch 2>/dev/null)"})
  if (( ${#reply} < 2 )); then
    _files
    return
  fi
  for (( i = 1; i < ${#reply}; i += 2 )); do
    values+=("${reply[i]}")
    displays+=("${reply[i+1]}")
  done
  compadd -l -d displays -a values
}

compdef _glmlaunch_completion glmlaunch
"""


def completion_script(shell: str) -> str:
    """The script ``--show-completion SHELL`` prints and ``--install-completion`` writes."""
    if shell == "bash":
        return _BASH_SCRIPT
    if shell == "zsh":
        return _ZSH_SCRIPT
    from typer._completion_shared import get_completion_script

    # fish and PowerShell read one candidate per line and insert it quoted or as one token themselves;
    # the answers below leave out what a line cannot carry (completion_answer)
    return get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell) + "\n"


def _offered(items: list[CompletionItem]) -> list[CompletionItem]:
    # A name with a control character or a line break cannot be one candidate in any of the protocols
    # (and a terminal would obey it when listed), and one that holds a secret would be shown: neither is
    # offered; a path typed by hand still works.
    from glmlaunch.output import is_safe, mask_secrets

    return [i for i in items if i.value and is_safe(i.value) and mask_secrets(i.value) == i.value]


def _help(item: CompletionItem) -> str:
    from glmlaunch.output import line_text

    return " ".join(line_text(str(item.help or "")).split())


def _bash_word(value: str) -> str:
    # bash inserts a candidate as it is: every character the shell would read specially is escaped
    import re

    return re.sub(r"([^A-Za-z0-9_@%+,./:=-])", r"\\\1", value)


def _pwsh_word(value: str) -> str:
    import re

    if re.fullmatch(r"[A-Za-z0-9_@%+,./:=-]+", value):
        return value
    return "'" + "".join(q * 2 if q in "'\u2018\u2019\u201a\u201b" else q for q in value) + "'"


def completion_answer(shell: str, items: list[CompletionItem]) -> str:
    """What glmlaunch prints for a completion request: the candidates as data for ``shell``'s script."""
    items = _offered(items)
    if shell == "bash":
        return "".join(f"{_bash_word(i.value)}\0" for i in items)
    if shell == "zsh":
        from glmlaunch.output import escape

        width = max((len(i.value) for i in items), default=0)
        pairs = [(i.value, f"{i.value:<{width}}  -- {_help(i)}" if i.help else i.value) for i in items]
        return "".join(f"{value}\0{escape(display)}\0" for value, display in pairs)
    if shell == "fish":
        return "".join(f"{i.value}\t{_help(i)}\n" if i.help else f"{i.value}\n" for i in items)
    return "".join(f"{_pwsh_word(i.value)}:::{_help(i) or ' '}\n" for i in items)


def _answer_completion(app: typer.Typer) -> NoReturn:
    """Answer the completion script's request (``_GLMLAUNCH_COMPLETE=complete_SHELL``) and exit.

    Typer's classes read the words from the environment; the answer is :func:`completion_answer`'s. A
    failure (an unreadable profile directory, a bug) answers nothing rather than print into the prompt.
    """
    from typer._click.shell_completion import get_completion_class
    from typer._completion_classes import completion_init
    from typer.main import get_command

    instruction, _, shell = os.environ.get(COMPLETE_VAR, "").partition("_")
    shell = "pwsh" if shell == "powershell" else shell
    completion_init()
    cls = get_completion_class(shell)
    if instruction != "complete" or cls is None:
        raise SystemExit(int(ExitCode.CONFIG))
    comp = cls(get_command(app), {}, PROG, COMPLETE_VAR)
    if shell == "fish" and os.environ.get("_TYPER_COMPLETE_FISH_ACTION") == "is-args":
        comp.complete()  # Typer's fish class answers this one by its exit status
        raise SystemExit(1)
    try:
        args, incomplete = comp.get_completion_args()
        answer = completion_answer(shell, comp.get_completions(args, incomplete))
    except Exception:
        if debug_enabled():
            raise
        answer = ""
    sys.stdout.write(answer)
    sys.stdout.flush()
    raise SystemExit(0)


def show_completion(value: str | None) -> None:
    if value is None:
        return
    shell = _check_completion_shell(value)
    sys.stdout.write(completion_script(shell))
    raise typer.Exit(0)


def install_completion(value: str | None) -> None:
    if value is None:
        return
    shell = _check_completion_shell(value)
    if shell in ("bash", "zsh", "fish"):
        path = _install(shell)
    else:
        from typer._completion_shared import install

        shell, path = install(shell=shell, prog_name=PROG, complete_var=COMPLETE_VAR)
    note(f"{shell} completion installed in {path}; it takes effect in a new shell")
    raise typer.Exit(0)


def _install(shell: str) -> Path:
    """Write the script under $HOME and the line that loads it, once, into the shell's start-up file.

    The line names the script by a path quoted for the shell that reads it (a quote in $HOME must not
    run code at every login); the start-up file is appended to, never replaced (it may be a link).
    """
    from glmlaunch.files import write_text
    from glmlaunch.output import shell_quote

    home = Path.home()
    if shell == "bash":
        script, rc = home / ".bash_completions" / f"{PROG}.sh", home / ".bashrc"
        line = f"source {shell_quote(str(script))}"
    elif shell == "zsh":
        script, rc = home / ".zfunc" / f"_{PROG}", home / ".zshrc"
        line = "fpath+=~/.zfunc; autoload -Uz compinit; compinit"
    else:
        script, rc = home / ".config" / "fish" / "completions" / f"{PROG}.fish", None
        line = ""
    write_text(script, completion_script(shell), key="--install-completion", make_parents=True)
    if rc is not None:
        try:
            before = rc.read_text(encoding="utf-8", errors="surrogateescape") if rc.is_file() else ""
            if line not in before.splitlines():
                with rc.open("a", encoding="utf-8", errors="surrogateescape") as handle:
                    handle.write(("" if before.endswith("\n") or not before else "\n") + line + "\n")
        except OSError as exc:
            from glmlaunch.errors import ConfigError

            raise ConfigError(
                f"cannot add the completion to {rc}: {exc.strerror or exc}",
                key="--install-completion",
                hint=f"add this line yourself: {line}",
            ) from None
    return script


def print_version(value: bool) -> None:
    if value:
        from glmlaunch import __version__

        sys.stdout.write(f"glmlaunch {__version__}\n")
        raise typer.Exit()


# --- running it ------------------------------------------------------------------------------------------
def _fail(exc: GlmlaunchError) -> NoReturn:
    # one_line() already hides the value of a secret-named key; mask_secrets hides every other secret.
    lines = exc.all_lines() if hasattr(exc, "all_lines") else [exc.one_line()]
    for line in lines:
        _error(line)
    raise SystemExit(int(exc.exit_code))


def _error(line: str) -> None:
    write_stderr(line_text(line), prefix="error: ")


def _usage_error(exc: UsageError) -> NoReturn:
    """click's three-line "Usage: … Try … Error: …" as one ``error:`` line with the way to the help."""
    message = " ".join(exc.format_message().split())  # "Choose from:\n\t…" included, on one line
    if message[:1].isupper() and message[1:2].islower():
        message = message[0].lower() + message[1:]
    path = exc.ctx.command_path if exc.ctx is not None else PROG
    _error(f"{message.rstrip('.')}; hint: `{path} -h` shows the usage")
    raise SystemExit(int(ExitCode.CONFIG))


def _completion_flag_values(args: list[str]) -> list[str]:
    """``--show-completion`` / ``--install-completion`` without a shell mean the current shell (Typer's
    form); click options cannot take an optional value, so the missing value is supplied here."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if not arg.startswith("-") or arg == "--":  # root options end at the command name
            return out + args[i:]
        out.append(arg)
        if arg in ("--show-completion", "--install-completion") and (
            i + 1 == len(args) or args[i + 1].startswith("-")
        ):
            out.append("auto")
    return out


def run(app: typer.Typer) -> NoReturn:
    """Run ``app`` as the console script: every failure one ``error:`` line and its documented exit code."""
    begin_run()  # the secrets and warnings of this run only (main may run many times in one process)
    without_plugin_loader()
    if COMPLETE_VAR in os.environ:
        # A completion script asks for candidates (answered here, as data: see "shell completion").
        _answer_completion(app)
    try:
        code = app(args=_completion_flag_values(sys.argv[1:]), prog_name=PROG, standalone_mode=False)
    except GlmlaunchError as exc:
        if debug_enabled():
            raise
        _fail(exc)
    except NoArgsIsHelpError as exc:
        # `glmlaunch calibrate`: the group's help is the answer, as for a bare `glmlaunch`
        sys.stdout.write(exc.ctx.get_help() + "\n" if exc.ctx is not None else "")
        raise SystemExit(0) from None
    except UsageError as exc:
        _usage_error(exc)
    except ClickException as exc:
        _error(exc.format_message())
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        _error("aborted")
        raise SystemExit(int(ExitCode.INTERNAL)) from None
    except KeyboardInterrupt:
        _error("interrupted")
        raise SystemExit(int(ExitCode.INTERRUPTED)) from None
    except BrokenPipeError:
        _silence_stdout()
        raise SystemExit(0) from None
    except Exception as exc:
        # A bug: one line in the same style, the traceback only when asked for (README: exit code 1).
        if debug_enabled():
            raise
        _error(
            f"internal error: {type(exc).__name__}: {exc}; hint: run again with GLMLAUNCH_DEBUG=1 for the "
            "traceback, and report it"
        )
        raise SystemExit(int(ExitCode.INTERNAL)) from None
    raise SystemExit(code if isinstance(code, int) else 0)
