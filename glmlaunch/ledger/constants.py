"""Library constants, versioned per kernel stack.

Each :class:`StackConstants` row is a frozen copy of the numbers the ledger needs from one library
generation. ``sparkinfer-r12`` is the sparkinfer tree at commit de04125 (the r12 release image);
``b12x`` is PyPI ``b12x`` 1.5.x. Where a value was measured rather than read from source, the row says so.
When ``b12x`` can be imported, :mod:`glmlaunch.ledger.b12x_bridge` replaces the ``b12x`` row with the
installed library's own values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

KIB = 1024
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class StackConstants:
    stack: str
    version: str
    source: str
    env_prefix: str
    ipc_align: int
    # one-shot all-reduce (pcie_oneshot)
    oneshot_signal_bytes: int
    oneshot_rank_data_bytes: int
    oneshot_rank_data_used_bytes: int
    oneshot_world_sizes: tuple[int, ...]
    # True: b12x >= 1.5 reserves one eager shard per source rank on some topologies by default
    oneshot_topology_shards: bool
    # DMA ring all-reduce (pcie_dma)
    dma_flag_slots: int
    dma_flag_stride: int
    dma_scratch_align: int
    dma_fp8_quant_block: int
    dma_min_world_size: int
    dma_world_sizes: tuple[int, ...] | None
    # DCP all-to-all (pcie_dcp_a2a)
    dcp_a2a_signal_bytes: int
    dcp_a2a_signal_origin: str
    dcp_a2a_world_sizes: tuple[int, ...]
    # DCP top-k owner exchange (pcie_dcp_topk)
    dcp_topk_signal_bytes: int
    dcp_topk_world_sizes: tuple[int, ...]
    # paged indexer scratch (dsa_indexer / nsa_indexer scratch.py)
    indexer_scratch_align: int
    indexer_tile_block_q: int
    indexer_tile_block_k: int
    indexer_supertile_default: int
    indexer_head_dim: int
    indexer_scale_bytes: int
    indexer_fused_max_rows_glm32: int
    indexer_fused_max_rows: int
    indexer_fused_merge_state_bytes_per_row: int
    # two-level fold (paged.py)
    fold_slice_tokens: int
    fold_max_slices: int
    fold_budget_mib_default: int
    page_size: int


SPARKINFER_R12 = StackConstants(
    stack="sparkinfer-r12",
    version="de04125508c75e748016493f851e6bd4513b515b",
    source="built-in table: sparkinfer tree de04125 (r12 release image)",
    env_prefix="SPARKINFER_",
    ipc_align=256,
    oneshot_signal_bytes=150_528,
    oneshot_rank_data_bytes=8 * MIB,
    oneshot_rank_data_used_bytes=2 * 128,  # two RankData records of kMaxRanks=16 pointers
    oneshot_world_sizes=(2, 4, 6, 8, 10),
    oneshot_topology_shards=False,
    dma_flag_slots=256,
    dma_flag_stride=128,
    dma_scratch_align=256,
    dma_fp8_quant_block=128,
    dma_min_world_size=2,
    dma_world_sizes=None,
    # meta_size() as measured on 2x H200 at de04125; the seed's arithmetic used 1 KiB.
    dcp_a2a_signal_bytes=133_120,
    dcp_a2a_signal_origin="measured meta_size() at de04125",
    dcp_a2a_world_sizes=(2, 4, 8),
    dcp_topk_signal_bytes=266_240,
    dcp_topk_world_sizes=(2, 3, 4, 6, 8),
    indexer_scratch_align=1024,
    indexer_tile_block_q=32,
    indexer_tile_block_k=512,
    indexer_supertile_default=32 * 1024,
    indexer_head_dim=128,
    indexer_scale_bytes=4,
    indexer_fused_max_rows_glm32=16,
    indexer_fused_max_rows=6,
    indexer_fused_merge_state_bytes_per_row=3088,
    fold_slice_tokens=16 * 1024,
    fold_max_slices=32,
    fold_budget_mib_default=256,
    page_size=64,
)

B12X_15 = replace(
    SPARKINFER_R12,
    stack="b12x",
    version="1.5.1",
    source="built-in table: b12x 1.5.x",
    env_prefix="B12X_",
    oneshot_topology_shards=True,
    dma_world_sizes=(2, 4, 6, 8, 10),
    # (64 blocks * 16 ranks + 2 * 64 * 16 * 32 flag words) * 4 B
    dcp_a2a_signal_bytes=(64 * 16 + 2 * 64 * 16 * 32) * 4,
    dcp_a2a_signal_origin="b12x.comm.pcie.pcie_dcp_a2a._SIGNAL_BYTES",
    dcp_a2a_world_sizes=(2, 4, 8, 9, 10, 12, 16),
    # signal_bytes(128 blocks)
    dcp_topk_signal_bytes=(128 * 16 + 2 * 128 * 16 * 32) * 4,
    # _COOP_STATE_WORDS = 8968 int32 words per row
    indexer_fused_merge_state_bytes_per_row=8968 * 4,
)

#: The seed's re-review arithmetic for the DCP A2A signal region (reproduces 14,205,952 B).
SEED_DCP_A2A_SIGNAL_BYTES = 1024

#: The r28 appliance's SparkInfer (200c1db7 = base 272a84bd + PR106 + PR117), read from its own tree: the
#: one-shot and DCP A2A ``Signal`` structs each gained an ``alignas(128)`` staging generation
#: (pcie_oneshot.cu:80-82, pcie_dcp_a2a.cu:80-81; sizes by g++ sizeof). Every other layout is de04125's.
SPARKINFER_R28 = replace(
    SPARKINFER_R12,
    stack="sparkinfer-r28",
    version="200c1db7ef98ff8bbfd4f621555326e20f42282e",
    source="built-in table: sparkinfer tree 200c1db7 (r17-r28 release images)",
    oneshot_signal_bytes=150_656,
    dcp_a2a_signal_bytes=133_248,
    dcp_a2a_signal_origin="sizeof(Signal) at 200c1db7 (pcie_dcp_a2a.cu:80)",
)

TABLE: dict[str, StackConstants] = {
    "sparkinfer-r12": SPARKINFER_R12,
    "sparkinfer-r28": SPARKINFER_R28,
    "b12x": B12X_15,
}


def for_stack(stack: str) -> StackConstants:
    return TABLE[stack]
