"""``glmlaunch preflight``: choose a backend, run the workers, check NVML, and build the report.

Inputs: a resolved :class:`~glmlaunch.config.schema.DeploymentConfig`, the backend choice, the device mode,
per-phase limits and an optional injected fault. Side effects: NVML probes (``glmlaunch.hardware.probe``)
before and after, worker processes (``launcher.launch``). Output: a frozen :class:`PreflightRun` that
``report.py`` turns into the verdict. Raises ``NoGpuError`` / ``HardwareError`` when the device mode
cannot run here.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from glmlaunch.config.registry import CUDA_HOME, managed_env
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.errors import ConfigError, HardwareError, NoGpuError
from glmlaunch.ledger.channels import stream_family
from glmlaunch.ledger.constants import for_stack
from glmlaunch.ledger.inputs import UNCALIBRATED, LedgerInputs
from glmlaunch.ledger.model import Ledger
from glmlaunch.plan.plan import Plan, make_plan
from glmlaunch.preflight.launcher import LaunchOutcome, LaunchRequest, launch
from glmlaunch.preflight.types import (
    DEFAULT_PHASE_LIMITS,
    PHASES,
    BackendName,
    DeviceMode,
    FaultSpec,
    PlannedAllocation,
)

BackendChoice = Literal["auto", "sparkinfer", "b12x", "replay"]
REPLAYED_KINDS = frozenset({"ipc", "torch", "workspace", "transient"})
#: NVML free memory after teardown may move by the driver's own bookkeeping; more than this is a leak.
LEAK_SLACK_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class BackendDecision:
    name: BackendName
    reason: str


@dataclass(frozen=True)
class GpuSnapshot:
    index: int
    name: str | None
    free_bytes: int | None
    used_bytes: int | None
    pids: tuple[int, ...]


@dataclass(frozen=True)
class PreflightRun:
    #: what the workers built and are compared with: the plan of the configuration, its ledger from the
    #: library the backend runs (b12x's layouts for the b12x backend)
    plan: Plan
    backend: BackendDecision
    device_mode: DeviceMode
    outcome: LaunchOutcome
    before: tuple[GpuSnapshot, ...]
    after: tuple[GpuSnapshot, ...]
    driver: str | None
    leaks: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def config(self) -> DeploymentConfig:
        return self.plan.config

    @property
    def ledger(self) -> Ledger:
        return self.plan.ledger


def parse_timeouts(items: list[str]) -> dict[str, float]:
    """``30`` sets every phase but ``build``; ``build=600`` sets one phase."""
    limits = dict(DEFAULT_PHASE_LIMITS)
    for item in items:
        key, sep, value = item.partition("=")
        try:
            seconds = float(value if sep else key)
        except ValueError:
            raise ConfigError("not a number of seconds", key="--timeout", value=item,
                              hint="write 30 or build=600") from None
        if seconds <= 0:
            raise ConfigError("a time limit must be positive", key="--timeout", value=item)
        if not sep:
            limits.update({p: seconds for p in PHASES if p != "build"})
        elif key in PHASES:
            limits[key] = seconds
        else:
            raise ConfigError("unknown phase", key="--timeout", value=key, allowed=list(PHASES))
    return limits


def planned_allocations(ledger: Ledger, rank: int = 0) -> tuple[PlannedAllocation, ...]:
    """The ledger entries a worker can allocate (context, NCCL, weights and KV are measured or skipped)."""
    out = []
    for e in ledger.ranks[rank].entries:
        if e.kind not in REPLAYED_KINDS or e.lifetime == "budget-term":
            continue
        group: Literal["tp", "dcp"] = "dcp" if e.subsystem.startswith(("dcp", "topk")) else "tp"
        out.append(
            PlannedAllocation(
                name=e.name,
                kind=e.kind,  # type: ignore[arg-type]
                lifetime=e.lifetime,
                requested_bytes=e.requested_bytes,
                count=e.count,
                predicted_device_bytes=e.device_bytes,
                group=group,
                stream=stream_family(e.name),
            )
        )
    return tuple(out)


def choose_backend(
    choice: BackendChoice, config: DeploymentConfig, device_mode: DeviceMode, capability: str | None
) -> BackendDecision:
    """``auto``: the library of the profile's stack when it can run here, else ``replay`` (and why)."""
    if choice != "auto":
        if choice == "sparkinfer" and device_mode == "cpu":
            raise ConfigError("the sparkinfer backend needs GPUs", key="--backend", value=choice,
                              hint="use --backend replay with --device cpu")
        return BackendDecision(choice, "chosen with --backend")
    if device_mode == "cpu":
        return BackendDecision("replay", "CPU device mode: no library pool can be built without GPUs")
    if config.stack.startswith("sparkinfer-"):
        if importlib.util.find_spec("sparkinfer") is None:
            return BackendDecision(
                "replay", f"stack {config.stack} but the sparkinfer package is not importable"
            )
        if shutil.which("nvcc") is None and not os.environ.get(CUDA_HOME):
            return BackendDecision(
                "replay", "sparkinfer JIT-builds its pools with nvcc, which is not on PATH"
            )
        return BackendDecision("sparkinfer", f"stack {config.stack} and sparkinfer + nvcc are available")
    if importlib.util.find_spec("b12x") is None:
        return BackendDecision("replay", f"stack {config.stack} but the b12x package is not importable")
    wanted = for_stack(config.stack).tree.pypi
    installed = _b12x_version()
    if wanted is not None and wanted != f"b12x=={installed}":
        return BackendDecision(
            "replay", f"stack {config.stack} is {wanted}, but the installed b12x is {installed}"
        )
    if capability is not None and not capability.startswith("12."):
        return BackendDecision("replay", f"b12x kernels target sm120/sm121; these GPUs are sm{capability}")
    return BackendDecision("b12x", f"stack {config.stack} and b12x {installed} is importable on sm12x")


def _b12x_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("b12x")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _snapshot(environ: Mapping[str, str]) -> tuple[tuple[GpuSnapshot, ...], str | None, str | None]:
    from glmlaunch.hardware.probe import probe

    inv = probe(environ=environ)
    snaps = tuple(
        GpuSnapshot(g.index, g.name, g.memory_free, g.memory_used, tuple(p.pid for p in g.processes))
        for g in inv.gpus
    )
    capability = inv.gpus[0].compute_capability if inv.gpus else None
    return snaps, inv.driver_version, capability


def run_preflight(
    config: DeploymentConfig,
    *,
    backend: BackendChoice = "auto",
    device: DeviceMode = "cuda",
    limits: Mapping[str, float] | None = None,
    fault: FaultSpec | None = None,
    progress: Callable[[str], None] | None = None,
    inputs: LedgerInputs = UNCALIBRATED,
) -> PreflightRun:
    """Run the workers for ``config``, planned with ``inputs`` (the calibration a plan found: a matching
    record or the rig defaults replace the ledger's defaults)."""
    if importlib.util.find_spec("torch") is None:
        # Said before any worker starts: otherwise every rank dies in its imports and the report calls a
        # missing dependency a worker failure.
        raise ConfigError(
            "the preflight workers need torch, which this Python cannot import",
            key="torch",
            value=sys.executable,
            hint="install it: pip install 'glmlaunch[gpu]', or run glmlaunch from vLLM's environment",
        )
    world = config.parallel.tp
    env = managed_env(config)
    child_environ = {**os.environ, **env}
    before: tuple[GpuSnapshot, ...] = ()
    driver = capability = None
    if device == "cuda":
        try:
            before, driver, capability = _snapshot(child_environ)
        except NoGpuError as exc:
            raise NoGpuError(exc.message, hint="the preflight needs the deployment's GPUs; "
                             "`--device cpu` runs the same sequence on CPU as a dry run") from None
        if len(before) < world:
            raise HardwareError(
                f"parallel.tp is {world} but {len(before)} GPU(s) are visible",
                key="parallel.tp",
                value=world,
                hint=f"scale the deployment to this machine: --set parallel.tp={len(before)} "
                f"--set parallel.dcp={min(config.parallel.dcp, len(before))}",
            )
    decision = choose_backend(backend, config, device, capability)
    notes: list[str] = []
    # The b12x backend sizes the indexer arenas with b12x's own planner (plan_indexer_scratch, run on the
    # CPU in this process), through the ledger's bridge to the installed library.
    library = "b12x" if decision.name == "b12x" else "builtin"
    plan = make_plan(config, inputs=inputs, library=library)
    ledger = plan.ledger
    if library == "b12x":
        notes.append("predictions, and the indexer arenas the workers allocate, come from the installed "
                     "b12x (constants, layouts, plan_indexer_scratch)")
    request = LaunchRequest(
        world_size=world,
        device_mode=device,
        backend=decision.name,
        config=config.model_dump(mode="json"),
        allocations=planned_allocations(ledger),
        env=env,
        phase_limits=dict(limits or DEFAULT_PHASE_LIMITS),
        fault=fault,
        free_before=tuple(s.free_bytes for s in before[:world]),
    )
    if progress:
        progress(f"backend: {decision.name} ({decision.reason})")
    outcome = launch(request, progress)
    after: tuple[GpuSnapshot, ...] = ()
    leaks: list[str] = []
    if device == "cuda":
        after, _, _ = _snapshot(child_environ)
        leaks = _leaks(before[:world], after[:world], outcome)
    for pid in outcome.survivors:
        leaks.append(f"worker process group {pid} is still alive after teardown")
    return PreflightRun(
        plan=plan,
        backend=decision,
        device_mode=device,
        outcome=outcome,
        before=before,
        after=after,
        driver=driver,
        leaks=tuple(leaks),
        notes=tuple(notes),
    )


def _leaks(
    before: tuple[GpuSnapshot, ...], after: tuple[GpuSnapshot, ...], outcome: LaunchOutcome
) -> list[str]:
    ours = {r.pid for r in outcome.results if r is not None}
    out = []
    for b, a in zip(before, after, strict=False):
        held = ours.intersection(a.pids)
        if held:
            out.append(f"GPU {a.index}: worker pid(s) {sorted(held)} still hold memory")
        lost = None if b.free_bytes is None or a.free_bytes is None else b.free_bytes - a.free_bytes
        if lost is not None and lost > LEAK_SLACK_BYTES:
            out.append(
                f"GPU {a.index}: {lost / 2**20:.0f} MiB less free than before the "
                "preflight"
            )
    return out


def result_dicts(run: PreflightRun) -> list[dict[str, Any] | None]:
    return [r.to_dict() if r is not None else None for r in run.outcome.results]
