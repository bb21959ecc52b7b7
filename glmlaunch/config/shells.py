"""Export lines for each shell, quoted so that any value survives ``eval`` unchanged.

Every value is quoted for the target shell's own expansions: POSIX shells get single quotes unless the value
is plain words (``shlex.quote`` leaves ``=ls`` bare, which zsh expands to ``/usr/bin/ls``, and ``a:~/b``
bare, which bash tilde-expands in an assignment); fish and PowerShell always get single quotes with their
own escapes. Values are never rewritten after quoting (secrets are withheld before rendering, see
``config.commands.show_env``). A NUL byte cannot be carried by any shell or environment, and a name must be
a plain identifier: both are refused (exit 2) rather than silently truncated or injected.

Shell detection follows hatch: shellingham, then ``$SHELL``, then POSIX sh.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from glmlaunch.errors import ConfigError

ShellName = Literal["bash", "zsh", "sh", "fish", "pwsh", "dotenv", "json"]
SHELLS: tuple[str, ...] = ("bash", "zsh", "sh", "fish", "pwsh", "dotenv", "json")
_POSIX = {"bash", "zsh", "sh", "dash", "ksh", "mksh", "ash", "busybox"}


def _normalise(name: str) -> ShellName | None:
    base = Path(name).name.lower().removesuffix(".exe")
    if base in _POSIX:
        return "bash" if base == "bash" else ("zsh" if base == "zsh" else "sh")
    if base == "fish":
        return "fish"
    if base in {"pwsh", "powershell"}:
        return "pwsh"
    return None


def detect_shell(environ: Mapping[str, str] | None = None) -> ShellName:
    env = os.environ if environ is None else environ
    try:
        import shellingham

        name, _path = shellingham.detect_shell()
        found = _normalise(name)
        if found is not None:
            return found
    except Exception:  # shellingham raises ShellDetectionFailure, or OS errors reading /proc
        pass
    found = _normalise(env.get("SHELL", ""))
    return found if found is not None else "sh"


#: Left bare in POSIX shells: no character any of bash, zsh, dash or ksh expands in an assignment value.
_POSIX_PLAIN = re.compile(r"[A-Za-z0-9_@%+,./-]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _posix_quote(value: str) -> str:
    if _POSIX_PLAIN.fullmatch(value):
        return value
    return "'" + value.replace("'", "'\\''") + "'"


def _fish_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _pwsh_quote(value: str) -> str:
    # Inside single quotes PowerShell treats only a doubled quote specially; the typographic
    # single quotes count as quote characters too.
    out = value
    for q in ("'", "\u2018", "\u2019", "\u201a", "\u201b"):
        out = out.replace(q, q + q)
    return "'" + out + "'"


def _dotenv_quote(value: str) -> str:
    # Double quotes, with what a POSIX shell still reads inside them escaped ($, `, \, "), so
    # `set -a; . ./file` (the common way to load one) gives back every value and runs nothing; compose's
    # env_file and python-dotenv read the same escapes. A line break is written \n (\r), which those two
    # read as the character and a shell's `.` as the two characters.
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return '"' + escaped.replace("$", "\\$").replace("`", "\\`") + '"'


def render_exports(env: Mapping[str, str], shell: ShellName) -> str:
    """The text to eval (or source) in ``shell`` so that every variable holds exactly its value."""
    for name, value in env.items():
        if not _NAME.fullmatch(name):
            raise ConfigError("not a valid environment variable name", key=f"env.{name}", value=name)
        if "\0" in value:
            raise ConfigError(
                "the value contains a NUL byte, which no environment variable can hold",
                key=f"env.{name}",
                hint="remove the NUL (\\0) from the value",
            )
    if shell == "json":
        return json.dumps(dict(env), indent=2, ensure_ascii=True) + "\n"
    lines: list[str] = []
    for name, value in env.items():
        if shell in {"bash", "zsh", "sh"}:
            lines.append(f"export {name}={_posix_quote(value)}")
        elif shell == "fish":
            lines.append(f"set -gx {name} {_fish_quote(value)}")
        elif shell == "pwsh":
            lines.append(f"$env:{name} = {_pwsh_quote(value)}")
        else:
            lines.append(f"{name}={_dotenv_quote(value)}")
    return "\n".join(lines) + ("\n" if lines else "")
