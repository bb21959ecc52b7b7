"""DCP sparse-MLA prefill memory: the full-CKV gather transient (in P) and the CKV prefetch ring (in W).

* ``dcp.ckv_gather_transient``: vLLM logs ``Including 233.25 MiB of B12X sparse DCP transient memory in
  the profile peak`` and adds it to P. All five TP4/DCP4 boot logs print exactly that figure (batched
  tokens 2048 and 3072, EXL3 prefill capacity 1024 and 3072), each with a full-CKV gather capacity of
  140,000 logical tokens (``Using transient full-CKV gather ... (capacity=140000 logical tokens)``). It
  is scaled linearly with ``dcp_policy.ckv_gather_max_tokens``: an assumption, since no log varied it.
* ``dcp.prefill_workspace``: the persistent CKV prefetch ring of B12X sparse MLA
  (``vllm/v1/attention/backends/mla/b12x_mla_sparse.py``: ``_ckv_prefetch_workspace_nbytes``,
  ``_ckv_prefetch_depth_within_budget``, ``_ckv_prefetch_execution_lanes``, the
  ``_CKVPrefetchWorkspacePool`` whose context B:``patches/releases/infernal-invocation-r18/vllm/
  integration.patch`` L10915-10930 at local-inference-lab/blackwell-llm-docker@3dd078a shows). Per lane
  ``(1 + (depth + 1) * DCP) * local_capacity * record_bytes``, with
  ``local_capacity = A(ceil(ckv_gather_max_tokens / DCP) + max_num_seqs * interleave, 64)``; the depth is
  ``VLLM_B12X_MLA_CKV_PREFETCH_DEPTH`` lowered until the ring fits
  ``VLLM_B12X_MLA_CKV_PREFETCH_WORKSPACE_MIB``
  (0: no cap) — the MiB knob is a ceiling on the ring, not an allocation of its own; lanes = 2 with
  speculative decoding, else 1. Every TP4/DCP4 boot log prints it exactly (``Preallocated 61.4 MiB for 1
  persistent CKV execution lane(s)`` at MTP0, ``122.9 MiB for 2`` at MTP3: 5 x 35,008 x 368 B per lane at
  depth 0) *before* ``Model loading took``: the ring is inside the logged W. Every W on record was logged at
  prefetch depth 0 (the boot logs and the appliance's profiles set 0), so the ring's depth-0 part is in W at
  the shape that W was logged at, and the ledger charges the lookahead slots a deeper prefetch adds,
  ``lanes * depth * DCP * local_capacity * record_bytes``, to W.
"""

from __future__ import annotations

from glmlaunch.ledger.context import Context, Draft, fmt_int

KIB = 1024
MIB = 1024 * KIB

#: logged transient at the logged gather capacity
CKV_TRANSIENT_LOGGED = round(233.25 * MIB)
CKV_CAPACITY_LOGGED = 140_000
#: the launchers' DCP_PREFILL_WORKSPACE_MIB default (every log): the prefetch ring's budget
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


#: vLLM's defaults when the variables are unset (envs.py of the release trees:
#: VLLM_B12X_MLA_CKV_PREFETCH_DEPTH 1, VLLM_B12X_MLA_CKV_GATHER_MAX_TOKENS 524288; B:patches/releases/
#: gilded-gnosis-v20-r34/vllm/integration.patch L9810-9813 context lines)
VLLM_PREFETCH_DEPTH_DEFAULT = 1
VLLM_GATHER_MAX_TOKENS_DEFAULT = 524_288
KV_BLOCK = 64
#: the KV formats the prefetch ring supports (``_ckv_prefetch_supports_format``)
_RING_FORMATS = ("fp8", "fp8_e4m3", "fp8_ds_mla", "nvfp4_ds_mla")


def ring_local_capacity(gather_max_tokens: int, dcp: int, max_num_seqs: int, interleave: int) -> int:
    per_rank = -(-gather_max_tokens // max(1, dcp)) + max_num_seqs * interleave
    return -(-per_rank // KV_BLOCK) * KV_BLOCK


def ring_lane_bytes(depth: int, dcp: int, local_capacity: int, record_bytes: int) -> int:
    """``_ckv_prefetch_workspace_nbytes``: one lane's local staging plus its gathered-cache ring."""
    return (1 + (max(0, depth) + 1) * dcp) * local_capacity * record_bytes


def ring_depth(requested: int, budget_mib: int, dcp: int, local_capacity: int, record_bytes: int) -> int:
    """``_ckv_prefetch_depth_within_budget``: the deepest lookahead whose ring fits the budget (0: no cap)."""
    requested = max(0, requested)
    budget = budget_mib * MIB
    if budget <= 0:
        return requested
    for depth in range(requested, -1, -1):
        if ring_lane_bytes(depth, dcp, local_capacity, record_bytes) <= budget:
            return depth
    return 0


def prefetch_ring(ctx: Context) -> list[Draft]:
    from glmlaunch.ledger import kv_cache

    cfg = ctx.config
    d = cfg.parallel.dcp
    pol = cfg.dcp_policy
    if d <= 1 or pol.ckv_gather is False or cfg.memory.kv_cache_dtype not in _RING_FORMATS:
        return []
    if cfg.model.weights_per_rank is not None:
        # an explicit W is final (ledger/weights.py): it was measured with whatever ring that boot had
        return []
    cap = pol.ckv_gather_max_tokens
    if cap is None:
        cap = VLLM_GATHER_MAX_TOKENS_DEFAULT
    interleave = cfg.server.dcp_kv_cache_interleave_size or 1
    mns = cfg.scheduler.max_num_seqs
    rec = kv_cache.geometry(cfg).record_bytes
    local = ring_local_capacity(cap, d, mns, interleave)
    asked = pol.ckv_prefetch_depth if pol.ckv_prefetch_depth is not None else VLLM_PREFETCH_DEPTH_DEFAULT
    budget = pol.ckv_prefetch_workspace_mib
    if budget is None:
        budget = WORKSPACE_DEFAULT_MIB
    depth = ring_depth(asked, budget, d, local, rec)
    lanes = 2 if cfg.mtp > 0 else 1
    lane = ring_lane_bytes(depth, d, local, rec)
    extra = lanes * depth * d * local * rec
    unset = [
        name
        for name, v in (
            ("ckv_prefetch_depth", pol.ckv_prefetch_depth),
            ("ckv_gather_max_tokens", pol.ckv_gather_max_tokens),
            ("ckv_prefetch_workspace_mib", pol.ckv_prefetch_workspace_mib),
        )
        if v is None
    ]
    capped = f" (asked {asked}, capped by the {budget} MiB workspace budget)" if depth != asked else ""
    return [
        Draft(
            name="dcp.prefill_workspace",
            subsystem="weights",
            requested_bytes=extra,
            count=1,
            kind="torch",
            lifetime="budget-term",
            condition=f"DCP {d} > 1, CKV gather on, KV {cfg.memory.kv_cache_dtype}; prefetch depth {depth}",
            reader="B12X sparse MLA: persistent CKV prefetch ring (allocated while the model is built: in W)",
            formula=(
                f"lanes * depth * DCP * local_capacity * record = {lanes} * {depth}{capped} * {d} * "
                f"{fmt_int(local)} * {rec} = {fmt_int(extra)}  [local_capacity = A(ceil({cap} / {d}) + "
                f"{mns} * {interleave}, 64); the whole ring is {lanes} x (1 + ({depth} + 1) * {d}) * "
                f"{fmt_int(local)} * {rec} = {fmt_int(lanes * lane)}; its depth-0 part "
                f"{fmt_int(lanes * ring_lane_bytes(0, d, local, rec))} is inside the logged W]"
            ),
            origin="default" if unset else "exact",
            alloc="fixed",
            note=(
                "the boot logs print the ring ('Preallocated 122.9 MiB for 2 persistent CKV execution "
                "lane(s)') before 'Model loading took': W holds its depth-0 part at the shape W was logged "
                "at; this entry is the lookahead a deeper prefetch adds"
                + (f"; unset, vLLM's defaults apply: {', '.join(unset)}" if unset else "")
            ),
        )
    ]
