"""The typed deployment configuration.

One frozen pydantic model, :class:`DeploymentConfig`, holds everything a GLM-5.2 deployment decides:
model, expected hardware, parallelism, scheduler, speculative decoding, memory, communication pools,
sparse indexer, runner, CUDA graphs, the library stack, and free-form ``env`` / ``vllm_args``.
Every section forbids unknown keys, so a typo is an error (with "did you mean") rather than a silently
ignored setting. Cross-field rules that need several sections live in :mod:`glmlaunch.config.validate`.
Every field carries a description: ``glmlaunch profiles schema`` gives them to editors.

Sizes are :data:`ByteSize` (bytes; human units accepted, read by :func:`.units.parse_size`).

No ``from __future__ import annotations`` here: pydantic would have to evaluate every annotation string
again when it builds the models, which every command that resolves a configuration pays at start-up.
"""

from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from glmlaunch import no_plugin_scan
from glmlaunch.config.checkpoints import known_tiers
from glmlaunch.config.limits import MAX_CAPTURE_SIZE, MAX_TOKENS
from glmlaunch.config.releases import (
    RELEASE_PATTERN,
    STACK_ALIASES,
    STACKS,
    StackName,
    canonical_release,
    canonical_stack,
    release_of,
)
from glmlaunch.config.units import GIB, KIB, MIB, parse_size

# The models below are built as the module runs: the scan stays off until the end of the module.
_models_built = no_plugin_scan()
_models_built.__enter__()

Stack = StackName
Runner = Literal["v1", "v2"]
KvCacheDtype = Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_ds_mla", "nvfp4_ds_mla"]
DmaWireMode = Literal["0", "ag", "ring", "a2a", "i8", "i8_ring", "i8_a2a", "mx", "mx_ring", "mx_a2a"]
FoldMode = Literal["auto", "0", "1"]
DraftSampleMethod = Literal["greedy", "probabilistic"]
CudagraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]
#: NVFP4 MLA KV scale contract: "static" (upstream's static-calibrated scales, bf16 RoPE: the 432 B record)
#: or "dynamic-token" (per-token scales, FP8 RoPE: the 368 B record the launcher logs).
KvScaleMode = Literal["static", "dynamic-token"]


def _scale_alias(value: object) -> object:
    # upstream's configurator spells the static contract "static-calibrated"
    if isinstance(value, str) and value.strip().lower() == "static-calibrated":
        return "static"
    return value


#: Online quantization of the checkpoint's BF16 linears at load: EXL3 Trellis K6 (``exl3-b6``) or MXFP8.
OnlineQuant = Literal["none", "exl3-b6", "mxfp8"]
#: Other spellings of an online quantization, each the same request: the launchers from Infernal
#: Invocation r16 take ``trellis-mcg-b6`` for exl3-b6 (the same JSON and variables: blackwell-llm-docker
#: launchers/serve-glm52-v16.sh@d568788 L189-207, ``trellis-mcg-b6|exl3-b6)``).
ONLINE_QUANT_ALIASES: dict[str, OnlineQuant] = {"trellis-mcg-b6": "exl3-b6"}


def _online_quant_alias(value: object) -> object:
    if isinstance(value, str):
        return ONLINE_QUANT_ALIASES.get(value.strip().lower(), value)
    return value
#: How the MTP drafter samples accepted tokens (vLLM's ``rejection_sample_method``).
RejectionSampleMethod = Literal["standard", "block"]
#: Where the MTP draft comes from: the checkpoint's own MTP layer with no ``model`` key (``native``), or
#: the target's path written as the draft ``model`` (``target``, the r12 launcher chain's spelling).
DraftSource = Literal["native", "target"]

#: wire modes that quantize the all-reduce payload and therefore change model numerics.
COMPRESSED_WIRE_MODES: frozenset[str] = frozenset(
    {"ag", "ring", "a2a", "i8", "i8_ring", "i8_a2a", "mx", "mx_ring", "mx_a2a"}
)

GLM52_INDEX_TOPK_PATTERN = "FFFSSS" + "FSSS" * 18


def _ci(word: str) -> str:
    """A case-insensitive regex for ``word`` that JSON Schema's ECMA-262 dialect reads (no ``(?i)``)."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in word)


def _words(*words: str) -> str:
    return "|".join(_ci(w) for w in words)


# The JSON Schema spellings of what the validators below accept (tests/config/test_profile_schema.py
# checks each against the tool): sizes exactly as units.parse_size reads them, the aliases, lists
# written as strings.
SIZE_PATTERN = (
    r"^\s*(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*[KkMmGgTt](?:[Ii]?[Bb])?"
    r"|(?:[0-9]+(?:\.0*)?|\.0+)\s*[Bb]?)\s*$"
)
OFF_PATTERN = rf"^\s*(?:{_words('off', 'none', 'null')})\s*$"
WIRE_ALIAS_PATTERN = rf"^\s*(?:{_words('bf16', 'off', 'none', 'false')})?\s*$"
FOLD_ALIAS_PATTERN = rf"^\s*(?:{_words('off', 'false', 'no', 'on', 'true', 'yes', 'force')})\s*$"
INT_LIST_PATTERN = r"^\s*\[?\s*[0-9]+(?:\s*,\s*[0-9]+)*\s*,?\s*\]?\s*$"

# Values from --set and GLMLAUNCH_* arrive as text and pydantic reads numbers and booleans from it
# ("8", "0.95", "yes"); profiles may quote them the same way. The schema accepts those spellings too, so
# an editor never flags a value the tool takes. Patterns: pydantic's lax string forms (checked against
# pydantic in tests/config/test_profile_schema.py).
LAX_BOOL_PATTERN = rf"^(?:[01]|{_words('on', 'off', 'true', 'false', 'yes', 'no', 't', 'f', 'y', 'n')})$"
LAX_INT_PATTERN = r"^\s*[+-]?[0-9](?:_?[0-9])*(?:\.0+)?\s*$"
LAX_FLOAT_PATTERN = (
    r"^\s*[+-]?(?:[0-9](?:_?[0-9])*(?:\.(?:[0-9](?:_?[0-9])*)?)?|\.[0-9](?:_?[0-9])*)"
    r"(?:[eE][+-]?[0-9](?:_?[0-9])*)?\s*$"
)


def _lax_int(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "string", "pattern": LAX_INT_PATTERN}]}


def _accepts(schema: dict[str, Any]) -> WithJsonSchema:
    """The spellings a profile may write; the serialized form (``config --json``) keeps pydantic's own."""
    return WithJsonSchema(schema, mode="validation")


_SIZE_JSON: dict[str, Any] = {
    "anyOf": [
        {"type": "integer", "minimum": 0, "maximum": 1 << 62},
        {"type": "string", "pattern": SIZE_PATTERN},
    ]
}

ByteSize = Annotated[
    int,
    BeforeValidator(parse_size),
    PlainSerializer(lambda v: v, return_type=int),
    _accepts(_SIZE_JSON),
]
"""A size in bytes that accepts human units in profiles, env vars and ``--set``."""


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
    """GLM-5.2's config.json facts that size the pools and plans (docs/memory-model.md §7)."""

    architecture: str = Field("GlmMoeDsaForCausalLM", description="the model class in config.json")
    hidden_size: int = Field(6144, gt=0, description="hidden size (config.json hidden_size)")
    num_hidden_layers: int = Field(78, gt=0, description="decoder layers (config.json num_hidden_layers)")
    num_attention_heads: int = Field(
        64, gt=0, description="attention heads; divided by parallel.tp per rank, gathered over DCP"
    )
    kv_lora_rank: int = Field(
        512, gt=0, description="MLA compressed-KV rank (the latent part of a KV record)"
    )
    qk_rope_head_dim: int = Field(64, gt=0, description="MLA RoPE part of a query/key head")
    qk_nope_head_dim: int = Field(192, gt=0, description="MLA non-RoPE part of a query/key head")
    v_head_dim: int = Field(256, gt=0, description="value head dimension")
    index_n_heads: int = Field(32, gt=0, description="sparse-indexer heads (sizes the indexer scratch)")
    index_head_dim: int = Field(128, gt=0, description="sparse-indexer head dimension")
    index_topk: int = Field(2048, gt=0, description="tokens the sparse indexer selects per query")
    index_topk_pattern: str = Field(
        GLM52_INDEX_TOPK_PATTERN,
        pattern=r"^[FS]+$",
        description=(
            "one letter per layer: F = full indexer, S = sparse (shared top-k); passed to vLLM in "
            "--hf-overrides"
        ),
    )
    num_mtp_layers: int = Field(
        1, ge=0, description="multi-token-prediction (draft) layers in the checkpoint"
    )
    q_lora_rank: int = Field(
        2048, gt=0, description="MLA query down-projection rank (config.json q_lora_rank)"
    )
    first_k_dense_replace: int = Field(
        3, ge=0, description="leading dense (non-MoE) layers (config.json first_k_dense_replace)"
    )
    n_routed_experts: int = Field(256, gt=0, description="routed experts per MoE layer")
    moe_intermediate_size: int = Field(2048, gt=0, description="intermediate size of one routed expert")
    vocab_size: int = Field(
        154_880, gt=0, description="vocabulary size (config.json vocab_size): sizes prompt-logprob logits"
    )
    max_position_embeddings: int = Field(
        1_048_576, gt=0, le=MAX_TOKENS, description="longest context the model supports (config.json)"
    )

    @model_validator(mode="after")
    def _pattern_covers_layers(self) -> "ModelGeometry":
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
    """The checkpoint `vllm serve` loads."""

    path: str | None = Field(None, description="local directory or hub id passed to `vllm serve`")
    revision: str | None = Field(None, description="hub revision (commit) to load: --revision")
    served_name: str | None = Field(None, description="the name clients request: --served-model-name")
    quantization: str | None = Field(
        None, description="vLLM quantization method (--quantization), e.g. exl3; exl3 enables the EXL3 terms"
    )
    load_format: str | None = Field(None, description="vLLM --load-format, e.g. safetensors")
    trust_remote_code: bool = Field(True, description="pass --trust-remote-code (GLM-5.2 ships its own code)")
    weights_per_rank: ByteSize | None = Field(
        None,
        description=(
            "device bytes of weights per rank ('Model loading took'); when set it is final: the budget uses "
            "exactly this figure, over calibration records and the built-in weights table"
        ),
    )
    absorb_bmm: bool | None = Field(
        None,
        description=(
            "VLLM_B12X_ABSORB_BMM; null follows model.online_quant (off with exl3-b6, on with mxfp8, unset "
            "otherwise)"
        ),
    )
    online_quant: Annotated[
        OnlineQuant,
        BeforeValidator(_online_quant_alias),
        _accepts({"enum": [*get_args(OnlineQuant), *ONLINE_QUANT_ALIASES]}),
    ] = Field(
        "none",
        description=(
            "quantize the checkpoint's BF16 linears while loading: exl3-b6 (EXL3 Trellis K6, about 4.6 GiB "
            "less per rank on GLM-5.2; trellis-mcg-b6 is the same, as the Infernal Invocation launchers "
            "spell it) or mxfp8; adds --quantization-config and the online-quant variables"
        ),
    )
    expert_bits: list[Annotated[int, Field(ge=1, le=8)]] | None = Field(
        None,
        description=(
            "the EXL3 bit tiers the routed experts are stored in, e.g. [3, 4, 5] for the R7 mixed-K3/K4/K5 "
            "checkpoint; null: known checkpoints by name (glmlaunch/config/checkpoints.py), else unknown"
        ),
    )
    clamp_rope_tables: bool = Field(
        False,
        description=(
            "size the RoPE tables for scheduler.max_model_len instead of the model's 1,048,576 positions "
            "(max_position_embeddings in --hf-overrides)"
        ),
    )
    geometry: ModelGeometry = Field(
        ModelGeometry(), description="the model's shape as config.json gives it (GLM-5.2 by default)"
    )


class HardwareSection(_Section):
    """What the deployment expects to run on; `check` compares this with the real inventory."""

    gpu_model: str = Field(
        "NVIDIA RTX PRO 6000 Blackwell Server Edition", description="GPU name as NVML reports it"
    )
    gpu_count: int = Field(4, ge=1, description="GPUs the deployment expects to see")
    memory_per_gpu: ByteSize = Field(
        round(95.01 * GIB), gt=0, description="usable device memory per GPU as cudaMemGetInfo reports it"
    )
    compute_capability: str = Field(
        "12.0", pattern=r"^[0-9]+\.[0-9]+$", description='CUDA compute capability, quoted: "12.0" (sm120)'
    )
    num_sms: int = Field(188, gt=0, description="streaming multiprocessors per GPU")
    pcie_generation: int = Field(5, ge=1, description="PCIe generation each GPU's slot should run at")
    pcie_width: int = Field(16, ge=1, description="PCIe lanes each GPU's slot should run at")
    min_driver: str | None = Field(
        None,
        pattern=r"^[0-9]+(\.[0-9]+)*$",
        description="lowest NVIDIA driver version accepted, e.g. 590.48.01",
    )
    min_cuda: str | None = Field(
        None,
        pattern=r"^[0-9]+(\.[0-9]+)*$",
        description='lowest CUDA version the driver must support, quoted: "13.2"',
    )


class ParallelSection(_Section):
    """Tensor and decode-context parallelism, and the GPUs they run on."""

    tp: int = Field(4, ge=1, description="tensor-parallel size")
    dcp: int = Field(1, ge=1, description="decode-context-parallel size (must divide tp)")
    gpus: Annotated[
        list[Annotated[int, Field(ge=0)]] | None,
        _accepts(
            {
                "anyOf": [
                    {"type": "array", "items": _lax_int({"type": "integer", "minimum": 0}), "minItems": 1},
                    {"type": "integer", "minimum": 0},
                    {"type": "string", "pattern": r"^\s*[0-9]+\s*(?:,\s*[0-9]+\s*)*$"},
                    {"type": "null"},
                ]
            }
        ),
    ] = Field(
        None,
        description=(
            "physical GPU indices (PCI bus order) for CUDA_VISIBLE_DEVICES: a list, one index, or "
            '"0,1,2,3"; default 0..tp-1'
        ),
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
    """vLLM's scheduler limits."""

    max_num_batched_tokens: int = Field(
        8192, ge=1, le=MAX_TOKENS, description="tokens one scheduler step may run (prefill chunk size)"
    )
    max_num_seqs: int = Field(256, ge=1, le=MAX_TOKENS, description="sequences decoded at once")
    max_model_len: int = Field(131072, ge=1, le=MAX_TOKENS, description="longest request (prompt + output)")
    enable_chunked_prefill: bool = Field(True, description="split long prompts into batched-token chunks")
    enable_prefix_caching: bool = Field(True, description="reuse KV blocks of shared prompt prefixes")
    async_scheduling: bool = Field(False, description="vLLM's asynchronous scheduling (off on this stack)")
    prompt_logprobs: bool = Field(
        False,
        description=(
            "clients may ask for prompt logprobs: the plan charges one chunk of fp32 logits over the "
            "vocabulary to the runtime demand (vLLM cannot turn the request parameter off)"
        ),
    )


class SpeculativeSection(_Section):
    """Multi-token prediction (MTP) speculative decoding."""

    method: Literal["mtp"] = Field("mtp", description="speculative method; GLM-5.2 uses its MTP layer")
    num_speculative_tokens: int = Field(0, ge=0, le=16, description="MTP k; 0 disables speculation")
    draft_sample_method: DraftSampleMethod = Field("greedy", description="how the draft samples its tokens")
    moe_backend: str | None = Field(None, description="MoE backend of the draft model (e.g. triton)")
    model: str | None = Field(
        None, description="an external draft model (its path or hub id); null uses `draft`"
    )
    draft: DraftSource = Field(
        "native",
        description=(
            "with no draft model: native (the checkpoint's own MTP layer, no model key in "
            "--speculative-config) or target (model.path written as the draft model, as the r12 chain did)"
        ),
    )
    rejection_sample_method: RejectionSampleMethod | None = Field(
        None, description="MTP rejection sampling: standard or block (null: vLLM's default, not written)"
    )


class AllocatorSection(_Section):
    """torch's caching allocator (PYTORCH_CUDA_ALLOC_CONF)."""

    expandable_segments: bool = Field(
        True, description="expandable segments (changes every torch footprint; forced off with LMCache)"
    )
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
    """The memory budget: how much vLLM may take, the KV cache, and the margin every rank keeps."""

    gpu_memory_utilization: float = Field(
        0.9, gt=0.0, le=1.0, description="GMU: the fraction of device memory vLLM may reserve"
    )
    kv_cache_memory_bytes: ByteSize | None = Field(
        None, description="pin the KV cache size; gpu_memory_utilization then only gates the start"
    )
    kv_cache_dtype: KvCacheDtype = Field("auto", description="KV cache element type: --kv-cache-dtype")
    allocator: AllocatorSection = Field(
        AllocatorSection(), description="torch caching-allocator settings (PYTORCH_CUDA_ALLOC_CONF)"
    )
    min_margin: ByteSize = Field(
        1 * GIB, description="steady-state margin every rank must keep after everything budgeted"
    )
    min_runtime_margin: ByteSize = Field(
        0,
        description=(
            "memory every rank must still have free at the peak of the runtime demand (one max_model_len "
            "prefill beside max_num_seqs - 1 decodes); the demand already holds the transient that fails"
        ),
    )
    estimate_cudagraphs: bool = Field(
        True, description="vLLM subtracts its CUDA-graph estimate from the KV budget"
    )
    profile_include_attn: bool = Field(
        True, description="vLLM's profile pass includes the attention transients"
    )
    kv_scale_mode: Annotated[
        KvScaleMode | None,
        BeforeValidator(_scale_alias),
        _accepts({"anyOf": [{"enum": ["static", "dynamic-token", "static-calibrated"]}, {"type": "null"}]}),
    ] = Field(
        None,
        description=(
            "NVFP4 MLA KV scale contract (nvfp4_ds_mla only; ignored with a note for other KV types): "
            "'static' (static-calibrated scales, bf16 RoPE: 432 B record), 'dynamic-token' (per-token "
            "scales, FP8 RoPE: 368 B record); null = static, nothing exported"
        ),
    )
    num_gpu_blocks_override: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description=(
            "pin the KV pool to this many blocks per rank (--num-gpu-blocks-override): it then holds "
            "blocks x 64 x DCP tokens whatever memory is free; null = vLLM sizes the pool from "
            "gpu_memory_utilization"
        ),
    )


class NcclSection(_Section):
    """NCCL settings for a single PCIe host; null leaves a variable unset."""

    proto: str | None = Field("LL,LL128,Simple", description="NCCL_PROTO")
    p2p_level: str | None = Field("SYS", description="NCCL_P2P_LEVEL")
    ib_disable: bool = Field(True, description="NCCL_IB_DISABLE: no InfiniBand on a PCIe box")
    socket_ifname: str | None = Field(
        "lo", description="NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME (the bootstrap interface)"
    )
    cumem_enable: bool | None = Field(
        None,
        description=(
            "NCCL_CUMEM_ENABLE: NCCL's cuMem allocator (the Infernal Invocation image sets 0, the legacy "
            "cudaMalloc buffers; no Gilded Gnosis image sets it); null leaves the image's choice"
        ),
    )
    buffsize: ByteSize | None = Field(
        None,
        description=(
            "NCCL_BUFFSIZE: bytes per channel buffer (NCCL's default 4 MiB); 1 MiB returned about 208 MiB "
            "per GPU on the rig (upstream r17); null leaves it unset"
        ),
    )


class LmcacheSection(_Section):
    """LMCache prefix offload (used when ``lmcache`` is true): its server, the connector vLLM gets, its tiers.

    ``serve --supervise`` starts the server (``server: managed``, the default) with the arguments the
    wrapper named by ``wrapper`` derives, before vLLM, and drains it after vLLM (glmlaunch.lmcache). Null
    ports, chunk size, DRAM tier and disk path are derived as that wrapper derives them: the ports offset by
    ``server.port - 8000``, the chunk by DCP (docs/configuration.md "LMCache").
    """

    server: Literal["managed", "external"] = Field(
        "managed",
        description=(
            "managed: `serve` starts the LMCache server before vLLM and stops it after (a supervised "
            "launch); external: a server runs already, and `serve` checks its port answers before vLLM starts"
        ),
    )
    wrapper: Literal["appliance", "release"] = Field(
        "appliance",
        description=(
            "whose LMCache wrapper the server command and the connector follow: appliance "
            "(malaiwah/glm52-exl3-vast scripts/glm52_lmcache_wrapper.sh) or release "
            "(local-inference-lab/blackwell-llm-docker launchers/lmcache-mp-wrapper.sh)"
        ),
    )
    host: str = Field("127.0.0.1", description="LMCache server address (lmcache.mp.host; server --host)")
    port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="LMCache server port (lmcache.mp.port); null: 5555 + the API port offset",
    )
    http_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="the server's HTTP port (/healthcheck); null: 8089 (appliance) / 8099 (release) + offset",
    )
    prometheus_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="the server's Prometheus port (appliance wrapper only); null: 9090 + API port offset",
    )
    chunk_size: int | None = Field(
        None, ge=1, description="LMCache chunk tokens (--chunk-size); null: 384 at DCP 3 or 6, else 512"
    )
    offload_fraction: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description=(
            "share of host memory for LMCache's DRAM tier (appliance wrapper: L1 = this x min(MemTotal, "
            "cgroup limit), at least 1 GiB)"
        ),
    )
    l1_gb: int | None = Field(
        None,
        ge=1,
        description=(
            "LMCache's DRAM tier in GiB (--l1-size-gb); null: offload_fraction of host memory (appliance) "
            "or 24 (release)"
        ),
    )
    disk_gb: int = Field(
        0, ge=0, description="LMCache's bounded NVMe tier in GiB (LMCACHE_L2_GB); 0 keeps DRAM only"
    )
    disk_path: str | None = Field(
        None,
        description=(
            "the NVMe tier's directory (with disk_gb > 0); null: <glmlaunch cache>/lmcache/l2 (appliance) "
            "or <glmlaunch cache>/lmcache/<API port> (release)"
        ),
    )


class CommSection(_Section):
    """The PCIe all-reduce, the DMA path and the DCP all-to-all pools."""

    pcie_allreduce: bool = Field(True, description="the PCIe custom all-reduce (one-shot + DMA)")
    allreduce_backend: Literal["b12x"] = Field(
        "b12x", description="kernel library behind the PCIe all-reduce"
    )
    dma_wire_mode: Annotated[
        DmaWireMode,
        _accepts(
            {
                "anyOf": [
                    {"enum": list(get_args(DmaWireMode))},
                    {"const": False},
                    {"const": 0},
                    {"type": "string", "pattern": WIRE_ALIAS_PATTERN},
                ]
            }
        ),
        Field(
            description=(
                "DMA wire mode: '0' (also bf16, off, false, 0) is the lossless bf16 wire; the others "
                "compress the payload and need allow_compressed_wire"
            )
        ),
    ] = "0"
    allow_compressed_wire: bool = Field(
        False, description="explicit opt-in for a compressed (numerics-changing) DMA wire mode"
    )
    dma_min_bytes: Annotated[
        ByteSize | None,
        _accepts(
            {
                "anyOf": [
                    *_SIZE_JSON["anyOf"],
                    {"type": "null"},
                    {"const": False},
                    {"type": "string", "pattern": OFF_PATTERN},
                ]
            }
        ),
    ] = Field(
        6 * MIB,
        description=(
            "DMA all-reduce crossover size; off (also null, or YAML's bare off/false) builds no DMA "
            "object and no slab"
        ),
    )
    oneshot_allreduce_max_size: ByteSize = Field(64 * KIB, description="largest one-shot all-reduce payload")
    oneshot_fused_max_size: ByteSize = Field(
        84 * KIB, description="largest fused add+RMSNorm one-shot payload"
    )
    oneshot_push: bool | None = Field(
        False, description="one-shot push mode (the eager slab grows W-fold); null: not exported (off)"
    )
    oneshot_tp2_remote_push: bool | None = Field(
        None,
        description=(
            "b12x-r32: TP2 remote push (B12X_PCIE_TP2_REMOTE_PUSH; the eager slab grows 2-fold); null: not "
            "exported (the library's default, off)"
        ),
    )
    oneshot_tp4_remote_push: bool | None = Field(
        None,
        description=(
            "b12x-r32: TP4 remote push (B12X_PCIE_TP4_REMOTE_PUSH; the eager slab grows 4-fold); null: not "
            "exported (the library's default, off)"
        ),
    )
    oneshot_tp8_owner_reduce: bool | None = Field(
        None,
        description=(
            "b12x-r32: TP8 owner reduce (B12X_PCIE_TP8_OWNER_REDUCE; the eager slab grows 8-fold); null: "
            "not exported (the library's default, on)"
        ),
    )
    dcp_a2a: bool = Field(True, description="the DCP all-to-all pools (used when parallel.dcp > 1)")
    dcp_a2a_max_tokens: int = Field(
        64, ge=0, le=MAX_TOKENS, description="0 = uncapped (staging sized from batched tokens)"
    )
    single_channel: bool | None = Field(
        False, description="one channel for eager and every graph capture; null: not exported (off)"
    )
    nccl: NcclSection = Field(NcclSection(), description="NCCL variables")

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
        """E in docs/memory-model.md §2: vLLM's eager one-shot buffer size."""
        return max(self.oneshot_allreduce_max_size, self.oneshot_fused_max_size, 16)


class DcpPolicySection(_Section):
    """DCP attention policy knobs; null leaves the library's automatic choice."""

    query_split: bool | None = Field(None, description="split decode queries across the DCP group")
    query_split_min_context_tokens: int | None = Field(
        None, ge=0, le=MAX_TOKENS, description="context length from which the query split applies"
    )
    topk_owner_merge: bool | None = Field(None, description="merge the DCP top-k at the owning rank")
    ckv_gather: bool | None = Field(None, description="gather the full compressed KV (CKV) for prefill")
    ckv_gather_max_tokens: int | None = Field(
        None, ge=0, le=MAX_TOKENS, description="token cap of the compressed-KV gather"
    )
    indexer_shards: int | None = Field(
        None, ge=0, description="sparse-indexer shards across the DCP group (0: no sharding)"
    )
    ckv_prefetch_depth: int | None = Field(
        None, ge=0, description="compressed-KV prefetch depth (unsafe over a SYS PCIe topology)"
    )
    ckv_gather_min_tokens: int | None = Field(
        None, ge=0, le=MAX_TOKENS, description="prefill tokens from which the compressed-KV gather applies"
    )
    gather_in_workspace: bool | None = Field(
        None, description="gather the DCP compressed KV into vLLM's workspace arena instead of a transient"
    )
    project_before_merge: bool | None = Field(
        None,
        description=(
            "project attention outputs to v_head_dim before the DCP merge: the A2A output head dim drops "
            "from kv_lora_rank 512 to v_head_dim 256"
        ),
    )
    project_before_merge_min_prefill_tokens: int | None = Field(
        None, ge=0, le=MAX_TOKENS, description="prefill tokens from which project-before-merge applies"
    )
    ckv_prefetch_workspace_mib: int | None = Field(
        None,
        ge=0,
        description=(
            "DCP prefill / CKV prefetch workspace ceiling in MiB (the launchers' DCP_PREFILL_WORKSPACE_MIB, "
            "exported as VLLM_B12X_MLA_CKV_PREFETCH_WORKSPACE_MIB; the launchers default to 1024)"
        ),
    )


class IndexerSection(_Section):
    """The sparse attention indexer. A null value is not exported: the library's default applies."""

    sparse_indexer: bool = Field(True, description="use the kernel library's sparse indexer")
    supertile_k: int | None = Field(
        32768, ge=512, description="paged index supertile tokens (rounded up to 512); null: the library's"
    )
    max_logits_mb: int | None = Field(
        512, ge=1, description="VLLM_SPARSE_INDEXER_MAX_LOGITS_MB; null: vLLM's 512"
    )
    fold: Annotated[
        FoldMode | None,
        _accepts(
            {
                "anyOf": [
                    {"enum": list(get_args(FoldMode))},
                    {"type": "boolean"},
                    {"enum": [0, 1]},
                    {"type": "string", "pattern": FOLD_ALIAS_PATTERN},
                    {"type": "null"},
                ]
            }
        ),
        Field(
            description="two-level top-k fold: auto, 0 (also off/false/no) or 1 (also on/true/yes/force); "
            "null: the library's auto"
        ),
    ] = "auto"
    fold_max_mib: int | None = Field(
        256, ge=0, description="budget of the fold's per-call candidate slab, MiB; null: the library's 256"
    )
    fused: bool | None = Field(
        True, description="the fused decode indexer route (rows <= 16); null: the library's default (on)"
    )

    @field_validator("fold", mode="before")
    @classmethod
    def _fold(cls, value: object) -> object:
        return _fold_alias(value)

    # The values the library uses, set or not (the ledger sizes with these).
    @property
    def supertile_k_value(self) -> int:
        return 32768 if self.supertile_k is None else self.supertile_k

    @property
    def max_logits_mb_value(self) -> int:
        return 512 if self.max_logits_mb is None else self.max_logits_mb

    @property
    def fold_value(self) -> FoldMode:
        return "auto" if self.fold is None else self.fold

    @property
    def fold_max_mib_value(self) -> int:
        return 256 if self.fold_max_mib is None else self.fold_max_mib

    @property
    def fused_value(self) -> bool:
        return True if self.fused is None else self.fused


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
    online_encoder_source: str = Field(
        "/opt/exllamav3-python/exllamav3",
        description="VLLM_EXL3_ENCODER_SOURCE: the exllamav3 tree encoding online K6 (model.online_quant)",
    )
    online_cache_dir: str = Field(
        "/cache/exl3-online",
        description="VLLM_EXL3_ONLINE_CACHE_DIR: where online-K6 tensors are cached between boots",
    )
    online_cache_mode: Literal["readwrite", "read", "write", "off"] = Field(
        "readwrite", description="VLLM_EXL3_ONLINE_CACHE_MODE: how the online-K6 cache is used"
    )


class CaptureRule(_Section):
    """Capture sizes derived as ``step, 2*step, … <= max``; step null means MTP+1."""

    step: int | None = Field(None, ge=1, le=MAX_CAPTURE_SIZE, description="size step; null = MTP+1")
    max: int = Field(..., ge=1, le=MAX_CAPTURE_SIZE, description="largest capture size")


class CudagraphSection(_Section):
    """CUDA graphs: the mode and the batch sizes captured (--compilation-config)."""

    mode: CudagraphMode = Field("FULL_AND_PIECEWISE", description="vLLM cudagraph_mode")
    capture_sizes: Annotated[
        list[Annotated[int, Field(ge=1, le=MAX_CAPTURE_SIZE)]] | None,
        _accepts(
            {
                "anyOf": [
                    {
                        "type": "array",
                        "items": _lax_int({"type": "integer", "minimum": 1, "maximum": MAX_CAPTURE_SIZE}),
                        "maxItems": MAX_CAPTURE_SIZE,
                    },
                    {"type": "string", "pattern": INT_LIST_PATTERN},
                    {"type": "null"},
                ]
            }
        ),
    ] = Field(
        None,
        max_length=MAX_CAPTURE_SIZE,
        description='explicit capture sizes (a list or "4,8,12"); give this or capture_rule',
    )
    capture_rule: CaptureRule | None = Field(
        None, description="capture sizes as multiples of a step up to a maximum; give this or capture_sizes"
    )
    max_capture_size: int | None = Field(
        None,
        ge=1,
        le=MAX_CAPTURE_SIZE,
        description="--max-cudagraph-capture-size (null: not written; vLLM takes the largest capture size)",
    )
    custom_ops: list[str] = Field(["all"], description="vLLM custom_ops in the compilation config")
    fuse_allreduce_rms: bool = Field(True, description="fuse all-reduce with RMSNorm (pass_config)")

    @field_validator("capture_sizes", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [p.strip() for p in value.replace("[", "").replace("]", "").split(",") if p.strip()]
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "CudagraphSection":
        if self.capture_sizes is not None and self.capture_rule is not None:
            raise ValueError("give either capture_sizes or capture_rule, not both")
        return self


class ServerSection(_Section):
    """The OpenAI-compatible server and the vLLM backends it runs."""

    host: str = Field("0.0.0.0", description="address the server listens on: --host")
    port: int = Field(8000, ge=1, le=65535, description="port the server listens on: --port")
    attention_backend: str | None = Field("B12X_MLA_SPARSE", description="vLLM --attention-backend")
    moe_backend: str | None = Field("b12x", description="vLLM --moe-backend")
    dcp_comm_backend: str | None = Field("a2a", description="vLLM --dcp-comm-backend (with DCP > 1)")
    dcp_kv_cache_interleave_size: int | None = Field(
        1, description="vLLM --dcp-kv-cache-interleave-size (with DCP > 1)"
    )
    enable_flashinfer_autotune: bool = Field(False, description="pass --enable-flashinfer-autotune")
    enable_auto_tool_choice: bool = Field(False, description="pass --enable-auto-tool-choice")
    tool_call_parser: str | None = Field(None, description="vLLM --tool-call-parser, e.g. glm47")
    reasoning_parser: str | None = Field(None, description="vLLM --reasoning-parser, e.g. glm45")
    default_chat_template_kwargs: dict[str, str | int | float | bool] | None = Field(
        None, description="vLLM --default-chat-template-kwargs, e.g. {reasoning_effort: high}"
    )
    enable_prompt_tokens_details: bool = Field(False, description="pass --enable-prompt-tokens-details")
    enable_force_include_usage: bool = Field(False, description="pass --enable-force-include-usage")
    enable_request_id_headers: bool = Field(False, description="pass --enable-request-id-headers")
    use_index_cache: bool = Field(True, description="use_index_cache in --hf-overrides")


class DeploymentConfig(_Section):
    """The whole resolved deployment; built by ``resolve.resolve_config``."""

    description: str = Field("", description="one line saying what this profile is for")
    stack: Annotated[Stack, _accepts({"enum": [*STACKS, *STACK_ALIASES]})] = Field(
        "sparkinfer-r14",
        description=(
            "kernel-library generation: sparkinfer-r14 (releases r12-r16), sparkinfer-r28 (r17-r28), "
            "b12x-r29 (r29-r31), b12x-r32 (r32-r34), b12x-ii (Infernal Invocation ii-r16-r18), b12x-1.5 "
            "(PyPI 1.5.x, no release); decides the environment names and the ledger's constants. "
            "sparkinfer-r12 and b12x are the earlier names of sparkinfer-r14 and b12x-1.5"
        ),
    )
    runner: Runner = Field("v2", description="vLLM model runner: v1 or v2 (VLLM_USE_V2_MODEL_RUNNER)")
    lmcache: bool = Field(False, description="LMCache host offload (forces expandable_segments off)")
    lmcache_config: LmcacheSection = Field(
        LmcacheSection(), description="the LMCache connector and tiers (with lmcache: true)"
    )
    exl3_trellis_max_m: int | None = Field(None, ge=1, description="VLLM_EXL3_TRELLIS_MAX_M decode window")
    release: Annotated[
        str | None,
        _accepts({"anyOf": [{"type": "string", "pattern": RELEASE_PATTERN}, {"type": "null"}]}),
    ] = Field(
        None,
        pattern=r"^(?:ii-)?r[0-9]+$|^v[0-9]+$",
        description=(
            "the release this deployment runs, as line and number: r28 or gg-r28 (Gilded Gnosis, the "
            "gilded-gnosis v20 line; a bare rNN is Gilded Gnosis), ii-r18 (Infernal Invocation); v31 for "
            "the older v31 image line. Picks the weights measured on that release, its documented "
            "overheads, and tells calibration records of that release from others; null = the release "
            "vllm_version names, else unknown"
        ),
    )
    vllm_version: str | None = Field(
        None,
        description=(
            "the vLLM build this deployment runs (e.g. from a boot log); picks calibration terms logged by "
            "that build. Default: the installed vLLM, else unknown (terms then average over builds)"
        ),
    )
    exl3: Exl3Section = Field(Exl3Section(), description="EXL3 runtime knobs")
    model: ModelSection = Field(ModelSection(), description="the checkpoint to serve")
    hardware: HardwareSection = Field(HardwareSection(), description="the GPUs the deployment expects")
    parallel: ParallelSection = Field(ParallelSection(), description="tensor / decode-context parallelism")
    scheduler: SchedulerSection = Field(SchedulerSection(), description="vLLM scheduler limits")
    speculative: SpeculativeSection = Field(SpeculativeSection(), description="MTP speculative decoding")
    memory: MemorySection = Field(MemorySection(), description="the memory budget and the KV cache")
    comm: CommSection = Field(CommSection(), description="PCIe all-reduce, DMA and DCP all-to-all pools")
    dcp_policy: DcpPolicySection = Field(
        DcpPolicySection(), description="DCP attention policy; null values leave the library's choice"
    )
    indexer: IndexerSection = Field(IndexerSection(), description="the sparse attention indexer")
    cudagraph: CudagraphSection = Field(CudagraphSection(), description="CUDA graph mode and capture sizes")
    server: ServerSection = Field(ServerSection(), description="the server and the vLLM backends")
    # Factories that are Python functions, not the builtins dict/list: pydantic inspects a factory's
    # signature, and a builtin's is read from its text through tokenize (~2 ms of every start-up,
    # bench/RESULTS.md "Start-up", issue 22).
    env: dict[str, Annotated[str, _accepts({"type": ["string", "boolean", "number"]})]] = Field(
        default_factory=lambda: {},
        description="extra environment, passed through (booleans become 1/0, numbers their text)",
    )
    vllm_args: list[str] = Field(default_factory=lambda: [], description="extra `vllm serve` arguments")

    @field_validator("stack", mode="before")
    @classmethod
    def _stack_alias(cls, value: object) -> object:
        return canonical_stack(value) if isinstance(value, str) else value

    @field_validator("release", mode="before")
    @classmethod
    def _release_spelling(cls, value: object) -> object:
        # gg-r28 is r28 and II-R18 is ii-r18: one spelling per release, so records of one compare equal
        return canonical_release(value) if isinstance(value, str) else value

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
    def release_effective(self) -> str | None:
        """``release``, else the one the vLLM build names (``….20260730.r14`` -> r14,
        ``…infernal.invocation.cu133.r18.…`` -> ii-r18)."""
        return self.release or release_of(self.vllm_version)

    @property
    def expert_bits_effective(self) -> tuple[int, ...] | None:
        """The routed experts' EXL3 bit tiers: ``model.expert_bits``, else the known checkpoint's."""
        if self.model.expert_bits is not None:
            return tuple(sorted(set(self.model.expert_bits)))
        known = known_tiers(self.model.path)
        return known.bits if known is not None else None

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


_models_built.__exit__(None, None, None)


def _reads_size(item: object) -> bool:
    """Whether a type (or a piece of Annotated metadata) parses its value with units.parse_size."""
    if isinstance(item, BeforeValidator):
        return item.func is parse_size
    # get_args(Annotated[int, m1, m2]) is (int, m1, m2); of a union, its members.
    return any(_reads_size(arg) for arg in get_args(item))


def size_keys(model: type[BaseModel] = DeploymentConfig, prefix: str = "") -> frozenset[str]:
    """Dotted keys of every setting typed :data:`ByteSize`, so tables can show them in units."""
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        if any(_reads_size(item) for item in (info.annotation, *info.metadata)):
            keys.add(prefix + name)
        for arg in (info.annotation, *get_args(info.annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                keys |= size_keys(arg, f"{prefix}{name}.")
    return frozenset(keys)


# --- the profile format as JSON Schema (`glmlaunch profiles schema`) ----------------------------------
def profile_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a profile file: every key described, every accepted spelling."""
    from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
    from pydantic_core import core_schema

    class _ProfileSchema(GenerateJsonSchema):
        def bool_schema(self, schema: core_schema.BoolSchema) -> JsonSchemaValue:
            return {
                "anyOf": [
                    super().bool_schema(schema),
                    {"enum": [0, 1]},
                    {"type": "string", "pattern": LAX_BOOL_PATTERN},
                ]
            }

        def int_schema(self, schema: core_schema.IntSchema) -> JsonSchemaValue:
            return {"anyOf": [super().int_schema(schema), {"type": "string", "pattern": LAX_INT_PATTERN}]}

        def float_schema(self, schema: core_schema.FloatSchema) -> JsonSchemaValue:
            return {"anyOf": [super().float_schema(schema), {"type": "string", "pattern": LAX_FLOAT_PATTERN}]}

    schema = DeploymentConfig.model_json_schema(schema_generator=_ProfileSchema)
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    schema["title"] = "glmlaunch profile"
    schema["description"] = (
        "A glmlaunch deployment profile (YAML or JSON). Every key is optional: a profile sets what differs "
        "from the built-in defaults or from the profile it extends. Sizes take 1024-based units (84KB = "
        "86,016 bytes). Numbers and booleans may also be written as text, as --set and GLMLAUNCH_* "
        "variables give them."
    )
    schema["properties"]["extends"] = {
        "type": "string",
        "description": "name or relative path of the base profile",
    }
    return schema
