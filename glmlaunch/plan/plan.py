"""The plan of one configuration: the one typed object every command, the preflight, serve and watch use.

:func:`make_plan` is the only place that chains the stages below it: the calibration (the term model
fitted on the stored records, ``glmlaunch.calibrate.apply``), the ledger built with those inputs, vLLM's
budget over it (on the measured device memory where the hardware was read) and the verdict. A
:class:`Plan` is frozen: what a command prints, a check row renders, serve judges and watch compares with
are the same figures.

The checkpoint's safetensors payload on disk is read where a command asks for a plan
(:func:`checkpoint_for`, with that command's environment) and given to :func:`make_plan` as a value, as the
measured device memory is: the plan carries it to the ledger in its inputs (W from it when nothing better
is known), and a fix or a search step planned from a plan's inputs keeps it without reading the disk again.

The runtime evidence of the stored serve logs (an OOM or a free-memory reading after ready of this very
configuration) is applied here: what it proves is a floor on the demand *relative to the plan's margin*,
so it needs the plan's own ledger and budget (``calibrate.apply.raise_by_evidence``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import format_size
from glmlaunch.errors import ConfigError
from glmlaunch.ledger import LIBRARY_CHOICES, build_ledger
from glmlaunch.ledger.budget import Budget, compute_budget
from glmlaunch.ledger.inputs import CheckpointOnDisk, LedgerInputs
from glmlaunch.ledger.model import Ledger
from glmlaunch.ledger.verdict import Verdict, judge

if TYPE_CHECKING:
    from glmlaunch.calibrate.apply import CalibrationUse
    from glmlaunch.calibrate.store import Store
    from glmlaunch.hardware.checks import MemoryInputs


@dataclass(frozen=True)
class Plan:
    """A configuration's ledger, budget and verdict, with the inputs they were computed from."""

    config: DeploymentConfig
    inputs: LedgerInputs
    ledger: Ledger
    budget: Budget
    verdict: Verdict
    #: the measured device memory the budget used (None: the profile's hardware.memory_per_gpu, nothing
    #: held by others)
    memory: MemoryInputs | None = None
    #: how the inputs were found: the records applied, the rig defaults or none, and what was skipped
    #: (None: the caller gave the inputs)
    calibration: CalibrationUse | None = None
    #: the records the calibration was looked up in (None: the cache's): a fix is calibrated from them too
    store: Store | None = None

    @property
    def message(self) -> str:
        """Which calibration the figures use, in words ("" when the caller gave the inputs)."""
        return self.calibration.message if self.calibration is not None else ""

    @property
    def headline(self) -> str:
        """:attr:`message` without the skipped records it names."""
        use = self.calibration
        return (use.headline or use.message) if use is not None else ""

    @property
    def warnings(self) -> tuple[str, ...]:
        """What reading the calibration records found wrong (corrupt or foreign files), and a checkpoint
        glmlaunch does not know (its W an estimate, with its band)."""
        from glmlaunch.ledger.weights import decide_for

        found = self.calibration.warnings if self.calibration is not None else ()
        unknown = decide_for(self.config, self.inputs).warning
        return (*found, unknown) if unknown else found

    def on_memory(self, memory: MemoryInputs | None) -> Plan:
        """This plan budgeted on measured device memory (None: the profile's): the same inputs and ledger,
        the budget and the verdict again."""
        if memory is None and self.memory is None:
            return self
        budget, verdict = _judged(self.config, self.ledger, memory)
        return _advice_checked(replace(self, memory=memory, budget=budget, verdict=verdict))

    def with_config(self, config: DeploymentConfig) -> Plan:
        """``config`` planned with this plan's inputs, memory and library: a fix or a search step."""
        return make_plan(config, memory=self.memory, inputs=self.inputs, library=self.ledger.library)


def check_library(library: str) -> str:
    if library not in LIBRARY_CHOICES:
        raise ConfigError("unknown library source", key="--library", value=library, allowed=LIBRARY_CHOICES)
    return library


def with_device_total(config: DeploymentConfig, total: int) -> DeploymentConfig:
    """``config`` on a device of ``total`` bytes: the KV entry is sized against T, so the ledger sees the
    same total as the budget."""
    return config.model_copy(
        update={"hardware": config.hardware.model_copy(update={"memory_per_gpu": total})}
    )


def checkpoint_for(config: DeploymentConfig, environ: Mapping[str, str]) -> CheckpointOnDisk | None:
    """``config``'s checkpoint as it is on disk where vLLM will load it: ``environ`` is the caller's
    environment (the profile's ``env:`` is composed over it, as for the launch, so the hub cache is
    vLLM's). A look at the disk (``glmlaunch.fetch.status.checkpoint_on_disk``); then, for a hub
    repository the documented weights table does not know and nothing on disk prices, the hub's file
    metadata (``glmlaunch.fetch.metadata.hub_checkpoint``: a short timeout, never under the caller's
    ``HF_HUB_OFFLINE``, kept in glmlaunch's cache so the next plan does not ask again)."""
    from glmlaunch.calibrate.store import cache_dir
    from glmlaunch.config.environment import compose
    from glmlaunch.fetch.status import checkpoint_on_disk
    from glmlaunch.ledger.weights import known

    launch_env = compose(config, environ).full
    found = checkpoint_on_disk(config, launch_env)
    if found is not None or known(config) or config.model.weights_per_rank is not None:
        return found
    from glmlaunch.fetch.metadata import hub_checkpoint  # the hub's file metadata: only when it is asked

    return hub_checkpoint(config, caller_env=environ, launch_env=launch_env, cache_dir=cache_dir(environ))


def make_plan(
    config: DeploymentConfig,
    *,
    memory: MemoryInputs | None = None,
    store: Store | None = None,
    inputs: LedgerInputs | None = None,
    checkpoint: CheckpointOnDisk | None = None,
    device_total: int | None = None,
    library: str = "builtin",
    check_advice: bool = True,
) -> Plan:
    """Calibrate, build the ledger, budget and judge ``config``.

    * ``memory``: the device memory the hardware check read on the tightest GPU (T and what others hold):
      the budget uses it; the ledger keeps the profile's ``hardware.memory_per_gpu``.
    * ``store``: the calibration records (default: the cache's); ignored when ``inputs`` are given.
    * ``inputs``: ledger inputs decided by the caller (a search step, a fix under a proven demand, a test):
      no calibration lookup. The checkpoint they carry (a plan's own inputs) is kept.
    * ``checkpoint``: the checkpoint found on disk (:func:`checkpoint_for`, read by the caller): W is
      priced from its safetensors payload when no explicit, calibrated or documented figure is known.
      None: the inputs' own (none, without ``inputs``).
    * ``device_total``: plan for a device of this many bytes (``plan --gpu-memory``, the GPUs ``watch``
      reads): ledger and budget both; the calibration is fitted for ``config`` as given.
    * ``library``: where layouts come from (``builtin``, ``b12x``, ``auto``).
    * ``check_advice``: plan the recommended pool pin and ``--kv-cache-memory-bytes`` and drop each
      where it does not keep the plan (``budget.dropped_advice`` says why); off for those plans.
    """
    library = check_library(library)
    use = None
    if inputs is None:
        use = _calibrate(config, store, checkpoint)
        inputs = use.inputs
    elif checkpoint is not None:
        inputs = replace(inputs, checkpoint=checkpoint)
    planned = config if device_total is None else with_device_total(config, device_total)
    ledger = build_ledger(planned, inputs, library=library)
    budget, verdict = _judged(planned, ledger, memory)
    plan = Plan(planned, inputs, ledger, budget, verdict, memory, use, store)
    return _advice_checked(plan) if check_advice else plan


def pinned_config(config: DeploymentConfig, blocks: int, context: int) -> DeploymentConfig:
    """``config`` with the pool pinned at ``blocks`` and, where they hold less, the context they hold."""
    from glmlaunch.calibrate.apply import _with

    pinned = _with(config, "memory.num_gpu_blocks_override", blocks)
    if context < config.scheduler.max_model_len:
        return _with(pinned, "scheduler.max_model_len", context)
    return pinned


def _advice_checked(plan: Plan) -> Plan:
    """``plan`` without a recommendation that would not keep it. The budget sizes the pool pin and
    ``--kv-cache-memory-bytes`` from this configuration's terms, but vLLM checks one max_model_len request
    against a fixed pool, a shorter context moves the terms (the profile run's workspaces, the calibration of
    that shape) and no pool lifts the start gate or the load: advice vLLM would refuse is no advice. So each
    is planned, unless it cannot change what the plan's own verdict rests on."""
    b = plan.budget
    dropped: list[str] = []
    blocks, kv_bytes = b.recommended_num_gpu_blocks, b.recommended_kv_cache_memory_bytes
    if blocks is not None:
        pinned = pinned_config(plan.config, blocks, b.recommended_context_tokens)
        trivial = plan.verdict.ok and pinned.scheduler == plan.config.scheduler
        blocked = None if trivial else _blocked(plan, pinned)
        if blocked is not None:
            blocks = None
            pin = f"memory.num_gpu_blocks_override={b.recommended_num_gpu_blocks}"
            dropped.append(f"{pin}, planned, is blocked by {blocked}")
    if kv_bytes is not None:
        from glmlaunch.calibrate.apply import _with

        unpinned = _with(plan.config, "memory.num_gpu_blocks_override", None)
        fixed = _with(unpinned, "memory.kv_cache_memory_bytes", kv_bytes)
        trivial = plan.verdict.ok and kv_bytes >= b.request_bytes
        blocked = None if trivial else _blocked(plan, fixed)
        if blocked is not None:
            kv_bytes_given = f"{kv_bytes} ({format_size(kv_bytes)})"
            kv_bytes = None
            dropped.append(f"--kv-cache-memory-bytes={kv_bytes_given}, planned, is blocked by {blocked}")
    if not dropped:
        return plan
    budget = b._replace(
        recommended_num_gpu_blocks=blocks,
        recommended_context_tokens=b.recommended_context_tokens if blocks is not None else 0,
        recommended_kv_cache_memory_bytes=kv_bytes,
        dropped_advice=tuple(dropped),
    )
    return replace(plan, budget=budget, verdict=judge(plan.config, plan.ledger, budget))


def _blocked(plan: Plan, config: DeploymentConfig) -> str | None:
    """What blocks ``config``, planned as ``plan`` was (None: it plans ok)."""
    if config == plan.config:
        verdict = plan.verdict
    else:
        verdict = make_plan(
            config,
            memory=plan.memory,
            store=plan.store,
            inputs=None if plan.calibration is not None else plan.inputs,
            checkpoint=plan.inputs.checkpoint,
            library=plan.ledger.library,
            check_advice=False,
        ).verdict
    if verdict.ok:
        return None
    return verdict.blocker.message if verdict.blocker is not None else f"its verdict {verdict.status}"


def _judged(config: DeploymentConfig, ledger: Ledger, memory: MemoryInputs | None) -> tuple[Budget, Verdict]:
    budget = compute_budget(
        config,
        ledger,
        total_bytes=memory.total_bytes if memory is not None else None,
        used_by_others=memory.used_by_others if memory is not None else 0,
    )
    return budget, judge(config, ledger, budget)


def _calibrate(
    config: DeploymentConfig, store: Store | None, checkpoint: CheckpointOnDisk | None
) -> CalibrationUse:
    from glmlaunch.calibrate.apply import calibration_for, raise_by_evidence

    use = calibration_for(config, store=store)
    if checkpoint is not None:
        # before the evidence: what it proves is read against the plan's own W
        use = replace(use, inputs=replace(use.inputs, checkpoint=checkpoint))
    if not use.evidence:
        return use
    # the evidence is read against the plan of the configuration as calibrated (its own T)
    ledger = build_ledger(config, use.inputs)
    raised = raise_by_evidence(ledger, compute_budget(config, ledger), use.evidence)
    if raised is None:
        return use
    inputs, said = raised
    return replace(use, inputs=inputs, message=f"{use.message}; {said}")
