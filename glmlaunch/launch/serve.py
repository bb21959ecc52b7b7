"""``glmlaunch serve``: resolve -> check -> plan -> preflight -> exec (or supervise) ``vllm serve``.

Each stage is one function below; a stage that does not run says so on stderr, with the reason, and is
recorded in the dry-run document. Nothing falls back silently: a failed stage stops the launch with its
documented exit code (README "Exit codes").

Inputs: :class:`ServeOptions` (the command line) and the caller's environment, which also carries the
whole configuration in a container (``GLMLAUNCH_PROFILE``, ``GLMLAUNCH_SET``,
``GLMLAUNCH_<SECTION>__<FIELD>``, ``GLMLAUNCH_SKIP_PREFLIGHT``, ``GLMLAUNCH_BACKEND``,
``GLMLAUNCH_VLLM_BIN``, ``GLMLAUNCH_INVENTORY``, ``GLMLAUNCH_SUPERVISE``, ``GLMLAUNCH_STRICT_EXIT``,
``GLMLAUNCH_STOP_GRACE``). Output: a :class:`ServePlan`; unless ``dry_run`` is set, :func:`serve` then
replaces the process with vLLM (exec, the command line's default) or runs it as a supervised child
(:mod:`glmlaunch.supervise`) and ends as vLLM ended.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, cast

from glmlaunch.config.environment import compose
from glmlaunch.config.registry import (
    GLMLAUNCH_SKIP_PREFLIGHT,
    GLMLAUNCH_STRICT,
    GLMLAUNCH_STRICT_EXIT,
    GLMLAUNCH_SUPERVISE,
)
from glmlaunch.config.render_args import full_argv, managed_flag_conflicts
from glmlaunch.config.resolve import Resolved, resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.settings import ToolSettings
from glmlaunch.errors import (
    ConfigError,
    ConfigErrors,
    GlmlaunchError,
    HardwareError,
    LaunchError,
    MarginError,
    NoGpuError,
    PreflightError,
)
from glmlaunch.hardware.baseline import GpuMemory, baseline_problems, read_gpu_memory
from glmlaunch.hardware.checks import CheckReport, MemoryInputs, ledger_budget, run_checks
from glmlaunch.hardware.inventory import Inventory
from glmlaunch.launch.handoff import (
    EnvChange,
    LaunchSpec,
    VllmBinary,
    env_changes,
    exec_vllm,
    locate_vllm,
    mask_argv,
    register_argv_secrets,
    require_vllm,
)
from glmlaunch.ledger import build_ledger
from glmlaunch.ledger.budget import Budget, compute_budget
from glmlaunch.ledger.verdict import Verdict, judge
from glmlaunch.output import mask_secrets, note, out_json, out_text, register_secrets, shell_quote, warn

if TYPE_CHECKING:
    from glmlaunch.preflight.api import PreflightRun

BACKENDS = ("auto", "sparkinfer", "b12x", "replay")
#: ``serve --dry-run --json``'s document version (docs/schemas/serve-dry-run.schema.json).
DRY_RUN_SCHEMA_VERSION = 1
StageName = Literal["resolve", "check", "plan", "preflight", "baseline"]
Mode = Literal["exec", "supervise"]
StageStatus = Literal["ok", "warn", "skipped", "failed"]

#: How long to wait, after the preflight's teardown, for the driver to hand GPU memory back.
BASELINE_WAIT_S = 15.0
BASELINE_POLL_S = 0.5


@dataclass(frozen=True)
class ServeOptions:
    """What the command line says; ``None`` means "not given" (the environment decides)."""

    profile: str | None = None
    overrides: tuple[str, ...] = ()
    extra_args: tuple[str, ...] = ()
    dry_run: bool = False
    skip_preflight: bool = False
    backend: str | None = None
    vllm_bin: str | None = None
    inventory: Path | None = None
    #: True: --supervise, False: --exec, None: GLMLAUNCH_SUPERVISE decides (default exec)
    supervise: bool | None = None
    #: --strict-exit (or GLMLAUNCH_STRICT_EXIT=1): exit 9 when vLLM exits 0 after a fatal engine error
    strict_exit: bool = False
    #: --watch: the watch (glmlaunch.watch) on a thread of the supervisor; its endpoint with --metrics-port
    watch: bool = False
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    #: (hidden) a recorded NVML trace the supervised watch replays instead of live NVML: the tests'
    watch_replay: Path | None = None


@dataclass(frozen=True)
class LaunchMode:
    """exec or supervise, and what decided it."""

    mode: Mode
    source: str  # "--supervise", "--exec", "GLMLAUNCH_SUPERVISE=1", "default"
    strict_exit: bool = False
    stop_grace_s: float | None = None
    watch: bool = False
    metrics: str | None = None  # host:port of the watch's endpoint

    def line(self) -> str:
        if self.mode == "exec":
            return (
                f"mode exec ({self.source}): glmlaunch is replaced by vLLM (same pid); no boot directory, "
                "no calibration record"
            )
        extra = "; --strict-exit" if self.strict_exit else ""
        if self.watch:
            extra += "; --watch: the margin watched against the plan" + (
                f", metrics on {self.metrics}" if self.metrics else ""
            )
        return (
            f"mode supervise ({self.source}): vLLM runs as glmlaunch's child; its log, outcome and "
            f"calibration record are kept under the cache (boots/){extra}"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "source": self.source,
            "strict_exit": self.strict_exit,
            "stop_grace_s": self.stop_grace_s,
            "watch": {"metrics": self.metrics} if self.watch else None,
        }


@dataclass(frozen=True)
class StageRecord:
    stage: StageName
    status: StageStatus
    detail: str
    #: the code a real launch stops with at this stage (None: it goes on)
    exit_code: int | None = None

    def line(self, *, dry_run: bool = True) -> str:
        who = "a real launch" if dry_run else "the launch"
        stop = f"; {who} stops here with exit {self.exit_code}" if self.exit_code is not None else ""
        return f"{self.stage} {self.status}: {self.detail}{stop}"

    def to_json(self) -> dict[str, object]:
        return {
            "stage": self.stage,
            "status": self.status,
            "detail": mask_secrets(self.detail),
            "exit_code": self.exit_code,
        }


@dataclass(frozen=True)
class Blocking:
    """A stage a real launch would stop at, and the error it would stop with."""

    stage: StageName
    error: GlmlaunchError

    def to_json(self) -> dict[str, object]:
        return {
            "stage": self.stage,
            "exit_code": int(self.error.exit_code),
            "error": mask_secrets(self.error.one_line()),
        }


@dataclass(frozen=True)
class ServePlan:
    """Everything decided before the hand-off; printed by ``--dry-run``, executed otherwise."""

    profile: str
    spec: LaunchSpec
    vllm: VllmBinary
    extra_args: tuple[str, ...]
    stages: tuple[StageRecord, ...]
    shadowed: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    checks: CheckReport | None = None
    dry_run: bool = False
    #: every stage a real launch would stop at, in stage order (dry runs only: a real launch raises at the
    #: first; a dry run goes on so that it can show the command and every problem)
    blocking: tuple[Blocking, ...] = ()
    #: the memory verdict of the plan stage (glmlaunch.ledger.verdict)
    verdict: Verdict | None = None
    mode: LaunchMode = LaunchMode("exec", "default")
    #: what a supervised launch keeps (the resolved configuration, the budget, the evidence)
    config: DeploymentConfig | None = None
    budget: Budget | None = None
    calibration: str = ""
    inventory: Inventory | None = None
    preflight: dict[str, Any] | None = None
    #: the calibration's ledger inputs the budget was computed with (the supervised watch plans with them)
    calibration_inputs: object | None = None

    @property
    def failure(self) -> GlmlaunchError | None:
        """The error a real launch would stop with: the first blocking stage's."""
        return self.blocking[0].error if self.blocking else None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": DRY_RUN_SCHEMA_VERSION,
            "profile": self.profile,
            "dry_run": self.dry_run,
            "started": False,
            "would_start": self.failure is None,
            "mode": self.mode.to_json(),
            "exit_code": int(self.failure.exit_code) if self.failure is not None else 0,
            "error": mask_secrets(self.failure.one_line()) if self.failure is not None else None,
            "blocking": [b.to_json() for b in self.blocking],
            "verdict": self.verdict.to_json() if self.verdict is not None else None,
            "argv": mask_argv(self.spec.argv),
            "command": self.spec.command_line(),
            "extra_args": mask_argv(self.extra_args),
            "vllm": {
                "requested": self.vllm.requested,
                "source": self.vllm.source,
                "path": self.vllm.path,
                "problem": self.vllm.problem,
            },
            "env_changes": [c.to_json() for c in self.spec.env_changes],
            "shadowed": [mask_secrets(s) for s in self.shadowed],
            "stages": [s.to_json() for s in self.stages],
            "checks": self.checks.to_json() if self.checks is not None else None,
            "warnings": [mask_secrets(w) for w in self.warnings],
        }


# --- stages ---------------------------------------------------------------------------------------


def resolve_stage(options: ServeOptions, environ: Mapping[str, str]) -> Resolved:
    return resolve_config(options.profile, options.overrides, environ)


def reject_managed_flags(extra: Sequence[str]) -> None:
    """Extra vllm arguments may not repeat a flag glmlaunch builds: argparse would let the last one win."""
    conflicts = managed_flag_conflicts(extra)
    if not conflicts:
        return
    raise ConfigErrors(
        [
            ConfigError(
                "is managed by glmlaunch and cannot be passed after --",
                key=flag,
                hint=f"use --set {setting}=VALUE (or GLMLAUNCH_SET) instead",
            )
            for flag, setting in conflicts
        ]
    )


@dataclass
class _BudgetMemo:
    """Keeps the budget the check stage's memory verdict computed, so the plan stage reports that one."""

    budget: Budget | None = None
    inputs: MemoryInputs | None = None
    calibration: object | None = None  # the term model's ledger inputs (calibration records / rig defaults)
    inventory: Inventory | None = None  # what the check read (a supervised boot keeps it)

    def __call__(self, config: DeploymentConfig, inputs: MemoryInputs) -> Budget:
        self.budget = ledger_budget(config, inputs, calibration=self.calibration)
        self.inputs = inputs
        return self.budget


def _say(record: StageRecord, *, dry_run: bool) -> None:
    # A dry run prints its stages on stdout (they are its data); a real launch reports them as progress.
    if not dry_run:
        note(record.line(dry_run=False))


def check_stage(
    config: DeploymentConfig,
    profile: str,
    *,
    inventory_file: Path | None,
    environ: Mapping[str, str],
    strict: bool,
    dry_run: bool,
    calibration: object | None = None,
) -> tuple[StageRecord, CheckReport | None, _BudgetMemo, GlmlaunchError | None]:
    """Hardware checks and the memory verdict on the GPUs vLLM will see (the launch environment's view)."""
    from glmlaunch.hardware.probe import get_inventory

    memo = _BudgetMemo(calibration=calibration)
    try:
        inv = get_inventory(inventory_file, environ=environ)
    except NoGpuError as exc:
        if not dry_run:
            raise
        record = StageRecord("check", "skipped", "no GPU to check here", exit_code=int(exc.exit_code))
        return record, None, memo, exc
    memo.inventory = inv
    report = run_checks(
        config, inv, purpose="serve", profile=profile, budget_fn=memo, calibration=calibration
    )
    counts = report.counts()
    failure: GlmlaunchError | None = None
    try:
        report.raise_for_status(strict=strict, strict_source=f"{GLMLAUNCH_STRICT}=1")
    except GlmlaunchError as exc:
        failure = exc
    for r in report.results:
        # The error line names the first failure of its class already: every other row is said once here.
        named = failure is not None and r.status == "FAIL" and f"{r.name}: {r.message}" in failure.message
        if r.status in ("WARN", "FAIL") and not named:
            warn(f"check {r.name}: {r.status}: {r.message}")
    summary = (
        f"{len(report.results)} checks on GPUs {list(report.gpus)} of the {report.inventory}: "
        f"{counts['OK']} OK, {counts['WARN']} WARN, {counts['FAIL']} FAIL, {counts['SKIP']} SKIP"
    )
    status: StageStatus = "failed" if failure is not None else ("warn" if counts["WARN"] else "ok")
    record = StageRecord(
        "check", status, summary, exit_code=int(failure.exit_code) if failure is not None else None
    )
    _say(record, dry_run=dry_run)
    return record, report, memo, failure


def plan_stage(
    config: DeploymentConfig, memo: _BudgetMemo, *, dry_run: bool = False
) -> tuple[StageRecord, Verdict, MarginError | None]:
    record, verdict, error, _ = plan_stage_budget(config, memo, dry_run=dry_run)
    return record, verdict, error


def plan_stage_budget(
    config: DeploymentConfig, memo: _BudgetMemo, *, dry_run: bool = False
) -> tuple[StageRecord, Verdict, MarginError | None, Budget]:
    """The ledger's budget: the one the check computed with real memory, else the profile's figures."""
    budget, basis = memo.budget, "the GPUs' real memory"
    cal = memo.calibration
    if budget is None:
        budget = compute_budget(config, build_ledger(config, calibration=cal), calibration=cal)
        basis = "the profile's hardware.memory_per_gpu (no GPU memory was read)"
        # Without a check stage no memory_verdict row carried the cautions: they are said here, once.
        for caution in budget.cautions:
            warn(f"plan: {caution}")
    verdict = judge(config, budget, cal)
    text = f"verdict {verdict.summary()}; from {basis}"
    if not verdict.ok:
        error = MarginError(
            f"plan: {verdict.summary()}",
            hint="`glmlaunch plan` shows every entry; lower memory.gpu_memory_utilization or the pools",
        )
        return StageRecord("plan", "failed", text, exit_code=int(error.exit_code)), verdict, error, budget
    record = StageRecord("plan", "ok", text)
    _say(record, dry_run=dry_run)
    return record, verdict, None, budget


def preflight_stage(
    config: DeploymentConfig, backend: str, calibration: object | None = None
) -> PreflightRun:
    """Build the pools on the real GPUs and compare with the ledger (glmlaunch.preflight)."""
    from glmlaunch.preflight.api import run_preflight
    from glmlaunch.preflight.report import build_report, failure_error, render_text

    run = run_preflight(
        config, backend=cast(Any, backend), device="cuda", progress=note, calibration=calibration
    )
    report = build_report(run)
    note(render_text(report))
    error = failure_error(report, launching=True)
    if error is None:
        return run
    raise error


def preflight_forecast(config: DeploymentConfig, environ: Mapping[str, str]) -> GlmlaunchError | None:
    """What stops a real launch's preflight here before it starts: no NVML or GPU (8), too few GPUs (3).

    A dry run starts no worker, but it can tell whether the preflight could run on this machine at all,
    so that ``would_start`` says what the real launch would do.
    """
    from glmlaunch.hardware.probe import probe

    try:
        gpus = probe(environ=environ).gpus
    except NoGpuError as exc:
        return NoGpuError(f"the preflight needs the GPUs: {exc.message}", hint=exc.hint)
    if len(gpus) < config.parallel.tp:
        return HardwareError(
            f"the preflight needs parallel.tp = {config.parallel.tp} GPUs; {len(gpus)} visible",
            key="parallel.tp",
            value=config.parallel.tp,
        )
    return None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def confirm_baseline(
    run: PreflightRun,
    environ: Mapping[str, str],
    *,
    wait_s: float = BASELINE_WAIT_S,
    read_gpus: Callable[[Mapping[str, str]], list[GpuMemory]] = read_gpu_memory,
) -> StageRecord:
    """Before exec: the preflight's workers are gone and every GPU has its pre-preflight free memory back."""
    from glmlaunch.preflight.api import LEAK_SLACK_BYTES

    world = run.config.parallel.tp
    before = [GpuMemory(s.index, s.free_bytes, s.pids) for s in run.before[:world]]
    workers = sorted({r.pid for r in run.outcome.results if r is not None} | set(run.outcome.survivors))
    deadline = time.monotonic() + wait_s
    while True:
        alive = [pid for pid in workers if _group_alive(pid)]
        problems = baseline_problems(before, read_gpus(environ), workers, alive, LEAK_SLACK_BYTES)
        if not problems or time.monotonic() >= deadline:
            break
        time.sleep(BASELINE_POLL_S)
    if problems:
        raise PreflightError(
            "GPUs are not back at their pre-preflight baseline: " + "; ".join(problems),
            hint="vLLM was not started; find the holders with `glmlaunch hw` and stop them",
        )
    record = StageRecord(
        "baseline", "ok", f"preflight workers gone, free memory back on GPUs {[b.index for b in before]}"
    )
    note(record.line())
    return record


# --- the whole chain ------------------------------------------------------------------------------


_DRY_RUN_SKIP = "--dry-run starts no process"


def _skip_reason(options: ServeOptions, tool: ToolSettings) -> str | None:
    # The flag and the variable come first: a dry run of a launch that skips the preflight anyway has no
    # preflight to forecast.
    if options.skip_preflight:
        return "--skip-preflight"
    if tool.skip_preflight:
        return f"{GLMLAUNCH_SKIP_PREFLIGHT}=1"
    if options.dry_run:
        return _DRY_RUN_SKIP
    return None


def prepare(options: ServeOptions, environ: Mapping[str, str]) -> ServePlan:
    """Run every stage up to the hand-off and return what would be executed.

    A real launch raises at the first stage that fails. A dry run goes on past every failure so that it
    shows the command and every stage; it records each stage a real launch would stop at (``blocking``),
    and the first one's exit code is the dry run's.
    """
    from glmlaunch.calibrate.apply import calibration_for

    dry = options.dry_run
    register_secrets(environ)
    register_argv_secrets(options.extra_args)
    tool = ToolSettings.from_environ(environ)
    backend = options.backend or tool.backend or "auto"
    if backend not in BACKENDS:
        raise ConfigError("unknown preflight backend", key="--backend", value=backend, allowed=BACKENDS)
    strict = tool.strict
    mode = launch_mode(options, tool)

    resolved = resolve_stage(options, environ)
    config = resolved.config
    register_secrets(config.env)
    warnings = [d.one_line() for d in resolved.warnings]
    for line in warnings:
        warn(line)
    reject_managed_flags(options.extra_args)
    blocking: list[Blocking] = []
    preflight_doc: dict[str, Any] | None = None

    vllm = locate_vllm(options.vllm_bin, environ)
    resolved_text = f"profile {resolved.profile_name}"
    if vllm.path is None:
        try:
            require_vllm(vllm)
        except LaunchError as exc:
            if not dry:
                raise
            blocking.append(Blocking("resolve", exc))
            resolved_text += f"; vllm: {vllm.problem} (from {vllm.source})"
    stages = [
        StageRecord(
            "resolve",
            "failed" if blocking else "ok",
            resolved_text,
            exit_code=int(blocking[0].error.exit_code) if blocking else None,
        )
    ]
    _say(stages[0], dry_run=dry)

    launch_env = compose(config, environ)
    shadowed = tuple(s.message() for s in launch_env.shadowed)
    for line in shadowed:
        warn(line)

    # Once per launch: the check's memory verdict, the plan stage and the preflight use the same terms.
    use = calibration_for(config)
    for line in use.warnings:
        warn(line)
    note(use.message)

    check, report, memo, check_failure = check_stage(
        config,
        resolved.profile_name,
        inventory_file=options.inventory,
        environ=launch_env.full,
        strict=strict,
        dry_run=dry,
        calibration=use.calibration,
    )
    stages.append(check)
    if check_failure is not None:
        if not dry:
            raise check_failure
        blocking.append(Blocking("check", check_failure))
    plan_record, verdict, plan_failure, budget = plan_stage_budget(config, memo, dry_run=dry)
    stages.append(plan_record)
    if plan_failure is not None:
        if not dry:
            raise plan_failure
        blocking.append(Blocking("plan", plan_failure))

    skip = _skip_reason(options, tool)
    if skip is not None:
        forecast = preflight_forecast(config, launch_env.full) if skip == _DRY_RUN_SKIP else None
        if forecast is not None:
            blocking.append(Blocking("preflight", forecast))
            detail = f"{skip}; a real launch runs it and stops: {forecast.message}"
            record = StageRecord("preflight", "skipped", detail, exit_code=int(forecast.exit_code))
        else:
            record = StageRecord("preflight", "skipped", skip)
        if not dry:
            warn(record.line(dry_run=False))  # skipping a real launch's preflight is worth a warning
        stages.append(record)
        stages.append(StageRecord("baseline", "skipped", "no preflight ran, so no workers to wait for"))
    else:
        run = preflight_stage(config, backend, use.calibration)
        stages.append(StageRecord("preflight", "ok", f"preflight passed ({run.backend.name} backend)"))
        stages.append(confirm_baseline(run, launch_env.full))
        if mode.mode == "supervise":
            preflight_doc = _preflight_document(run)

    argv = full_argv(config, options.extra_args, vllm_bin=vllm.path or vllm.requested)
    spec = LaunchSpec(
        argv=tuple(argv), env=dict(launch_env.full), env_changes=env_changes(launch_env, environ)
    )
    return ServePlan(
        profile=resolved.profile_name,
        spec=spec,
        vllm=vllm,
        extra_args=options.extra_args,
        stages=tuple(stages),
        shadowed=shadowed,
        warnings=tuple(warnings),
        checks=report,
        dry_run=dry,
        blocking=tuple(blocking),
        verdict=verdict,
        mode=mode,
        config=config,
        budget=budget,
        calibration=use.headline or use.message,
        inventory=memo.inventory,
        preflight=preflight_doc,
        calibration_inputs=use.calibration,
    )


def launch_mode(options: ServeOptions, tool: ToolSettings) -> LaunchMode:
    """--supervise / --exec, else GLMLAUNCH_SUPERVISE, else exec (the command line's default)."""
    if options.supervise is not None:
        mode: Mode = "supervise" if options.supervise else "exec"
        source = "--supervise" if options.supervise else "--exec"
    elif tool.supervise:
        mode, source = "supervise", f"{GLMLAUNCH_SUPERVISE}=1"
    else:
        mode, source = "exec", "default"
    strict = options.strict_exit or tool.strict_exit
    if strict and mode == "exec":
        raise ConfigError(
            "needs a supervised launch: with exec, vLLM's exit status is the process's own",
            key="--strict-exit" if options.strict_exit else GLMLAUNCH_STRICT_EXIT,
            hint=f"add --supervise (or {GLMLAUNCH_SUPERVISE}=1)",
        )
    watch = options.watch or options.metrics_port is not None or options.watch_replay is not None
    if watch and mode == "exec":
        raise ConfigError(
            "needs a supervised launch: the watch runs on a thread of glmlaunch, which exec replaces",
            key="--watch" if options.watch else "--metrics-port",
            hint=f"add --supervise (or {GLMLAUNCH_SUPERVISE}=1), or run `glmlaunch watch` beside vLLM",
        )
    if options.metrics_port is not None and not 0 <= options.metrics_port <= 65535:
        raise ConfigError(
            "not a TCP port", key="--metrics-port", value=options.metrics_port, allowed=["0..65535"]
        )
    metrics = None
    if options.metrics_port is not None:
        metrics = f"{options.metrics_host}:{options.metrics_port}"
    return LaunchMode(
        mode, source, strict_exit=strict, stop_grace_s=tool.stop_grace, watch=watch, metrics=metrics
    )


def _preflight_document(run: PreflightRun) -> dict[str, Any]:
    from glmlaunch.preflight.report import build_report

    return cast(dict[str, Any], json.loads(json.dumps(build_report(run).to_dict(), default=str)))


def serve(options: ServeOptions, environ: Mapping[str, str] | None = None) -> ServePlan:
    """Prepare the launch; with ``dry_run`` return it; otherwise hand the process to vLLM (exec) or
    supervise it and end as it ended (neither returns)."""
    env = dict(os.environ if environ is None else environ)
    plan = prepare(options, env)
    if options.dry_run:
        return plan
    if plan.mode.mode == "supervise":
        supervise_vllm(plan, env, options)
    exec_vllm(plan.spec)


def supervise_vllm(
    plan: ServePlan, environ: Mapping[str, str], options: ServeOptions | None = None
) -> NoReturn:
    """Run vLLM as a supervised child (glmlaunch.supervise) and end this process as vLLM ended."""
    from glmlaunch.supervise.process import exit_like
    from glmlaunch.supervise.session import Launch, supervise
    from glmlaunch.supervise.watching import WatchSetup

    assert plan.config is not None  # a real launch always resolved its configuration
    for change in plan.spec.env_changes:
        if change.change != "unchanged":
            note(f"env: {change.line()}")
    note(f"supervise: {plan.spec.command_line()}")
    budget = plan.budget
    watch = None
    if plan.mode.watch and budget is not None and options is not None:
        watch = WatchSetup(
            budget=budget,
            calibration=plan.calibration_inputs,
            verdict=plan.verdict.status if plan.verdict is not None else budget.verdict,
            metrics_host=options.metrics_host,
            metrics_port=options.metrics_port,
            replay=options.watch_replay,
        )
    result = supervise(
        Launch(
            argv=plan.spec.argv,
            env=plan.spec.env,
            caller_env=environ,
            profile=plan.profile,
            config=plan.config,
            inventory=plan.inventory,
            command_line=plan.spec.command_line(),
            documents=_boot_documents(plan),
            plan_terms=_plan_terms(budget),
            plan_kv_tokens=budget.kv_tokens if budget is not None else None,
            calibration=plan.calibration,
            strict_exit=plan.mode.strict_exit,
            stop_grace_s=plan.mode.stop_grace_s,
            watch=watch,
        )
    )
    exit_like(result.code, result.sig)


def _plan_terms(budget: Budget | None) -> dict[str, int] | None:
    """The budget terms a boot logs, by the names the calibration uses (u_pre: T - F0, others included)."""
    if budget is None:
        return None
    return {"w": budget.w, "p": budget.p, "n": budget.n, "g_e": budget.g_e, "u_pre": budget.total - budget.f0}


def _boot_documents(plan: ServePlan) -> dict[str, dict[str, Any]]:
    """What a supervised boot keeps of the launch before vLLM starts (boots/<id>/*.json, masked there)."""
    docs: dict[str, dict[str, Any]] = {
        "config.json": {
            "profile": plan.profile,
            "config": plan.config.model_dump(mode="json") if plan.config is not None else None,
            "env_changes": [c.to_json() for c in plan.spec.env_changes],
            "extra_args": list(plan.extra_args),
            "mode": plan.mode.to_json(),
        },
        "plan.json": {
            "verdict": plan.verdict.to_json() if plan.verdict is not None else None,
            "terms": plan.budget.terms if plan.budget is not None else None,
            "kv_tokens": plan.budget.kv_tokens if plan.budget is not None else None,
            "calibration": plan.calibration,
        },
        "preflight.json": {
            "stages": [s.to_json() for s in plan.stages],
            "checks": plan.checks.to_json() if plan.checks is not None else None,
            "preflight": plan.preflight,
        },
    }
    if plan.inventory is not None:
        docs["inventory.json"] = {"inventory": plan.inventory.model_dump(mode="json")}
    return docs


# --- dry-run output -------------------------------------------------------------------------------


def _env_line(change: EnvChange) -> str:
    text = f"{change.name}={shell_quote(change.shown_value())}"
    if change.change == "replaced":
        text += f"  # replaces {shell_quote(change.shown_before() or '')} from the caller's environment"
    elif change.change == "unchanged":
        text += "  # already set to this value"
    return text


def dry_run_text(plan: ServePlan) -> str:
    lines = [f"# glmlaunch serve --dry-run: profile {plan.profile}; nothing was started"]
    for stage in plan.stages:
        lines.append(f"# {stage.line()}")
    lines.append(f"# {plan.mode.line()}")
    lines.append("# environment changes (the rest of the caller's environment is passed unchanged)")
    lines.extend(_env_line(c) for c in plan.spec.env_changes)
    if plan.blocking:
        first = plan.blocking[0]
        code = int(first.error.exit_code)
        # the reason is the stage's line above (and the error line on stderr): not said a third time
        lines.append(f"# a launch would stop at the {first.stage} stage, exit {code}")
    lines.append("# command")
    lines.append(plan.spec.command_line())
    return "\n".join(lines)


def render(plan: ServePlan, *, as_json: bool) -> None:
    """Print a dry run (a real launch never returns here); then raise what a launch would stop with."""
    if as_json:
        out_json(plan.to_json())
    else:
        out_text(dry_run_text(plan))
    if plan.failure is not None:
        raise plan.failure


def validate_json_flag(*, as_json: bool, dry_run: bool) -> None:
    if as_json and not dry_run:
        raise ConfigError("--json describes a dry run", key="--json", hint="add --dry-run")
