"""``glmlaunch check``: the hardware checks and the memory verdict of the plan on the GPUs found.

The hardware stage checks the GPUs and reads the memory facts of the TP group's tightest one
(:func:`glmlaunch.hardware.checks.memory_inputs`); the plan budgets with those facts; the
``memory_verdict`` row shows that plan's verdict, the one ``plan``, ``serve`` and ``calibrate search``
print too. ``free_memory``'s start gate adds the plan's U_pre. The report decides the exit code
(README "Exit codes").
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from glmlaunch.config.registry import GLMLAUNCH_STRICT
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.settings import ToolSettings
from glmlaunch.config.units import format_size
from glmlaunch.errors import ConfigError, ExitCode, NoGpuError
from glmlaunch.hardware.checks import (
    PURPOSES,
    CheckReport,
    CheckResult,
    Purpose,
    Status,
    group_memory,
    hardware_checks,
)
from glmlaunch.hardware.inventory import Inventory
from glmlaunch.ledger.inputs import CheckpointOnDisk, LedgerInputs
from glmlaunch.plan.plan import Plan, checkpoint_for, make_plan

if TYPE_CHECKING:
    from glmlaunch.calibrate.store import Store


def plan_on(
    config: DeploymentConfig,
    inv: Inventory,
    *,
    store: Store | None = None,
    inputs: LedgerInputs | None = None,
    checkpoint: CheckpointOnDisk | None = None,
) -> Plan:
    """The plan of ``config`` on the memory of its TP group's tightest GPU in ``inv`` (the profile's
    figures when NVML reported none)."""
    return make_plan(
        config, memory=group_memory(config, inv), store=store, inputs=inputs, checkpoint=checkpoint
    )


def memory_row(plan: Plan) -> CheckResult:
    """The ``memory_verdict`` row: the plan's verdict on the GPU it was budgeted for."""
    memory, budget, verdict = plan.memory, plan.budget, plan.verdict
    if memory is None:
        return CheckResult(
            name="memory_verdict",
            status="SKIP",
            message="NVML did not report memory",
            fail_code=ExitCode.MARGIN,
        )
    details: dict[str, Any] = {
        "gpu": memory.gpu,
        "verdict": verdict.to_json(),
        "terms": budget.terms,
        "min_margin": budget.min_margin,
        "start_gate_ok": budget.start_gate_ok,
        "kv_tokens": budget.kv_tokens,
        "request_fits": budget.request_fits,
        "recommended_kv_cache_memory_bytes": budget.recommended_kv_cache_memory_bytes,
    }
    held = format_size(memory.used_by_others)
    where = f"on GPU {memory.gpu} (T {format_size(memory.total_bytes)}, others {held})"
    message = f"{verdict.summary()} {where}"
    status: Status = "OK"
    if not verdict.ok:
        status = "FAIL"
    elif budget.cautions or verdict.caution:
        # a band caution is in the verdict's summary already
        if budget.cautions:
            message += "; " + "; ".join(budget.cautions)
        status = "WARN"
    return CheckResult(
        name="memory_verdict", status=status, message=message, details=details, fail_code=ExitCode.MARGIN
    )


def check_report(
    plan: Plan, inv: Inventory, *, purpose: Purpose = "serve", profile: str = "(config)"
) -> CheckReport:
    """Every hardware check on ``plan``'s TP group, then its memory verdict (:func:`memory_row`)."""
    from glmlaunch.hardware.checks import select_group

    config = plan.config
    # the start gate adds what the plan allocates before vLLM's snapshot, where memory was read
    u_pre = plan.budget.u_pre if plan.memory is not None else 0
    rows = hardware_checks(config, inv, purpose=purpose, pre_snapshot_bytes=u_pre)
    return CheckReport(
        profile=profile,
        purpose=purpose,
        inventory=inv.describe(),
        gpus=select_group(config, inv).indices,
        results=(*rows, memory_row(plan)),
    )


def run_checks(
    config: DeploymentConfig,
    inv: Inventory,
    *,
    purpose: Purpose = "serve",
    profile: str = "(config)",
    store: Store | None = None,
    inputs: LedgerInputs | None = None,
) -> CheckReport:
    """:func:`check_report` of the plan of ``config`` on ``inv`` (:func:`plan_on`)."""
    return check_report(
        plan_on(config, inv, store=store, inputs=inputs), inv, purpose=purpose, profile=profile
    )


def run_check(
    profile: str | None,
    overrides: Sequence[str],
    *,
    inventory_file: Path | None,
    purpose: str,
    strict: bool,
    as_json: bool,
) -> CheckReport:
    """Resolve, load or probe the hardware, plan on it, run every check, print the table; raise on failure."""
    from glmlaunch.config.commands import resolve
    from glmlaunch.hardware.commands import check_table, no_gpu_report
    from glmlaunch.hardware.probe import get_inventory
    from glmlaunch.output import out_console, out_json, warn

    if purpose not in PURPOSES:  # typer passes a plain str
        raise ConfigError("unknown purpose", key="--purpose", value=purpose, allowed=PURPOSES)
    strict_source = "--strict" if strict else f"{GLMLAUNCH_STRICT}=1"
    strict = strict or ToolSettings.from_environ().strict
    resolved = resolve(profile, overrides)
    try:
        inv = get_inventory(inventory_file)
    except NoGpuError as exc:
        # --json promises one document: the report says what stopped the checks (and exit 8 follows)
        if as_json:
            out_json(no_gpu_report(resolved.profile_name, purpose, exc).to_json(strict=strict))
        raise
    plan = plan_on(resolved.config, inv, checkpoint=checkpoint_for(resolved.config, os.environ))
    for line in plan.warnings:
        warn(line)
    report = check_report(plan, inv, purpose=purpose, profile=resolved.profile_name)
    if plan.message:
        # the calibration the memory verdict rests on is data of the report (stdout), not a message
        report = report.model_copy(update={"calibration": plan.message})
    if as_json:
        out_json(report.to_json(strict=strict))
    else:
        out_console.print(check_table(report))
    # Each WARN's message is in the table (or the JSON) already: stderr names the rows once, not again.
    warned = report.warned()
    if warned and report.exit_code(strict=strict) != ExitCode.WARNINGS:
        warn(f"{len(warned)} check(s) warned: {', '.join(warned)} (the messages are on stdout)")
    report.raise_for_status(strict=strict, strict_source=strict_source)
    return report
