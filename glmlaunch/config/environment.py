"""The environment a configuration produces, and how it meets the caller's environment.

Precedence for a managed name (one the registry produces): the resolved configuration wins over the
caller's environment, and every difference is reported — the caller changes a managed value through
``GLMLAUNCH_<SECTION>__<FIELD>`` or ``--set``, which are validated and recorded with their source.
Passthrough names from ``env:`` win over the caller's environment; that is reported too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from glmlaunch.config.registry import MANAGED_BY_NAME, managed_env
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.output import is_secret_name


@dataclass(frozen=True)
class EnvEntry:
    name: str
    value: str
    origin: Literal["managed", "passthrough"]
    settings: tuple[str, ...]


@dataclass(frozen=True)
class Shadowed:
    """A caller variable that the launch replaces."""

    name: str
    caller_value: str
    value: str
    origin: Literal["managed", "passthrough"]

    def message(self) -> str:
        if is_secret_name(self.name):
            return f"{self.name} from your environment is replaced (a secret: values not shown)"
        if self.origin == "managed":
            spec = MANAGED_BY_NAME[self.name]
            how = " / ".join(f"--set {s}=…" for s in spec.settings) or "the profile"
            return (
                f"{self.name}={self.caller_value!r} from your environment is replaced by {self.value!r}: "
                f"glmlaunch manages it (change it with {how})"
            )
        return (
            f"{self.name}={self.caller_value!r} from your environment is replaced by the profile's env: value"
        )


@dataclass(frozen=True)
class LaunchEnvironment:
    entries: tuple[EnvEntry, ...]
    shadowed: tuple[Shadowed, ...]
    full: Mapping[str, str]

    def exported(self) -> dict[str, str]:
        return {e.name: e.value for e in self.entries}


def produced_env(config: DeploymentConfig) -> tuple[EnvEntry, ...]:
    entries = [
        EnvEntry(name, value, "managed", MANAGED_BY_NAME[name].settings)
        for name, value in managed_env(config).items()
    ]
    entries += [EnvEntry(name, value, "passthrough", (f"env.{name}",)) for name, value in config.env.items()]
    return tuple(entries)


def compose(config: DeploymentConfig, inherited: Mapping[str, str]) -> LaunchEnvironment:
    """The exact environment for ``vllm serve``: the inherited one plus the produced names."""
    entries = produced_env(config)
    full = dict(inherited)
    shadowed: list[Shadowed] = []
    for entry in entries:
        before = inherited.get(entry.name)
        if before is not None and before != entry.value:
            shadowed.append(Shadowed(entry.name, before, entry.value, entry.origin))
        full[entry.name] = entry.value
    return LaunchEnvironment(entries=entries, shadowed=tuple(shadowed), full=full)


def split_secrets(env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Exportable variables, and the names withheld because they hold secrets."""
    plain = {k: v for k, v in env.items() if not is_secret_name(k)}
    return plain, [k for k in env if is_secret_name(k)]
