"""glmlaunch's own knobs (``GLMLAUNCH_PROFILE``, ``GLMLAUNCH_SET``, …), read with pydantic-settings.

The variable names are declared in ``registry.TOOL_VARS``; :class:`ToolSettings` gives them types.
pydantic-settings reads them from an explicit mapping (not only ``os.environ``), so commands and tests
resolve against the environment they are handed.

pydantic-settings is imported only when one of these variables is present: importing it pulls in
asyncio, ssl and argparse (about 140 ms on the 2-core CI machine, measured with bench/startup.py's
method), which would otherwise be half of `glmlaunch env`'s start-up time for nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from glmlaunch.config.registry import TOOL_PREFIX, TOOL_VARS
from glmlaunch.errors import ConfigError

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings


class ToolSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

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
    rig_defaults: Path | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ToolSettings:
        env = dict(os.environ if environ is None else environ)
        names = {name.upper() for name in TOOL_VARS}
        if not any(key.upper() in names for key in env):
            return cls()
        try:
            return cls.model_validate(_read(env).model_dump())
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


def _read(env: Mapping[str, str]) -> BaseSettings:
    _ENVIRON.append(dict(env))
    try:
        return _settings_class()()
    finally:
        _ENVIRON.pop()


# pydantic-settings builds its sources in a classmethod; the mapping for the one construction in
# progress is handed over on this stack.
_ENVIRON: list[dict[str, str]] = []
_CLASS: list[type[BaseSettings]] = []


def _settings_class() -> type[BaseSettings]:
    """ToolSettings' fields read by pydantic-settings from a given mapping (built on first use)."""
    if _CLASS:
        return _CLASS[0]
    from pydantic import create_model
    from pydantic_settings import (
        BaseSettings,
        EnvSettingsSource,
        PydanticBaseSettingsSource,
        SettingsConfigDict,
    )
    from pydantic_settings.sources.utils import parse_env_vars

    class _MappingEnvSource(EnvSettingsSource):
        def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
            self._environ = dict(environ)
            super().__init__(settings_cls)

        def _load_env_vars(self) -> Mapping[str, str | None]:
            return parse_env_vars(
                self._environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
            )

    class _Base(BaseSettings):
        model_config = SettingsConfigDict(env_prefix=TOOL_PREFIX, case_sensitive=False, extra="ignore")

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (init_settings, _MappingEnvSource(settings_cls, _ENVIRON[-1]))

    fields: dict[str, Any] = {
        name: (info.annotation, info.default) for name, info in ToolSettings.model_fields.items()
    }
    cls: type[BaseSettings] = create_model("_ToolEnv", __base__=_Base, **fields)
    _CLASS.append(cls)
    return cls


def _check_registry() -> None:
    missing = {TOOL_PREFIX + name.upper() for name in ToolSettings.model_fields} ^ set(TOOL_VARS)
    if missing:  # pragma: no cover - a development error caught by the test suite
        raise RuntimeError(f"ToolSettings and registry.TOOL_VARS disagree: {sorted(missing)}")


_check_registry()

__all__ = ["ToolSettings"]
