"""DMA ring all-reduce (``DmaAllReduce``): IPC ring slab, counters, and the compressed-wire fp8 stage.

``max_bytes = max_num_batched_tokens * hidden_size * 2`` (bf16 sizing in vLLM's ``CustomAllreduce`` of every
generation, r12 to r34).
Slab = ``FLAG_SLOTS * FLAG_STRIDE + 2(W-1) * A256(ceil(max_bytes / W))``; the stage exists only on a
compressed wire: ``W * A256(e + floor(e/128)*4)``, ``e = floor(max_bytes / 2 / W)``.
"""

from __future__ import annotations

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.constants import StackConstants
from glmlaunch.ledger.context import Context, Draft, align, fmt_int
from glmlaunch.ledger.model import Origin
from glmlaunch.ledger.oneshot import resident

ITEMSIZE_BF16 = 2


def max_bytes(tokens: int, hidden: int, itemsize: int = ITEMSIZE_BF16) -> int:
    return tokens * hidden * itemsize


def shard_capacity(k: StackConstants, mb: int, w: int) -> int:
    return align(-(-mb // w), k.dma_scratch_align)


def flags_bytes(k: StackConstants) -> int:
    return k.dma_flag_slots * k.dma_flag_stride


def slab_bytes(k: StackConstants, mb: int, w: int) -> int:
    return flags_bytes(k) + 2 * (w - 1) * shard_capacity(k, mb, w)


def stage_bytes(k: StackConstants, mb: int, w: int) -> int:
    e = mb // 2 // w
    return w * align(e + e // k.dma_fp8_quant_block * 4, k.dma_scratch_align)


def counters_bytes(k: StackConstants) -> int:
    return 2 * k.dma_flag_slots * 4


def compressed_slot_bytes(k: StackConstants, mb: int, w: int) -> int:
    """Bytes a compressed hop actually addresses in one step slot: e + e/128*4 (about 0.516 x bf16)."""
    e = mb // 2 // w
    return align(e + e // k.dma_fp8_quant_block * 4, k.dma_scratch_align)


def built(cfg: DeploymentConfig, k: StackConstants) -> bool:
    w = cfg.parallel.tp
    if not cfg.comm.pcie_allreduce or cfg.comm.dma_min_bytes is None or w < k.dma_min_world_size:
        return False
    # vLLM makes the DMA object after the one-shot pool; when the one-shot pool fails its residency check
    # (r17+) CustomAllreduce falls back to PyNCCL and returns before the DMA (custom_all_reduce.py)
    if not resident(k.oneshot_required_sms, k.max_concurrent_channels, cfg.hardware.num_sms):
        return False
    return k.dma_world_sizes is None or w in k.dma_world_sizes


def entries(ctx: Context) -> list[Draft]:
    cfg, k = ctx.config, ctx.k
    if not built(cfg, k):
        return []
    w = cfg.parallel.tp
    t = cfg.scheduler.max_num_batched_tokens
    h = cfg.model.geometry.hidden_size
    mb = max_bytes(t, h)
    cap = shard_capacity(k, mb, w)
    slab = slab_bytes(k, mb, w)
    cond = f"PCIe all-reduce on and VLLM_PCIE_DMA_MIN_BYTES={cfg.comm.dma_min_bytes} (not off), TP {w}"
    origin: Origin = "library" if ctx.lib is not None else "exact"
    out = [
        Draft(
            name="dma.slab",
            subsystem="dma",
            requested_bytes=slab,
            count=1,
            kind="ipc",
            lifetime="pre-snapshot",
            condition=cond,
            reader=f"DMA ring all-reduce for payloads >= {fmt_int(cfg.comm.dma_min_bytes or 0)} B",
            formula=(
                f"FLAG_SLOTS * FLAG_STRIDE + 2(W-1) * A256(ceil(max_bytes / W)) = {k.dma_flag_slots} * "
                f"{k.dma_flag_stride} + {2 * (w - 1)} * {fmt_int(cap)} = {fmt_int(slab)}  "
                f"[max_bytes = {t} * {h} * 2 = {fmt_int(mb)}]"
            ),
            origin=origin,
            alloc="ipc",
        ),
        Draft(
            name="dma.counters",
            subsystem="dma",
            requested_bytes=counters_bytes(k),
            count=1,
            kind="torch",
            lifetime="pre-snapshot",
            condition=cond,
            reader="DMA flag publisher/waiter counters",
            formula=f"2 * FLAG_SLOTS * 4 = 2 * {k.dma_flag_slots} * 4 = {fmt_int(counters_bytes(k))}",
            origin=origin,
            alloc="torch",
            note="packs into an open small-pool segment (measured: bf16 wire costs the slab pages only)",
        ),
    ]
    if cfg.comm.compressed_wire:
        st = stage_bytes(k, mb, w)
        e = mb // 2 // w
        out.append(
            Draft(
                name="dma.fp8_stage",
                subsystem="dma",
                requested_bytes=st,
                count=1,
                kind="torch",
                lifetime="pre-snapshot",
                condition=f"compressed wire mode {cfg.comm.dma_wire_mode!r} (explicit opt-in)",
                reader="compressed DMA all-gather / ring hops",
                formula=(
                    f"W * A256(e + floor(e/128)*4) = {w} * A256({fmt_int(e)} + {fmt_int(e // 128 * 4)}) "
                    f"= {fmt_int(st)}  [e = floor(max_bytes / 2 / W)]"
                ),
                origin=origin,
                alloc="torch",
            )
        )
    return out
