"""The plain function behind ``glmlaunch preflight`` (cli.py only declares its options)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import cast

from glmlaunch.errors import ConfigError
from glmlaunch.output import note, warn
from glmlaunch.preflight.api import BackendChoice, parse_timeouts, run_preflight
from glmlaunch.preflight.report import PreflightReport, build_report
from glmlaunch.preflight.types import DeviceMode, FaultSpec

BACKENDS = ("auto", "sparkinfer", "b12x", "replay")
DEVICES = ("cuda", "cpu")


def preflight(
    profile: str | None,
    overrides: Sequence[str],
    *,
    backend: str | None = None,
    device: str = "cuda",
    timeouts: Sequence[str] = (),
    inject_fault: str | None = None,
) -> PreflightReport:
    from glmlaunch.config.commands import resolve
    from glmlaunch.config.settings import ToolSettings

    if backend is None:
        # --backend wins; GLMLAUNCH_BACKEND is the default for scripts and containers.
        backend = ToolSettings.from_environ().backend or "auto"
    if backend not in BACKENDS:
        raise ConfigError("unknown backend", key="--backend", value=backend, allowed=BACKENDS)
    if device not in DEVICES:
        raise ConfigError("unknown device mode", key="--device", value=device, allowed=DEVICES)
    try:
        fault = FaultSpec.parse(inject_fault) if inject_fault else None
    except ValueError as exc:
        raise ConfigError(str(exc), key="--inject-fault") from None
    config = resolve(profile, overrides).config
    from glmlaunch.plan.plan import checkpoint_for, make_plan

    plan = make_plan(config, checkpoint=checkpoint_for(config, os.environ))
    for line in plan.warnings:
        warn(line)
    note(plan.message)
    run = run_preflight(
        config,
        inputs=plan.inputs,
        backend=cast(BackendChoice, backend),
        device=cast(DeviceMode, device),
        limits=parse_timeouts(list(timeouts)),
        fault=fault,
        progress=note,
    )
    return build_report(run)
