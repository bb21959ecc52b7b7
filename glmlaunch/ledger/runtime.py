"""CUDA context, NCCL communicators and the other non-torch memory vLLM's profiler sees as N.

Defaults are measurements, marked ``default`` and replaced by calibration. Where two measurements
disagree the default takes the larger one: U_pre is subtracted from F0, so an overestimate errs towards
refusing, never towards an OOM.

* CUDA context: 651 MiB per process (docs/memory-model.md §1, H200, driver 580); the preflight measured
  527 MiB (552,402,944 B) on 2x and 1x H200 with torch 2.11 + CUDA 13.0 (bench/PREFLIGHT.md). Default 651 MiB.
* NCCL TP communicator: 842 MiB per rank (docs/memory-model.md §1, 2 ranks over NVLink, first all-reduce
  included); the preflight measured 936 MiB (981,467,136 B: init + first all-reduce +
  ``broadcast_object_list``, torch excluded) at 2 ranks over NVLink and 650 MiB at 1 rank. Default 936 MiB.
* NCCL DCP communicator: vLLM builds the DCP group as a group of its own with its own communicator, even
  when its ranks are the TP group's; the preflight measured 486 MiB (509,607,936 B) per rank at DCP 2 over
  NVLink. Default 486 MiB when DCP > 1. PCIe and 4 ranks differ (the r14 TP4/DCP4 logs put the whole
  T - F0 at 1.38-1.40 GiB on RTX PRO 6000): calibrate.
* non-torch growth during profiling: 0.45 GiB in r14 TP4/DCP4 boot logs (NCCL lazy buffers, cuBLAS
  workspaces), less the DCP A2A eager channel the ledger lists on its own.
"""

from __future__ import annotations

from glmlaunch.ledger.context import Context, Draft, fmt_int

MIB = 1024 * 1024
CUDA_CONTEXT_DEFAULT = 651 * MIB
NCCL_DEFAULT = 936 * MIB
NCCL_DCP_DEFAULT = 486 * MIB
NONTORCH_DEFAULT = 448 * MIB


# the budget term a calibrated driver entry is the residual of
_TERM_OF = {"nccl_bytes": "u_pre", "nontorch_bytes": "n"}


def _driver_entry(
    ctx: Context,
    *,
    name: str,
    key: str,
    calibrated: int | None,
    default: int,
    default_formula: str,
    lifetime: str,
    condition: str,
    reader: str,
    note: str = "",
) -> Draft:
    """One fixed, non-torch allocation: the calibrated value when a record has one, else the default."""
    cal = calibrated
    if cal is not None:
        value, origin, formula = cal, "calibrated", f"calibration.{key} = {fmt_int(cal)}"
        why = ctx.inputs.note_for(_TERM_OF.get(key, ""))
        if why:
            formula += f"; the whole term: {why}"
    else:
        value, origin, formula = default, "default", default_formula
    return Draft(
        name=name,
        subsystem="runtime",
        requested_bytes=value,
        count=1,
        kind="driver",
        lifetime=lifetime,  # type: ignore[arg-type]
        condition=condition,
        reader=reader,
        formula=formula,
        origin=origin,  # type: ignore[arg-type]
        alloc="fixed",
        note=note,
        residual=True,
    )


#: why NCCL's figures are an estimate where NCCL's legacy allocator runs (the ii image)
LEGACY_NCCL_NOTE = (
    "NCCL_CUMEM_ENABLE=0 (the Infernal Invocation image: NCCL 2.31.2, legacy cudaMalloc buffers): the rig "
    "defaults were fitted on Gilded Gnosis images (NCCL 2.30.4 with its cuMem allocator), so this figure "
    "is an estimate until a boot log of this image is ingested"
)


def _legacy_nccl(ctx: Context) -> bool:
    """NCCL's cuMem allocator is off and no record of this configuration measured NCCL."""
    off = ctx.config.comm.nccl.cumem_enable is False
    return off and ctx.inputs.origin != "calibrated"


def _estimate(d: Draft, ctx: Context) -> Draft:
    if not _legacy_nccl(ctx) or d.origin == "default":
        return d
    return d._replace(origin="estimate", note="; ".join(x for x in (d.note, LEGACY_NCCL_NOTE) if x))


def entries(ctx: Context) -> list[Draft]:
    return [
        _estimate(d, ctx) if d.name in ("runtime.nccl", "runtime.nontorch_profiled") else d
        for d in _entries(ctx)
    ]


def _entries(ctx: Context) -> list[Draft]:
    cfg = ctx.config
    out = [
        _driver_entry(
            ctx,
            name="runtime.cuda_context",
            key="cuda_context_bytes",
            calibrated=ctx.inputs.cuda_context_bytes,
            default=CUDA_CONTEXT_DEFAULT,
            default_formula="651 * 1024 * 1024 (default: docs/memory-model.md §1 on H200, driver 580.159; "
            "the preflight measured 527 MiB on 2x H200, torch 2.11 + CUDA 13.0: the larger is kept)",
            lifetime="pre-snapshot",
            condition="always (one process per GPU)",
            reader="CUDA driver",
        )
    ]
    if cfg.parallel.tp > 1:
        out.append(
            _driver_entry(
                ctx,
                name="runtime.nccl",
                key="nccl_bytes",
                calibrated=ctx.inputs.nccl_bytes,
                default=NCCL_DEFAULT,
                default_formula="936 * 1024 * 1024 (default: TP communicator measured by the preflight at 2 "
                "ranks over NVLink, init + first all-reduce + broadcast_object_list; docs/memory-model.md §1 "
                "quotes 842 MiB, 1 rank 650 MiB: the larger is kept; PCIe and 4 ranks differ: calibrate)",
                lifetime="pre-snapshot",
                condition=f"TP {cfg.parallel.tp} > 1 (the TP group's NCCL communicator)",
                reader="NCCL collectives",
            )
        )
    if cfg.parallel.dcp > 1:
        out.append(
            _driver_entry(
                ctx,
                name="runtime.nccl_dcp",
                key="nccl_dcp_bytes",
                calibrated=ctx.inputs.nccl_dcp_bytes,
                default=NCCL_DCP_DEFAULT,
                default_formula="486 * 1024 * 1024 (default: vLLM's DCP communicator measured by the "
                "preflight at DCP 2 over NVLink, 509,607,936 B per rank; PCIe and 4 ranks differ: calibrate)",
                lifetime="pre-snapshot",
                condition=f"DCP {cfg.parallel.dcp} > 1 (vLLM's separate DCP group and its NCCL communicator)",
                reader="NCCL collectives of the DCP group",
                note="a communicator of its own even when the DCP group's ranks are the TP group's",
            )
        )
    out.append(
        _driver_entry(
            ctx,
            name="runtime.nontorch_profiled",
            key="nontorch_bytes",
            calibrated=ctx.inputs.nontorch_bytes,
            default=NONTORCH_DEFAULT,
            default_formula="448 * 1024 * 1024 (r14 log: 0.45 GiB non-torch minus the A2A eager channel)",
            lifetime="profiled",
            condition="always (NCCL lazy buffers, cuBLAS/cuBLASLt workspaces during the profile run)",
            reader="NCCL, cuBLAS",
        )
    )
    return out
