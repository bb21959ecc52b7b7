"""Hardware checks: a resolved configuration against an inventory, as data.

Input: a :class:`~glmlaunch.config.schema.DeploymentConfig`, an
:class:`~glmlaunch.hardware.inventory.Inventory`
(probed or loaded from a file) and a purpose: ``serve`` (the deployment will run here) or
``preflight`` (only the memory / communication preflight will run here, e.g. on a non-target GPU).
Output: one :class:`CheckResult` per check (:func:`hardware_checks`) and the memory facts of the group's
tightest GPU (:func:`memory_inputs`), which the plan budgets with; ``glmlaunch.plan.check`` adds the memory
verdict row from that plan and makes the :class:`CheckReport`. Findings never raise. The report
decides the exit code (README "Exit codes"): any hardware FAIL -> 3, else a memory-verdict FAIL -> 4,
else warnings with ``strict`` -> 7, else 0.

The checks only look at the TP group: the configured ``parallel.gpus`` or, when unset, the first
``tp`` visible GPUs. Nothing here talks to NVML.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from glmlaunch.config.schema import DeploymentConfig, Stack
from glmlaunch.config.units import MIB, format_size
from glmlaunch.errors import ExitCode, HardwareError, MarginError, StrictWarningsError
from glmlaunch.hardware.inventory import Gpu, GpuPair, Inventory

Status = Literal["OK", "WARN", "FAIL", "SKIP"]
#: ``check --json``'s document version (docs/schemas/check.schema.json).
CHECK_SCHEMA_VERSION = 1
Purpose = Literal["serve", "preflight"]
PURPOSES: tuple[Purpose, ...] = ("serve", "preflight")

#: Compute capabilities the kernels of each library stack are built for (docs/configuration.md §4).
STACK_CAPABILITIES: dict[Stack, tuple[str, ...]] = {
    "sparkinfer-r14": ("12.0", "12.1"),
    "sparkinfer-r28": ("12.0", "12.1"),
    "b12x-r29": ("12.0", "12.1"),
    "b12x-r32": ("12.0", "12.1"),
    "b12x-ii": ("12.0", "12.1"),
    "b12x-1.5": ("12.0", "12.1"),
}

#: Relative difference between the real and the profile's memory total that still counts as "the same
#: card" (the RTX PRO 6000 reports 94.97-95.01 GiB usable depending on driver and ECC).
MEMORY_TOTAL_TOLERANCE = 0.01

#: Memory NVML reports as used on an idle GPU without any process (driver bookkeeping).
IDLE_USED_BYTES = 256 * MIB

#: P-states at or above this are idle; an idle GPU trains its PCIe link down to save power.
IDLE_PSTATE = 8


class CheckResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    status: Status
    message: str
    details: dict[str, JsonValue] = Field(default_factory=dict)
    #: the exit code a FAIL of this check maps to.
    fail_code: ExitCode = ExitCode.HARDWARE


class CheckReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: str
    purpose: Purpose
    inventory: str
    gpus: tuple[int, ...]
    results: tuple[CheckResult, ...]
    # Which calibration the memory verdict uses, in words (part of the report, as in plan's header).
    calibration: str = ""

    def by_name(self, name: str) -> CheckResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)

    def counts(self) -> dict[Status, int]:
        out: dict[Status, int] = {"OK": 0, "WARN": 0, "FAIL": 0, "SKIP": 0}
        for r in self.results:
            out[r.status] += 1
        return out

    def exit_code(self, *, strict: bool = False) -> ExitCode:
        failed = [r for r in self.results if r.status == "FAIL"]
        if failed:
            return min(r.fail_code for r in failed)
        if strict and any(r.status == "WARN" for r in self.results):
            return ExitCode.WARNINGS
        return ExitCode.OK

    def warned(self) -> list[str]:
        return [r.name for r in self.results if r.status == "WARN"]

    def verdict(self) -> dict[str, JsonValue] | None:
        """The memory verdict (glmlaunch.ledger.verdict) behind the ``memory_verdict`` row, as JSON."""
        try:
            doc = self.by_name("memory_verdict").details.get("verdict")
        except KeyError:
            return None
        return doc if isinstance(doc, dict) else None

    def to_json(self, *, strict: bool = False) -> dict[str, Any]:
        """One document: ``schema_version`` first (docs/schemas/check.schema.json)."""
        code = self.exit_code(strict=strict)
        return {
            "schema_version": CHECK_SCHEMA_VERSION,
            **self.model_dump(mode="json"),
            "verdict": self.verdict(),
            "summary": {**self.counts(), "strict": strict, "exit_code": int(code)},
        }

    def raise_for_status(self, *, strict: bool = False, strict_source: str = "--strict") -> None:
        """Raise what the report's exit code stands for; ``strict_source`` names what made warnings fail
        (``--strict``, or ``GLMLAUNCH_STRICT=1`` for commands without the flag, such as ``serve``)."""
        code = self.exit_code(strict=strict)
        if code == ExitCode.OK:
            return
        if code == ExitCode.WARNINGS:
            names = self.warned()
            raise StrictWarningsError(
                f"{len(names)} check(s) warned and {strict_source} makes warnings fail: {', '.join(names)}"
            )
        failed = [r for r in self.results if r.status == "FAIL" and r.fail_code == code]
        first = f"{failed[0].name}: {failed[0].message}"
        if code == ExitCode.MARGIN:
            raise MarginError(first)
        if len(failed) == 1:
            raise HardwareError(f"hardware check failed: {first}")
        failed_names = ", ".join(r.name for r in failed)
        raise HardwareError(f"{len(failed)} hardware checks failed ({failed_names}); first: {first}")


# --- the TP group -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuGroup:
    """The GPUs the deployment will use, and what is wrong with the choice."""

    indices: tuple[int, ...]
    gpus: tuple[Gpu, ...]
    missing: tuple[int, ...]
    configured: bool


def select_group(config: DeploymentConfig, inv: Inventory) -> GpuGroup:
    """``parallel.gpus`` when set (physical indices, PCI bus order), else the first ``tp`` visible GPUs."""
    tp = config.parallel.tp
    if config.parallel.gpus is not None:
        wanted = tuple(config.parallel.gpus)
        present = tuple(g for i in wanted if (g := inv.gpu(i)) is not None)
        missing = tuple(i for i in wanted if inv.gpu(i) is None)
        return GpuGroup(wanted, present, missing, True)
    chosen = inv.gpus[:tp]
    return GpuGroup(tuple(g.index for g in chosen), chosen, (), False)


# --- helpers ------------------------------------------------------------------------------------


def _r(
    name: str,
    status: Status,
    message: str,
    details: dict[str, Any] | None = None,
    fail_code: ExitCode = ExitCode.HARDWARE,
) -> CheckResult:
    return CheckResult(name=name, status=status, message=message, details=details or {}, fail_code=fail_code)


def _gib(n: float) -> str:
    return format_size(n)


def version_tuple(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.strip().split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def version_at_least(have: str, need: str) -> bool:
    a, b = version_tuple(have), version_tuple(need)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


# --- the checks ---------------------------------------------------------------------------------


def check_gpu_count(config: DeploymentConfig, inv: Inventory, group: GpuGroup) -> CheckResult:
    tp = config.parallel.tp
    visible = list(inv.visible_indices)
    details = {
        "tp": tp,
        "visible": visible,
        "group": list(group.indices),
        "host_gpu_count": inv.host_gpu_count,
    }
    if group.missing:
        why = (
            f"hidden by CUDA_VISIBLE_DEVICES={inv.cuda_visible_devices}"
            if inv.cuda_visible_devices is not None
            else f"the host has {inv.host_gpu_count}"
        )
        listed = ", ".join(str(i) for i in group.missing)
        return _r(
            "gpu_count", "FAIL", f"parallel.gpus names GPU {listed}, which is not visible ({why})", details
        )
    if len(group.indices) < tp:
        return _r(
            "gpu_count", "FAIL", f"tp={tp} needs {tp} GPUs; {len(visible)} visible ({visible})", details
        )
    return _r("gpu_count", "OK", f"{len(visible)} visible, using {list(group.indices)} for tp={tp}", details)


def check_gpu_probe(inv: Inventory, group: GpuGroup) -> CheckResult:
    unreadable = [g for g in group.gpus if not g.readable]
    mig = [g for g in group.gpus if g.mig_enabled]
    partial = {f"GPU {g.index}": [f"{e.field}: {e.error}" for e in g.errors] for g in group.gpus if g.errors}
    details: dict[str, Any] = {"nvml_errors": partial}
    if unreadable:
        what = "; ".join(
            f"GPU {g.index}: " + ", ".join(f"{e.field}: {e.error}" for e in g.errors) for g in unreadable
        )
        return _r("gpu_probe", "FAIL", f"NVML cannot read {what}", details)
    if mig:
        listed = ", ".join(str(g.index) for g in mig)
        return _r(
            "gpu_probe",
            "FAIL",
            f"MIG mode is on for GPU {listed}; the deployment needs whole GPUs",
            details,
        )
    if partial:
        n = sum(len(v) for v in partial.values())
        return _r("gpu_probe", "OK", f"all GPUs readable ({n} optional NVML field(s) unavailable)", details)
    return _r("gpu_probe", "OK", "all GPUs readable", details)


def check_gpu_model(config: DeploymentConfig, group: GpuGroup) -> CheckResult:
    hw = config.hardware
    names = sorted({g.name for g in group.gpus if g.name})
    sms = sorted({n for g in group.gpus if (n := g.sm_count) is not None})
    details: dict[str, Any] = {
        "expected": hw.gpu_model,
        "found": names,
        "expected_sms": hw.num_sms,
        "found_sms": sms,
    }
    if not group.gpus:
        return _r("gpu_model", "SKIP", "no GPU in the group", details)
    problems: list[str] = []
    if len(names) > 1:
        problems.append(f"mixed models {names}")
    elif names and names[0] != hw.gpu_model:
        problems.append(f"{names[0]}, not the profile's {hw.gpu_model}")
    if sms and sms != [hw.num_sms]:
        problems.append(f"{'/'.join(map(str, sms))} SMs, profile sizes the fused indexer for {hw.num_sms}")
    if problems:
        return _r("gpu_model", "WARN", "; ".join(problems), details)
    sm_text = f", {sms[0]} SMs" if sms else ""
    return _r("gpu_model", "OK", f"{names[0] if names else '?'}{sm_text}", details)


def check_compute_capability(config: DeploymentConfig, group: GpuGroup, purpose: Purpose) -> CheckResult:
    targets = STACK_CAPABILITIES[config.stack]
    found = {str(g.index): g.compute_capability for g in group.gpus}
    details: dict[str, Any] = {"stack": config.stack, "kernel_targets": list(targets), "found": found}
    unknown = [i for i, cc in found.items() if cc is None]
    off = sorted({cc for cc in found.values() if cc is not None and cc not in targets})
    if not group.gpus:
        return _r("compute_capability", "SKIP", "no GPU in the group", details)
    target_text = "/".join("sm" + t.replace(".", "") for t in targets)
    if off:
        have = "/".join("sm" + cc.replace(".", "") for cc in off)
        if purpose == "serve":
            return _r(
                "compute_capability",
                "FAIL",
                f"{have}: the {config.stack} kernels target {target_text} only; serving cannot run here",
                details,
            )
        return _r(
            "compute_capability",
            "WARN",
            f"{have} is not a kernel target ({target_text}): the preflight can measure allocations, page and "
            "segment rounding, IPC/NCCL setup and collectives here, but cannot prove that the sm12x kernels "
            "run, their workspace sizes on the target, or PCIe timings",
            details,
        )
    if unknown:
        listed = ", ".join(unknown)
        return _r("compute_capability", "WARN", f"unknown for GPU {listed} (NVML error)", details)
    cc = next(iter(found.values()))
    return _r(
        "compute_capability",
        "OK",
        f"sm{cc.replace('.', '') if cc else '?'} is a {config.stack} target",
        details,
    )


def check_driver(config: DeploymentConfig, inv: Inventory) -> CheckResult:
    need_driver, need_cuda = config.hardware.min_driver, config.hardware.min_cuda
    details: dict[str, Any] = {
        "driver": inv.driver_version,
        "cuda": inv.cuda_driver_version,
        "min_driver": need_driver,
        "min_cuda": need_cuda,
    }
    if need_driver is None and need_cuda is None:
        have = f"driver {inv.driver_version or '?'}, CUDA {inv.cuda_driver_version or '?'}"
        return _r(
            "driver", "SKIP", f"{have}; the profile sets no minimum (hardware.min_driver/min_cuda)", details
        )
    problems: list[str] = []
    unknown: list[str] = []
    for label, found, need in (
        ("driver", inv.driver_version, need_driver),
        ("CUDA", inv.cuda_driver_version, need_cuda),
    ):
        if need is None:
            continue
        if found is None:
            unknown.append(label)
        elif not version_at_least(found, need):
            problems.append(f"{label} {found} < required {need}")
    if problems:
        return _r("driver", "FAIL", "; ".join(problems) + "; upgrade the NVIDIA driver", details)
    if unknown:
        return _r("driver", "WARN", f"NVML did not report the {' and '.join(unknown)} version", details)
    return _r(
        "driver",
        "OK",
        f"driver {inv.driver_version or '?'}, CUDA {inv.cuda_driver_version} meet the minimum",
        details,
    )


def check_memory_total(config: DeploymentConfig, group: GpuGroup) -> CheckResult:
    expected = config.hardware.memory_per_gpu
    totals = {str(g.index): g.usable_total for g in group.gpus}
    details: dict[str, Any] = {"expected_bytes": expected, "usable_bytes": totals}
    known = {i: t for i, t in totals.items() if t is not None}
    if not known:
        return _r("memory_total", "SKIP", "NVML did not report memory totals", details)
    smallest = min(known.values())
    rel = (smallest - expected) / expected
    if rel < -MEMORY_TOTAL_TOLERANCE:
        return _r(
            "memory_total",
            "FAIL",
            f"{_gib(smallest)} usable per GPU, the profile is sized for {_gib(expected)} "
            "(hardware.memory_per_gpu)",
            details,
        )
    if rel > MEMORY_TOTAL_TOLERANCE:
        return _r(
            "memory_total",
            "WARN",
            f"{_gib(smallest)} usable per GPU, the profile assumes {_gib(expected)}: GMU "
            f"{config.memory.gpu_memory_utilization} of the real total changes every budget figure",
            details,
        )
    return _r("memory_total", "OK", f"{_gib(smallest)} usable per GPU (profile {_gib(expected)})", details)


def _proc_text(g: Gpu) -> str:
    return ", ".join(
        f"pid {p.pid} {p.name or '(unnamed)'} {_gib(p.used_bytes) if p.used_bytes is not None else '?'}"
        for p in g.processes
    )


def check_free_memory(
    config: DeploymentConfig, group: GpuGroup, *, pre_snapshot_bytes: int = 0
) -> CheckResult:
    """vLLM refuses to start unless free >= ceil(GMU * total) after its own pre-snapshot allocations."""
    gmu = config.memory.gpu_memory_utilization
    short: list[str] = []
    tenants: list[str] = []
    anonymous: list[str] = []
    per_gpu: dict[str, Any] = {}
    for g in group.gpus:
        total = g.usable_total
        if total is None or g.memory_free is None:
            per_gpu[str(g.index)] = None
            continue
        need = math.ceil(gmu * total) + pre_snapshot_bytes
        named = sum(p.used_bytes or 0 for p in g.processes)
        unnamed = (g.memory_used or 0) - named
        per_gpu[str(g.index)] = {
            "free": g.memory_free,
            "needed": need,
            "processes": [p.model_dump(mode="json") for p in g.processes],
            "unattributed_used": max(unnamed, 0),
        }
        if g.memory_free < need:
            short.append(f"GPU {g.index} has {_gib(g.memory_free)} free, needs {_gib(need)}")
        if g.processes:
            tenants.append(f"GPU {g.index}: {_proc_text(g)}")
        elif unnamed > IDLE_USED_BYTES:
            anonymous.append(f"GPU {g.index}: {_gib(unnamed)} used by processes NVML cannot name")
    details: dict[str, Any] = {
        "gpu_memory_utilization": gmu,
        "pre_snapshot_bytes": pre_snapshot_bytes,
        "gpus": per_gpu,
    }
    holders = "; ".join(tenants + anonymous)
    if short:
        msg = "; ".join(short) + " (vLLM's start gate: free >= GMU x total + pre-snapshot)"
        if holders:
            msg += f"; held by {holders}"
        return _r("free_memory", "FAIL", msg, details)
    if holders:
        return _r("free_memory", "WARN", f"co-tenants hold memory: {holders}", details)
    if not per_gpu or all(v is None for v in per_gpu.values()):
        return _r("free_memory", "SKIP", "NVML did not report free memory", details)
    return _r("free_memory", "OK", f"no co-tenants; free memory passes GMU {gmu}", details)


def _group_pairs(
    inv: Inventory, group: GpuGroup
) -> tuple[list[tuple[int, int]], dict[tuple[int, int], GpuPair]]:
    idx = sorted(g.index for g in group.gpus)
    wanted = [(a, b) for i, a in enumerate(idx) for b in idx[i + 1 :]]
    have = {(p.a, p.b): p for p in inv.pairs_within(idx)}
    return wanted, have


def check_p2p(inv: Inventory, group: GpuGroup) -> CheckResult:
    wanted, have = _group_pairs(inv, group)
    if not wanted:
        return _r("p2p", "SKIP", "one GPU: no peer-to-peer traffic")
    bad: list[str] = []
    no_atomics: list[str] = []
    matrix: dict[str, Any] = {}
    for a, b in wanted:
        pair = have.get((a, b))
        if pair is None:
            bad.append(f"{a}<->{b} unknown")
            matrix[f"{a}-{b}"] = None
            continue
        matrix[f"{a}-{b}"] = {"forward": pair.forward.model_dump(), "reverse": pair.reverse.model_dump()}
        problems: dict[str, set[str]] = {}
        for src, dst, caps in ((a, b, pair.forward), (b, a, pair.reverse)):
            for cap in ("read", "write"):
                state = getattr(caps, cap)
                if state != "ok":
                    problems.setdefault(state or "unknown", set()).add(f"{src}->{dst} {cap}")
            if caps.atomics != "ok":
                no_atomics.append(f"{src}->{dst}")
        for state, where in problems.items():
            both_ways = len(where) == 4
            bad.append(f"{a}<->{b} {state}" if both_ways else f"{', '.join(sorted(where))} {state}")
    details: dict[str, Any] = {"pairs": matrix, "no_atomics": no_atomics}
    if bad:
        return _r(
            "p2p",
            "FAIL",
            "the driver reports no P2P for " + "; ".join(bad) + " (the IPC comm pools need peer access)",
            details,
        )
    note = f"; atomics unavailable on {len(no_atomics)} direction(s)" if no_atomics else ""
    return _r(
        "p2p",
        "OK",
        f"driver reports P2P read/write for all {len(wanted)} pair(s){note} — a capability answer, not a "
        "data-path test (the preflight exercises it)",
        details,
    )


def check_topology(config: DeploymentConfig, inv: Inventory, group: GpuGroup) -> CheckResult:
    wanted, have = _group_pairs(inv, group)
    if not wanted:
        return _r("topology", "SKIP", "one GPU: no topology to check")
    labels: dict[str, str] = {}
    sys_pairs: list[str] = []
    unknown: list[str] = []
    for a, b in wanted:
        pair = have.get((a, b))
        label = pair.topology_label if pair is not None else "?"
        labels[f"{a}-{b}"] = label
        if pair is None or pair.topology is None:
            unknown.append(f"{a}-{b}")
        elif pair.topology == "system" and not (pair.forward.nvlink == "ok" and pair.reverse.nvlink == "ok"):
            sys_pairs.append(f"{a}-{b}")
    depth = config.dcp_policy.ckv_prefetch_depth
    details: dict[str, Any] = {"pairs": labels, "ckv_prefetch_depth": depth, "dcp": config.parallel.dcp}
    if sys_pairs:
        msg = f"SYS (across CPU sockets) between GPU {', '.join(sys_pairs)}: CKV prefetch is unsafe there"
        if depth and config.parallel.dcp > 1:
            return _r(
                "topology",
                "FAIL",
                f"{msg}, but dcp_policy.ckv_prefetch_depth={depth}",
                details,
            )
        # Nothing to change: the profile already keeps prefetch off, so a warning would only nag.
        if config.parallel.dcp <= 1:
            why = "DCP 1 runs no CKV prefetch"
        elif depth == 0:
            why = "dcp_policy.ckv_prefetch_depth is 0, so none runs"
        else:
            why = "dcp_policy.ckv_prefetch_depth is unset: the library's topology-aware default applies"
        return _r("topology", "OK", f"{msg}; {why}: nothing to change", details)
    if unknown:
        return _r("topology", "WARN", f"NVML did not report the topology of {', '.join(unknown)}", details)
    worst = sorted(set(labels.values()))
    return _r("topology", "OK", f"no SYS path inside the group ({'/'.join(worst)})", details)


def check_pcie_link(config: DeploymentConfig, group: GpuGroup) -> CheckResult:
    want_gen, want_width = config.hardware.pcie_generation, config.hardware.pcie_width
    degraded: list[str] = []
    limited: list[str] = []
    idle_notes: list[str] = []
    unknown: list[int] = []
    links: dict[str, Any] = {}
    for g in group.gpus:
        p = g.pcie
        links[str(g.index)] = {**p.model_dump(), "performance_state": g.performance_state}
        if None in (p.current_generation, p.max_generation, p.current_width, p.max_width):
            unknown.append(g.index)
            continue
        assert p.current_generation is not None and p.max_generation is not None
        assert p.current_width is not None and p.max_width is not None
        if p.current_width < p.max_width:
            degraded.append(f"GPU {g.index} runs x{p.current_width} of x{p.max_width}")
        if p.current_generation < p.max_generation:
            text = f"GPU {g.index} runs Gen{p.current_generation} of Gen{p.max_generation}"
            if g.performance_state is not None and g.performance_state >= IDLE_PSTATE:
                idle_notes.append(f"{text} while idle (P{g.performance_state})")
            else:
                degraded.append(text)
        if p.max_generation < want_gen or p.max_width < want_width:
            limited.append(f"GPU {g.index} tops out at Gen{p.max_generation} x{p.max_width}")
    details: dict[str, Any] = {"expected": f"Gen{want_gen} x{want_width}", "links": links, "idle": idle_notes}
    if degraded or limited:
        parts = degraded + [f"{t} (profile expects Gen{want_gen} x{want_width})" for t in limited]
        return _r(
            "pcie_link",
            "WARN",
            "; ".join(parts) + ": all-reduce and DMA bandwidth drop; reseat the card or check the slot/riser",
            details,
        )
    if unknown:
        return _r("pcie_link", "WARN", f"NVML did not report the PCIe link of GPU {unknown}", details)
    msg = "links at their maximum"
    if idle_notes:
        msg += "; " + "; ".join(idle_notes) + " (idle GPUs train down; normal)"
    return _r("pcie_link", "OK", msg, details)


def check_bar1(group: GpuGroup) -> CheckResult:
    small: dict[tuple[int, int], list[str]] = {}
    sizes: dict[str, int | None] = {}
    for g in group.gpus:
        sizes[str(g.index)] = g.bar1_total
        if g.bar1_total is not None and g.usable_total is not None and g.bar1_total < g.usable_total:
            small.setdefault((g.bar1_total, g.usable_total), []).append(str(g.index))
    details: dict[str, Any] = {"bar1_bytes": sizes}
    if small:
        text = "; ".join(
            f"GPU {','.join(idx)}: BAR1 {_gib(bar)} < {_gib(mem)} of memory"
            for (bar, mem), idx in small.items()
        )
        return _r(
            "bar1",
            "WARN",
            f"{text}: peers map IPC slabs through BAR1; enable Resizable BAR / large BAR in the BIOS",
            details,
        )
    if not any(v is not None for v in sizes.values()):
        return _r("bar1", "SKIP", "NVML did not report BAR1", details)
    return _r("bar1", "OK", "BAR1 covers device memory", details)


# --- the memory facts the plan budgets with -----------------------------------------------------


@dataclass(frozen=True)
class MemoryInputs:
    """The real memory facts the budget is computed with, from the group's tightest GPU."""

    total_bytes: int  # T: what cudaMemGetInfo reports as total (NVML total - reserved)
    used_by_others: int  # U_oth: memory already in use on that GPU before launch
    gpu: int


def memory_inputs(group: GpuGroup) -> MemoryInputs | None:
    """The GPU of the group with the least memory left for this deployment (T - U_oth)."""
    best: MemoryInputs | None = None
    for g in group.gpus:
        total = g.usable_total
        if total is None:
            continue
        used = g.memory_used if g.memory_used is not None else 0
        if g.memory_free is not None:
            used = max(used, total - g.memory_free)
        cand = MemoryInputs(total_bytes=total, used_by_others=used, gpu=g.index)
        if best is None or cand.total_bytes - cand.used_by_others < best.total_bytes - best.used_by_others:
            best = cand
    return best


def group_memory(config: DeploymentConfig, inv: Inventory) -> MemoryInputs | None:
    """:func:`memory_inputs` of ``config``'s TP group in ``inv`` (None: NVML reported no memory)."""
    return memory_inputs(select_group(config, inv))


# --- all of them --------------------------------------------------------------------------------


def hardware_checks(
    config: DeploymentConfig, inv: Inventory, *, purpose: Purpose = "serve", pre_snapshot_bytes: int = 0
) -> tuple[CheckResult, ...]:
    """Every hardware check, in a fixed order, on the TP group of ``config`` in ``inv``.

    ``pre_snapshot_bytes``: what the plan allocates before vLLM's free-memory snapshot (its U_pre), which
    the start gate of ``free_memory`` adds. The memory verdict row is the plan's
    (``glmlaunch.plan.check``): it comes last.
    """
    group = select_group(config, inv)
    return (
        check_gpu_count(config, inv, group),
        check_gpu_probe(inv, group),
        check_gpu_model(config, group),
        check_compute_capability(config, group, purpose),
        check_driver(config, inv),
        check_memory_total(config, group),
        check_free_memory(config, group, pre_snapshot_bytes=pre_snapshot_bytes),
        check_p2p(inv, group),
        check_topology(config, inv, group),
        check_pcie_link(config, group),
        check_bar1(group),
    )
