"""Residuals: what the ledger predicted, without calibration, against what each rank logged.

The prediction uses the boot's own GMU and device total (from the log), so a residual measures the
memory model, not a different setting. Terms (docs/memory-model.md §6): W, P, N, G_e, the production graph
memory against G_e, T - F0 (U_pre plus what others held), and KV; plus KV tokens from EngineCore.
``delta`` is logged - predicted: positive means the ledger under-predicted (the dangerous direction for
every term but KV).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from glmlaunch.calibrate.apply import _with, boot_config
from glmlaunch.calibrate.fingerprint import compare, make_fingerprint
from glmlaunch.calibrate.records import Calibration
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import format_size
from glmlaunch.errors import GlmlaunchError

TERMS: tuple[tuple[str, str], ...] = (
    ("W", "weights"),
    ("P", "peak activation"),
    ("N", "non-torch"),
    ("G_e", "graph estimate"),
    ("G", "graph actual vs G_e"),
    ("T-F0", "before the snapshot"),
    ("KV", "KV cache"),
)


def _prediction_config(config: DeploymentConfig, record: Calibration) -> DeploymentConfig:
    cfg = boot_config(config, record)
    gmus = {o.gpu_memory_utilization for o in record.boot.ranks if o.gpu_memory_utilization is not None}
    totals = [t.total_bytes for t in record.ranks if t.total_bytes is not None]
    if len(gmus) == 1:
        cfg = _with(cfg, "memory.gpu_memory_utilization", gmus.pop())
    if totals:
        cfg = _with(cfg, "hardware.memory_per_gpu", min(totals))
    return cfg


def compute_residuals(config: DeploymentConfig, record: Calibration) -> dict[str, Any]:
    from glmlaunch.calibrate.apply import model_calibration
    from glmlaunch.calibrate.rigdefaults import rig_prior
    from glmlaunch.ledger.inputs import UNCALIBRATED
    from glmlaunch.plan.plan import make_plan

    cfg = _prediction_config(config, record)
    # What glmlaunch would have said without any record: the rig defaults where they apply, else the ledger's.
    prior = rig_prior(cfg)
    cal = model_calibration(cfg, prior, version=cfg.vllm_version) if prior is not None else None
    budget = make_plan(cfg, inputs=cal or UNCALIBRATED).budget
    ranks: list[dict[str, Any]] = []
    t = budget  # ranks are alike in the ledger; the budget's terms include the term model's
    for obs, logged in zip(record.boot.ranks, record.ranks, strict=True):
        pairs = {
            "W": (t.w, logged.weights_bytes),
            "P": (t.p, logged.activation_peak_bytes),
            "N": (t.n, logged.non_torch_bytes),
            "G_e": (t.g_e, logged.graph_estimate_bytes),
            "G": (t.g_e, logged.graph_actual_bytes),
            "T-F0": (t.u_pre, logged.pre_snapshot_bytes),
            "KV": (t.kv, logged.kv_cache_bytes),
        }
        ranks.append(
            {
                "rank": obs.rank,
                "terms": {
                    k: {"predicted": p, "logged": v, "delta": None if v is None else v - p}
                    for k, (p, v) in pairs.items()
                },
            }
        )
    doc: dict[str, Any] = {
        "predicted_from": (
            "rig defaults (no record)" if cal is not None else "ledger defaults (no calibration)"
        )
        + ", the boot's own configuration, GMU and device total",
        "gpu_memory_utilization": cfg.memory.gpu_memory_utilization,
        "total_bytes": cfg.hardware.memory_per_gpu,
        "ranks": ranks,
    }
    tokens = record.boot.engine.kv_cache_tokens
    if tokens is not None:
        predicted_tokens = budget.kv_tokens
        doc["kv_tokens"] = {
            "predicted": predicted_tokens,
            "logged": tokens,
            "delta": tokens - predicted_tokens,
        }
    return doc


def residuals_document(record: Calibration, config: DeploymentConfig | None = None) -> dict[str, Any]:
    """Residuals for a record, against the configuration it was ingested with (rebuilt from the profile)."""
    cfg = config
    if cfg is None and record.config is not None:
        from glmlaunch.calibrate.learn import record_config

        cfg = record_config(record)
    if cfg is None:
        from glmlaunch.config.resolve import resolve_config

        if record.profile is None or record.profile == "(defaults)":
            return {"unavailable": "the record names no profile to predict from"}
        try:
            cfg = resolve_config(record.profile, environ={}).config
        except GlmlaunchError as exc:  # a profile renamed or removed since ingest
            return {"unavailable": f"profile {record.profile!r} no longer resolves: {exc.one_line()}"}
        changed = compare(record.fingerprint, make_fingerprint(cfg, versions={}), relax=()).differences
        settings = [d.key for d in changed if d.key.startswith("settings.")]
        if settings:
            return {"unavailable": f"profile {record.profile!r} changed since ingest: " + ", ".join(settings)}
    return compute_residuals(cfg, record)


def _sz(n: int | None) -> str:
    return "—" if n is None else format_size(n)


def _delta(n: int | None) -> str:
    if n is None:
        return "—"
    return ("+" if n > 0 else "") + format_size(n)


def residuals_table(doc: dict[str, Any]) -> Table | None:
    if "ranks" not in doc:
        return None
    table = Table(
        title=f"residuals: logged - predicted ({doc.get('predicted_from', 'ledger defaults')})",
        caption="positive = the ledger under-predicted (KV: over-predicted when negative)",
        expand=False,
    )
    table.add_column("rank", no_wrap=True)
    for key, _ in TERMS:
        table.add_column(key, no_wrap=True, justify="right")
    for r in doc["ranks"]:
        table.add_row(r["rank"], *(_delta(r["terms"][k]["delta"]) for k, _ in TERMS))
    first = doc["ranks"][0]["terms"] if doc["ranks"] else None
    if first is not None:
        table.add_row("(predicted)", *(_sz(first[k]["predicted"]) for k, _ in TERMS), style="dim")
    return table
