"""Where the programs glmlaunch starts are (vLLM, the LMCache server): one lookup for both.

``--vllm-bin`` and ``--lmcache-bin`` (and their variables) follow the same rules, so they share the code:
a path is checked as given, a bare name is looked up on the PATH of the environment the program gets.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from glmlaunch.config.registry import PATH


@dataclass(frozen=True)
class Executable:
    """A program glmlaunch starts (vLLM, the LMCache server): what was asked for, where, and what is wrong."""

    requested: str
    source: str
    path: str | None
    problem: str | None = None


def locate_executable(
    cli_value: str | None, *, flag: str, env_name: str, default: str, environ: Mapping[str, str]
) -> Executable:
    """``flag``'s value, else ``$env_name``, else ``default`` on the PATH of ``environ``."""
    if cli_value:
        requested, source = cli_value, flag
    elif environ.get(env_name, "").strip():
        requested, source = environ[env_name].strip(), env_name
    else:
        requested, source = default, "PATH"
    if os.sep in requested:
        path = Path(requested).expanduser()
        if not path.exists():
            return Executable(requested, source, None, f"{path} does not exist")
        if path.is_dir():
            return Executable(requested, source, None, f"{path} is a directory")
        if not os.access(path, os.X_OK):
            return Executable(requested, source, None, f"{path} is not executable (chmod +x it)")
        return Executable(requested, source, str(path.absolute()))
    search = environ.get(PATH, os.defpath)
    found = shutil.which(requested, path=search)
    if found is None:
        return Executable(requested, source, None, f"no executable {requested!r} on PATH ({search})")
    return Executable(requested, source, found)
