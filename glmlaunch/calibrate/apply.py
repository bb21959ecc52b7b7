"""Turn a calibration record into the values ``build_ledger(config, calibration=…)`` reads.

The ledger itemizes what it knows exactly (pools, channels, indexer arenas) and keeps one *residual*
entry per budget term for the rest (``weights``, ``activations``, ``runtime.nontorch_profiled``,
``cudagraph.pool``, ``runtime.cuda_context`` + ``runtime.nccl``). A boot log states the terms whole
(W, P, N, G_e, T - F0), so each calibrated residual is the logged term minus the ledger's itemized
entries of that term, computed for the configuration the boot ran:

* ``activation_bytes``  = P - itemized profiled torch/workspace entries
* ``nontorch_bytes``    = N - itemized profiled ipc/driver entries
* ``graph_bytes``       = G_e - itemized graph-estimated entries
* ``nccl_bytes``        = (T - F0) - itemized pre-snapshot entries - CUDA context (measured by a preflight
  when the record has it, else the ledger's default; a boot log cannot split the two)
* ``weights_bytes``     = W
* ``kv_bytes_per_token`` = KV / (KV tokens / DCP), rounded up after adding the log's rounding, only when
  the ledger's own per-token figure is an estimate (nvfp4_ds_mla)

The worst rank is used by default (the ledger treats ranks alike); ``calibrate search`` evaluates each
rank with its own terms. When the configuration differs from the boot's in
``scheduler.max_num_batched_tokens`` (``calibrate search`` allows that), the activation residual is scaled
by the ratio of batched tokens, like the ledger's own per-token default; everything else is kept.
A negative residual (the ledger's itemized entries exceed what vLLM logged) is clamped at 0 and noted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from glmlaunch.calibrate.records import LOG_GIB_RESOLUTION, Calibration
from glmlaunch.calibrate.terms import CalibratedTerms
from glmlaunch.config import DeploymentConfig

if TYPE_CHECKING:
    from glmlaunch.calibrate.store import Store
    from glmlaunch.inventory import Inventory

RESIDUAL_ENTRIES: frozenset[str] = frozenset(
    {
        "weights",
        "activations",
        "runtime.nontorch_profiled",
        "cudagraph.pool",
        "runtime.cuda_context",
        "runtime.nccl",
    }
)
TOKENS_KEY = "scheduler.max_num_batched_tokens"


@dataclass(frozen=True)
class LedgerCalibration:
    """Attribute names are the ones ``glmlaunch.ledger`` reads through ``Context.calibrated``."""

    record_id: str
    weights_bytes: int | None = None
    activation_bytes: int | None = None
    nontorch_bytes: int | None = None
    graph_bytes: int | None = None
    cuda_context_bytes: int | None = None
    nccl_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    notes: tuple[str, ...] = ()


def _with(config: DeploymentConfig, dotted: str, value: Any) -> DeploymentConfig:
    data = config.model_dump(mode="python")
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value
    return DeploymentConfig.model_validate(data)


def boot_config(config: DeploymentConfig, record: Calibration) -> DeploymentConfig:
    """``config`` with the batched-token count the boot ran (the one setting search lets differ)."""
    recorded = record.fingerprint.settings.get(TOKENS_KEY)
    if isinstance(recorded, int) and recorded != config.scheduler.max_num_batched_tokens:
        return _with(config, TOKENS_KEY, recorded)
    return config


def _itemized(config: DeploymentConfig) -> dict[str, int]:
    from glmlaunch.ledger import build_ledger

    rank = build_ledger(config).rank0
    out = {"pre": 0, "p": 0, "n": 0, "g_e": 0, "cuda_context_default": 0}
    for e in rank.entries:
        if e.name == "runtime.cuda_context":
            out["cuda_context_default"] = e.device_bytes
        if e.name in RESIDUAL_ENTRIES:
            continue
        if e.lifetime == "pre-snapshot":
            out["pre"] += e.device_bytes
        elif e.lifetime == "profiled":
            out["n" if e.kind in ("ipc", "driver") else "p"] += e.device_bytes
        elif e.lifetime == "graph-estimated":
            out["g_e"] += e.device_bytes
    return out


def ledger_calibration(
    config: DeploymentConfig, record: Calibration, rank_terms: CalibratedTerms | None = None
) -> LedgerCalibration:
    """The calibrated residuals for ``config`` (which must match the record up to batched tokens).

    ``rank_terms`` picks one rank's terms; the default is the worst rank (per-term maximum).
    """
    worst = rank_terms if rank_terms is not None else record.worst()
    base = boot_config(config, record)
    items = _itemized(base)
    notes: list[str] = []

    def residual(logged: int | None, itemized: int, name: str) -> int | None:
        if logged is None:
            return None
        value = logged - itemized
        if value < 0:
            notes.append(
                f"{name}: the ledger itemizes {itemized:,} B but vLLM logged {logged:,} B; residual 0"
            )
            return 0
        return value

    activation = residual(worst.activation_peak_bytes, items["p"], "activation")
    cal_tokens = base.scheduler.max_num_batched_tokens
    if activation is not None and cal_tokens != config.scheduler.max_num_batched_tokens:
        tokens = config.scheduler.max_num_batched_tokens
        scaled = -(-activation * tokens // cal_tokens)
        notes.append(
            f"activation residual scaled by batched tokens {tokens}/{cal_tokens}: "
            f"{activation:,} -> {scaled:,} B"
        )
        activation = scaled
    context = worst.cuda_context_bytes
    nccl = worst.nccl_bytes
    if nccl is None and worst.pre_snapshot_bytes is not None:
        ctx_part = context if context is not None else items["cuda_context_default"]
        nccl = residual(worst.pre_snapshot_bytes, items["pre"] + ctx_part, "pre-snapshot")
        if context is None:
            notes.append("T - F0 cannot split CUDA context from NCCL: the context keeps its default")
    kv_per_token = _kv_per_token(config, record)
    return LedgerCalibration(
        record_id=record.record_id,
        weights_bytes=worst.weights_bytes,
        activation_bytes=activation,
        nontorch_bytes=residual(worst.non_torch_bytes, items["n"], "non-torch"),
        graph_bytes=residual(worst.graph_estimate_bytes, items["g_e"], "graph estimate"),
        cuda_context_bytes=context,
        nccl_bytes=nccl,
        kv_bytes_per_token=kv_per_token,
        notes=tuple(notes),
    )


def _kv_per_token(config: DeploymentConfig, record: Calibration) -> int | None:
    from glmlaunch.ledger import kv_cache

    if kv_cache.geometry(config).origin != "estimate":
        return None
    tokens = record.boot.engine.kv_cache_tokens
    kv = [t.kv_cache_bytes for t in record.ranks if t.kv_cache_bytes is not None]
    if not tokens or not kv:
        return None
    per_rank_tokens = tokens // max(1, config.parallel.dcp)
    if per_rank_tokens <= 0:
        return None
    return -(-(min(kv) + LOG_GIB_RESOLUTION) // per_rank_tokens)


@dataclass(frozen=True)
class CalibrationUse:
    """What ``plan`` / ``check`` / ``preflight`` pass to ``build_ledger`` and ``compute_budget``, and say."""

    calibration: LedgerCalibration | None
    message: str
    record: Calibration | None
    warnings: tuple[str, ...]


def calibration_for(
    config: DeploymentConfig, inventory: Inventory | None = None, *, store: Store | None = None
) -> CalibrationUse:
    """The matching record turned into ledger inputs, or None with the reason every record was rejected.

    Use: ``use = calibration_for(config, inventory)``; ``note(use.message)``;
    ``build_ledger(config, calibration=use.calibration)``; ``compute_budget(…, calibration=use.calibration)``.
    """
    from glmlaunch.calibrate.store import lookup_calibration

    found = lookup_calibration(config, inventory, store=store)
    if found.calibration is None:
        return CalibrationUse(None, found.message(), None, found.warnings)
    cal = ledger_calibration(config, found.calibration)
    message = found.message()
    if cal.notes:
        message += " (" + "; ".join(cal.notes) + ")"
    return CalibrationUse(cal, message, found.calibration, found.warnings)
