"""The typed deployment configuration.

One frozen pydantic model, :class:`DeploymentConfig`, holds everything a GLM-5.2 deployment decides:
model, expected hardware, parallelism, scheduler, speculative decoding, memory, communication pools,
sparse indexer, runner, CUDA graphs, the library stack, and free-form ``env`` / ``vllm_args``.
Every section forbids unknown keys, so a typo is an error (with "did you mean") rather than a silently
ignored setting. Cross-field rules that need several sections live in :mod:`glmlaunch.config.validate`.

Sizes are :data:`glmlaunch.config.units.ByteSize` (bytes, human units accepted).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from glmlaunch.config.limits import MAX_CAPTURE_SIZE, MAX_TOKENS
from glmlaunch.config.units import GIB, KIB, MIB, ByteSize

Stack = Literal["sparkinfer-r12", "b12x"]
Runner = Literal["v1", "v2"]
KvCacheDtype = Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_ds_mla", "nvfp4_ds_mla"]
DmaWireMode = Literal["0", "ag", "ring", "a2a", "i8", "i8_ring", "i8_a2a", "mx", "mx_ring", "mx_a2a"]
FoldMode = Literal["auto", "0", "1"]
DraftSampleMethod = Literal["greedy", "probabilistic"]
CudagraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]
#: NVFP4 MLA KV scale contract: "static" (calibrated per-layer scales, bf16 RoPE: 416 B record) or
#: "dynamic-token" (per-token scales, FP8 RoPE: the 368 B record the launcher logs).
KvScaleMode = Literal["static", "dynamic-token"]

#: wire modes that quantize the all-reduce payload and therefore change model numerics.
COMPRESSED_WIRE_MODES: frozenset[str] = frozenset(
    {"ag", "ring", "a2a", "i8", "i8_ring", "i8_a2a", "mx", "mx_ring", "mx_a2a"}
)

GLM52_INDEX_TOPK_PATTERN = "FFFSSS" + "FSSS" * 18


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def _wire_alias(value: object) -> object:
    # The launchers spell the lossless mode "0"; people also write bf16/off/false.
    if value is False:
        return "0"
    if isinstance(value, int) and value == 0:
        return "0"
    if isinstance(value, str) and value.strip().lower() in {"bf16", "off", "none", "false", ""}:
        return "0"
    return value


def _fold_alias(value: object) -> object:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int) and value in (0, 1):
        return str(value)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in {"off", "false", "no"}:
            return "0"
        if low in {"on", "true", "yes", "force"}:
            return "1"
    return value


class ModelGeometry(_Section):
    """GLM-5.2's config.json facts that size the pools and plans (memory-model.md §7)."""

    architecture: str = "GlmMoeDsaForCausalLM"
    hidden_size: int = Field(6144, gt=0)
    num_hidden_layers: int = Field(78, gt=0)
    num_attention_heads: int = Field(64, gt=0)
    kv_lora_rank: int = Field(512, gt=0)
    qk_rope_head_dim: int = Field(64, gt=0)
    qk_nope_head_dim: int = Field(192, gt=0)
    v_head_dim: int = Field(256, gt=0)
    index_n_heads: int = Field(32, gt=0)
    index_head_dim: int = Field(128, gt=0)
    index_topk: int = Field(2048, gt=0)
    index_topk_pattern: str = Field(GLM52_INDEX_TOPK_PATTERN, pattern=r"^[FS]+$")
    num_mtp_layers: int = Field(1, ge=0)
    max_position_embeddings: int = Field(1_048_576, gt=0, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _pattern_covers_layers(self) -> ModelGeometry:
        if len(self.index_topk_pattern) != self.num_hidden_layers:
            raise ValueError(
                f"index_topk_pattern has {len(self.index_topk_pattern)} characters but the model has "
                f"{self.num_hidden_layers} layers; write one F (full indexer) or S (sparse) per layer"
            )
        return self

    @property
    def query_head_dim(self) -> int:
        """MLA query head dim seen by the DCP collectives: kv_lora_rank + qk_rope."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def num_sparse_layers(self) -> int:
        return self.index_topk_pattern.count("S")


class ModelSection(_Section):
    path: str | None = Field(None, description="local directory or hub id passed to `vllm serve`")
    revision: str | None = None
    served_name: str | None = None
    quantization: str | None = None
    load_format: str | None = None
    trust_remote_code: bool = True
    weights_per_rank: ByteSize | None = Field(
        None, description="device bytes of weights per rank, when known (calibration or a boot log)"
    )
    geometry: ModelGeometry = ModelGeometry()


class HardwareSection(_Section):
    """What the deployment expects to run on; `check` compares this with the real inventory."""

    gpu_model: str = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    gpu_count: int = Field(4, ge=1)
    memory_per_gpu: ByteSize = Field(
        round(95.01 * GIB), description="usable device memory per GPU as cudaMemGetInfo reports it"
    )
    compute_capability: str = Field("12.0", pattern=r"^[0-9]+\.[0-9]+$")
    num_sms: int = Field(188, gt=0)
    pcie_generation: int = Field(5, ge=1)
    pcie_width: int = Field(16, ge=1)
    min_driver: str | None = Field(None, pattern=r"^[0-9]+(\.[0-9]+)*$")
    min_cuda: str | None = Field(None, pattern=r"^[0-9]+(\.[0-9]+)*$")


class ParallelSection(_Section):
    tp: int = Field(4, ge=1, description="tensor-parallel size")
    dcp: int = Field(1, ge=1, description="decode-context-parallel size (must divide tp)")
    gpus: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, description="physical GPU indices (PCI bus order) for CUDA_VISIBLE_DEVICES; default 0..tp-1"
    )

    @field_validator("gpus", mode="before")
    @classmethod
    def _split_gpu_string(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if not text:
                raise ValueError("an empty GPU list would hide every GPU; leave it unset instead")
            return [p.strip() for p in text.split(",")]
        if isinstance(value, int) and not isinstance(value, bool):
            return [value]
        return value

    @field_validator("gpus")
    @classmethod
    def _unique(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("a GPU appears twice in the list")
        if value is not None and not value:
            raise ValueError("an empty GPU list would hide every GPU; leave it unset instead")
        return value


class SchedulerSection(_Section):
    max_num_batched_tokens: int = Field(8192, ge=1, le=MAX_TOKENS)
    max_num_seqs: int = Field(256, ge=1, le=MAX_TOKENS)
    max_model_len: int = Field(131072, ge=1, le=MAX_TOKENS)
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    async_scheduling: bool = False


class SpeculativeSection(_Section):
    method: Literal["mtp"] = "mtp"
    num_speculative_tokens: int = Field(0, ge=0, le=16, description="MTP k; 0 disables speculation")
    draft_sample_method: DraftSampleMethod = "greedy"
    moe_backend: str | None = None
    model: str | None = Field(None, description="draft model; defaults to model.path")


class AllocatorSection(_Section):
    expandable_segments: bool = True
    extra: str | None = Field(
        None, description="further PYTORCH_CUDA_ALLOC_CONF options, comma separated (key:value)"
    )

    @field_validator("extra")
    @classmethod
    def _no_expandable(cls, value: str | None) -> str | None:
        if value and "expandable_segments" in value:
            raise ValueError("set memory.allocator.expandable_segments instead of repeating it in extra")
        return value

    def conf(self) -> str:
        parts = [f"expandable_segments:{'True' if self.expandable_segments else 'False'}"]
        if self.extra:
            parts.extend(p.strip() for p in self.extra.split(",") if p.strip())
        return ",".join(parts)


class MemorySection(_Section):
    gpu_memory_utilization: float = Field(0.9, gt=0.0, le=1.0)
    kv_cache_memory_bytes: ByteSize | None = Field(
        None, description="pin the KV cache size; gpu_memory_utilization then only gates the start"
    )
    kv_cache_dtype: KvCacheDtype = "auto"
    allocator: AllocatorSection = AllocatorSection()
    min_margin: ByteSize = Field(
        1 * GIB, description="steady-state margin every rank must keep after everything budgeted"
    )
    estimate_cudagraphs: bool = True
    profile_include_attn: bool = True
    kv_scale_mode: KvScaleMode | None = Field(
        None,
        description=(
            "NVFP4 MLA KV scale contract (nvfp4_ds_mla only): 'static' keeps bf16 RoPE (416 B record), "
            "'dynamic-token' per-token scales with FP8 RoPE (368 B record); null = static, nothing exported"
        ),
    )


class NcclSection(_Section):
    proto: str | None = "LL,LL128,Simple"
    p2p_level: str | None = "SYS"
    ib_disable: bool = True
    socket_ifname: str | None = "lo"


class CommSection(_Section):
    pcie_allreduce: bool = True
    allreduce_backend: Literal["b12x"] = "b12x"
    dma_wire_mode: Annotated[DmaWireMode, Field(description="'0' is the lossless bf16 wire")] = "0"
    allow_compressed_wire: bool = Field(
        False, description="explicit opt-in for a compressed (numerics-changing) DMA wire mode"
    )
    dma_min_bytes: ByteSize | None = Field(
        6 * MIB, description="DMA all-reduce crossover; null/'off' builds no DMA object and no slab"
    )
    oneshot_allreduce_max_size: ByteSize = 64 * KIB
    oneshot_fused_max_size: ByteSize = 84 * KIB
    oneshot_push: bool = False
    dcp_a2a: bool = True
    dcp_a2a_max_tokens: int = Field(
        64, ge=0, le=MAX_TOKENS, description="0 = uncapped (staging sized from batched tokens)"
    )
    single_channel: bool = False
    nccl: NcclSection = NcclSection()

    @field_validator("dma_wire_mode", mode="before")
    @classmethod
    def _wire(cls, value: object) -> object:
        return _wire_alias(value)

    @field_validator("dma_min_bytes", mode="before")
    @classmethod
    def _off(cls, value: object) -> object:
        # YAML 1.1 reads a bare `off` as false: that is the same request as the quoted "off"
        if value is None or value is False:
            return None
        if isinstance(value, str) and value.strip().lower() in {"off", "none", "null"}:
            return None
        return value

    @property
    def compressed_wire(self) -> bool:
        return self.dma_wire_mode in COMPRESSED_WIRE_MODES

    @property
    def oneshot_eager_bytes(self) -> int:
        """E in memory-model.md §2: vLLM's eager one-shot buffer size."""
        return max(self.oneshot_allreduce_max_size, self.oneshot_fused_max_size, 16)


class DcpPolicySection(_Section):
    """DCP attention policy knobs; null leaves the library's automatic choice."""

    query_split: bool | None = None
    query_split_min_context_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)
    topk_owner_merge: bool | None = None
    ckv_gather: bool | None = None
    ckv_gather_max_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)
    indexer_shards: int | None = Field(None, ge=1)
    ckv_prefetch_depth: int | None = Field(None, ge=0)
    ckv_prefetch_workspace_mib: int | None = Field(
        None,
        ge=0,
        description=(
            "DCP prefill / CKV prefetch workspace ceiling in MiB (the launchers' DCP_PREFILL_WORKSPACE_MIB, "
            "exported as VLLM_B12X_MLA_CKV_PREFETCH_WORKSPACE_MIB; the launchers default to 1024)"
        ),
    )


class IndexerSection(_Section):
    sparse_indexer: bool = True
    supertile_k: int = Field(32768, ge=512, description="paged index supertile tokens (rounded up to 512)")
    max_logits_mb: int = Field(512, ge=1, description="VLLM_SPARSE_INDEXER_MAX_LOGITS_MB")
    fold: FoldMode = "auto"
    fold_max_mib: int = Field(256, ge=0)
    fused: bool = True

    @field_validator("fold", mode="before")
    @classmethod
    def _fold(cls, value: object) -> object:
        return _fold_alias(value)


class Exl3Section(_Section):
    """EXL3 runtime knobs (only read when model.quantization is exl3)."""

    prefill_capacity: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description=(
            "VLLM_EXL3_PREFILL_CAPACITY: tokens the EXL3 prefill arenas are sized for (240 KiB/token for the "
            "target model, 320 KiB/token for the MTP drafter); null follows scheduler.max_num_batched_tokens"
        ),
    )


class CaptureRule(_Section):
    """Capture sizes derived as ``step, 2*step, … <= max``; step null means MTP+1."""

    step: int | None = Field(None, ge=1, le=MAX_CAPTURE_SIZE)
    max: int = Field(..., ge=1, le=MAX_CAPTURE_SIZE)


class CudagraphSection(_Section):
    mode: CudagraphMode = "FULL_AND_PIECEWISE"
    capture_sizes: (
        list[Annotated[int, Field(ge=1, le=MAX_CAPTURE_SIZE)]] | None
    ) = Field(None, max_length=MAX_CAPTURE_SIZE)
    capture_rule: CaptureRule | None = None
    custom_ops: list[str] = ["all"]
    fuse_allreduce_rms: bool = True

    @field_validator("capture_sizes", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [p.strip() for p in value.replace("[", "").replace("]", "").split(",") if p.strip()]
        return value

    @model_validator(mode="after")
    def _one_source(self) -> CudagraphSection:
        if self.capture_sizes is not None and self.capture_rule is not None:
            raise ValueError("give either capture_sizes or capture_rule, not both")
        return self


class ServerSection(_Section):
    host: str = "0.0.0.0"
    port: int = Field(8000, ge=1, le=65535)
    attention_backend: str | None = "B12X_MLA_SPARSE"
    moe_backend: str | None = "b12x"
    dcp_comm_backend: str | None = "a2a"
    dcp_kv_cache_interleave_size: int | None = 1
    enable_flashinfer_autotune: bool = False
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    default_chat_template_kwargs: dict[str, str | int | float | bool] | None = None
    enable_prompt_tokens_details: bool = False
    enable_force_include_usage: bool = False
    enable_request_id_headers: bool = False
    use_index_cache: bool = True


class DeploymentConfig(_Section):
    """The whole resolved deployment; built by ``resolve.resolve_config``."""

    description: str = ""
    stack: Stack = Field("sparkinfer-r12", description="library generation: decides env names and constants")
    runner: Runner = "v2"
    lmcache: bool = Field(False, description="LMCache host offload (forces expandable_segments off)")
    exl3_trellis_max_m: int | None = Field(None, ge=1, description="VLLM_EXL3_TRELLIS_MAX_M decode window")
    vllm_version: str | None = Field(
        None,
        description=(
            "the vLLM build this deployment runs (e.g. from a boot log); picks calibration terms logged by "
            "that build. Default: the installed vLLM, else unknown (terms then average over builds)"
        ),
    )
    exl3: Exl3Section = Exl3Section()
    model: ModelSection = ModelSection()
    hardware: HardwareSection = HardwareSection()
    parallel: ParallelSection = ParallelSection()
    scheduler: SchedulerSection = SchedulerSection()
    speculative: SpeculativeSection = SpeculativeSection()
    memory: MemorySection = MemorySection()
    comm: CommSection = CommSection()
    dcp_policy: DcpPolicySection = DcpPolicySection()
    indexer: IndexerSection = IndexerSection()
    cudagraph: CudagraphSection = CudagraphSection()
    server: ServerSection = ServerSection()
    env: dict[str, str] = Field(default_factory=dict, description="extra environment, passed through")
    vllm_args: list[str] = Field(default_factory=list, description="extra `vllm serve` arguments")

    @field_validator("env", mode="before")
    @classmethod
    def _stringify_env(cls, value: object) -> object:
        if isinstance(value, dict):
            out: dict[object, object] = {}
            for k, v in value.items():
                if isinstance(v, bool):
                    out[k] = "1" if v else "0"
                elif isinstance(v, int | float):
                    out[k] = str(v)
                else:
                    out[k] = v
            return out
        return value

    @property
    def mtp(self) -> int:
        return self.speculative.num_speculative_tokens

    @property
    def decode_step(self) -> int:
        """Tokens per sequence per decode step: 1 + MTP k."""
        return 1 + self.mtp

    @property
    def is_exl3(self) -> bool:
        return (self.model.quantization or "").lower() == "exl3"

    @property
    def exl3_prefill_capacity_effective(self) -> int:
        """EXL3 prefill capacity: exl3.prefill_capacity, else max_num_batched_tokens (the launchers'
        ``${VLLM_EXL3_PREFILL_CAPACITY:-${MAX_NUM_BATCHED_TOKENS}}``)."""
        cap = self.exl3.prefill_capacity
        return cap if cap is not None else self.scheduler.max_num_batched_tokens

    @property
    def kv_scale_mode_effective(self) -> KvScaleMode | None:
        """The NVFP4 scale contract in force: None when the KV dtype is not nvfp4_ds_mla."""
        if self.memory.kv_cache_dtype != "nvfp4_ds_mla":
            return None
        return self.memory.kv_scale_mode or "static"

    @property
    def gpu_list(self) -> list[int]:
        return list(self.parallel.gpus) if self.parallel.gpus is not None else list(range(self.parallel.tp))

    @property
    def local_heads(self) -> int:
        return self.model.geometry.num_attention_heads // self.parallel.tp

    @property
    def dcp_total_heads(self) -> int:
        """H of the DCP A2A staging: local heads gathered over the DCP group."""
        return self.local_heads * self.parallel.dcp

    def capture_sizes(self) -> list[int]:
        """The CUDA-graph capture sizes: given, or derived from the rule (step defaults to MTP+1)."""
        if self.cudagraph.mode == "NONE":
            return []
        if self.cudagraph.capture_sizes is not None:
            return sorted(set(self.cudagraph.capture_sizes))
        if self.cudagraph.capture_rule is not None:
            step = self.cudagraph.capture_rule.step or self.decode_step
            return list(range(step, self.cudagraph.capture_rule.max + 1, step))
        # vLLM's own default list, capped at max_num_seqs * decode step.
        cap = min(512, self.scheduler.max_num_seqs * self.decode_step)
        base = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
        return [s for s in base if s <= cap] or [1]

    @property
    def allocator_conf(self) -> str:
        alloc = self.memory.allocator
        if self.lmcache and alloc.expandable_segments:
            alloc = alloc.model_copy(update={"expandable_segments": False})
        return alloc.conf()
