"""DCP sparse-MLA prefill memory: the full-CKV gather transient (in P) and the prefill workspace (latent).

* ``dcp.ckv_gather_transient``: vLLM logs ``Including 233.25 MiB of B12X sparse DCP transient memory in
  the profile peak`` and adds it to P. All five TP4/DCP4 boot logs print exactly that figure (batched
  tokens 2048 and 3072, EXL3 prefill capacity 1024 and 3072), each with a full-CKV gather capacity of
  140,000 logical tokens (``Using transient full-CKV gather ... (capacity=140000 logical tokens)``). It
  is scaled linearly with ``dcp_policy.ckv_gather_max_tokens``: an assumption, since no log varied it.
* ``dcp.prefill_workspace``: the launchers' ``DCP_PREFILL_WORKSPACE_MIB`` (1024 in every log; it becomes
  ``VLLM_B12X_MLA_CKV_PREFETCH_WORKSPACE_MIB``, setting ``dcp_policy.ckv_prefetch_workspace_mib``). The
  logged peak activation P (0.75-1.41 GiB) cannot hold a 1024 MiB workspace, so the figure is a ceiling
  not allocated at profile time: listed as a latent hazard, not charged to a rank.
"""

from __future__ import annotations

from glmlaunch.ledger.context import Context, Draft, fmt_int

KIB = 1024
MIB = 1024 * KIB

#: logged transient at the logged gather capacity
CKV_TRANSIENT_LOGGED = round(233.25 * MIB)
CKV_CAPACITY_LOGGED = 140_000
#: the launchers' DCP_PREFILL_WORKSPACE_MIB default (every log)
WORKSPACE_DEFAULT_MIB = 1024


def ckv_transient_bytes(capacity: int) -> int:
    return round(CKV_TRANSIENT_LOGGED * capacity / CKV_CAPACITY_LOGGED)


def entries(ctx: Context) -> list[Draft]:
    cfg = ctx.config
    d = cfg.parallel.dcp
    pol = cfg.dcp_policy
    if d <= 1 or pol.ckv_gather is False:
        return []
    cap = pol.ckv_gather_max_tokens if pol.ckv_gather_max_tokens is not None else CKV_CAPACITY_LOGGED
    n = ckv_transient_bytes(cap)
    src = "dcp_policy.ckv_gather_max_tokens" if pol.ckv_gather_max_tokens is not None else "unset: as logged"
    return [
        Draft(
            name="dcp.ckv_gather_transient",
            subsystem="dcp_prefill",
            requested_bytes=n,
            count=1,
            kind="transient",
            lifetime="profiled",
            condition=f"DCP {d} > 1 and dcp_policy.ckv_gather not off ({pol.ckv_gather})",
            reader="B12X sparse MLA prefill: transient full-CKV gather",
            formula=(
                f"233.25 MiB * capacity / 140000 = {fmt_int(CKV_TRANSIENT_LOGGED)} * {cap} / "
                f"{CKV_CAPACITY_LOGGED} = {fmt_int(n)}  [capacity {cap}: {src}]"
            ),
            # exactly the logged figure at the logged capacity; scaled, it is an estimate
            origin="calibrated" if cap == CKV_CAPACITY_LOGGED else "estimate",
            # vLLM adds the figure to the profile peak itself: no allocator rounding
            alloc="fixed",
            note=(
                "vLLM logs 'Including 233.25 MiB of B12X sparse DCP transient memory in the profile peak' "
                "and adds it to P; all five TP4/DCP4 logs used gather capacity 140000, so linearity in the "
                "capacity is an assumption"
            ),
        )
    ]


def latent(ctx: Context) -> list[Draft]:
    cfg = ctx.config
    d = cfg.parallel.dcp
    if d <= 1:
        return []
    mib = cfg.dcp_policy.ckv_prefetch_workspace_mib
    src = "dcp_policy.ckv_prefetch_workspace_mib"
    if mib is None:
        mib, src = WORKSPACE_DEFAULT_MIB, "unset: the launchers' default 1024"
    n = mib * MIB
    return [
        Draft(
            name="dcp.prefill_workspace",
            subsystem="dcp_prefill",
            requested_bytes=n,
            count=1,
            kind="workspace",
            lifetime="unbudgeted",
            condition=f"DCP {d} > 1 (a ceiling, not allocated at profile time)",
            reader="DCP sparse-MLA prefill / CKV prefetch workspace (latent)",
            formula=f"prefill_workspace_mib * 1 MiB = {mib} * {fmt_int(MIB)} = {fmt_int(n)}  [{src}]",
            origin="exact" if cfg.dcp_policy.ckv_prefetch_workspace_mib is not None else "default",
            alloc="transient",
            pieces=(n,),
            note=(
                "latent: the launchers' DCP_PREFILL_WORKSPACE_MIB is 1024 in every boot log, yet the logged "
                "peak activation P is 0.75-1.41 GiB and already holds the EXL3 arenas and the 233.25 MiB DCP "
                "transient, so the workspace is a ceiling that is not allocated during profiling"
            ),
        )
    ]
