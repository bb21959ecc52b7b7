"""How a supervised boot ended, in one line from its log; and, at ready, the plan next to the boot.

:func:`classify` turns the exit status, the timeline and what the log said into an outcome kind and one
line, in this order of evidence:

1. ``refused``: vLLM's own refusal, with its numbers (the KV cache cannot hold one ``max_model_len``
   request; no memory for KV blocks; the start gate F0 < GMU x T);
2. ``oom``: a CUDA out-of-memory, with the allocation that failed and the process it failed in;
3. ``hung``: a phase ran past its expected time before vLLM was stopped or died;
4. ``failed``: the first exception a process wrote before ready (a worker's traceback), or after ready
   when vLLM then exited non-zero;
5. ``engine-error``: vLLM exited 0 although its engine logged a fatal error (vllm issue 48966);
6. ``killed``: vLLM died by a signal;
7. ``served``: it reached ready and exited 0; ``exited``: anything else (the code and the phase).

``lmcache-failed`` is the supervisor's own (:mod:`.session`): the managed LMCache server was not ready, or
died while vLLM ran; it takes precedence over what vLLM's stop then looked like.

:func:`plan_vs_boot` is the block printed when vLLM is ready: W, P, N, G_e, T - F0 and the KV tokens,
as the plan stage predicted them and as this boot logged them (worst rank), and the calibration the
plan used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from glmlaunch.config.units import GIB, format_size
from glmlaunch.supervise.process import signal_name
from glmlaunch.supervise.stream import Finding, FindingKind
from glmlaunch.supervise.timeline import Timeline, fmt_seconds
from glmlaunch.vllmlog.events import CAPACITY_AS_PRINTED_RE, TRIED_AS_PRINTED_RE

if TYPE_CHECKING:
    from glmlaunch.calibrate.records import Calibration
    from glmlaunch.vllmlog.boot import BootLog, Refusal

OutcomeKind = Literal[
    "served", "refused", "oom", "hung", "failed", "engine-error", "killed", "exited", "lmcache-failed"
]


@dataclass(frozen=True)
class Verdict:
    kind: OutcomeKind
    diagnosis: str


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.2f} GiB"


def refusal_line(refusal: Refusal) -> str:
    if refusal.kind == "kv-too-small":
        mml = f"{refusal.max_model_len:,}" if refusal.max_model_len else "max_model_len"
        est = (
            f" (vLLM's estimated maximum model length {refusal.estimated_max_model_len:,})"
            if refusal.estimated_max_model_len
            else ""
        )
        return (
            f"vLLM refused to start: one {mml}-token request needs {_gib(refusal.kv_needed_bytes)} of KV "
            f"cache, {_gib(refusal.kv_available_bytes)} available{est}"
        )
    if refusal.kind == "start-gate":
        return (
            f"vLLM refused to start: free memory {_gib(refusal.free_bytes)} of {_gib(refusal.total_bytes)} "
            f"on startup is below GMU {refusal.gpu_memory_utilization} x T = {_gib(refusal.requested_bytes)}"
        )
    return "vLLM refused to start: " + " ".join(refusal.message.split())[:240]


def first_refusal(boot: BootLog) -> Refusal | None:
    for ref in (
        *boot.engine.refusals,
        *(r for o in boot.ranks for r in o.refusals),
        *boot.unattributed_refusals,
    ):
        return ref
    return None


def oom_line(finding: Finding) -> str:
    where = f" in {finding.process}" if finding.process else ""
    alloc = TRIED_AS_PRINTED_RE.search(finding.text)
    free = CAPACITY_AS_PRINTED_RE.search(finding.text)
    if alloc is None:
        return f"CUDA out of memory{where}: {finding.text}"
    text = f"CUDA out of memory{where}: tried to allocate {alloc.group(1)}"
    if free is not None:
        text += f" on GPU {free.group(1)} ({free.group(3)} free of {free.group(2)})"
    return text


def _by(finding: Finding) -> str:
    return f"{finding.process}: " if finding.process else ""


def _phase_at_end(timeline: Timeline, ready: bool) -> str:
    if ready:
        return "after ready"
    where = timeline.current()
    return f"during {where[0]}" if where is not None else "before ready"


def classify(
    *,
    code: int | None,
    sig: int | None,
    ready: bool,
    timeline: Timeline,
    findings: Mapping[FindingKind, Finding],
    boot: BootLog | None,
    stopped_by: str | None,
) -> Verdict:
    """The outcome and its one-line diagnosis (see the module docstring for the order of evidence)."""
    how = f"killed by signal {sig} ({signal_name(sig)})" if sig is not None else f"exited {code}"
    when = _phase_at_end(timeline, ready)
    stop = f" after {stopped_by}" if stopped_by else ""
    refusal = first_refusal(boot) if boot is not None and not ready else None
    if refusal is not None:
        return Verdict("refused", refusal_line(refusal))
    oom = findings.get("oom")
    if oom is not None and (not ready or oom.after_ready):
        return Verdict("oom", oom_line(oom))
    if timeline.hung and not ready:
        phase, spent = next(iter(timeline.hung.items()))
        limit = timeline.expected_s.get(phase)
        bound = f" (expected at most {fmt_seconds(limit)}, {timeline.expected_from})" if limit else ""
        return Verdict(
            "hung", f"no progress past {phase} for {fmt_seconds(spent)}{bound}; vLLM then {how}{stop}"
        )
    exc = findings.get("exception")
    fatal = findings.get("engine-fatal")
    if code == 0 and sig is None and fatal is not None:
        return Verdict("engine-error", f"vLLM exited 0 after a fatal engine error: {_by(fatal)}{fatal.text}")
    if exc is not None and (not ready or (exc.after_ready and (code or sig))) and not stopped_by:
        return Verdict("failed", f"{_by(exc)}{exc.text} ({how} {when})")
    if sig is not None:
        return Verdict("killed", f"vLLM was {how} {when}{stop}")
    if code == 0 and ready:
        served = timeline.ready_s
        return Verdict("served", f"vLLM was ready after {fmt_seconds(served or 0)} and exited 0{stop}")
    return Verdict("exited", f"vLLM {how} {when}{stop}")


_TERMS: tuple[tuple[str, str, str], ...] = (
    ("W", "w", "weights_bytes"),
    ("P", "p", "activation_peak_bytes"),
    ("N", "n", "non_torch_bytes"),
    ("G_e", "g_e", "graph_estimate_bytes"),
    ("T - F0", "u_pre", "pre_snapshot_bytes"),
)


def _delta(plan: int | None, boot: int | None) -> str:
    if plan is None or boot is None:
        return "—"
    d = boot - plan
    return ("+" if d > 0 else "") + format_size(d) if d else "0"


def plan_vs_boot(
    plan_terms: Mapping[str, int] | None,
    plan_kv_tokens: int | None,
    record: Calibration,
    calibration: str,
) -> list[str]:
    """The ready block: per term, the plan's figure, the boot's (worst rank), and boot - plan."""
    worst = record.worst() if record.ranks else None
    rows = [("term", "plan", "boot", "boot - plan")]
    for label, plan_key, boot_attr in _TERMS:
        p = plan_terms.get(plan_key) if plan_terms else None
        b = getattr(worst, boot_attr) if worst is not None else None
        rows.append(
            (
                label,
                format_size(p) if p is not None else "—",
                format_size(b) if b is not None else "—",
                _delta(p, b),
            )
        )
    kv = record.boot.engine.kv_cache_tokens
    kv_delta = f"{kv - plan_kv_tokens:+,}" if kv is not None and plan_kv_tokens is not None else "—"
    rows.append(
        (
            "KV tokens",
            f"{plan_kv_tokens:,}" if plan_kv_tokens is not None else "—",
            f"{kv:,}" if kv is not None else "—",
            kv_delta,
        )
    )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    ranks = len(record.ranks)
    lines = [f"plan vs boot (boot: worst of {ranks} rank{'s' if ranks != 1 else ''}):"]
    for r in rows:
        lines.append(
            "  "
            + "  ".join(
                cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(r)
            )
        )
    lines.append(f"the plan used: {calibration}")
    return lines
