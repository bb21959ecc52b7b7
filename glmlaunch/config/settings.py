"""glmlaunch's own knobs (``GLMLAUNCH_PROFILE``, ``GLMLAUNCH_SET``, …).

The variable names are declared in ``registry.TOOL_VARS``; :class:`ToolSettings` gives them types.
They are read from an explicit mapping (not only ``os.environ``), so commands and tests resolve against
the environment they are handed.

Every variable is a scalar (a string, a path, a boolean or one word of a list), so reading them takes
no more than pydantic-settings' environment source did for them: match the names case-insensitively
and let pydantic validate the strings. pydantic-settings itself is not used: importing it pulls in
asyncio, ssl and argparse (~50 ms on the 2-core CI VM, bench/RESULTS.md "Start-up"), which every
command paid as soon as any ``GLMLAUNCH_*`` variable was set. The model is built on first validation
(``defer_build``), so a run without these variables does not build it at all.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from glmlaunch import no_plugin_scan
from glmlaunch.config.registry import TOOL_PREFIX, TOOL_VARS
from glmlaunch.errors import ConfigError


class ToolSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    profile: str | None = None
    profile_path: str | None = None
    set: str | None = None
    debug: bool = False
    quiet: bool = False
    vllm_bin: str | None = None
    cache_dir: Path | None = None
    inventory: Path | None = None
    backend: Literal["auto", "sparkinfer", "b12x", "replay"] | None = None
    skip_preflight: bool = False
    strict: bool = False
    rig_defaults: Path | None = None
    supervise: bool = False
    # finite only: `inf` passed `gt=0`, then launch.json could not hold it (exit 1); 0 is compose's
    # `stop_grace_period: 0s` (SIGKILL at once), a grace like any other
    stop_grace: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    strict_exit: bool = False
    lmcache_bin: str | None = None
    lmcache_start_timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ToolSettings:
        env = os.environ if environ is None else environ
        values = _read(env)
        if not values:
            # model_construct needs no validator: the defaults are the declared ones.
            return cls.model_construct()
        try:
            with no_plugin_scan():
                return cls.model_validate(values)
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


_FIELD_BY_VAR = {TOOL_PREFIX + name.upper(): name for name in ToolSettings.model_fields}


def _read(env: Mapping[str, str]) -> dict[str, str]:
    """The tool variables present in ``env``, by field name. Names match case-insensitively and a later
    spelling of the same name wins, as with pydantic-settings' ``case_sensitive=False``.

    An empty (or blank) value is no value: compose's ``${GLMLAUNCH_STRICT:-}`` sets the variable to the
    empty string, and that must mean what leaving it out means, for every variable alike.
    """
    values: dict[str, str] = {}
    for key, value in env.items():
        field = _FIELD_BY_VAR.get(key.upper())
        if field is not None:
            if value.strip():
                values[field] = value
            else:
                values.pop(field, None)
    return values


def _check_registry() -> None:
    missing = set(_FIELD_BY_VAR) ^ set(TOOL_VARS)
    if missing:  # pragma: no cover - a development error caught by the test suite
        raise RuntimeError(f"ToolSettings and registry.TOOL_VARS disagree: {sorted(missing)}")


_check_registry()

__all__ = ["ToolSettings"]
