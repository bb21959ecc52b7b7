"""``glmlaunch serve``: resolve -> check -> plan -> preflight -> exec (or supervise) ``vllm serve``.

Each stage is one function in :data:`STAGES`; it returns a :class:`StageRecord` (its status, the error a
launch stops with there, its typed data for the stages after it) and :func:`run_stages`, the one loop,
decides: a real launch raises the first record's error, a dry run records every stage and reports them.
Nothing falls back silently: a stage that does not run says why, and a failed stage stops the launch
with its documented exit code (README "Exit codes").

Inputs: :class:`ServeOptions` (the command line) and the caller's environment, which also carries the
whole configuration in a container (``GLMLAUNCH_PROFILE``, ``GLMLAUNCH_SET``,
``GLMLAUNCH_<SECTION>__<FIELD>``, ``GLMLAUNCH_SKIP_PREFLIGHT``, ``GLMLAUNCH_BACKEND``,
``GLMLAUNCH_VLLM_BIN``, ``GLMLAUNCH_INVENTORY``, ``GLMLAUNCH_SUPERVISE``, ``GLMLAUNCH_STRICT_EXIT``,
``GLMLAUNCH_STOP_GRACE``, ``GLMLAUNCH_LMCACHE_BIN``). Output: a :class:`ServePlan`; unless ``dry_run`` is
set, :func:`serve` then replaces the process with vLLM (exec, the command line's default) or runs it as a
supervised child (:mod:`glmlaunch.supervise`) and ends as vLLM ended. A profile with a managed LMCache
server (:mod:`glmlaunch.lmcache`) is supervised: the supervisor starts that server first.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, NoReturn, TypeVar, cast

from glmlaunch.config.environment import LaunchEnvironment, compose
from glmlaunch.config.executables import Executable
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
from glmlaunch.hardware.checks import CheckReport, group_memory
from glmlaunch.hardware.inventory import Inventory
from glmlaunch.launch.handoff import (
    EnvChange,
    LaunchSpec,
    env_changes,
    exec_vllm,
    locate_vllm,
    mask_argv,
    register_argv_secrets,
    require_vllm,
)
from glmlaunch.ledger.budget import Budget
from glmlaunch.ledger.inputs import UNCALIBRATED, LedgerInputs
from glmlaunch.ledger.verdict import Verdict
from glmlaunch.output import (
    is_quiet,
    mask_secrets,
    note,
    out_json,
    out_text,
    register_secrets,
    shell_quote,
    warn,
)
from glmlaunch.plan.check import check_report
from glmlaunch.plan.plan import Plan, checkpoint_for, make_plan

if TYPE_CHECKING:
    from glmlaunch.lmcache.stage import LmcachePlan
    from glmlaunch.preflight.api import PreflightRun
    from glmlaunch.preflight.report import PreflightReport

BACKENDS = ("auto", "sparkinfer", "b12x", "replay")
#: ``serve --dry-run --json``'s document version (docs/schemas/serve-dry-run.schema.json).
DRY_RUN_SCHEMA_VERSION = 1
#: the stages a dry run shows (its ``stages``), and the steps between them it does not show
StageName = Literal["resolve", "lmcache", "check", "plan", "preflight", "baseline"]
StepName = Literal["backend", "mode", "environment", "lmcache-mode", "calibration", "launch-spec"]
Mode = Literal["exec", "supervise"]
#: ok; note: nothing to act on in this run (a stage a dry run does not run, or what stops a launch but
#: which a planning machine may lack: the vllm executable); warn: the launch goes on, with something to
#: act on; error: the launch stops here, and a dry run exits with it
Status = Literal["ok", "note", "warn", "error"]
#: a stage as the dry run's document shows it
StageStatus = Literal["ok", "warn", "skipped", "failed"]

#: How long to wait, after the preflight's teardown, for the driver to hand GPU memory back.
BASELINE_WAIT_S = 15.0
BASELINE_POLL_S = 0.5

D = TypeVar("D")


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
    #: --fetch: missing weights are fetched in the preflight stage (glmlaunch.fetch), not refused
    fetch: bool = False
    #: --lmcache-bin: the executable of a managed LMCache server (else GLMLAUNCH_LMCACHE_BIN, PATH)
    lmcache_bin: str | None = None


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


# --- the record every stage returns -------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """A line a stage has for stderr, said by the loop (in a dry run too): a note or a warning."""

    level: Literal["note", "warn"]
    text: str

    def say(self) -> None:
        (warn if self.level == "warn" else note)(self.text)


@dataclass(frozen=True)
class StageRecord(Generic[D]):
    """What one stage found: its status, the error a launch stops with here, and its data."""

    stage: StageName | StepName
    status: Status
    #: what the stages after this one use (Prior.get finds it by its type)
    data: D
    detail: str = ""
    #: what a real launch stops with at this stage (status error, or note where a dry run need not stop)
    error: GlmlaunchError | None = None
    #: what the dry run itself stops with here where that is not ``error`` (a note for the dry run): the
    #: preflight's weights are missing (the launch's 10) and no GPU could run it (the dry run's 8)
    dry_error: GlmlaunchError | None = None
    #: False: the stage did not run (skipped), and ``detail`` says why
    ran: bool = True
    messages: tuple[Message, ...] = ()
    #: how a real launch reports this stage on stderr; None: not at all (its error line or its own
    #: report says it, or there is nothing to add)
    progress: Literal["note", "warn"] | None = "note"
    #: False: a step between the stages that the dry run does not show (an error it carries ends any run)
    shown: bool = True

    @property
    def shown_status(self) -> StageStatus:
        if not self.ran:
            return "skipped"
        if self.error is not None:
            return "failed"
        return "warn" if self.status == "warn" else "ok"

    @property
    def exit_code(self) -> int | None:
        """The code a real launch stops with at this stage (None: it goes on)."""
        return int(self.error.exit_code) if self.error is not None else None

    def line(self, *, dry_run: bool = True) -> str:
        who = "a real launch" if dry_run else "the launch"
        stop = f"; {who} stops here with exit {self.exit_code}" if self.exit_code is not None else ""
        return f"{self.stage} {self.shown_status}: {self.detail}{stop}"

    def to_json(self) -> dict[str, object]:
        return {
            "stage": self.stage,
            "status": self.shown_status,
            "detail": mask_secrets(self.detail),
            "exit_code": self.exit_code,
        }

    def blocking_json(self) -> dict[str, object]:
        assert self.error is not None
        return {
            "stage": self.stage,
            "exit_code": int(self.error.exit_code),
            "error": mask_secrets(self.error.one_line()),
        }


@dataclass(frozen=True)
class Prior:
    """What a stage gets: the command line, the caller's environment, and the records before it."""

    options: ServeOptions
    environ: Mapping[str, str]
    tool: ToolSettings
    records: tuple[StageRecord[Any], ...] = ()

    def get(self, kind: type[D]) -> D:
        """The data of type ``kind`` the latest stage before this one produced."""
        for record in reversed(self.records):
            if isinstance(record.data, kind):
                return record.data
        raise LookupError(f"no stage before this one produces a {kind.__name__} (see STAGES)")


Stage = Callable[[Prior], StageRecord[Any]]


# --- what the stages hand on ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    """The preflight's backend (--backend, GLMLAUNCH_BACKEND, auto)."""

    name: str


@dataclass(frozen=True)
class Resolution:
    resolved: Resolved
    vllm: Executable
    #: the configuration's warnings, one line each
    warnings: tuple[str, ...]

    @property
    def config(self) -> DeploymentConfig:
        return self.resolved.config


@dataclass(frozen=True)
class Environment:
    """The launch environment: the caller's plus every name the configuration manages."""

    launch: LaunchEnvironment
    #: the caller's variables the configuration replaces, one line each
    shadowed: tuple[str, ...]


@dataclass(frozen=True)
class LmcacheSide:
    """The LMCache server of the launch: managed, external, or None (``lmcache: false``)."""

    plan: LmcachePlan | None


@dataclass(frozen=True)
class Checked:
    report: CheckReport | None  # None: no GPU to check (a dry run goes on without)
    inventory: Inventory | None
    #: the plan the memory verdict row judged, on the GPUs' real memory (None: no memory was read)
    plan: Plan | None


@dataclass(frozen=True)
class Planned:
    #: the plan the plan stage judged: on the GPUs' real memory where the check read it
    plan: Plan


@dataclass(frozen=True)
class Preflighted:
    run: PreflightRun | None  # None: the preflight did not run
    report: PreflightReport | None


# --- the stages -----------------------------------------------------------------------------------------


def backend_step(prior: Prior) -> StageRecord[Backend]:
    backend = prior.options.backend or prior.tool.backend or "auto"
    if backend not in BACKENDS:
        raise ConfigError("unknown preflight backend", key="--backend", value=backend, allowed=BACKENDS)
    return StageRecord("backend", "ok", Backend(backend), progress=None, shown=False)


def mode_step(prior: Prior) -> StageRecord[LaunchMode]:
    return StageRecord("mode", "ok", launch_mode(prior.options, prior.tool), progress=None, shown=False)


def resolve_stage(prior: Prior) -> StageRecord[Resolution]:
    """The configuration (a configuration that does not resolve ends the run, dry or not) and vLLM."""
    options = prior.options
    resolved = resolve_config(options.profile, options.overrides, prior.environ)
    register_secrets(resolved.config.env)
    warnings = tuple(d.one_line() for d in resolved.warnings)
    messages = tuple(Message("warn", line) for line in warnings)
    try:
        reject_managed_flags(options.extra_args)
    except ConfigErrors:
        for message in messages:  # the run ends here: the configuration's warnings are said first
            message.say()
        raise
    vllm = locate_vllm(options.vllm_bin, prior.environ)
    data = Resolution(resolved, vllm, warnings)
    detail = f"profile {resolved.profile_name}"
    if vllm.path is None:
        try:
            require_vllm(vllm)
        except LaunchError as exc:
            # A planning machine need not have vLLM: a dry run notes it and shows the command, not exit 6.
            detail += f"; vllm: {vllm.problem} (from {vllm.source})"
            return StageRecord("resolve", "note", data, detail, exc, messages=messages, progress=None)
    return StageRecord("resolve", "ok", data, detail, messages=messages)


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


def environment_step(prior: Prior) -> StageRecord[Environment]:
    launch_env = compose(prior.get(Resolution).config, prior.environ)
    shadowed = tuple(s.message() for s in launch_env.shadowed)
    messages = tuple(Message("warn", line) for line in shadowed)
    return StageRecord(
        "environment", "ok", Environment(launch_env, shadowed), messages=messages, progress=None, shown=False
    )


def lmcache_stage(prior: Prior) -> StageRecord[LmcacheSide]:
    """The LMCache server (glmlaunch.lmcache.stage): its command, or the external one expected; a managed
    server's missing executable stops a launch with exit 6, and a dry run notes it (as vLLM's)."""
    from glmlaunch.lmcache.stage import plan_server

    options = prior.options
    plan = plan_server(
        prior.get(Resolution).config,
        prior.get(Environment).launch.full,
        lmcache_bin=options.lmcache_bin,
        environ=prior.environ,
    )
    if plan is None:
        return StageRecord("lmcache", "ok", LmcacheSide(None), "no LMCache", progress=None, shown=False)
    detail = plan.line()
    if plan.binary is not None and plan.binary.path is None:
        try:
            plan.require()
        except LaunchError as exc:
            detail += f"; lmcache: {plan.binary.problem} (from {plan.binary.source})"
            return StageRecord("lmcache", "note", LmcacheSide(plan), detail, exc, progress=None)
    return StageRecord("lmcache", "ok", LmcacheSide(plan), detail)


def lmcache_mode_step(prior: Prior) -> StageRecord[LaunchMode]:
    """A managed LMCache server is started and stopped by the supervisor: such a launch is supervised even
    where serve would exec (a note says why), and ``--exec`` is refused (nothing would supervise it)."""
    mode = prior.get(LaunchMode)
    plan = prior.get(LmcacheSide).plan
    if plan is None or plan.server != "managed" or mode.mode == "supervise":
        return StageRecord("lmcache-mode", "ok", mode, progress=None, shown=False)
    if prior.options.supervise is False:
        raise ConfigError(
            "cannot exec with a managed LMCache server: exec replaces glmlaunch with vLLM, and nothing would "
            "start, watch or stop the server",
            key="--exec",
            hint="drop --exec (serve then supervises), or start the server yourself and "
            "--set lmcache_config.server=external",
        )
    why = Message(
        "note",
        "serve: lmcache_config.server is managed: vLLM runs supervised, not exec'd (glmlaunch starts the "
        "LMCache server before vLLM and stops it after; exec would leave nobody to)",
    )
    supervised = replace(mode, mode="supervise", source="lmcache_config.server=managed")
    return StageRecord("lmcache-mode", "ok", supervised, messages=(why,), progress=None, shown=False)


def calibration_step(prior: Prior) -> StageRecord[Plan]:
    """Once per launch: the check's memory verdict, the plan stage and the preflight use the same terms
    (the plan of the profile's figures; the check budgets it again on the GPUs' memory). W is priced from
    the checkpoint on disk where vLLM will load it when nothing better is known (a look, no fetch: the
    weights check of the preflight stage fetches)."""
    config = prior.get(Resolution).config
    plan = make_plan(config, checkpoint=checkpoint_for(config, prior.environ))
    messages = (*(Message("warn", line) for line in plan.warnings), Message("note", plan.message))
    return StageRecord("calibration", "ok", plan, messages=messages, progress=None, shown=False)


def check_stage(prior: Prior) -> StageRecord[Checked]:
    """Hardware checks and the memory verdict on the GPUs vLLM will see (the launch environment's view):
    the plan budgeted on the memory of the TP group's tightest GPU."""
    from glmlaunch.hardware.probe import get_inventory

    resolution = prior.get(Resolution)
    config = resolution.config
    try:
        inv = get_inventory(prior.options.inventory, environ=prior.get(Environment).launch.full)
    except NoGpuError as exc:
        # A note for a dry run (issue 27: a planning machine has no GPU, like no vLLM): the record keeps
        # the launch's exit 8; a real launch raises it all the same.
        return StageRecord(
            "check", "note", Checked(None, None, None), "no GPU to check here", exc, ran=False, progress=None
        )
    plan = prior.get(Plan).on_memory(group_memory(config, inv))
    report = check_report(plan, inv, purpose="serve", profile=resolution.resolved.profile_name)
    counts = report.counts()
    failure: GlmlaunchError | None = None
    try:
        report.raise_for_status(strict=prior.tool.strict, strict_source=f"{GLMLAUNCH_STRICT}=1")
    except GlmlaunchError as exc:
        failure = exc
    messages: list[Message] = []
    for r in report.results:
        # The error line names the first failure of its class already: every other row is said once here.
        named = failure is not None and r.status == "FAIL" and f"{r.name}: {r.message}" in failure.message
        if r.status in ("WARN", "FAIL") and not named:
            messages.append(Message("warn", f"check {r.name}: {r.status}: {r.message}"))
    summary = (
        f"{len(report.results)} checks on GPUs {list(report.gpus)} of the {report.inventory}: "
        f"{counts['OK']} OK, {counts['WARN']} WARN, {counts['FAIL']} FAIL, {counts['SKIP']} SKIP"
    )
    status: Status = "error" if failure is not None else ("warn" if counts["WARN"] else "ok")
    measured = plan if plan.memory is not None else None
    return StageRecord(
        "check", status, Checked(report, inv, measured), summary, failure, messages=tuple(messages)
    )


def plan_budget_stage(prior: Prior) -> StageRecord[Planned]:
    """The plan's verdict: the one the check judged on real memory, else the profile's figures."""
    plan, basis = prior.get(Checked).plan, "the GPUs' real memory"
    messages: tuple[Message, ...] = ()
    if plan is None:
        plan = prior.get(Plan)
        basis = "the profile's hardware.memory_per_gpu (no GPU memory was read)"
        # Without a check stage no memory_verdict row carried the cautions: they are said here, once.
        messages = tuple(Message("warn", f"plan: {caution}") for caution in plan.budget.cautions)
    verdict = plan.verdict
    text = f"verdict {verdict.summary()}; from {basis}"
    data = Planned(plan)
    if not verdict.ok:
        error = MarginError(
            f"plan: {verdict.summary()}",
            hint="`glmlaunch plan` shows every entry; lower memory.gpu_memory_utilization or the pools",
        )
        return StageRecord("plan", "error", data, text, error, messages=messages, progress=None)
    return StageRecord("plan", "ok", data, text, messages=messages)


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


def preflight_stage(prior: Prior) -> StageRecord[Preflighted]:
    """The weights, then the preflight on the real GPUs; a dry run says what stops them here before they
    start. The weights check (glmlaunch.fetch.status) is skipped with the preflight, run by a dry run (it
    is a look at the disk, no hub), and a missing checkpoint is fetched first with ``--fetch``."""
    from glmlaunch.fetch.status import ensure_weights

    config = prior.get(Resolution).config
    skip = _skip_reason(prior.options, prior.tool)
    nothing = Preflighted(None, None)
    if skip is not None and skip != _DRY_RUN_SKIP:
        # skipping a real launch's preflight is worth a warning
        detail = f"{skip}; the weights on disk are not checked either"
        return StageRecord("preflight", "warn", nothing, detail, ran=False, progress="warn")
    weights = ensure_weights(
        prior.get(Resolution).resolved,
        caller_env=prior.environ,
        launch_env=prior.get(Environment).launch.full,
        fetch_missing=prior.options.fetch,
        dry_run=prior.options.dry_run,
        bars=not is_quiet() and sys.stderr.isatty(),
        say=note,
        warn=warn,
    )
    if skip is None:
        note(weights.line())  # now, not after the preflight: that takes a while
        record = preflight_on_gpus(config, prior.get(Backend).name, prior.get(Plan).inputs)
        return replace(record, detail=f"{record.detail}; {weights.line()}")
    forecast = preflight_forecast(config, prior.get(Environment).launch.full)
    parts = [skip, weights.line()]
    if forecast is not None:
        parts.append(f"a real launch runs it and stops: {forecast.message}")
    detail = "; ".join(parts)
    # no GPU at all is a note for a dry run, as in the check stage; a GPU count short of the plan is not
    stops_dry_run = forecast is not None and not isinstance(forecast, NoGpuError)
    if weights.error is None:
        if forecast is None:
            return StageRecord("preflight", "note", nothing, detail, ran=False)
        return StageRecord(
            "preflight", "error" if stops_dry_run else "note", nothing, detail, forecast, ran=False
        )
    # Missing weights are what a dry run is for (issue 27: a note, like a missing vLLM): the record carries
    # the launch's error, so would_start and exit_code say what the real launch would do (it checks the
    # weights before it starts the preflight); the dry run stops only for what it cannot forecast past.
    return StageRecord(
        "preflight",
        "note",
        nothing,
        detail,
        weights.error,
        ran=False,
        dry_error=forecast if stops_dry_run else None,
    )


def preflight_on_gpus(
    config: DeploymentConfig, backend: str, inputs: LedgerInputs = UNCALIBRATED
) -> StageRecord[Preflighted]:
    """Build the pools on the real GPUs and compare with the ledger (glmlaunch.preflight)."""
    from glmlaunch.preflight.api import run_preflight
    from glmlaunch.preflight.report import build_report, failure_error, render_text

    run = run_preflight(config, backend=cast(Any, backend), device="cuda", progress=note, inputs=inputs)
    report = build_report(run)
    data = Preflighted(run, report)
    # the report is the stage's progress on stderr: no line of its own
    said = (Message("note", render_text(report)),)
    error = failure_error(report, launching=True)
    detail = f"preflight passed ({run.backend.name} backend)" if error is None else report.verdict
    return StageRecord(
        "preflight", "ok" if error is None else "error", data, detail, error, messages=said, progress=None
    )


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


def baseline_stage(prior: Prior) -> StageRecord[None]:
    run = prior.get(Preflighted).run
    if run is None:
        return StageRecord(
            "baseline", "note", None, "no preflight ran, so no workers to wait for", ran=False, progress=None
        )
    return confirm_baseline(run, prior.get(Environment).launch.full)


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
) -> StageRecord[None]:
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
        error = PreflightError(
            "GPUs are not back at their pre-preflight baseline: " + "; ".join(problems),
            hint="vLLM was not started; find the holders with `glmlaunch hw` and stop them",
        )
        return StageRecord("baseline", "error", None, "; ".join(problems), error, progress=None)
    detail = f"preflight workers gone, free memory back on GPUs {[b.index for b in before]}"
    return StageRecord("baseline", "ok", None, detail)


def launch_spec_step(prior: Prior) -> StageRecord[LaunchSpec]:
    """Exactly what exec (or the supervisor) runs: the final argv, the environment and its changes."""
    resolution = prior.get(Resolution)
    launch_env = prior.get(Environment).launch
    vllm = resolution.vllm
    argv = full_argv(resolution.config, prior.options.extra_args, vllm_bin=vllm.path or vllm.requested)
    spec = LaunchSpec(
        argv=tuple(argv), env=dict(launch_env.full), env_changes=env_changes(launch_env, prior.environ)
    )
    return StageRecord("launch-spec", "ok", spec, progress=None, shown=False)


#: The stages in order: a new stage is one entry here (and its function); the data it needs comes from
#: the stages before it (``Prior.get``).
STAGES: tuple[Stage, ...] = (
    backend_step,
    mode_step,
    resolve_stage,
    environment_step,
    lmcache_stage,
    lmcache_mode_step,
    calibration_step,
    check_stage,
    plan_budget_stage,
    preflight_stage,
    baseline_stage,
    launch_spec_step,
)


# --- the one loop ---------------------------------------------------------------------------------------


def run_stages(options: ServeOptions, environ: Mapping[str, str]) -> Prior:
    """Every stage in order. A real launch raises the first error a record carries; a dry run records
    every stage and goes on, so that it can show the command and every problem. A stage that cannot
    hand on its data (a configuration that does not resolve) raises itself: nothing after it could run.
    """
    prior = Prior(options, environ, ToolSettings.from_environ(environ))
    for stage in STAGES:
        record = stage(prior)
        for message in record.messages:
            message.say()
        # A dry run prints its stages on stdout (they are its data); a real launch reports them as progress.
        if not options.dry_run and record.progress is not None:
            (warn if record.progress == "warn" else note)(record.line(dry_run=False))
        if record.error is not None and (not options.dry_run or not record.shown):
            raise record.error
        prior = replace(prior, records=(*prior.records, record))
    return prior


@dataclass(frozen=True)
class ServePlan:
    """Everything decided before the hand-off; printed by ``--dry-run``, executed otherwise."""

    profile: str
    spec: LaunchSpec
    vllm: Executable
    extra_args: tuple[str, ...]
    #: the stages a dry run shows, in order
    stages: tuple[StageRecord[Any], ...]
    shadowed: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    checks: CheckReport | None = None
    dry_run: bool = False
    mode: LaunchMode = LaunchMode("exec", "default")
    #: the plan the plan stage judged (on the GPUs' real memory where the check read it): what a supervised
    #: launch keeps (its configuration, budget and calibration) and its watch compares with
    plan: Plan | None = None
    inventory: Inventory | None = None
    preflight: PreflightReport | None = None
    #: the LMCache server: started by the supervisor (managed), expected running (external), or None
    lmcache: LmcachePlan | None = None

    @property
    def config(self) -> DeploymentConfig | None:
        return self.plan.config if self.plan is not None else None

    @property
    def budget(self) -> Budget | None:
        return self.plan.budget if self.plan is not None else None

    @property
    def verdict(self) -> Verdict | None:
        """The memory verdict of the plan stage (glmlaunch.ledger.verdict)."""
        return self.plan.verdict if self.plan is not None else None

    @property
    def calibration(self) -> str:
        """Which calibration the plan uses, in words (the skipped records left out)."""
        return self.plan.headline if self.plan is not None else ""

    @property
    def blocking(self) -> tuple[StageRecord[Any], ...]:
        """Every stage a real launch would stop at, in stage order (a dry run's only: a real launch
        raises at the first)."""
        return tuple(s for s in self.stages if s.error is not None)

    @property
    def failure(self) -> GlmlaunchError | None:
        """The error a real launch would stop with: the first blocking stage's."""
        return self.blocking[0].error if self.blocking else None

    @property
    def dry_run_failure(self) -> GlmlaunchError | None:
        """The error the dry run stops with: the first blocking stage's that is not a note."""
        for s in self.blocking:
            if s.dry_error is not None:
                return s.dry_error
            if s.status == "error":
                return s.error
        return None

    def to_json(self) -> dict[str, Any]:
        dry_failure = self.dry_run_failure
        return {
            "schema_version": DRY_RUN_SCHEMA_VERSION,
            "profile": self.profile,
            "dry_run": self.dry_run,
            "started": False,
            "would_start": self.failure is None,
            "mode": self.mode.to_json(),
            "exit_code": int(self.failure.exit_code) if self.failure is not None else 0,
            "dry_run_exit_code": int(dry_failure.exit_code) if dry_failure is not None else 0,
            "error": mask_secrets(self.failure.one_line()) if self.failure is not None else None,
            "blocking": [b.blocking_json() for b in self.blocking],
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
            "lmcache": self.lmcache.to_json() if self.lmcache is not None else None,
        }


def prepare(options: ServeOptions, environ: Mapping[str, str]) -> ServePlan:
    """Run every stage up to the hand-off (:func:`run_stages`) and return what would be executed."""
    register_secrets(environ)
    register_argv_secrets(options.extra_args)
    prior = run_stages(options, environ)
    resolution = prior.get(Resolution)
    checked = prior.get(Checked)
    planned = prior.get(Planned)
    return ServePlan(
        profile=resolution.resolved.profile_name,
        spec=prior.get(LaunchSpec),
        vllm=resolution.vllm,
        extra_args=options.extra_args,
        stages=tuple(r for r in prior.records if r.shown),
        shadowed=prior.get(Environment).shadowed,
        warnings=resolution.warnings,
        checks=checked.report,
        dry_run=options.dry_run,
        mode=prior.get(LaunchMode),
        plan=planned.plan,
        inventory=checked.inventory,
        preflight=prior.get(Preflighted).report,
        lmcache=prior.get(LmcacheSide).plan,
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
        from glmlaunch.watch.metrics import metrics_host

        metrics = f"{metrics_host(options.metrics_host)}:{options.metrics_port}"
    return LaunchMode(
        mode, source, strict_exit=strict, stop_grace_s=tool.stop_grace, watch=watch, metrics=metrics
    )


def serve(options: ServeOptions, environ: Mapping[str, str] | None = None) -> ServePlan:
    """Prepare the launch; with ``dry_run`` return it; otherwise hand the process to vLLM (exec) or
    supervise it and end as it ended (neither returns)."""
    env = dict(os.environ if environ is None else environ)
    plan = prepare(options, env)
    if options.dry_run:
        return plan
    if plan.lmcache is not None and plan.lmcache.server == "external":
        from glmlaunch.lmcache.stage import check_external

        check_external(plan.lmcache)
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
    from glmlaunch.watch.metrics import metrics_host

    assert plan.config is not None  # a real launch always resolved its configuration
    for change in plan.spec.env_changes:
        if change.change != "unchanged":
            note(f"env: {change.line()}")
    note(f"supervise: {plan.spec.command_line()}")
    budget = plan.budget
    watch = None
    if plan.mode.watch and plan.plan is not None and options is not None:
        watch = WatchSetup(
            plan=plan.plan,
            metrics_host=metrics_host(options.metrics_host),
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
            lmcache=plan.lmcache.command if plan.lmcache is not None else None,
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
            "preflight": plan.preflight.to_dict() if plan.preflight is not None else None,
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
    if plan.lmcache is not None and plan.lmcache.command is not None:
        lines.append(f"# lmcache command: {plan.lmcache.command.command_line()}")
    lines.append("# environment changes (the rest of the caller's environment is passed unchanged)")
    lines.extend(_env_line(c) for c in plan.spec.env_changes)
    if plan.blocking:
        first = plan.blocking[0]
        code = first.exit_code
        # the reason is the stage's line above (and the error line on stderr): not said a third time
        lines.append(f"# a launch would stop at the {first.stage} stage, exit {code}")
    lines.append("# command")
    lines.append(plan.spec.command_line())
    return "\n".join(lines)


def render(plan: ServePlan, *, as_json: bool) -> None:
    """Print a dry run (a real launch never returns here); then raise what the dry run stops with.

    A stopper that is a note (the vllm executable, which a planning machine need not have) is said as a
    note: the dry run still exits 0 for it, and its document keeps the launch's exit code."""
    if as_json:
        out_json(plan.to_json())
    else:
        out_text(dry_run_text(plan))
    for stage in plan.blocking:
        if stage.status == "note" and stage.error is not None:
            note(
                f"a launch would stop at the {stage.stage} stage with exit {stage.exit_code}: "
                f"{stage.error.one_line()}"
            )
    if plan.dry_run_failure is not None:
        raise plan.dry_run_failure


def validate_json_flag(*, as_json: bool, dry_run: bool) -> None:
    if as_json and not dry_run:
        raise ConfigError("--json describes a dry run", key="--json", hint="add --dry-run")
