"""DCP sparse-MLA prefill memory: the eager AG/RS transient the profile adds to P, and the CKV prefetch
ring (in W).

* ``dcp.ckv_gather_transient``: the synthetic allocation vLLM makes during the profile run so that P holds
  the eager DCP all-gather / reduce-scatter attention tensors of the largest prefill chunk that takes that
  path (vLLM ``vllm/model_executor/layers/attention/mla_attention.py``: ``_get_sparse_memory_profile_bytes``
  and ``_estimate_dcp_ag_rs_transient_bytes``; the r14 boot logs print its line,
  ``[mla_attention.py:1164] Including 233.25 MiB of B12X sparse DCP transient memory in the profile peak``).
  Gated by ``VLLM_MEMORY_PROFILE_INCLUDE_ATTN`` (``memory.profile_include_attn``), the B12X_MLA_SPARSE
  backend and DCP > 1. Rows: above the A2A small-batch cap (``comm.dcp_a2a_max_tokens`` + 1; pure A2A,
  cap 0, allocates nothing) up to ``max_num_batched_tokens``, or up to 1,024 where the B12X prefill
  workspace takes the larger chunks (``dcp_policy.gather_in_workspace`` with ``project_before_merge``);
  with project-before-merge the rows above its threshold are costed with the projected head dim. For
  ``T`` rows, ``H_l`` local heads (attention heads / TP) and ``H = H_l * DCP``:
  ``T*H*576*2 + T*H*D*2 + (T*H*D*2 + 2*T*H_l*D*2) + (DCP+1)*T*H*4 (+ H*512*256*2 projected)``.
  Every TP4/DCP4 boot log (batched tokens 2048 and 3072, A2A cap 16, gather in workspace) gives 1,024 rows
  and 244,580,352 B = 233.25 MiB: the logged figure, to the byte.
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

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.context import Context, Draft, fmt_int

KIB = 1024
MIB = 1024 * KIB

#: the transient every TP4/DCP4 boot log prints ("Including 233.25 MiB of B12X sparse DCP transient")
CKV_TRANSIENT_LOGGED = round(233.25 * MIB)
#: the launchers' DCP_PREFILL_WORKSPACE_MIB default (every log): the prefetch ring's budget
WORKSPACE_DEFAULT_MIB = 1024


def ag_rs_transient_bytes(
    *,
    rows: int,
    local_heads: int,
    dcp: int,
    q_head_dim: int,
    output_head_dim: int,
    lora: int,
    v_head: int,
    projected: bool,
) -> int:
    """``_estimate_dcp_ag_rs_transient_bytes``: the simultaneously live eager AG/RS attention tensors."""
    if rows <= 0 or local_heads <= 0 or dcp <= 1:
        return 0
    heads = local_heads * dcp
    query = rows * heads * q_head_dim * 2
    output = rows * heads * output_head_dim * 2
    reduce_scatter = output + 2 * rows * local_heads * output_head_dim * 2
    lse = (dcp + 1) * rows * heads * 4
    w_uv = heads * lora * v_head * 2 if projected else 0
    return query + output + reduce_scatter + lse + w_uv


#: vLLM's defaults of the switches the transient reads, when unset (the envs of the release trees)
PBM_MIN_TOKENS_DEFAULT = 1024
WORKSPACE_MIN_ROWS = 1025


def ag_rs_plan(cfg: DeploymentConfig) -> tuple[list[tuple[int, bool]], str]:
    """The (rows, projected) candidates ``_get_sparse_memory_profile_bytes`` costs, and why those rows."""
    pol = cfg.dcp_policy
    mnbt = cfg.scheduler.max_num_batched_tokens
    a2a = cfg.server.dcp_comm_backend == "a2a"
    if a2a:
        cap = cfg.comm.dcp_a2a_max_tokens
        if cap <= 0 or cfg.env.get("VLLM_DCP_A2A_LARGE_BACKEND") == "a2a":
            return [], "pure A2A (cap 0 or large backend a2a): no AG/RS path"
        first = cap + 1
    else:
        first = 1
    pbm = bool(pol.project_before_merge)
    threshold = pol.project_before_merge_min_prefill_tokens
    if threshold is None:
        threshold = PBM_MIN_TOKENS_DEFAULT
    start = max(WORKSPACE_MIN_ROWS, threshold + 1)
    in_workspace = bool(pol.gather_in_workspace) and pbm and start <= mnbt
    last = min(mnbt, start - 1) if in_workspace else mnbt
    why = (
        f"rows {first}..{last}: above the A2A cap {first - 1}"
        if a2a
        else f"rows {first}..{last}: every chunk (no A2A)"
    ) + (f", below the prefill workspace from {start}" if in_workspace else f", up to {mnbt} batched tokens")
    if first > last:
        return [], why
    out: list[tuple[int, bool]] = []
    if not pbm:
        out.append((last, False))
    else:
        unprojected = min(last, threshold)
        if unprojected >= first:
            out.append((unprojected, False))
        if last > threshold:
            out.append((last, True))
    return out, why


def entries(ctx: Context) -> list[Draft]:
    cfg = ctx.config
    d = cfg.parallel.dcp
    if d <= 1 or not cfg.memory.profile_include_attn or cfg.server.attention_backend != "B12X_MLA_SPARSE":
        return []
    g = cfg.model.geometry
    local = g.num_attention_heads // cfg.parallel.tp
    dq = g.kv_lora_rank + g.qk_rope_head_dim
    plan, why = ag_rs_plan(cfg)
    costed = [
        (
            ag_rs_transient_bytes(
                rows=rows,
                local_heads=local,
                dcp=d,
                q_head_dim=dq,
                output_head_dim=g.v_head_dim if projected else g.kv_lora_rank,
                lora=g.kv_lora_rank,
                v_head=g.v_head_dim,
                projected=projected,
            ),
            rows,
            projected,
        )
        for rows, projected in plan
    ]
    n, rows, projected = max(costed, default=(0, 0, False))
    if n <= 0:
        return []
    dv = g.v_head_dim if projected else g.kv_lora_rank
    h = local * d
    return [
        Draft(
            name="dcp.ckv_gather_transient",
            subsystem="dcp_prefill",
            requested_bytes=n,
            count=1,
            kind="transient",
            lifetime="profiled",
            condition=(f"DCP {d} > 1, B12X_MLA_SPARSE, memory.profile_include_attn on; {why}"),
            reader="eager DCP all-gather / reduce-scatter of sparse-MLA prefill (profile-time stand-in)",
            formula=(
                f"T*H*{dq}*2 + T*H*D*2 + (T*H*D*2 + 2*T*H_l*D*2) + (DCP+1)*T*H*4"
                + (f" + H*{g.kv_lora_rank}*{g.v_head_dim}*2" if projected else "")
                + f" with T = {rows}, H_l = {local}, H = {h}, D = {dv}, DCP = {d}: {fmt_int(n)}"
            ),
            origin="exact",
            # vLLM allocates exactly this many bytes in the profile pass: no allocator rounding modelled
            alloc="fixed",
            note=(
                "vLLM's own profile-time allocation (mla_attention.py _get_sparse_memory_profile_bytes); "
                "every TP4/DCP4 boot log prints it: 'Including 233.25 MiB of B12X sparse DCP transient "
                "memory in the profile peak'"
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
                f"{fmt_int(lanes * ring_lane_bytes(0, d, local, rec))} is counted inside W: every W on "
                "record was logged at depth 0]"
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
