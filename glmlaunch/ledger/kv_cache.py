"""The KV cache: bytes per token from GLM-5.2's MLA geometry and the KV dtype, and the budget entry.

Per layer and token, sparse MLA stores the compressed latent (kv_lora_rank = 512) and the rope part
(qk_rope = 64):

* ``auto`` / ``bfloat16``: (512 + 64) * 2 = 1,152 B (exact).
* ``fp8`` / ``fp8_e4m3`` / ``fp8_ds_mla``: the ds_mla record: 512 fp8 + 4 fp32 block scales (16 B) +
  64 bf16 rope (128 B) = 656 B. vLLM stores fp8 for a DSA model in this record.
* ``nvfp4_ds_mla`` with ``memory.kv_scale_mode`` unset or ``static`` (upstream's static-calibrated
  scales): the 432 B record upstream's configurator names ("the established BF16-RoPE 432-byte record",
  malaiwah/glm52-exl3-vast scripts/glm_config.py KV_SCALE_MODE), which its r5-era boot confirms: 9.15 GiB
  for 265,152 tokens per rank is 37,033-37,073 B/token against 79 x 432 + 22 x 132 = 37,032
  (TEST_RESULTS.md, the 3,072-batch row). 512 fp4 (256 B) + one e4m3 scale per 16 (32 B) + 64 bf16 rope
  (128 B) is 416 B: the record carries 16 B more (its outer scale and padding).
* ``nvfp4_ds_mla`` with ``memory.kv_scale_mode: dynamic-token`` (per-token scales, FP8 RoPE): 368 B, the
  record the launcher and the library log (``FP8-RoPE 368-byte record``, ``kv_gmem_stride=368``). With
  it, every logged ``GPU KV cache size`` of the TP4/DCP4 boot logs is reproduced exactly from the logged
  ``Available KV cache memory`` (whole 64-token blocks per rank, times DCP).

The indexer keeps its own K cache (index_head_dim 128 fp8 + a 4 B scale = 132 B) on the layers that run
the full indexer (``F`` in index_topk_pattern, plus the MTP layer). Layers with KV: num_hidden_layers,
plus the MTP layers when speculative decoding is on (the drafter's own cache). With DCP, each rank
holds 1/DCP of every sequence's tokens (interleave 1).

``dcp_policy.indexer_shards`` = s with 1 <= s < DCP splits the indexer over s replica groups
(``_needs_indexer_replica_groups``: ``1 <= indexer_shards < dcp_size``, vLLM ``parallel_state.py``, B:
``patches/releases/gilded-gnosis-v20-r34/vllm/integration.patch`` L9695-9761 at local-inference-lab/
blackwell-llm-docker@3dd078a): each rank then keeps the indexer K cache of 1/s of the tokens instead of
1/DCP, so the indexer part of the record counts DCP/s times per DCP-local token. 0 (or s >= DCP) keeps it
DCP-sharded like the latent. The appliance's matched r25/r26 A/B measures it: r26's two-shard policy took
the 3.36 bpw auto pool from 771,584 to 717,312 tokens (malaiwah/glm52-exl3-vast@eba43a5 TEST_RESULTS.md
L1293-1295); the record grows from 37,032 to 39,936 B, which predicts 715,474 (-0.26 %).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.model import Origin


@dataclass(frozen=True, slots=True)
class KvGeometry:
    record_bytes: int
    record_formula: str
    record_origin: Origin
    kv_layers: int
    index_layers: int
    index_record_bytes: int
    bytes_per_token: int  # all layers, one rank, before DCP sharding
    formula: str
    origin: Origin


#: the dynamic-token / FP8-RoPE NVFP4 MLA record (logged: "FP8-RoPE 368-byte record", kv_gmem_stride=368)
NVFP4_DYNAMIC_RECORD = 368
#: the static-calibrated BF16-RoPE NVFP4 MLA record (upstream's configurator; the r5 capacity agrees)
NVFP4_STATIC_RECORD = 432


def _record(dtype: str, lora: int, rope: int, scale_mode: str | None = None) -> tuple[int, str, Origin]:
    if dtype in ("auto", "bfloat16"):
        return (lora + rope) * 2, f"({lora} + {rope}) * 2", "exact"
    if dtype in ("fp8", "fp8_e4m3", "fp8_ds_mla"):
        return lora + (lora // 128) * 4 + rope * 2, f"{lora} + {lora}/128*4 + {rope}*2", "exact"
    # nvfp4_ds_mla
    if scale_mode == "dynamic-token":
        return (
            NVFP4_DYNAMIC_RECORD,
            f"dynamic-token FP8-RoPE record, logged: launcher + kv_gmem_stride={NVFP4_DYNAMIC_RECORD}",
            "exact",
        )
    return (
        NVFP4_STATIC_RECORD,
        f"static-calibrated BF16-RoPE record: {lora}/2 + {lora}/16 + {rope}*2 + 16 B outer scale/padding "
        f"= {NVFP4_STATIC_RECORD} (upstream glm_config.py; r5 capacity 9.15 GiB / 265,152 tokens per rank)",
        "exact",
    )


@lru_cache(maxsize=256)
def _geometry(
    dtype: str,
    lora: int,
    rope: int,
    layers: int,
    pattern: str,
    mtp_layers: int,
    index_head_dim: int,
    scale_mode: str | None = None,
    dcp: int = 1,
    index_shards: int = 0,
) -> KvGeometry:
    rec, rec_f, rec_o = _record(dtype, lora, rope, scale_mode)
    index_layers = pattern.count("F") + mtp_layers
    kv_layers = layers + mtp_layers
    idx = index_head_dim + 4
    replicas = index_replicas(dcp, index_shards)
    total = kv_layers * rec + index_layers * idx * replicas
    shards = (
        f" x {replicas} (indexer over {index_shards} shard(s) of DCP {dcp}: each rank keeps 1/{index_shards} "
        "of the tokens' indexer cache)"
        if replicas > 1
        else ""
    )
    formula = (
        f"{kv_layers} layers * {rec} B ({dtype}: {rec_f}) + {index_layers} indexer layers * {idx} B "
        f"({index_head_dim} fp8 + 4 B scale){shards} = {total:,} B/token"
    )
    return KvGeometry(rec, rec_f, rec_o, kv_layers, index_layers, idx, total, formula, rec_o)


def index_replicas(dcp: int, shards: int) -> int:
    """How many DCP-local shares of the indexer cache one rank keeps: DCP / s for 1 <= s < DCP, else 1."""
    if 1 <= shards < dcp:
        return -(-dcp // shards)
    return 1


def geometry(cfg: DeploymentConfig) -> KvGeometry:
    g = cfg.model.geometry
    mtp_layers = g.num_mtp_layers if cfg.mtp > 0 else 0
    return _geometry(
        cfg.memory.kv_cache_dtype,
        g.kv_lora_rank,
        g.qk_rope_head_dim,
        g.num_hidden_layers,
        g.index_topk_pattern,
        mtp_layers,
        g.index_head_dim,
        cfg.kv_scale_mode_effective,
        cfg.parallel.dcp,
        cfg.dcp_policy.indexer_shards or 0,
    )


def tokens_per_rank(cfg: DeploymentConfig, seq_len: int, block: int = 64) -> int:
    """Tokens of one sequence held by one rank, rounded to whole 64-token blocks."""
    per_rank = -(-seq_len // cfg.parallel.dcp)
    return -(-per_rank // block) * block


def request_bytes(cfg: DeploymentConfig, bytes_per_token: int) -> int:
    return tokens_per_rank(cfg, cfg.scheduler.max_model_len) * bytes_per_token


KV_BLOCK = 64


def pool_bytes(cfg: DeploymentConfig, bytes_per_token: int, natural: int) -> int:
    """Bytes of the KV pool per rank: ``--num-gpu-blocks-override`` blocks when pinned, else ``natural``.

    vLLM sizes the pool from the memory it measured (``natural``: R - W - P - N - G_e, or
    ``--kv-cache-memory-bytes``) and then replaces the block count with the override, whatever memory is
    left ("Overriding num_gpu_blocks=N with num_gpu_blocks_override=M"); its one-request check ran on the
    measured memory before that.
    """
    blocks = cfg.memory.num_gpu_blocks_override
    if blocks is None:
        return natural
    return blocks * KV_BLOCK * bytes_per_token


def pool_tokens(cfg: DeploymentConfig) -> int | None:
    """Logical tokens a pinned pool holds: blocks x 64 x DCP (None when vLLM sizes the pool)."""
    blocks = cfg.memory.num_gpu_blocks_override
    return None if blocks is None else blocks * KV_BLOCK * cfg.parallel.dcp


def tokens_for(kv_bytes: int, bytes_per_token: int, dcp: int, block: int = KV_BLOCK) -> int:
    """Tokens vLLM's KV cache holds: whole blocks of ``block`` tokens per rank, times DCP.

    The real r14 TP4/DCP4 logs match this to the token (e.g. 1,004 blocks of 64 tokens on each of 4 ranks
    for the MTP-3 boot's 1.91 GiB at 31,976 B/token/rank: 257,024 tokens).
    """
    if bytes_per_token <= 0 or kv_bytes <= 0:
        return 0
    return int(kv_bytes // (block * bytes_per_token) * block * dcp)
