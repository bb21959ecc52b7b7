"""Predicted vs measured, per allocation and per rank, and the preflight's verdict.

Comparison unit: the set of ledger entries one or more measured steps realise (a library call often
makes several entries at once: a one-shot channel is an IPC slab plus a torch ``rank_data``). Measured
device bytes are drops of ``cudaMemGetInfo`` free memory, synchronised, right around each step.

Tolerance, per compared group: ``2 MiB x IPC instances + 20 MiB if any torch entry + 1 % of predicted``.
Why: the driver commits 2 MiB pages but sub-allocates small slabs inside a chunk it already committed
(the first small cudaMalloc costs a page, later ones often nothing), so each IPC instance can read one
page more or less than its own rounding; the torch caching allocator packs requests of [1, 10) MiB into
shared 20 MiB segments (two 8 MiB ``rank_data`` share one), so a torch entry can cost a whole segment
or nothing depending on what came before it; 1 % absorbs rounding of large arenas. A model that is
wrong by more than one page per slab or one segment per group is wrong, not unlucky.

Exit: a worker failure, a leak, or a disagreement beyond tolerance -> PREFLIGHT (5); a margin below
``memory.min_margin`` -> MARGIN (4); SIGINT/SIGTERM -> INTERRUPTED (130).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from glmlaunch.config.units import MIB, format_size
from glmlaunch.errors import ExitCode, GlmlaunchError, MarginError, PreflightError
from glmlaunch.ledger.budget import compute_budget
from glmlaunch.ledger.model import Entry
from glmlaunch.output import err_console, out_json, out_text
from glmlaunch.preflight.api import PreflightRun
from glmlaunch.preflight.types import RankResult, StepRecord

PAGE = 2 * MIB
SEGMENT = 20 * MIB
#: ``preflight --json``'s document version (docs/schemas/preflight.schema.json).
SCHEMA_VERSION = 1


class PreflightInterrupted(GlmlaunchError):
    exit_code = ExitCode.INTERRUPTED


@dataclass(frozen=True)
class Comparison:
    label: str
    entries: tuple[str, ...]
    kinds: tuple[str, ...]
    predicted_requested: int
    predicted_device: int
    measured_requested: int
    measured_device: tuple[int | None, ...]  # per rank
    tolerance: int
    within: bool | None  # None: nothing measured (CPU mode) or nothing predicted

    @property
    def worst_delta(self) -> int | None:
        vals = [m - self.predicted_device for m in self.measured_device if m is not None]
        return max(vals, key=abs) if vals else None


@dataclass(frozen=True)
class RankSummary:
    rank: int
    status: str
    context_bytes: int | None
    nccl_bytes: int | None
    f0_bytes: int | None
    total_bytes: int | None
    measured_steps_bytes: int | None
    predicted_steps_bytes: int
    residue_after_close: int | None


@dataclass(frozen=True)
class PreflightReport:
    backend: str
    backend_reason: str
    device_mode: str
    world_size: int
    machine: dict[str, Any]
    phases: dict[str, float]
    wall_s: float
    build: dict[str, Any]
    comparisons: tuple[Comparison, ...]
    measured_only: tuple[dict[str, Any], ...]
    ranks: tuple[RankSummary, ...]
    margin: dict[str, Any]
    root_cause: str | None
    root_cause_detail: str | None
    failures: tuple[str, ...]
    leaks: tuple[str, ...]
    notes: tuple[str, ...]
    verdict: str
    exit_code: int
    #: every rank's raw result: phase timings, memory marks, and each measured step
    results: tuple[dict[str, Any], ...] = ()
    #: the workers' directory (results, rank logs) when the run kept it: only a failed run does
    workdir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}


def _tolerance(entries: list[Entry], predicted: int) -> int:
    ipc_instances = sum(e.count for e in entries if e.kind == "ipc")
    torch_like = any(e.kind in ("torch", "workspace", "transient") for e in entries)
    return PAGE * ipc_instances + (SEGMENT if torch_like else 0) + predicted // 100


def _groups(results: list[RankResult]) -> list[tuple[frozenset[str], list[str]]]:
    """Merge step cover-sets that share an entry, so every entry is compared exactly once."""
    sets: list[set[str]] = []
    labels: list[list[str]] = []
    for res in results:
        for step in res.steps:
            if not step.covers:
                continue
            cover = set(step.covers)
            hit = [i for i, s in enumerate(sets) if s & cover]
            if not hit:
                sets.append(cover)
                labels.append([step.name])
                continue
            first = hit[0]
            sets[first] |= cover
            if step.name not in labels[first]:
                labels[first].append(step.name)
            for i in reversed(hit[1:]):
                sets[first] |= sets.pop(i)
                labels[first].extend(n for n in labels.pop(i) if n not in labels[first])
    return [(frozenset(s), lab) for s, lab in zip(sets, labels, strict=True)]


def _steps_for(res: RankResult, cover: frozenset[str]) -> list[StepRecord]:
    return [s for s in res.steps if s.covers and set(s.covers) <= cover]


def compare(run: PreflightRun) -> tuple[list[Comparison], list[dict[str, Any]]]:
    results = [r for r in run.outcome.results if r is not None]
    comparisons: list[Comparison] = []
    for cover, labels in _groups(results):
        entries = [e for e in run.ledger.rank0.entries if e.name in cover]
        predicted_dev = sum(e.device_bytes for e in entries)
        predicted_req = sum(e.total_requested for e in entries)
        measured: list[int | None] = []
        requested = 0
        for res in results:
            steps = _steps_for(res, cover)
            vals = [s.device_bytes for s in steps]
            known = [v for v in vals if v is not None]
            measured.append(sum(known) if vals and len(known) == len(vals) else None)
            if res.rank == results[0].rank:
                requested = sum(s.requested_bytes for s in steps)
        tol = _tolerance(entries, predicted_dev)
        within: bool | None = None
        if entries and any(m is not None for m in measured):
            within = all(abs(m - predicted_dev) <= tol for m in measured if m is not None)
        comparisons.append(
            Comparison(
                label=" + ".join(labels),
                entries=tuple(sorted(cover)),
                kinds=tuple(sorted({e.kind for e in entries})),
                predicted_requested=predicted_req,
                predicted_device=predicted_dev,
                measured_requested=requested,
                measured_device=tuple(measured),
                tolerance=tol,
                within=within,
            )
        )
    measured_only: list[dict[str, Any]] = []
    if results:
        for step in results[0].steps:
            if step.covers:
                continue
            measured_only.append(
                {
                    "step": step.name,
                    "note": step.note,
                    "device_bytes": [
                        next((s.device_bytes for s in r.steps if s.name == step.name), None) for r in results
                    ],
                    "torch_reserved_bytes": step.torch_reserved_bytes,
                }
            )
    return comparisons, measured_only


def _rank_summary(res: RankResult, comparisons: list[Comparison], index: int) -> RankSummary:
    mem = res.memory
    nccl_parts = [mem.get("nccl_tp_bytes"), mem.get("nccl_dcp_bytes")]
    nccl = sum(v for v in nccl_parts if v is not None) if mem.get("nccl_tp_bytes") is not None else None
    steps = [s.device_bytes for s in res.steps]
    measured = None if any(v is None for v in steps) else sum(v for v in steps if v is not None)
    base, after = mem.get("free_baseline"), mem.get("free_after_close")
    return RankSummary(
        rank=res.rank,
        status=res.status,
        context_bytes=mem.get("context_bytes"),
        nccl_bytes=nccl,
        f0_bytes=mem.get("f0_free"),
        total_bytes=mem.get("total"),
        measured_steps_bytes=measured,
        predicted_steps_bytes=sum(c.predicted_device for c in comparisons),
        residue_after_close=None if base is None or after is None else base - after,
    )


def _margin(run: PreflightRun, ranks: list[RankSummary]) -> dict[str, Any]:
    """The budget model of ``plan`` on the measured card: T and F0 measured, the rest from the ledger."""
    cfg = run.config
    measured = [r for r in ranks if r.f0_bytes is not None and r.total_bytes is not None]
    out: dict[str, Any] = {"min_margin": cfg.memory.min_margin}
    if not measured:
        out["status"] = "not measured (CPU device mode)"
        return out
    worst = min(measured, key=lambda r: r.f0_bytes or 0)
    total = worst.total_bytes or 0
    f0 = worst.f0_bytes or 0
    out.update(total_bytes=total, f0_bytes=f0, u_pre_plus_others=total - f0)
    budget = compute_budget(cfg, run.ledger, total_bytes=total, used_by_others=0)
    out["budget"] = budget._asdict()
    # The budget's U_pre is modelled; replace it with what this card measured.
    measured_margin = budget.margin - (budget.f0 - f0)
    out.update(predicted_f0_bytes=budget.f0, margin_bytes=measured_margin,
               status="ok" if measured_margin >= cfg.memory.min_margin else "below minimum")
    return out


def build_report(run: PreflightRun) -> PreflightReport:
    outcome = run.outcome
    results = [r for r in outcome.results if r is not None]
    comparisons, measured_only = compare(run)
    ranks = [_rank_summary(r, comparisons, i) for i, r in enumerate(results)]
    margin = _margin(run, ranks)
    notes = [*run.notes, *sorted({n for r in results for n in r.notes})]
    root = outcome.root_cause
    device = results[0].device if results else {}
    machine = {
        "gpu": device.get("name"),
        "capability": device.get("capability"),
        "driver": run.driver,
        "torch": device.get("torch"),
        "torch_cuda": device.get("torch_cuda"),
        "gpus_visible": len(run.before),
    }
    disagree = [c for c in comparisons if c.within is False]
    if outcome.interrupted is not None:
        verdict, code = "interrupted", ExitCode.INTERRUPTED
    elif root is not None or run.leaks:
        verdict, code = "preflight failed", ExitCode.PREFLIGHT
    elif disagree:
        verdict, code = "measured and predicted disagree", ExitCode.PREFLIGHT
    elif margin.get("status") == "below minimum":
        verdict, code = "margin below minimum", ExitCode.MARGIN
    else:
        verdict, code = "ok", ExitCode.OK
    return PreflightReport(
        backend=run.backend.name,
        backend_reason=run.backend.reason,
        device_mode=run.device_mode,
        world_size=run.config.parallel.tp,
        machine=machine,
        phases=outcome.phase_wall,
        wall_s=outcome.wall_s,
        build=results[0].build if results else {},
        comparisons=tuple(comparisons),
        measured_only=tuple(measured_only),
        ranks=tuple(ranks),
        margin=margin,
        root_cause=root.line() if root else None,
        root_cause_detail=(root.traceback or None) if root else None,
        failures=tuple(f.line() for f in outcome.failures),
        leaks=run.leaks,
        notes=tuple(notes),
        verdict=verdict,
        exit_code=int(code),
        results=tuple(r.to_dict() for r in results),
        workdir=outcome.workdir if outcome.workdir_kept else None,
    )


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MIB:.1f}"


def render_text(report: PreflightReport) -> str:
    lines = [
        f"preflight: {report.backend} backend ({report.backend_reason}); {report.device_mode}, "
        f"{report.world_size} rank(s)",
    ]
    if report.machine.get("gpu"):
        m = report.machine
        lines.append(f"machine: {m['gpu']} sm{m['capability']}, driver {m['driver']}, torch {m['torch']}")
    lines.append("phases (s, slowest rank): " + ", ".join(f"{k} {v:.2f}" for k, v in report.phases.items())
                 + f"; wall {report.wall_s:.2f}")
    if report.build.get("backend") == "sparkinfer":
        b = report.build
        lines.append(f"library build: {'cold' if b.get('cold') else 'warm'} {b.get('seconds', 0):.1f} s "
                     f"({b.get('extensions_dir')})")
    header = (f"{'allocation':<44} {'kind':<14} {'req MiB':>9} {'pred MiB':>9} "
              f"{'meas MiB (per rank)':>22} {'tol':>6}  ok")
    lines += ["", header, "-" * len(header)]
    for c in report.comparisons:
        meas = "/".join(_mib(m) for m in c.measured_device)
        ok = "-" if c.within is None else ("yes" if c.within else "NO")
        lines.append(f"{c.label[:44]:<44} {','.join(c.kinds)[:14]:<14} {_mib(c.predicted_requested):>9} "
                     f"{_mib(c.predicted_device):>9} {meas:>22} {_mib(c.tolerance):>6}  {ok}")
    for m in report.measured_only:
        meas = "/".join(_mib(v) for v in m["device_bytes"])
        lines.append(f"{m['step'][:44]:<44} {'(not in ledger)':<14} {'':>9} {'':>9} {meas:>22} {'':>6}  -")
    lines.append("")
    for r in report.ranks:
        lines.append(
            f"rank {r.rank}: {r.status}; context {_mib(r.context_bytes)} MiB, NCCL {_mib(r.nccl_bytes)} MiB, "
            f"steps {_mib(r.measured_steps_bytes)} MiB (predicted {_mib(r.predicted_steps_bytes)}), "
            f"F0 {_mib(r.f0_bytes)} of {_mib(r.total_bytes)} MiB, "
            f"after close {_mib(r.residue_after_close)} MiB"
        )
    mg = report.margin
    if "margin_bytes" in mg:
        lines.append(f"margin: {format_size(mg['margin_bytes'])} (minimum {format_size(mg['min_margin'])}): "
                     f"{mg['status']}")
    else:
        lines.append(f"margin: {mg.get('status')}")
    for n in report.notes:
        lines.append(f"note: {n}")
    for leak in report.leaks:
        lines.append(f"LEAK: {leak}")
    if report.root_cause:
        lines.append(f"root cause (first failure): {report.root_cause}")
    lines.append(f"verdict: {report.verdict}")
    return "\n".join(lines)


def failure_error(report: PreflightReport, *, launching: bool = False) -> GlmlaunchError | None:
    """The error the report's exit code stands for (None when it passed); it names the kept directory.
    ``launching``: the preflight ran as ``serve``'s stage, so the error says that vLLM was not started."""
    code = ExitCode(report.exit_code)
    if code == ExitCode.OK:
        return None
    stopped = "; vLLM was not started" if launching else ""
    # The one line that says where the failed run's rank logs are (the directory is kept for them).
    kept = f"the workers' results and logs are kept in {report.workdir}" if report.workdir else None
    message = report.root_cause or report.verdict
    if code == ExitCode.INTERRUPTED:
        return PreflightInterrupted(
            f"preflight interrupted: {message}; every worker was torn down{stopped}", hint=kept
        )
    if code == ExitCode.MARGIN:
        return MarginError(
            f"preflight: {report.verdict}{stopped}",
            hint="lower gpu_memory_utilization or the pools" + (f"; {kept}" if kept else ""),
        )
    if report.comparisons and not report.root_cause and not report.leaks:
        bad = [c.label for c in report.comparisons if c.within is False]
        return PreflightError(
            f"preflight: measured and predicted disagree beyond tolerance for {', '.join(bad)}{stopped}",
            hint=kept,
        )
    return PreflightError(f"preflight failed: {message}{stopped}", hint=kept)


def render(report: PreflightReport, *, as_json: bool) -> None:
    """Print the report (JSON on stdout, or the table on stdout) and raise the verdict's error."""
    if as_json:
        out_json(report.to_dict())
    else:
        out_text(render_text(report))
    if report.root_cause_detail and not as_json:
        err_console.print(report.root_cause_detail, markup=False, highlight=False)
    error = failure_error(report)
    if error is not None:
        raise error
