"""The mixed-Trellis MoE scratch arenas of B12X-era EXL3 (Gilded Gnosis r34, Infernal Invocation r16+).

From r34 (and on the ii line) vLLM's EXL3 MoE runs a checkpoint whose routed experts come in several bit
tiers (the R7 K3/K4/K5 checkpoint) through B12X's fused mixed-Trellis kernels, with **one worst-case
scratch arena per owner (the target model, the MTP drafter) and launch geometry** (``_shared_mixed_buffers``,
blackwell-llm-docker patches/releases/infernal-invocation-r18/vllm/integration.patch@3dd078a L6880-6980;
the same in gilded-gnosis-v20-r34). Two geometries per owner: decode at ``max_decode_m =
min(VLLM_EXL3_TRELLIS_MAX_M (32), max_num_batched_tokens)`` rows with route block 8, and prefill at the EXL3
prefill capacity C with the prefill route block (32 for GLM-5.2 three-tier experts on SM12x unless
``VLLM_EXL3_PREFILL_BLOCK_M`` is set, L6525-6560; 64 otherwise).

An arena is what ``make_mixed_trellis3_buffers`` allocates for the worst-case launch (B12X tree 75787c7a,
``b12x/moe/_shared/kernels/w4a16/mixed_trellis.py`` L2253-2326 and ``host.py`` L172-180, L254-267), with
rows = C x top_k, E the routed experts, H hidden, I the intermediate size per TP rank:

* rotation gate and up: 2 x rows x H x 2 B (fp16; FC2's output reuses the gate's storage);
* FC1 output rows x 2I x 2 B; activated rows x I x 2 B; output C x H x 4 B (fp32);
* route slots S = rows + E x (block - 1) (rows x block when rows < E is smaller): packed indices S x 4 B,
  block ids ceil(S / block) x 4 B, (2E + 2) x 4 B of counts and offsets;
* FC1 and FC2 split-K scratch: min(N x S, SMs x 4 x block x 256) fp32 each (doubled at block 8), N = 2I, H;
* a workspace of (SMs x 4 + 2) int32 (the compiled kernel's blocks per SM are at most 4 on SM120: an
  estimate of a few KiB).

At C = 2048, block 64 this is 574.1 MiB, the "approximately 574 MiB arena" the patch's comment names
(L6893-6896); block 32 gives 527.1 MiB. The arenas replace :mod:`glmlaunch.ledger.exl3`'s fitted target
and drafter arenas (the r14 executor's, which these releases no longer run).
"""

from __future__ import annotations

from typing import NamedTuple

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.context import Context, Draft, fmt_int

MIB = 1024 * 1024
#: the route block of the decode geometry (``_MIXED_TRELLIS_ROUTE_BLOCK_SIZE``)
DECODE_BLOCK = 8
#: the runtime's decode window when VLLM_EXL3_TRELLIS_MAX_M is unset
TRELLIS_MAX_M_DEFAULT = 32
#: the prefill route block vLLM selects for qualified GLM-5.2 tier signatures on SM12x, and its default
GLM52_PREFILL_BLOCK = 32
PREFILL_BLOCK_DEFAULT = 64
#: the stacks whose vLLM runs the shared worst-case arenas (r34's and Infernal Invocation's EXL3 code)
STACKS = frozenset({"b12x-r32", "b12x-ii"})
#: the blocks per SM the workspace is sized for at most (an estimate: the compiled kernel decides)
WORKSPACE_BLOCKS_PER_SM = 4


def applies(cfg: DeploymentConfig) -> bool:
    """Whether the configuration's routed experts run B12X's mixed-Trellis arenas: EXL3 on a B12X stack of
    r34 or the ii line, with experts of more than one bit tier (the R7 checkpoint)."""
    tiers = cfg.expert_bits_effective
    return cfg.is_exl3 and cfg.stack in STACKS and tiers is not None and len(tiers) > 1


class Arena(NamedTuple):
    size_m: int
    block: int
    rows: int
    slots: int
    bytes: int
    parts: tuple[tuple[str, int], ...]


def route_slots(numel: int, block: int, experts: int) -> int:
    """B12X ``max_packed_route_slots``."""
    slots = numel + experts * (block - 1)
    if numel < experts:
        slots = min(numel * block, slots)
    return slots


def gemm_scratch_elements(n: int, slots: int, block: int, sms: int) -> int:
    """B12X ``packed_gemm_scratch_elements``."""
    elements = min(n * slots, sms * 4 * block * 256)
    if block == 8:
        elements *= 2
    return max(elements, 1)


def arena(size_m: int, block: int, *, topk: int, hidden: int, inter: int, experts: int, sms: int) -> Arena:
    rows = size_m * topk
    s = route_slots(rows, block, experts)
    parts = (
        ("rotation gate (FC2 reuses it)", rows * hidden * 2),
        ("rotation up", rows * hidden * 2),
        ("FC1", rows * 2 * inter * 2),
        ("activated", rows * inter * 2),
        ("output fp32", size_m * hidden * 4),
        ("route indices", s * 4),
        ("block expert ids", -(-s // block) * 4),
        ("counts and offsets", (2 * experts + 2) * 4),
        ("FC1 split-K scratch", gemm_scratch_elements(2 * inter, s, block, sms) * 4),
        ("FC2 split-K scratch", gemm_scratch_elements(hidden, s, block, sms) * 4),
        ("workspace", (sms * WORKSPACE_BLOCKS_PER_SM + 2) * 4),
    )
    return Arena(size_m, block, rows, s, sum(b for _, b in parts), parts)


def decode_rows(cfg: DeploymentConfig) -> tuple[int, str]:
    window = cfg.exl3_trellis_max_m or TRELLIS_MAX_M_DEFAULT
    src = "exl3_trellis_max_m" if cfg.exl3_trellis_max_m else "VLLM_EXL3_TRELLIS_MAX_M unset: 32"
    return min(window, cfg.scheduler.max_num_batched_tokens), src


def prefill_block(cfg: DeploymentConfig) -> tuple[int, str]:
    """The prefill route block: an explicit VLLM_EXL3_PREFILL_BLOCK_M as given; else 32 where vLLM's
    qualified GLM-5.2 rule selects it (SM12x, hidden 6144, 512 intermediate rows per rank, top-8, three
    tiers K3/K4/K5), else 64."""
    raw = (cfg.env.get("VLLM_EXL3_PREFILL_BLOCK_M") or "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw), "VLLM_EXL3_PREFILL_BLOCK_M (explicit: used as given)"
    g = cfg.model.geometry
    qualified = (
        cfg.hardware.compute_capability.split(".")[0] == "12"
        and g.hidden_size == 6144
        and g.moe_intermediate_size // cfg.parallel.tp == 512
        and cfg.expert_bits_effective == (3, 4, 5)
    )
    if qualified:
        return (
            GLM52_PREFILL_BLOCK,
            "vLLM's qualified GLM-5.2 three-tier block (VLLM_EXL3_PREFILL_BLOCK_M unset)",
        )
    return PREFILL_BLOCK_DEFAULT, "VLLM_EXL3_PREFILL_BLOCK_M unset: 64"


def arenas(cfg: DeploymentConfig) -> list[tuple[str, Arena, str]]:
    """(geometry name, arena, how its rows were chosen) of one owner."""
    g = cfg.model.geometry
    shape = dict(
        topk=8,
        hidden=g.hidden_size,
        inter=g.moe_intermediate_size // cfg.parallel.tp,
        experts=g.n_routed_experts,
        sms=cfg.hardware.num_sms,
    )
    d, d_src = decode_rows(cfg)
    out = [("decode", arena(d, DECODE_BLOCK, **shape), f"{d} rows ({d_src}), block {DECODE_BLOCK}")]
    mnbt = cfg.scheduler.max_num_batched_tokens
    if mnbt > d:
        c = cfg.exl3_prefill_capacity_effective
        b, b_src = prefill_block(cfg)
        out.append(
            (
                "prefill",
                arena(c, b, **shape),
                f"C = {c} rows (the EXL3 prefill capacity), block {b} ({b_src})",
            )
        )
    return out


def entries(ctx: Context) -> list[Draft]:
    cfg = ctx.config
    if not applies(cfg):
        return []
    owners = [("target", "the target model")]
    if cfg.mtp > 0:
        owners.append(("draft", "the MTP drafter (its own owner token)"))
    fused = cfg.env.get("VLLM_EXL3_R7_FUSED", "1").strip() != "0"
    out = []
    for owner, who in owners:
        for geometry, a, how in arenas(cfg):
            terms = " + ".join(f"{name} {fmt_int(b)}" for name, b in a.parts)
            out.append(
                Draft(
                    name=f"exl3.r7_arena.{owner}.{geometry}",
                    subsystem="exl3",
                    requested_bytes=a.bytes,
                    count=1,
                    kind="torch",
                    lifetime="profiled",
                    condition=(
                        f"EXL3 experts in {len(cfg.expert_bits_effective or ())} bit tiers on {cfg.stack}; "
                        f"{who}; {geometry}: {how}"
                    ),
                    reader="B12X fused mixed-Trellis MoE (one worst-case arena per owner and geometry)",
                    formula=(
                        f"rows = {a.size_m} x top-8 = {fmt_int(a.rows)}, route slots {fmt_int(a.slots)}: "
                        f"{terms} = {fmt_int(a.bytes)}"
                    ),
                    origin="exact" if fused else "estimate",
                    alloc="torch",
                    note=(
                        "sized as make_mixed_trellis3_buffers for the worst-case launch (B12X 75787c7a "
                        "mixed_trellis.py L2253-2326); the workspace assumes at most "
                        f"{WORKSPACE_BLOCKS_PER_SM} blocks per SM"
                        + (
                            ""
                            if fused
                            else "; VLLM_EXL3_R7_FUSED=0 runs the projection-wise fallback with its own "
                            "graph arena instead (not modelled: this is an estimate)"
                        )
                    ),
                )
            )
    return out


#: the dense K6 kernel's split-K scratch cap: SMs (at most 192 on SM120/121) x 4 x block_m (at most 64) x 256
#: fp32 elements (``_B12X_TRELLIS_C_TMP_CAP``, ii patch L6488-6492; the same on r34)
K6_C_TMP_CAP = 192 * 4 * 64 * 256


def k6_scratch(ctx: Context) -> list[Draft]:
    """The online-K6 dense projections' split-K temporary at the prefill rows (a transient of P)."""
    cfg = ctx.config
    if not (cfg.is_exl3 and cfg.stack in STACKS and cfg.model.online_quant == "exl3-b6"):
        return []
    g = cfg.model.geometry
    rows = cfg.scheduler.max_num_batched_tokens
    padded = max(-(-rows // 48) * 48, -(-rows // 64) * 64)
    widest = g.hidden_size  # o_proj and the shared expert's down projection write hidden-wide rows
    elements = min(widest * padded, K6_C_TMP_CAP)
    n = elements * 4
    return [
        Draft(
            name="exl3.k6_scratch",
            subsystem="exl3",
            requested_bytes=n,
            count=1,
            kind="transient",
            lifetime="profiled",
            condition=f"online K6 (model.online_quant exl3-b6) on {cfg.stack}: {rows} prefill rows",
            reader="B12X dense Trellis K6 linear (c_tmp, reused across layers)",
            formula=(
                f"min(out {widest} x rows padded to 48/64 {padded}, cap 192 x 4 x 64 x 256 = "
                f"{fmt_int(K6_C_TMP_CAP)}) x 4 B = {fmt_int(n)}"
            ),
            origin="exact",
            alloc="transient",
            pieces=(n,),
            note=(
                "ii patch _b12x_trellis_c_tmp_elements (L7075-7098); at 1-128 rows (the captured decode "
                "shapes) the ii line sizes it per graph (B12X k6_mcg_small_m_scratch_elements), r34 passes "
                "one element: inside the graph pool"
            ),
        )
    ]


def all_entries(ctx: Context) -> list[Draft]:
    return entries(ctx) + k6_scratch(ctx)

