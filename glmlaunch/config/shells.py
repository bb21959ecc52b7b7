"""Export lines for each shell, quoted so that any value survives ``eval`` unchanged.

Shell detection follows hatch: shellingham, then ``$SHELL``, then POSIX sh.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

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
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return '"' + escaped.replace("$", "\\$") + '"'


def render_exports(env: Mapping[str, str], shell: ShellName) -> str:
    """The text to eval (or source) in ``shell`` so that every variable holds exactly its value."""
    if shell == "json":
        return json.dumps(dict(env), indent=2) + "\n"
    lines: list[str] = []
    for name, value in env.items():
        if shell in {"bash", "zsh", "sh"}:
            lines.append(f"export {name}={shlex.quote(value)}")
        elif shell == "fish":
            lines.append(f"set -gx {name} {_fish_quote(value)}")
        elif shell == "pwsh":
            lines.append(f"$env:{name} = {_pwsh_quote(value)}")
        else:
            lines.append(f"{name}={_dotenv_quote(value)}")
    return "\n".join(lines) + ("\n" if lines else "")
