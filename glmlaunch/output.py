"""Where output goes, and secret masking.

stdout carries data only (tables, JSON, export lines); messages, warnings and progress go to stderr.
Every stderr line is a plain note (:func:`note`), ``warning: …`` (:func:`warn`) or ``error: …`` (the CLI's
one error path); ``--quiet`` / ``GLMLAUNCH_QUIET=1`` silences notes and :func:`progress`, never warnings or
errors (:func:`is_quiet`).

One masking path: every printed string passes through :func:`mask_secrets` (messages, tables through the
rich consoles, JSON strings before they are serialised) so a token never reaches a terminal or a log:

* values registered as secret (the caller's secret-named variables, read once on first use; values the
  configuration marks secret) are replaced wherever they appear;
* ``NAME=value`` with a secret-named NAME, ``--api-key value`` / ``--hf-token=value`` and indented YAML
  ``NAME: value`` lines have the value replaced;
* a URL's userinfo password (``http://user:****@host``) and its token-like query parameters
  (``?token=****``, ``api_key``, ``sig``, ``X-Amz-Signature``, …) are masked (:func:`mask_url`).

Structured data is masked by structure, never after quoting: :func:`mask_obj` masks the value of a
secret-named key and the argument after a secret flag in a list before ``json.dumps``; the shell export
lines (:mod:`glmlaunch.config.shells`) are printed with :func:`out_data`, exactly as rendered, because their
values were vetted before quoting (a secret is withheld, never masked inside a quoted string).

One escaping rule for text a terminal shows (:func:`escape`): a control character (C0, DEL, C1 such as
U+0085), a line or paragraph separator (U+2028, U+2029), a bidirectional control and a byte that is not
UTF-8 are written as visible escapes (``\x1b``, ``\n``, ``\u2028``), so a file name can neither move the
cursor, recolour or retitle the terminal, nor start a line that looks like glmlaunch's own. Every stderr
line (:func:`note`, :func:`warn`, the CLI's ``error:``) is one line through it; tables on the rich consoles
escape every cell (line breaks inside a cell stay: rich lays them out inside the cell); :func:`out_text`
keeps line breaks and tabs of multi-line data and escapes the rest. Files glmlaunch writes use the same
rule for their generated comments (:func:`header_text`, :func:`glmlaunch.files.comment_header`), and
command lines are shown with :func:`shell_quote`, which bash reads back as the same argument.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any, TextIO, cast

from glmlaunch.config.registry import COLUMNS, GLMLAUNCH_DEBUG, GLMLAUNCH_QUIET, NO_COLOR
from glmlaunch.errors import MASK as MASK
from glmlaunch.errors import SECRET_MARKERS as SECRET_MARKERS
from glmlaunch.errors import ConfigError
from glmlaunch.errors import is_secret_name as is_secret_name

if TYPE_CHECKING:
    from rich.console import Console

#: What a terminal must never receive raw: C0 controls, DEL, C1 controls (U+0085 NEL among them), the
#: line and paragraph separators, bidirectional controls (they reorder what is shown) and lone surrogates (a
#: byte that is not UTF-8, decoded with surrogateescape).
_OTHER_UNSAFE = "\x0b-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE = re.compile(f"[\x00-\x0a{_OTHER_UNSAFE}]")
#: The same, less the line breaks and tabs that multi-line data keeps (a profile shown, a table cell).
_UNSAFE_IN_DATA = re.compile(f"[\x00-\x08{_OTHER_UNSAFE}]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group(0)
    code = ord(ch)
    if ch in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[ch]
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape): the byte itself
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape(text: str) -> str:
    """``text`` as a terminal may show it: every unsafe character (module docstring) as a visible escape.

    A line break becomes ``\\n``: a name or a message is one line, whatever it holds. Text without unsafe
    characters comes back unchanged.
    """
    return _UNSAFE.sub(_escape_char, text)


def escape_data(text: str) -> str:
    """Like :func:`escape`, but line breaks (``\\n``) and tabs stay: multi-line data (a profile, a table)."""
    return _UNSAFE_IN_DATA.sub(_escape_char, text)


def is_safe(text: str) -> bool:
    """Whether :func:`escape` would leave ``text`` unchanged (a name fit to show or insert as it is)."""
    return _UNSAFE.search(text) is None


def header_text(text: str) -> str:
    """Text for a generated comment in a file glmlaunch writes: secrets masked, then escaped to one line
    (no line break of any kind survives, so nothing after ``#`` can become live YAML or shell)."""
    return escape(mask_secrets(text))


#: Left bare by :func:`shell_quote`: no character bash, zsh or sh expands or splits on.
_SHELL_PLAIN = re.compile(r"[A-Za-z0-9_@%+,./:=-]+")


def shell_quote(arg: str) -> str:
    """``arg`` as bash (and zsh) reads it back exactly: bare when plain, else single-quoted; an argument
    holding an unsafe character is written in ANSI-C quoting (``$'a\\nb'``), so what is shown is both
    readable on a terminal and the argument that runs."""
    if arg and _SHELL_PLAIN.fullmatch(arg):
        return arg
    if is_safe(arg):
        return "'" + arg.replace("'", "'\\''") + "'"
    body = arg.replace("\\", "\\\\").replace("'", "\\'")
    return "$'" + _UNSAFE.sub(_ansi_c_char, body) + "'"


def _ansi_c_char(match: re.Match[str]) -> str:
    # In $'…' a \xHH is one byte: right for ASCII and for a byte that was not UTF-8, while a C1 control
    # or a separator is a character, \uHHHH (bash and zsh encode it in the locale's UTF-8).
    code = ord(match.group(0))
    if code <= 0x7F or 0xDC80 <= code <= 0xDCFF:
        return _escape_char(match)
    return f"\\u{code:04x}"


def shell_join(argv: Sequence[str]) -> str:
    return " ".join(shell_quote(a) for a in argv)


_CONSOLES: dict[str, Console] = {}


def __getattr__(name: str) -> Console:
    # `err_console` / `out_console` are made on first use: importing rich costs ~40 ms, which the
    # commands that print only export lines or JSON (env, args, config --json) need not pay.
    if name not in ("err_console", "out_console"):
        raise AttributeError(name)
    if name not in _CONSOLES:
        from rich.console import Console as _RichConsole
        from rich.segment import Segment
        from rich.table import Table

        class Console(_RichConsole):
            def on_broken_pipe(self) -> None:
                # rich exits 1 here; a reader that stops early (`| head`) is not an error: let main() see
                # the BrokenPipeError and end quietly with 0, as `git log | head` does.
                self.quiet = True
                raise BrokenPipeError

            def print(self, *objects: Any, **kwargs: Any) -> None:
                # Every table at this console's width, no cell cut (fit): the rule for every command.
                super().print(
                    *(fit(o, width=self.width) if isinstance(o, Table) else o for o in objects), **kwargs
                )

            def render_str(self, text: str, **kwargs: Any) -> Any:
                # Every string cell and title: escaped before rich measures it, so columns stay aligned;
                # never markup (a log named "[/x]" is a name, not a style tag, and never a crash).
                kwargs["markup"] = False
                return super().render_str(escape_data(text), **kwargs)

            def render(self, renderable: Any, options: Any = None) -> Any:
                # Text built directly (not through render_str) is escaped here, after layout: the last
                # line of defence for whatever a renderable holds. rich's own control segments pass.
                for segment in super().render(renderable, options):
                    if segment.control or _UNSAFE_IN_DATA.search(segment.text) is None:
                        yield segment
                    else:
                        yield Segment(escape_data(segment.text), segment.style, segment.control)

        if name == "err_console":
            # as stderr's messages (write_stderr): wrapped at words on a terminal, one line in a log
            _CONSOLES[name] = Console(
                file=cast("IO[str]", _MaskedStream("stderr")),
                highlight=False,
                soft_wrap=not sys.stderr.isatty(),
                emoji=False,
                markup=False,
            )
        else:
            # Data on stdout must not be wrapped to an imaginary 80-column terminal when piped; on a
            # terminal text wraps at words to its width (the terminal would wrap it anyway, mid-word).
            tty = sys.stdout.isatty()
            _CONSOLES[name] = Console(
                file=cast("IO[str]", _MaskedStream("stdout")),
                highlight=False,
                # Data is printed as it is: rich would turn a value like ":x:" into an emoji (and pay for
                # the lookup in every cell).
                emoji=False,
                markup=False,
                soft_wrap=not tty,
                width=None if tty else 240,
            )
    return _CONSOLES[name]


#: The narrowest a wrapping column may get before a table no longer counts as fitting.
_WRAP_MIN = 12


def _cell_text(cell: Any) -> str:
    from rich.text import Text

    return cell.plain if isinstance(cell, Text) else cell if isinstance(cell, str) else ""


def _longest_line(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(line) for line in text.splitlines()), default=0)


def _needed(table: Any) -> int:
    """The columns ``table`` needs to keep its ``no_wrap`` columns whole and give every other column
    :data:`_WRAP_MIN` (or its widest cell, when narrower): its borders and padding included."""
    needed = int(table._extra_width) + sum(
        int(table._get_padding_width(i)) for i in range(len(table.columns))
    )
    for column in table.columns:
        widest = max(
            [_longest_line(_cell_text(c)) for c in column.cells] + [_longest_line(_cell_text(column.header))]
        )
        needed += widest if column.no_wrap else min(widest, _WRAP_MIN)
    return needed


def fits(table: Any, width: int) -> bool:
    """Whether ``table`` keeps every cell whole at ``width`` columns as it is laid out (:func:`fit`)."""
    return _needed(table) <= width


def fit(table: Any, *, width: int | None = None) -> Any:
    """``table`` as it reads at ``width`` (the console's width), no cell ever cut with "…".

    Every table the consoles print passes through here (the rule is the console's, not each
    command's). A column declared ``no_wrap`` holds what must stay whole (an id, a date, a size): it keeps
    its widest cell's width; the other columns wrap at spaces, and a word longer than the column folds
    onto the next line. When the whole columns and a minimum for the others do not fit the width, the
    table is stacked instead: one section per row, one ``column  value`` line per cell; a table of two
    columns that cannot keep them whole wraps and folds every column.
    """
    from rich.table import Table

    available = width if width is not None else __getattr__("out_console").width
    for column in table.columns:
        if not column.no_wrap:
            column.overflow = "fold"
    if fits(table, available):
        return table
    if len(table.columns) <= 2:
        for column in table.columns:
            column.no_wrap = False
            column.overflow = "fold"
        return table
    stacked = Table(
        title=table.title, caption=table.caption, show_header=False, expand=False, title_justify="left"
    )
    stacked.add_column("", style="bold", overflow="fold", max_width=max(_WRAP_MIN, available // 3))
    stacked.add_column("", overflow="fold")
    columns = [(_cell_text(c.header) or "", list(c.cells)) for c in table.columns]
    for row in range(table.row_count):
        for i, (name, values) in enumerate(columns):
            stacked.add_row(name, values[row], end_section=i == len(columns) - 1)
    return stacked


class _MaskedStream:
    """sys.stdout / sys.stderr (looked up at each write, as rich does) behind :func:`mask_secrets`.

    rich writes a whole rendered print in one call, so a secret is never split across two writes.
    """

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def _stream(self) -> TextIO:
        stream: TextIO = getattr(sys, self._name)
        # rich's Live swaps sys.stdout/sys.stderr for a proxy that prints through a console; writing to
        # the proxy from that console would feed it its own output, so unwrap it as rich's Console does
        proxied: TextIO = getattr(stream, "rich_proxied_file", stream)
        return proxied

    def write(self, text: str) -> int:
        self._stream.write(printable(mask_secrets(text)))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", None) or "utf-8"


_known_secrets: set[str] = set()
_environ_read = False


def reset_secrets() -> None:
    """Forget registered secrets; the caller's environment is read again on next use (one CLI run)."""
    global _environ_read
    _known_secrets.clear()
    _environ_read = False


_NUMBER = re.compile(r"[+-]?[0-9][0-9_,]*(?:\.[0-9]+)?")


def register_secrets(environ: Mapping[str, str]) -> None:
    """Remember the values of secret-named variables so they are masked wherever they appear."""
    for name, value in environ.items():
        if is_secret_name(name):
            register_secret(value)


def register_secret(value: str) -> None:
    """Remember one secret value, to mask wherever it appears.

    Not remembered: values under four characters (they would mask ordinary words) and plain numbers: a
    value such as ``1024`` is a count wherever it appears (sizes, token counts, formulas), and masking it
    by value would garble every figure that happens to equal it (the name itself is still masked).
    """
    if not isinstance(value, str) or len(value) < 4 or value == MASK:
        return
    if _NUMBER.fullmatch(value.strip()):
        return
    _known_secrets.add(value)


def register_argv_secrets(argv: Sequence[str]) -> None:
    """Remember the values of secret flags (``--api-key X``, ``--hf-token=X``) in an argument vector."""
    for i, arg in enumerate(argv):
        if not _secret_flag(arg):
            continue
        _flag, eq, value = arg.partition("=")
        if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            value = argv[i + 1]
        if value:
            register_secret(value)


def register_config_secrets(env: Mapping[str, str], argv: Sequence[str]) -> None:
    """Remember a configuration's secrets: secret-named ``env:`` values and secret flags in ``vllm_args``."""
    register_secrets(env)
    register_argv_secrets(argv)


def known_secrets() -> list[str]:
    """Every registered secret value, longest first; the caller's environment is read on first use."""
    global _environ_read
    if not _environ_read:
        _environ_read = True
        register_secrets(os.environ)
    return sorted(_known_secrets, key=len, reverse=True)


def contains_secret(text: str) -> bool:
    """Whether ``text`` holds a registered secret value anywhere."""
    return any(secret in text for secret in known_secrets())


_PART = r"[A-Za-z0-9]+"
_MARKER = "(?:" + "|".join(sorted(SECRET_MARKERS, key=len, reverse=True)) + ")"
_NAME = rf"(?:{_PART}_+)*{_MARKER}(?:_+{_PART})*"
#: NAME=value (shell, dotenv, --set env.X_TOKEN=value). The name starts at a word boundary.
_ASSIGNMENT = re.compile(rf"(?<![A-Za-z0-9_])({_NAME})(\s*=\s*[\"']?)(?!\*\*\*\*)[^\s\"',;]+", re.IGNORECASE)
#: Indented YAML `NAME: value` (a profile's env: block); not `key: message` (one_line: never indented).
_YAML_PAIR = re.compile(
    rf"^([ \t]+(?:-[ \t]+)?{_NAME}[ \t]*:[ \t]+[\"']?)(?!\*\*\*\*)[^\s\"',#]+", re.IGNORECASE | re.MULTILINE
)
#: "NAME": "value" in JSON quoted inside a message.
_JSON_PAIR = re.compile(rf'("{_NAME}"\s*:\s*")(?:[^"\\]|\\.)*(")', re.IGNORECASE)
#: --api-key value, --hf-token=value, and the same inside a quoted list: "--api-key", "value".
_FLAG = re.compile(
    rf"(?<![A-Za-z0-9_-])(--?(?:[A-Za-z0-9]+[-_])*{_MARKER}(?:[-_][A-Za-z0-9]+)*)"
    r"(=[\"']?|[\"']?(?:\s*,\s*|\s+)[\"']?)(?![-*])[^\s\"',\]]+",
    re.IGNORECASE,
)


#: A URL's userinfo password: ``scheme://user:password@host`` (the last ``@`` of the authority ends it, as
#: urllib.parse reads it); the user name stays.
_URL_PASSWORD = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*:)(?!\*\*\*\*@)([^\s/?#]*)(@)")
#: A userinfo without a password (``https://ghp_abc@host``): that one field is a token, so all of it.
_URL_USER_ONLY = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://)(?!\*\*\*\*@)([^\s/?#@:]+)(@)")
#: A URL query parameter: ``?name=value`` / ``&name=value``, the value up to the next ``&`` or ``#``.
_URL_PARAM = re.compile(r"(?<=[?&])([A-Za-z0-9._~%-]+=)(?!\*\*\*\*(?:[&#\s\"']|$))([^&#\s\"'<>]+)")
#: Query parameter names that carry a credential by convention beside the secret-named ones (signed URLs:
#: ``sig``, ``X-Amz-Signature``; OAuth and ad-hoc auth).
_QUERY_MARKERS = frozenset({"SIG", "SIGNATURE", "AUTH", "AUTHORIZATION", "PASS", "PWD", "JWT", "BEARER"})


def _secret_param(name: str) -> bool:
    parts = re.split(r"[^A-Z0-9]+", name.upper())
    return is_secret_name(name) or bool(parts and parts[-1] in _QUERY_MARKERS)


def mask_url(text: str) -> str:
    """URLs in ``text`` with their credentials masked: the userinfo password and token-like query
    parameters (:func:`mask_secrets` applies it to everything it masks)."""
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{MASK}{m.group(3)}", text)
        text = _URL_USER_ONLY.sub(lambda m: f"{m.group(1)}{MASK}{m.group(3)}", text)
    if "=" in text and ("?" in text):
        text = _URL_PARAM.sub(
            lambda m: f"{m.group(1)}{MASK}" if _secret_param(m.group(1)[:-1]) else m.group(0), text
        )
    return text


def mask_secrets(text: str, extra: Iterable[str] = ()) -> str:
    """The one masking path for text: registered secret values, URLs' credentials (:func:`mask_url`),
    then secret assignments and flags."""
    for secret in sorted({*known_secrets(), *(s for s in extra if len(s) >= 4)}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    # Every pattern below needs a secret marker in a name or a URL; most text has neither (a plan's JSON
    # document is ~1,200 strings, and four substitutions on each were two thirds of `plan --json`).
    # (ASCII only: re.IGNORECASE also matches non-ASCII case variants, such as the Kelvin sign for K)
    if text.isascii() and "://" not in text and not ("?" in text and "=" in text):
        upper = text.upper()
        if not any(marker in upper for marker in SECRET_MARKERS):
            return text
    text = mask_url(text)
    # The patterns find a marker anywhere in a name; is_secret_name then drops the quantities
    # (VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD=1024 is a count).
    text = _ASSIGNMENT.sub(lambda m: _masked(m, f"{m.group(1)}{m.group(2)}{MASK}", m.group(1)), text)
    text = _YAML_PAIR.sub(lambda m: _masked(m, f"{m.group(1)}{MASK}", m.group(1)), text)
    text = _JSON_PAIR.sub(lambda m: _masked(m, f"{m.group(1)}{MASK}{m.group(2)}", m.group(1)), text)
    return _FLAG.sub(lambda m: _masked(m, f"{m.group(1)}{m.group(2)}{MASK}", m.group(1)), text)


def _masked(match: re.Match[str], masked: str, name: str) -> str:
    return masked if is_secret_name(name.strip(' \t-:"')) else match.group(0)


def printable(text: str) -> str:
    """``text`` that any UTF-8 stream can take: a lone surrogate (a file name that is not valid UTF-8,
    decoded with surrogateescape) becomes a visible ``\\xNN`` escape instead of an encoding crash."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _secret_flag(arg: str) -> bool:
    return arg.startswith("-") and is_secret_name(arg.split("=", 1)[0].lstrip("-"))


def mask_argv(argv: Sequence[str]) -> list[str]:
    """An argument vector for display: values of secret-named flags (``--api-key X``) masked."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            shown.append(MASK)
            hide_next = False
            continue
        hide_next = False
        if _secret_flag(arg):
            if "=" in arg:
                shown.append(arg.split("=", 1)[0] + "=" + MASK)
            else:
                shown.append(arg)
                hide_next = True
            continue
        shown.append(mask_secrets(arg))
    return shown


def mask_mapping(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_name(k) else mask_secrets(v)) for k, v in env.items()}


_ENV_LIKE = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def _secret_key(key: object) -> bool:
    # JSON documents use lowercase snake_case for their own fields ("key", "kv_bytes_per_token_origin");
    # only keys written like an environment variable (HF_TOKEN, OPENAI_API_KEY) name secrets.
    return isinstance(key, str) and bool(_ENV_LIKE.match(key)) and is_secret_name(key)


def mask_obj(obj: Any) -> Any:
    """Mask a JSON-like object by structure: the value of a secret-named key (at any depth), the argument
    after a secret flag in a list of strings, and registered secrets inside every string."""
    if isinstance(obj, Mapping):
        return {
            printable(k) if isinstance(k, str) else k: (
                MASK if _secret_key(k) and v is not None and not isinstance(v, bool) else mask_obj(v)
            )
            for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        if obj and all(isinstance(v, str) for v in obj):
            return [printable(v) for v in mask_argv(obj)]
        return [mask_obj(v) for v in obj]
    if isinstance(obj, str):
        return printable(mask_secrets(obj))
    return obj


def _nonfinite(obj: Any, path: str = "") -> tuple[str, float] | None:
    """The dotted path and value of the first NaN or infinity in a JSON-like object."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return path or "(document)", obj
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            found = _nonfinite(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            found = _nonfinite(v, f"{path}[{i}]")
            if found:
                return found
    return None


def _printable_obj(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {printable(k) if isinstance(k, str) else k: _printable_obj(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_printable_obj(v) for v in obj]
    return printable(obj) if isinstance(obj, str) else obj


def json_text(obj: Any, *, mask: bool = True) -> str:
    """``obj`` as strict JSON (RFC 8259), secrets masked: NaN and infinities are refused (exit 2) because
    no JSON parser but Python's reads them; text that is not valid UTF-8 is escaped visibly. ``mask=False``
    only for data that is the secret's own carrier (``args --json``: the argv `vllm serve` runs)."""
    doc = mask_obj(obj) if mask else _printable_obj(obj)
    bad = _nonfinite(doc)
    if bad is not None:
        path, value = bad
        raise ConfigError(
            "not a finite number: JSON has no NaN or Infinity",
            key=path,
            value=value,
            hint="use a finite number (or a string) for this value",
        )
    try:
        return json.dumps(doc, indent=2, sort_keys=False, default=str, allow_nan=False)
    except ValueError as exc:  # a non-finite float reached through default=str's objects
        raise ConfigError(f"cannot be written as strict JSON: {exc}", key="--json") from None


def out_json(obj: Any, *, mask: bool = True) -> None:
    """Write exactly one strict JSON document to stdout (secrets masked unless ``mask=False``)."""
    text = json_text(obj, mask=mask)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def out_json_line(obj: Any) -> None:
    """One strict JSON object on one line of stdout (a stream of documents: ``watch --json``), masked."""
    doc = mask_obj(obj)
    bad = _nonfinite(doc)
    if bad is not None:
        raise ConfigError("not a finite number: JSON has no NaN or Infinity", key=bad[0], value=bad[1])
    sys.stdout.write(json.dumps(doc, separators=(",", ":"), default=str, allow_nan=False) + "\n")
    sys.stdout.flush()


def out_data(text: str) -> None:
    """Write data that was vetted for secrets before it was quoted (shell export lines), unchanged."""
    sys.stdout.write(printable(text))
    if not text.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()


def out_text(text: str) -> None:
    """Multi-line text data on stdout: secrets masked, unsafe characters escaped (line breaks stay)."""
    sys.stdout.write(escape_data(mask_secrets(text)))
    if not text.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()


_TRUE = frozenset({"1", "true", "yes", "on"})
_quiet = False


def set_quiet(quiet: bool) -> None:
    """``--quiet`` for this run (main() resets it: it may run many times in one process, as in tests)."""
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    """Whether notes and progress are silenced (``--quiet`` or ``GLMLAUNCH_QUIET=1``).

    Quiet keeps warnings and errors: a warning is something the operator has to act on or accept, and
    scripts that want silence for the routine narration (which record is used, what was written, each
    preflight rank's progress) should not lose the one line that explains a surprising result.
    """
    return _quiet or os.environ.get(GLMLAUNCH_QUIET, "").strip().lower() in _TRUE


def note(message: str) -> None:
    """A human message on stderr (silenced by ``--quiet``)."""
    if is_quiet():
        return
    write_stderr(line_text(message))


def _stderr_columns() -> int | None:
    """The width of the terminal stderr is, else None (a log or a pipe keeps one line per message)."""
    try:
        if not sys.stderr.isatty():
            return None
        columns = os.environ.get(COLUMNS, "").strip()  # what rich (stdout) and the shell read first
        return (
            int(columns)
            if columns.isdigit() and int(columns) > 0
            else os.get_terminal_size(sys.stderr.fileno()).columns
        )
    except (AttributeError, OSError, ValueError):
        return None


def wrap_for_terminal(line: str, columns: int | None) -> str:
    """``line`` as a terminal of ``columns`` shows it: broken at spaces, never inside a word (the
    terminal itself would cut "edi|ted"), continuation lines indented; a word longer than the line stays
    whole. ``columns`` None: the line as it is (piped, logged: one message, one line, for grep)."""
    if columns is None or len(line) <= columns:
        return line
    import textwrap

    return (
        "\n".join(
            textwrap.wrap(
                line,
                width=max(columns, 20),
                subsequent_indent="  ",
                break_long_words=False,
                break_on_hyphens=False,
                drop_whitespace=True,
            )
        )
        or line
    )


def write_stderr(line: str, *, prefix: str = "", style: tuple[str, str] = ("", "")) -> None:
    """The one writer of stderr messages: ``prefix + line`` (already masked and escaped), word-wrapped on
    a terminal, in ``style`` (an SGR start and end) when given."""
    text = wrap_for_terminal(prefix + line, _stderr_columns())
    sys.stderr.write(f"{style[0]}{text}{style[1]}\n")
    sys.stderr.flush()


def line_text(message: str) -> str:
    """One stderr line: secrets masked, then everything unsafe escaped, line breaks included."""
    return escape(mask_secrets(message))


_warned: set[str] = set()


def begin_run() -> None:
    """A fresh CLI run (main() may run many times in one process, as in tests): no secrets registered,
    not quiet, no warning said yet, and consoles made anew (rich reads the terminal, ``COLUMNS``,
    ``NO_COLOR`` and ``FORCE_COLOR`` when a console is made: a console kept from an earlier run would lay
    this run's output out for that run's stdout)."""
    reset_secrets()
    set_quiet(False)
    _warned.clear()
    _CONSOLES.clear()


def warn(message: str, *, repeat: bool = False) -> None:
    """``warning: …`` on stderr, once per run: a configuration two stages (or both sides of a ``diff``)
    resolve is warned about once. ``repeat``: each call is a new event (the watch's state changes)."""
    line = "warning: " + line_text(message)
    if line in _warned and not repeat:
        return
    _warned.add(line)
    colour = sys.stderr.isatty() and not os.environ.get(NO_COLOR)
    write_stderr(line, style=("\x1b[33m", "\x1b[0m") if colour else ("", ""))


def debug_enabled() -> bool:
    return os.environ.get(GLMLAUNCH_DEBUG, "").strip().lower() in _TRUE


_SPINNER = "|/-\\"


@contextmanager
def progress(message: str, *, after: float = 1.0) -> Iterator[None]:
    """A spinner with ``message`` on stderr while the block runs longer than ``after`` seconds.

    Only on a terminal (a log or a pipe gets no carriage-return animation) and never under ``--quiet``;
    the line is erased when the block ends, so what follows starts on a clean line. The spinner runs in
    a daemon thread: the block itself (an import, a search) need not cooperate.
    """
    if is_quiet() or not sys.stderr.isatty():
        yield
        return
    import threading

    text = line_text(message)
    done = threading.Event()

    def spin() -> None:
        if done.wait(after):
            return
        frame = 0
        while True:
            sys.stderr.write(f"\r{_SPINNER[frame % len(_SPINNER)]} {text}")
            sys.stderr.flush()
            frame += 1
            if done.wait(0.1):
                break
        sys.stderr.write("\r\x1b[2K")
        sys.stderr.flush()

    thread = threading.Thread(target=spin, name="glmlaunch-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
