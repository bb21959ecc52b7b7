"""Tables and JSON documents for the calibrate commands (data only; messages go to stderr elsewhere)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from glmlaunch.calibrate.logs import BootLog
from glmlaunch.calibrate.records import Calibration
from glmlaunch.units import format_size


def _sz(n: int | None) -> str:
    return "—" if n is None else format_size(n)


def terms_table(record: Calibration) -> Table:
    boot = record.boot
    title = f"calibration {record.record_id}: {boot.source}"
    caption = (
        "W weights, P peak activation, N non-torch, G_e graph estimate, G graph actual, T-F0 before snapshot"
    )
    table = Table(title=title, caption=caption, expand=False)
    for col in ("rank", "W", "P", "N", "G_e", "G", "T-F0", "KV", "found", "missing"):
        table.add_column(col, no_wrap=col not in ("found", "missing"))
    for obs, t in zip(boot.ranks, record.ranks, strict=True):
        table.add_row(
            obs.rank,
            _sz(t.weights_bytes),
            _sz(t.activation_peak_bytes),
            _sz(t.non_torch_bytes),
            _sz(t.graph_estimate_bytes),
            _sz(t.graph_actual_bytes),
            _sz(t.pre_snapshot_bytes),
            _sz(t.kv_cache_bytes),
            f"{len(obs.found)} lines",
            ", ".join(obs.missing + [f"unparsed {u.split(':', 1)[0]}" for u in obs.unparsed]) or "—",
        )
    return table


def boot_summary(boot: BootLog) -> list[str]:
    """Engine-level lines and refusals, one fact per line (for stderr)."""
    lines: list[str] = []
    eng = boot.engine
    if eng.kv_cache_tokens is not None:
        lines.append(f"GPU KV cache size: {eng.kv_cache_tokens:,} tokens")
    if eng.vllm_version:
        lines.append(f"vLLM {eng.vllm_version}")
    refusals = [*eng.refusals, *boot.unattributed_refusals, *(x for r in boot.ranks for x in r.refusals)]
    for ref in refusals:
        if ref.kind == "kv-too-small":
            lines.append(
                f"REFUSED: one {ref.max_model_len or '?'}-token request needs {_sz(ref.kv_needed_bytes)} "
                f"of KV, {_sz(ref.kv_available_bytes)} available; "
                f"estimated max model length {ref.estimated_max_model_len}"
            )
        elif ref.kind == "start-gate":
            lines.append(
                f"REFUSED at the start gate: free {_sz(ref.free_bytes)} < "
                f"GMU {ref.gpu_memory_utilization} x T = {_sz(ref.requested_bytes)}"
            )
        else:
            lines.append(f"REFUSED: {ref.message[:200]}")
    if boot.ends_mid_line:
        lines.append("the log ends in the middle of a line (truncated)")
    if not boot.complete:
        lines.append("the boot did not reach the KV-cache size line: some per-rank lines are missing")
    if boot.repeated_ranks:
        lines.append("more than one boot in this file; the last one's values are used")
    return lines


def record_document(record: Calibration, *, residuals: Any = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "record_id": record.record_id,
        "created_at": record.created_at.isoformat(),
        "profile": record.profile,
        "usable": record.usable,
        "unusable_reason": record.unusable_reason(),
        "fingerprint_digest": record.fingerprint_digest,
        "total_bytes_exact": record.total_bytes_exact,
        "notes": record.notes,
        "log": {
            "source": record.boot.source,
            "sha256": record.boot.sha256,
            "size_bytes": record.boot.size_bytes,
            "complete": record.boot.complete,
            "ends_mid_line": record.boot.ends_mid_line,
            "refused": record.boot.refused,
        },
        "ranks": [
            {
                **{k: v for k, v in vars(t).items()},
                "found": obs.found,
                "missing": obs.missing,
                "unparsed": obs.unparsed,
            }
            for obs, t in zip(record.boot.ranks, record.ranks, strict=True)
        ],
        "engine": record.boot.engine.model_dump(mode="json"),
        "unattributed_refusals": [r.model_dump(mode="json") for r in record.boot.unattributed_refusals],
    }
    if residuals is not None:
        doc["residuals"] = residuals
    return doc


def list_table(records: list[Calibration]) -> Table:
    table = Table(title="calibration records (newest first)", expand=False)
    for col in ("id", "created", "profile", "usable", "ranks", "W", "log"):
        table.add_column(col, no_wrap=col != "log")
    for r in records:
        worst = r.worst() if r.ranks else None
        table.add_row(
            r.record_id,
            r.created_at.strftime("%Y-%m-%d %H:%M"),
            r.profile or "—",
            "yes" if r.usable else f"no: {r.unusable_reason()}",
            str(len(r.ranks)),
            _sz(worst.weights_bytes if worst else None),
            r.boot.source,
        )
    return table
