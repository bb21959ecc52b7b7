"""The hand-off to vLLM: find the executable, print what will run, and replace this process with it.

glmlaunch ends in ``os.execvpe`` so vLLM keeps this process id: under ``docker run`` / ``init: true``
it is the process that receives SIGTERM and SIGINT, exactly as with the old ``exec vllm serve``.
Everything printed here (the command line, the environment changes) passes through secret masking;
the values themselves reach vLLM unchanged.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, NoReturn

from glmlaunch.config.environment import LaunchEnvironment
from glmlaunch.config.executables import Executable, locate_executable
from glmlaunch.config.registry import GLMLAUNCH_VLLM_BIN
from glmlaunch.errors import LaunchError
from glmlaunch.output import MASK, is_secret_name, mask_secrets, note, shell_join
from glmlaunch.output import mask_argv as mask_argv
from glmlaunch.output import register_argv_secrets as register_argv_secrets

DEFAULT_VLLM = "vllm"

ChangeKind = Literal["added", "replaced", "unchanged"]


@dataclass(frozen=True)
class EnvChange:
    """One name glmlaunch sets for vLLM, compared with what the caller's environment had."""

    name: str
    value: str
    before: str | None
    change: ChangeKind
    origin: Literal["managed", "passthrough"]
    settings: tuple[str, ...]

    @property
    def secret(self) -> bool:
        return is_secret_name(self.name)

    def shown_value(self) -> str:
        return MASK if self.secret else mask_secrets(self.value)

    def shown_before(self) -> str | None:
        if self.before is None:
            return None
        return MASK if self.secret else mask_secrets(self.before)

    def line(self) -> str:
        text = f"{self.name}={self.shown_value()}"
        if self.change == "replaced":
            text += f"  (replaces {self.shown_before()!r} from the caller's environment)"
        elif self.change == "unchanged":
            text += "  (the caller's environment already has this value)"
        return text

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "value": self.shown_value(),
            "before": self.shown_before(),
            "change": self.change,
            "origin": self.origin,
            "settings": list(self.settings),
            "secret": self.secret,
        }


@dataclass(frozen=True)
class LaunchSpec:
    """Exactly what ``exec_vllm`` runs: the argument vector, the whole environment, and the diff."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    env_changes: tuple[EnvChange, ...]

    def command_line(self) -> str:
        # bash reads the line back as the argv that runs: a control character shows as $'\x1b', never raw
        return mask_secrets(shell_join(mask_argv(self.argv)))


def env_changes(launch_env: LaunchEnvironment, inherited: Mapping[str, str]) -> tuple[EnvChange, ...]:
    out: list[EnvChange] = []
    for entry in launch_env.entries:
        before = inherited.get(entry.name)
        kind: ChangeKind = "added"
        if before is not None:
            kind = "unchanged" if before == entry.value else "replaced"
        out.append(EnvChange(entry.name, entry.value, before, kind, entry.origin, entry.settings))
    return tuple(out)


def locate_vllm(cli_value: str | None, environ: Mapping[str, str]) -> Executable:
    """``--vllm-bin``, else ``$GLMLAUNCH_VLLM_BIN``, else ``vllm`` on the PATH of ``environ``."""
    return locate_executable(
        cli_value, flag="--vllm-bin", env_name=GLMLAUNCH_VLLM_BIN, default=DEFAULT_VLLM, environ=environ
    )


def require_vllm(binary: Executable) -> str:
    if binary.path is None:
        raise LaunchError(
            f"cannot start vLLM: {binary.problem}",
            key=binary.source,
            hint=f"install vllm, or point --vllm-bin / {GLMLAUNCH_VLLM_BIN} at the executable",
        )
    return binary.path


def exec_vllm(spec: LaunchSpec) -> NoReturn:
    """Log the command and the environment changes on stderr, then replace this process with vLLM."""
    for change in spec.env_changes:
        if change.change != "unchanged":
            note(f"env: {change.line()}")
    note(f"exec: {spec.command_line()}")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(spec.argv[0], list(spec.argv), dict(spec.env))
    except OSError as exc:
        raise LaunchError(
            f"cannot execute {spec.argv[0]}: {exc.strerror or exc}",
            key="exec",
            hint="a script needs a #! line and execute permission; a binary must match this machine",
        ) from None
