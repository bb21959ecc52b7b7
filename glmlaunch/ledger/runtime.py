"""CUDA context, NCCL communicators and the other non-torch memory vLLM's profiler sees as N.

Defaults are measurements (memory-model.md §1, §6), marked ``default`` and replaced by calibration:
context 651 MiB per process (H200, driver 580); NCCL 842 MiB per rank (2 ranks over NVLink, first
all-reduce included; PCIe and 4 ranks differ: calibrate); non-torch growth during profiling 0.45 GiB
in r14 TP4/DCP4 boot logs (NCCL lazy buffers, cuBLAS workspaces), less the DCP A2A eager channel the
ledger lists on its own.
"""

from __future__ import annotations

from glmlaunch.ledger.context import Context, Draft, fmt_int

MIB = 1024 * 1024
CUDA_CONTEXT_DEFAULT = 651 * MIB
NCCL_DEFAULT = 842 * MIB
NONTORCH_DEFAULT = 448 * MIB


def _value(ctx: Context, key: str, default: int, default_formula: str) -> tuple[int, str, str]:
    cal = ctx.calibrated(key)
    if cal is not None:
        return cal, "calibrated", f"calibration.{key} = {fmt_int(cal)}"
    return default, "default", default_formula


def entries(ctx: Context) -> list[Draft]:
    cfg = ctx.config
    out: list[Draft] = []
    v, o, f = _value(
        ctx, "cuda_context_bytes", CUDA_CONTEXT_DEFAULT, "651 * 1024 * 1024 (H200, driver 580.159: measure)"
    )
    out.append(
        Draft(
            name="runtime.cuda_context",
            subsystem="runtime",
            requested_bytes=v,
            count=1,
            kind="driver",
            lifetime="pre-snapshot",
            condition="always (one process per GPU)",
            reader="CUDA driver",
            formula=f,
            origin=o,  # type: ignore[arg-type]
            alloc="fixed",
        )
    )
    if cfg.parallel.tp > 1:
        v, o, f = _value(
            ctx,
            "nccl_bytes",
            NCCL_DEFAULT,
            "842 * 1024 * 1024 (2 ranks over NVLink incl. first all-reduce: measure)",
        )
        out.append(
            Draft(
                name="runtime.nccl",
                subsystem="runtime",
                requested_bytes=v,
                count=1,
                kind="driver",
                lifetime="pre-snapshot",
                condition=f"TP {cfg.parallel.tp} > 1 (NCCL communicators)",
                reader="NCCL collectives",
                formula=f,
                origin=o,  # type: ignore[arg-type]
                alloc="fixed",
            )
        )
    v, o, f = _value(
        ctx,
        "nontorch_bytes",
        NONTORCH_DEFAULT,
        "448 * 1024 * 1024 (r14 log: 0.45 GiB non-torch minus the A2A eager channel)",
    )
    out.append(
        Draft(
            name="runtime.nontorch_profiled",
            subsystem="runtime",
            requested_bytes=v,
            count=1,
            kind="driver",
            lifetime="profiled",
            condition="always (NCCL lazy buffers, cuBLAS/cuBLASLt workspaces during the profile run)",
            reader="NCCL, cuBLAS",
            formula=f,
            origin=o,  # type: ignore[arg-type]
            alloc="fixed",
        )
    )
    return out


def key(ctx: Context) -> tuple[object, ...]:
    """Everything :func:`entries` reads (the ledger memoizes on it)."""
    return (
        ctx.config.parallel.tp,
        ctx.calibrated("cuda_context_bytes"),
        ctx.calibrated("nccl_bytes"),
        ctx.calibrated("nontorch_bytes"),
    )
