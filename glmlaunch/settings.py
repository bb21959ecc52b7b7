"""glmlaunch's own knobs (``GLMLAUNCH_PROFILE``, ``GLMLAUNCH_SET``, …), read with pydantic-settings.

The variable names are declared in ``registry.TOOL_VARS``; this model gives them types. It reads an
explicit mapping (not only ``os.environ``) so commands and tests resolve against the environment they
are handed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import ValidationError
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from glmlaunch.errors import ConfigError
from glmlaunch.registry import TOOL_PREFIX, TOOL_VARS


class _MappingEnvSource(EnvSettingsSource):
    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = dict(environ)
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(
            self._environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


class ToolSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=TOOL_PREFIX, case_sensitive=False, extra="ignore", frozen=True
    )

    profile: str | None = None
    profile_path: str | None = None
    set: str | None = None
    debug: bool = False
    vllm_bin: str | None = None
    cache_dir: Path | None = None
    inventory: Path | None = None
    backend: Literal["auto", "sparkinfer", "b12x", "replay"] | None = None
    skip_preflight: bool = False
    strict: bool = False

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        environ = _CURRENT_ENVIRON.get("env")
        if environ is not None:
            return (init_settings, _MappingEnvSource(settings_cls, environ))
        return (init_settings, env_settings)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ToolSettings:
        _CURRENT_ENVIRON["env"] = dict(os.environ if environ is None else environ)
        try:
            return cls()
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            name = TOOL_PREFIX + str(err["loc"][0]).upper() if err["loc"] else TOOL_PREFIX
            raise ConfigError(
                str(err["msg"]),
                key=name,
                value=err.get("input"),
                source="environment",
                hint=TOOL_VARS.get(name),
            ) from None
        finally:
            _CURRENT_ENVIRON.pop("env", None)


# pydantic-settings builds sources in a classmethod; this hands it the mapping for one call.
_CURRENT_ENVIRON: dict[str, dict[str, str]] = {}


def _field_names() -> list[str]:
    return [TOOL_PREFIX + name.upper() for name in ToolSettings.model_fields]


def _check_registry() -> None:
    missing = set(_field_names()) ^ set(TOOL_VARS)
    if missing:  # pragma: no cover - a development error caught by the test suite
        raise RuntimeError(f"ToolSettings and registry.TOOL_VARS disagree: {sorted(missing)}")


_check_registry()

__all__ = ["ToolSettings"]
