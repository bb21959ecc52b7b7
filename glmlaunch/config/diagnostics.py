"""Where a setting's value came from, and one finding about a configuration (layering and validation).

Lower than both :mod:`.resolve` and :mod:`.validate`, so neither imports the other's internals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from glmlaunch.errors import ConfigError

SourceKind = Literal["default", "profile", "env", "cli"]


@dataclass(frozen=True)
class Source:
    kind: SourceKind
    detail: str = ""

    def __str__(self) -> str:
        return self.kind if not self.detail else f"{self.kind} {self.detail}"


@dataclass(frozen=True)
class Diagnostic:
    level: Literal["error", "warning", "note"]
    key: str
    message: str
    value: object = None
    allowed: tuple[str, ...] = ()
    source: str | None = None
    hint: str | None = None
    #: the validation rule that found it (config/rules.py), when one did
    rule: str | None = None

    def as_error(self) -> ConfigError:
        return ConfigError(
            self.message,
            key=self.key,
            value=self.value,
            allowed=list(self.allowed) or None,
            source=self.source,
            hint=self.hint,
        )

    def one_line(self) -> str:
        return self.as_error().one_line()
