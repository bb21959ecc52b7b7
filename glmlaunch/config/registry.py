"""Every environment variable name glmlaunch reads or writes, declared once.

Two tables:

* :data:`TOOL_VARS`: glmlaunch's own ``GLMLAUNCH_*`` knobs (profile, overrides, paths, debugging).
  Deployment settings are also reachable as ``GLMLAUNCH_<SECTION>__<FIELD>``
  (:mod:`glmlaunch.config.resolve`).
* :data:`MANAGED`: the variables a resolved configuration produces for vLLM and the kernel library,
  per library generation (``stack``). One knob becomes every name that generation's launchers export
  (the r12 chain and the r28 appliance export the DMA wire mode as VLLM_, SPARKINFER_ and B12X_ names;
  B12X from r29 drops every SPARKINFER_ name); a setting left null is not exported at all, so the
  library's own default applies.
* :data:`KNOWN_PASSTHROUGH`: names the deployments export that glmlaunch does not make settings of, each
  with the reason (a kernel route switch, a host path, the toolchain).

Modelled on vLLM's ``envs.py``: a name, a type, a default, and a line of documentation each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from glmlaunch.config.releases import B12X_STACKS, RELEASE_BANDS, SPARKINFER_STACKS, STACKS, releases_text
from glmlaunch.config.units import GIB, KIB, MIB

if TYPE_CHECKING:
    # Annotations only: importing the schema builds the pydantic models (pydantic itself included),
    # which every command that only needs a variable's name (output.py, profiles, hw) would pay.
    from glmlaunch.config.schema import DeploymentConfig, Stack

ALL_STACKS: frozenset[Stack] = frozenset(STACKS)
#: the SparkInfer generations: their launchers export SPARKINFER_* names
SPARKINFER: frozenset[Stack] = SPARKINFER_STACKS
R28: frozenset[Stack] = frozenset({"sparkinfer-r28"})
#: B12X, from r29: B12X_* names only
B12X: frozenset[Stack] = B12X_STACKS
#: r32+: the one-shot topology transports (pcie_oneshot.py:117-132 at cd3ce190; the same code in the
#: Infernal Invocation tree 75787c7a)
B12X_R32: frozenset[Stack] = frozenset({"b12x-r32", "b12x-ii"})
#: the r28 launchers also export two B12X_* names (the supertile and the DMA wire), as B12X does
R28_B12X: frozenset[Stack] = R28 | B12X
#: name prefixes of the kernel libraries' own variables
LIBRARY_PREFIXES = ("SPARKINFER_", "B12X_")
#: library-prefixed names vLLM itself reads, whatever the generation: vLLM's CustomAllreduce falls back to
#: B12X_PCIE_DMA_FP8 when VLLM_PCIE_DMA_FP8 is unset and passes the result as fp8= (r20+ copies of
#: custom_all_reduce.py), so the library's own DMA variable is never consulted under vLLM
B12X_PCIE_DMA_FP8 = "B12X_PCIE_DMA_FP8"
VLLM_READS_LIBRARY_NAMES: dict[str, str] = {
    B12X_PCIE_DMA_FP8: "vLLM reads it as the fallback of VLLM_PCIE_DMA_FP8 and passes it as fp8=",
}

# --- glmlaunch's own variables ---------------------------------------------------------------

TOOL_PREFIX = "GLMLAUNCH_"
GLMLAUNCH_PROFILE = "GLMLAUNCH_PROFILE"
GLMLAUNCH_PROFILE_PATH = "GLMLAUNCH_PROFILE_PATH"
GLMLAUNCH_SET = "GLMLAUNCH_SET"
GLMLAUNCH_DEBUG = "GLMLAUNCH_DEBUG"
GLMLAUNCH_QUIET = "GLMLAUNCH_QUIET"
GLMLAUNCH_VLLM_BIN = "GLMLAUNCH_VLLM_BIN"
GLMLAUNCH_CACHE_DIR = "GLMLAUNCH_CACHE_DIR"
GLMLAUNCH_INVENTORY = "GLMLAUNCH_INVENTORY"
GLMLAUNCH_BACKEND = "GLMLAUNCH_BACKEND"
GLMLAUNCH_SKIP_PREFLIGHT = "GLMLAUNCH_SKIP_PREFLIGHT"
GLMLAUNCH_STRICT = "GLMLAUNCH_STRICT"
GLMLAUNCH_RIG_DEFAULTS = "GLMLAUNCH_RIG_DEFAULTS"
GLMLAUNCH_SUPERVISE = "GLMLAUNCH_SUPERVISE"
GLMLAUNCH_STOP_GRACE = "GLMLAUNCH_STOP_GRACE"
GLMLAUNCH_STRICT_EXIT = "GLMLAUNCH_STRICT_EXIT"
GLMLAUNCH_LMCACHE_BIN = "GLMLAUNCH_LMCACHE_BIN"
GLMLAUNCH_LMCACHE_START_TIMEOUT = "GLMLAUNCH_LMCACHE_START_TIMEOUT"

# CUDA variables glmlaunch also reads from the caller (hardware.py honours them when probing).
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
CUDA_DEVICE_ORDER = "CUDA_DEVICE_ORDER"
# Conventions glmlaunch honours: NO_COLOR turns colour off; PATH is where `vllm` is looked up; COLUMNS
# is the terminal's width where set (stderr messages wrap to it, as rich lays stdout out to it).
NO_COLOR = "NO_COLOR"
COLUMNS = "COLUMNS"
PATH = "PATH"
# Where the preflight looks for nvcc and for the JIT-built pools (the same cache vLLM uses).
CUDA_HOME = "CUDA_HOME"
TORCH_EXTENSIONS_DIR = "TORCH_EXTENSIONS_DIR"

# Hugging Face's variables: `glmlaunch fetch` (glmlaunch.fetch) downloads the checkpoint where vLLM will
# look for it, so it reads the cache location from the launch environment as huggingface_hub does
# (huggingface_hub/constants.py: HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else
# XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub), the hub from HF_ENDPOINT and the token
# from HF_TOKEN (masked everywhere). HF_HUB_OFFLINE is read from the caller's environment only: the
# profiles set it for vLLM, whose weights are on disk by then.
HF_TOKEN = "HF_TOKEN"
HF_ENDPOINT = "HF_ENDPOINT"
HF_HOME = "HF_HOME"
HF_HUB_CACHE = "HF_HUB_CACHE"
HUGGINGFACE_HUB_CACHE = "HUGGINGFACE_HUB_CACHE"
HF_HUB_OFFLINE = "HF_HUB_OFFLINE"
XDG_CACHE_HOME = "XDG_CACHE_HOME"
HOME = "HOME"

# b12x's own knobs: produced for vLLM on the b12x stack (MANAGED below), and pinned by the ledger's
# b12x bridge while it asks the library's planners (ledger/b12x_bridge.py).
B12X_FUSED_INDEXER = "B12X_FUSED_INDEXER"
B12X_PAGED_INDEX_SUPERTILE_K = "B12X_PAGED_INDEX_SUPERTILE_K"
B12X_INDEXER_TWO_LEVEL_FOLD = "B12X_INDEXER_TWO_LEVEL_FOLD"
B12X_INDEXER_TWO_LEVEL_FOLD_MAX_MIB = "B12X_INDEXER_TWO_LEVEL_FOLD_MAX_MIB"
B12X_PCIE_ONESHOT_PUSH = "B12X_PCIE_ONESHOT_PUSH"
B12X_INDEXER_STREAM_SCORER = "B12X_INDEXER_STREAM_SCORER"

TOOL_VARS: dict[str, str] = {
    GLMLAUNCH_PROFILE: "profile name or path used when -p/--profile is not given (default: turnkey)",
    GLMLAUNCH_PROFILE_PATH: "extra profile directories, searched before the built-in ones (os.pathsep list)",
    GLMLAUNCH_SET: "overrides like --set, separated by ';' or newlines; applied before command-line --set",
    GLMLAUNCH_DEBUG: "1 shows tracebacks for errors",
    GLMLAUNCH_QUIET: "1 silences notes and progress on stderr, like --quiet (warnings and errors stay)",
    GLMLAUNCH_VLLM_BIN: "the vllm executable `serve` execs (default: vllm on PATH)",
    GLMLAUNCH_CACHE_DIR: "where calibration records are stored (default: the user cache directory)",
    GLMLAUNCH_INVENTORY: "a saved hardware inventory (JSON) used instead of probing NVML",
    GLMLAUNCH_BACKEND: "preflight backend: auto, sparkinfer, b12x or replay",
    GLMLAUNCH_SKIP_PREFLIGHT: "1 makes `serve` skip the GPU preflight (stated on stderr)",
    GLMLAUNCH_STRICT: "1 makes warnings fail checks, like --strict",
    GLMLAUNCH_RIG_DEFAULTS: "rig-defaults JSON (scripts/derive_rig_defaults.py) replacing the shipped one",
    GLMLAUNCH_SUPERVISE: "1 makes `serve` supervise vLLM as its child (like --supervise); 0 or unset: exec",
    GLMLAUNCH_STOP_GRACE: (
        "seconds (finite, 0 or more) the container runtime waits after its stop signal before SIGKILL "
        "(compose stop_grace_period); a supervised stop escalates inside it"
    ),
    GLMLAUNCH_STRICT_EXIT: (
        "1: like `serve --strict-exit` (exit 9 when vLLM exits 0 after a fatal engine error)"
    ),
    GLMLAUNCH_LMCACHE_BIN: "the lmcache executable a managed LMCache server runs (default: lmcache on PATH)",
    GLMLAUNCH_LMCACHE_START_TIMEOUT: (
        "seconds a managed LMCache server has to answer its /healthcheck or log its ready line before "
        "`serve` gives up (default 120, the wrappers' LMCACHE_START_TIMEOUT; exit 12)"
    ),
}

#: Settings reachable through the environment are ``GLMLAUNCH_<SECTION>__<FIELD>``.
SETTING_ENV_SEPARATOR = "__"

# --- variables produced for vLLM and the kernels -----------------------------------------------


@dataclass(frozen=True)
class EnvSpec:
    name: str
    doc: str
    render: Callable[[DeploymentConfig], str | None]
    settings: tuple[str, ...]
    stacks: frozenset[Stack] = ALL_STACKS

    def value(self, config: DeploymentConfig) -> str | None:
        if config.stack not in self.stacks:
            return None
        return self.render(config)


def _flag(value: bool) -> str:
    return "1" if value else "0"


def env_size(n: int) -> str:
    """The launchers' spelling: 84KB for 86,016 (vLLM reads KB/MB/GB as 1024-based)."""
    for unit, factor in (("GB", GIB), ("MB", MIB), ("KB", KIB)):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


def _opt_flag(value: bool | None) -> str | None:
    return None if value is None else _flag(value)


def _opt_int(value: int | None) -> str | None:
    return None if value is None else str(value)


def _dma_min(c: DeploymentConfig) -> str | None:
    if not c.comm.pcie_allreduce:
        return None
    return "off" if c.comm.dma_min_bytes is None else env_size(c.comm.dma_min_bytes)


def _when_pcie(fn: Callable[[DeploymentConfig], str | None]) -> Callable[[DeploymentConfig], str | None]:
    return lambda c: fn(c) if c.comm.pcie_allreduce else None


def _when_dcp(fn: Callable[[DeploymentConfig], str | None]) -> Callable[[DeploymentConfig], str | None]:
    return lambda c: fn(c) if c.parallel.dcp > 1 else None


def _wire(c: DeploymentConfig) -> str | None:
    return c.comm.dma_wire_mode if c.comm.pcie_allreduce else None


def _k6(c: DeploymentConfig) -> bool:
    return c.model.online_quant == "exl3-b6"


def _absorb_bmm(c: DeploymentConfig) -> str | None:
    if c.model.absorb_bmm is not None:
        return _flag(c.model.absorb_bmm)
    return {"exl3-b6": "0", "mxfp8": "1"}.get(c.model.online_quant)


def _dynamic_scale(c: DeploymentConfig) -> str | None:
    """1/0 for an explicit NVFP4 scale mode on nvfp4_ds_mla; nothing when unset or another KV dtype."""
    if c.memory.kv_cache_dtype != "nvfp4_ds_mla" or c.memory.kv_scale_mode is None:
        return None
    return _flag(c.memory.kv_scale_mode == "dynamic-token")


MANAGED: tuple[EnvSpec, ...] = (
    EnvSpec(CUDA_DEVICE_ORDER, "GPU numbering follows PCI bus order", lambda c: "PCI_BUS_ID", ()),
    EnvSpec(
        CUDA_VISIBLE_DEVICES,
        "the TP group's GPUs (follows parallel.tp unless parallel.gpus is set)",
        lambda c: ",".join(str(g) for g in c.gpu_list),
        ("parallel.gpus", "parallel.tp"),
    ),
    EnvSpec(
        "PYTORCH_CUDA_ALLOC_CONF",
        "torch caching-allocator configuration (expandable segments forced off with LMCache)",
        lambda c: c.allocator_conf,
        ("memory.allocator.expandable_segments", "memory.allocator.extra", "lmcache"),
    ),
    EnvSpec(
        "VLLM_USE_V2_MODEL_RUNNER", "1 = V2 model runner", lambda c: _flag(c.runner == "v2"), ("runner",)
    ),
    EnvSpec(
        "VLLM_ENABLE_PCIE_ALLREDUCE",
        "PCIe custom all-reduce (one-shot + DMA)",
        lambda c: _flag(c.comm.pcie_allreduce),
        ("comm.pcie_allreduce",),
    ),
    EnvSpec(
        "VLLM_PCIE_ALLREDUCE_BACKEND",
        "kernel library behind the PCIe all-reduce",
        _when_pcie(lambda c: c.comm.allreduce_backend),
        ("comm.allreduce_backend",),
    ),
    EnvSpec(
        "VLLM_PCIE_DMA_FP8",
        "DMA wire mode vLLM passes as fp8= ('0' = lossless bf16)",
        _wire,
        ("comm.dma_wire_mode",),
    ),
    EnvSpec(
        "SPARKINFER_PCIE_DMA_FP8",
        "DMA wire mode as the SparkInfer library reads it",
        _wire,
        ("comm.dma_wire_mode",),
        SPARKINFER,
    ),
    EnvSpec(
        B12X_PCIE_DMA_FP8,
        "DMA wire mode as b12x >= 1.1 reads it, and vLLM as VLLM_PCIE_DMA_FP8's fallback (the r12 chain and "
        "r28 launchers export it too)",
        _wire,
        ("comm.dma_wire_mode",),
    ),
    EnvSpec(
        "VLLM_PCIE_DMA_MIN_BYTES",
        "DMA all-reduce crossover; 'off' builds no DMA object and no slab",
        _dma_min,
        ("comm.dma_min_bytes",),
    ),
    EnvSpec(
        "VLLM_PCIE_ONESHOT_ALLREDUCE_MAX_SIZE",
        "largest one-shot all-reduce payload",
        _when_pcie(lambda c: env_size(c.comm.oneshot_allreduce_max_size)),
        ("comm.oneshot_allreduce_max_size",),
    ),
    EnvSpec(
        "VLLM_PCIE_ONESHOT_FUSED_ADD_RMS_NORM_MAX_SIZE",
        "largest fused add+RMSNorm one-shot payload",
        _when_pcie(lambda c: env_size(c.comm.oneshot_fused_max_size)),
        ("comm.oneshot_fused_max_size",),
    ),
    EnvSpec(
        "SPARKINFER_PCIE_ONESHOT_PUSH",
        "one-shot push mode (eager slab grows W-fold)",
        _when_pcie(lambda c: _opt_flag(c.comm.oneshot_push)),
        ("comm.oneshot_push",),
        SPARKINFER,
    ),
    EnvSpec(
        B12X_PCIE_ONESHOT_PUSH,
        "one-shot push mode (eager slab grows W-fold)",
        _when_pcie(lambda c: _opt_flag(c.comm.oneshot_push)),
        ("comm.oneshot_push",),
        B12X,
    ),
    EnvSpec(
        "B12X_PCIE_TP2_REMOTE_PUSH",
        "r32+: TP2 remote-push transport (eager slab grows 2-fold); the library's default is off",
        _when_pcie(lambda c: _opt_flag(c.comm.oneshot_tp2_remote_push)),
        ("comm.oneshot_tp2_remote_push",),
        B12X_R32,
    ),
    EnvSpec(
        "B12X_PCIE_TP4_REMOTE_PUSH",
        "r32+: TP4 remote-push transport (eager slab grows 4-fold); the library's default is off",
        _when_pcie(lambda c: _opt_flag(c.comm.oneshot_tp4_remote_push)),
        ("comm.oneshot_tp4_remote_push",),
        B12X_R32,
    ),
    EnvSpec(
        "B12X_PCIE_TP8_OWNER_REDUCE",
        "r32+: TP8 owner-reduce transport (eager slab grows 8-fold); the library's default is on",
        _when_pcie(lambda c: _opt_flag(c.comm.oneshot_tp8_owner_reduce)),
        ("comm.oneshot_tp8_owner_reduce",),
        B12X_R32,
    ),
    EnvSpec(
        "VLLM_PCIE_ONESHOT_SINGLE_CHANNEL",
        "1 = one channel for eager and every capture",
        _when_pcie(lambda c: _opt_flag(c.comm.single_channel)),
        ("comm.single_channel",),
    ),
    EnvSpec(
        "VLLM_USE_B12X_DCP_A2A",
        "DCP all-to-all pools",
        _when_dcp(lambda c: _flag(c.comm.dcp_a2a)),
        ("comm.dcp_a2a",),
    ),
    EnvSpec(
        "VLLM_DCP_A2A_MAX_TOKENS",
        "DCP A2A staging batch cap (0 = sized from max_num_batched_tokens)",
        _when_dcp(lambda c: str(c.comm.dcp_a2a_max_tokens) if c.comm.dcp_a2a else None),
        ("comm.dcp_a2a_max_tokens",),
    ),
    EnvSpec(
        "VLLM_USE_B12X_SPARSE_INDEXER",
        "the library's sparse indexer",
        lambda c: _flag(c.indexer.sparse_indexer),
        ("indexer.sparse_indexer",),
    ),
    EnvSpec(
        "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB",
        "caps the prefill indexer plan rows: MB * 2^20 / 4 / supertile",
        lambda c: _opt_int(c.indexer.max_logits_mb),
        ("indexer.max_logits_mb",),
    ),
    EnvSpec(
        "SPARKINFER_PAGED_INDEX_SUPERTILE_K",
        "paged indexer supertile tokens",
        lambda c: _opt_int(c.indexer.supertile_k),
        ("indexer.supertile_k",),
        SPARKINFER,
    ),
    EnvSpec(
        B12X_PAGED_INDEX_SUPERTILE_K,
        "paged indexer supertile tokens (the r28 launchers export it beside the SparkInfer name)",
        lambda c: _opt_int(c.indexer.supertile_k),
        ("indexer.supertile_k",),
        R28_B12X,
    ),
    EnvSpec(
        "SPARKINFER_INDEXER_TWO_LEVEL_FOLD",
        "two-level top-k fold: auto, 0, 1",
        lambda c: c.indexer.fold,
        ("indexer.fold",),
        SPARKINFER,
    ),
    EnvSpec(
        B12X_INDEXER_TWO_LEVEL_FOLD,
        "two-level top-k fold: auto, 0, 1",
        lambda c: c.indexer.fold,
        ("indexer.fold",),
        B12X,
    ),
    EnvSpec(
        "SPARKINFER_INDEXER_TWO_LEVEL_FOLD_MAX_MIB",
        "budget of the fold's per-call candidate slab",
        lambda c: _opt_int(c.indexer.fold_max_mib),
        ("indexer.fold_max_mib",),
        SPARKINFER,
    ),
    EnvSpec(
        B12X_INDEXER_TWO_LEVEL_FOLD_MAX_MIB,
        "budget of the fold's per-call candidate slab",
        lambda c: _opt_int(c.indexer.fold_max_mib),
        ("indexer.fold_max_mib",),
        B12X,
    ),
    EnvSpec(
        "SPARKINFER_FUSED_INDEXER",
        "fused decode indexer route (rows <= 16)",
        lambda c: _opt_flag(c.indexer.fused),
        ("indexer.fused",),
        SPARKINFER,
    ),
    EnvSpec(
        B12X_FUSED_INDEXER,
        "fused decode indexer route (rows <= 16)",
        lambda c: _opt_flag(c.indexer.fused),
        ("indexer.fused",),
        B12X,
    ),
    EnvSpec(
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS",
        "subtract the CUDA-graph estimate from the KV budget",
        lambda c: _flag(c.memory.estimate_cudagraphs),
        ("memory.estimate_cudagraphs",),
    ),
    EnvSpec(
        "VLLM_MEMORY_PROFILE_INCLUDE_ATTN",
        "include attention transients in the profile pass",
        lambda c: _flag(c.memory.profile_include_attn),
        ("memory.profile_include_attn",),
    ),
    EnvSpec(
        "VLLM_EXL3_TRELLIS_MAX_M",
        "EXL3 Trellis decode window",
        lambda c: _opt_int(c.exl3_trellis_max_m),
        ("exl3_trellis_max_m",),
    ),
    EnvSpec(
        "VLLM_EXL3_PREFILL_CAPACITY",
        "EXL3 prefill arena capacity in tokens (unset: the launchers use max_num_batched_tokens)",
        lambda c: _opt_int(c.exl3.prefill_capacity),
        ("exl3.prefill_capacity",),
    ),
    EnvSpec(
        "VLLM_NVFP4_MLA_DYNAMIC_SCALE",
        "1 = per-token NVFP4 MLA KV scales (dynamic-token, 368 B record), 0 = static scales",
        _dynamic_scale,
        ("memory.kv_scale_mode", "memory.kv_cache_dtype"),
    ),
    EnvSpec(
        "KV_FP8_ROPE",
        "1 = FP8 RoPE in the NVFP4 MLA KV record (dynamic-token), 0 = bf16 RoPE (static)",
        _dynamic_scale,
        ("memory.kv_scale_mode", "memory.kv_cache_dtype"),
    ),
    EnvSpec(
        "VLLM_DCP_QUERY_SPLIT",
        "DCP query split",
        _when_dcp(lambda c: _opt_flag(c.dcp_policy.query_split)),
        ("dcp_policy.query_split",),
    ),
    EnvSpec(
        "VLLM_DCP_QUERY_SPLIT_MIN_CONTEXT_TOKENS",
        "context length from which the query split applies",
        _when_dcp(lambda c: _opt_int(c.dcp_policy.query_split_min_context_tokens)),
        ("dcp_policy.query_split_min_context_tokens",),
    ),
    EnvSpec(
        "VLLM_DCP_TOPK_OWNER_MERGE",
        "DCP top-k owner merge",
        _when_dcp(lambda c: _opt_flag(c.dcp_policy.topk_owner_merge)),
        ("dcp_policy.topk_owner_merge",),
    ),
    EnvSpec(
        "VLLM_B12X_MLA_CKV_GATHER",
        "compressed-KV gather",
        _when_dcp(lambda c: _opt_flag(c.dcp_policy.ckv_gather)),
        ("dcp_policy.ckv_gather",),
    ),
    EnvSpec(
        "VLLM_B12X_MLA_CKV_GATHER_MAX_TOKENS",
        "compressed-KV gather token cap",
        _when_dcp(lambda c: _opt_int(c.dcp_policy.ckv_gather_max_tokens)),
        ("dcp_policy.ckv_gather_max_tokens",),
    ),
    EnvSpec(
        "VLLM_DCP_INDEXER_SHARDS",
        "indexer shards across the DCP group",
        _when_dcp(lambda c: _opt_int(c.dcp_policy.indexer_shards)),
        ("dcp_policy.indexer_shards",),
    ),
    EnvSpec(
        "VLLM_B12X_MLA_CKV_PREFETCH_DEPTH",
        "compressed-KV prefetch depth (unsafe over SYS topology)",
        _when_dcp(lambda c: _opt_int(c.dcp_policy.ckv_prefetch_depth)),
        ("dcp_policy.ckv_prefetch_depth",),
    ),
    EnvSpec(
        "VLLM_B12X_MLA_CKV_PREFETCH_WORKSPACE_MIB",
        "DCP prefill / CKV prefetch workspace ceiling in MiB (launcher knob DCP_PREFILL_WORKSPACE_MIB)",
        _when_dcp(lambda c: _opt_int(c.dcp_policy.ckv_prefetch_workspace_mib)),
        ("dcp_policy.ckv_prefetch_workspace_mib",),
    ),
    EnvSpec(
        "VLLM_B12X_MLA_CKV_GATHER_MIN_TOKENS",
        "prefill tokens from which the compressed-KV gather applies",
        _when_dcp(lambda c: _opt_int(c.dcp_policy.ckv_gather_min_tokens)),
        ("dcp_policy.ckv_gather_min_tokens",),
    ),
    EnvSpec(
        "VLLM_B12X_MLA_DCP_GATHER_IN_WORKSPACE",
        "1 = gather the DCP compressed KV into the workspace arena (else a transient)",
        _when_dcp(lambda c: _opt_flag(c.dcp_policy.gather_in_workspace)),
        ("dcp_policy.gather_in_workspace",),
    ),
    EnvSpec(
        "VLLM_DCP_PROJECT_BEFORE_MERGE",
        "1 = project to v_head_dim before the DCP merge (A2A output head dim 512 -> 256)",
        _when_dcp(lambda c: _opt_flag(c.dcp_policy.project_before_merge)),
        ("dcp_policy.project_before_merge",),
    ),
    EnvSpec(
        "VLLM_DCP_PROJECT_BEFORE_MERGE_MIN_PREFILL_TOKENS",
        "prefill tokens from which project-before-merge applies",
        _when_dcp(lambda c: _opt_int(c.dcp_policy.project_before_merge_min_prefill_tokens)),
        ("dcp_policy.project_before_merge_min_prefill_tokens",),
    ),
    EnvSpec(
        "VLLM_B12X_ABSORB_BMM",
        "absorbed-BMM MLA path (off with online K6, on with online MXFP8)",
        _absorb_bmm,
        ("model.absorb_bmm", "model.online_quant"),
    ),
    EnvSpec(
        "VLLM_EXL3_ONLINE_TRELLIS_BITS",
        "online EXL3 Trellis bits for the checkpoint's BF16 linears (6 = K6)",
        lambda c: "6" if _k6(c) else None,
        ("model.online_quant",),
    ),
    EnvSpec(
        "VLLM_EXL3_ENCODER_SOURCE",
        "the exllamav3 tree that encodes online K6",
        lambda c: c.exl3.online_encoder_source if _k6(c) else None,
        ("exl3.online_encoder_source", "model.online_quant"),
    ),
    EnvSpec(
        "VLLM_EXL3_ONLINE_CACHE_DIR",
        "where online-K6 tensors are cached between boots",
        lambda c: c.exl3.online_cache_dir if _k6(c) else None,
        ("exl3.online_cache_dir", "model.online_quant"),
    ),
    EnvSpec(
        "VLLM_EXL3_ONLINE_CACHE_MODE",
        "how the online-K6 cache is used",
        lambda c: c.exl3.online_cache_mode if _k6(c) else None,
        ("exl3.online_cache_mode", "model.online_quant"),
    ),
    EnvSpec(
        "LMCACHE_MODE",
        "LMCache tiers: ram (DRAM only) or disk (DRAM + a bounded NVMe tier)",
        lambda c: ("disk" if c.lmcache_config.disk_gb else "ram") if c.lmcache else None,
        ("lmcache", "lmcache_config.disk_gb"),
    ),
    EnvSpec(
        "LMCACHE_L2_GB",
        "LMCache's NVMe tier in GiB (0 = DRAM only)",
        lambda c: str(c.lmcache_config.disk_gb) if c.lmcache else None,
        ("lmcache", "lmcache_config.disk_gb"),
    ),
    EnvSpec(
        "LMCACHE_DISABLE_BANNER",
        "no LMCache banner in vLLM's log (the appliance's LMCache wrapper sets it)",
        lambda c: "1" if c.lmcache else None,
        ("lmcache",),
    ),
    EnvSpec(
        "NCCL_BUFFSIZE",
        "NCCL buffer bytes per channel (default 4 MiB)",
        lambda c: _opt_int(c.comm.nccl.buffsize),
        ("comm.nccl.buffsize",),
    ),
    EnvSpec(
        "NCCL_CUMEM_ENABLE",
        "NCCL's cuMem allocator on/off (the Infernal Invocation image sets 0: legacy cudaMalloc buffers)",
        lambda c: _opt_flag(c.comm.nccl.cumem_enable),
        ("comm.nccl.cumem_enable",),
    ),
    EnvSpec("NCCL_PROTO", "NCCL protocols", lambda c: c.comm.nccl.proto, ("comm.nccl.proto",)),
    EnvSpec("NCCL_P2P_LEVEL", "NCCL P2P level", lambda c: c.comm.nccl.p2p_level, ("comm.nccl.p2p_level",)),
    EnvSpec(
        "NCCL_IB_DISABLE",
        "no InfiniBand on a PCIe box",
        lambda c: _flag(c.comm.nccl.ib_disable),
        ("comm.nccl.ib_disable",),
    ),
    EnvSpec(
        "NCCL_SOCKET_IFNAME",
        "NCCL bootstrap interface",
        lambda c: c.comm.nccl.socket_ifname,
        ("comm.nccl.socket_ifname",),
    ),
    EnvSpec(
        "GLOO_SOCKET_IFNAME",
        "gloo bootstrap interface (same as NCCL's)",
        lambda c: c.comm.nccl.socket_ifname,
        ("comm.nccl.socket_ifname",),
    ),
)

MANAGED_BY_NAME: dict[str, EnvSpec] = {spec.name: spec for spec in MANAGED}

_ROUTE = "kernel route switch: picks a kernel, allocates nothing the ledger sizes"
_SPARK_ROUTE = "SparkInfer " + _ROUTE
_B12X_ROUTE = (
    "b12x " + _ROUTE + "; read by the B12X library (r29+) or vLLM's own b12x backends, never by SparkInfer"
)
_VLLM_ROUTE = "vLLM " + _ROUTE
_TOOLCHAIN = "toolchain or process setting of the serving image (no GPU memory)"
_HOST_PATH = "a cache directory on the host (host-derived path)"
_CPP_AR = "the C++ all-reduce's NCCL crossover (used when the PCIe all-reduce is off)"
_DCP_ROUTE = "DCP attention route choice of the r12-r28 launchers; its memory is not modelled separately"
_IT_RING = (
    "sizes the InstantTensor loader's load-time ring (the buffer, and the I/O staging it caps at this share "
    "of free memory): the load-time peak, ledger/loadtime.py"
)
_IMAGE_NCCL = (
    "the serving image's NCCL build settings (NCCL 2.31.2 on the Infernal Invocation image; no GPU memory)"
)
_IMAGE_NCCL_LIB = (
    "the serving image's NCCL library (preloaded by glm52-pcie-runtime-env.sh when the file exists; a path)"
)

# --- settings that cannot move the plan's memory -----------------------------------------------

_LAUNCH = "launch-only"
_API = "launch-only: the API's behaviour (no GPU memory)"
_LMCACHE_HOST = (
    "sizes LMCache's host-memory (L1) and disk tiers; its GPU buffers are the measured lmcache_gpu_bytes "
    "(ledger/lmcache.py), which no boot varied with this"
)
_ROUTE_FLAG = "a kernel route flag: picks a kernel, allocates nothing the ledger sizes"
_NCCL_TRANSPORT = "NCCL transport selection: no size the ledger models for it"
_UNMODELLED = "unmodelled: "

#: Deployment settings (dotted keys; a key ending in "." covers its whole section) that no ledger term
#: depends on, each with why. Every other setting moves the plan when it changes to another allowed value
#: (tests/config/test_knobs_move_the_plan.py changes each one, alone or with the companion setting it needs,
#: on every shipped profile). A reason starting "unmodelled:" names real memory the ledger does not size.
PLAN_NEUTRAL: dict[str, str] = {
    "description": "text: what the profile is for",
    "lmcache_config.server": _LAUNCH + ": the LMCache server's process",
    "lmcache_config.wrapper": _LAUNCH + ": the LMCache wrapper script",
    "lmcache_config.host": _LAUNCH + ": the LMCache server's address",
    "lmcache_config.port": _LAUNCH + ": the LMCache server's port",
    "lmcache_config.http_port": _LAUNCH + ": the LMCache server's HTTP port",
    "lmcache_config.prometheus_port": _LAUNCH + ": the LMCache server's metrics port",
    "lmcache_config.disk_path": _LAUNCH + ": where LMCache's disk tier lives (a host path)",
    "lmcache_config.chunk_size": _UNMODELLED + "LMCache's chunk; " + _LMCACHE_HOST,
    "lmcache_config.offload_fraction": _LMCACHE_HOST,
    "lmcache_config.l1_gb": _LMCACHE_HOST,
    "lmcache_config.disk_gb": _LMCACHE_HOST,
    "vllm_version": (
        "names the build: N's residual of that build applies where records of it exist "
        "(calibrate.model.build_key); the name allocates nothing"
    ),
    "exl3.online_encoder_source": "where online K6 quantization reads its encoder (load-time source)",
    "exl3.online_cache_dir": "where online K6 quantization caches encoded weights (a host path)",
    "exl3.online_cache_mode": "whether online K6 reads or writes its host cache (load time)",
    "model.served_name": _API,
    "model.trust_remote_code": _LAUNCH + ": lets vLLM run the checkpoint's code",
    "model.absorb_bmm": _ROUTE_FLAG + " (VLLM_B12X_ABSORB_BMM)",
    "model.expert_bits": (
        "the checkpoint's expert bit tiers: the SM120 block-64 rule reads them; the R7 arenas are sized by "
        "capacity and block"
    ),
    "model.clamp_rope_tables": _UNMODELLED
    + "the RoPE cos/sin tables (max_position_embeddings x rotary dim) are inside W as logged; no boot "
    "varied it",
    "model.geometry.": "the checkpoint's config.json (a fact of model.path, validated with it), not a knob",
    "hardware.gpu_count": "how many GPUs the host has: the plan sizes the TP ranks it uses (parallel.tp)",
    "hardware.compute_capability": (
        "picks the fused indexer route only at top-k 512 (GLM-5.2 runs 2048): no size for this model"
    ),
    "hardware.pcie_generation": "link speed: the preflight's bandwidth checks (no memory)",
    "hardware.pcie_width": "link width: the preflight's bandwidth checks (no memory)",
    "hardware.min_driver": "a version floor the hardware check enforces",
    "hardware.min_cuda": "a version floor the hardware check enforces",
    "parallel.gpus": "which GPUs: every rank is sized alike",
    "scheduler.enable_chunked_prefill": _LAUNCH + ": the chunk is max_num_batched_tokens either way",
    "scheduler.enable_prefix_caching": "reuses blocks of the pool already sized (no allocation at start-up)",
    "scheduler.async_scheduling": "scheduler overlap: no GPU allocation the ledger sizes",
    "speculative.method": "the MTP method's name (GLM-5.2 accepts mtp only)",
    "speculative.draft_sample_method": "the drafter's sampling rule (no memory)",
    "speculative.rejection_sample_method": "the verifier's rejection rule (no memory)",
    "speculative.moe_backend": _ROUTE_FLAG + " of the drafter's MoE",
    "speculative.model": _UNMODELLED + "an external drafter's weights are not priced (W takes the MTP layer)",
    "speculative.draft": _UNMODELLED + "an external drafter's weights are not priced (W takes the MTP layer)",
    "memory.allocator.extra": _UNMODELLED + "other PYTORCH_CUDA_ALLOC_CONF options (the packer models "
    "expandable_segments only)",
    "comm.allreduce_backend": "the all-reduce backend's name: the PCIe pools follow comm.pcie_allreduce",
    "comm.allow_compressed_wire": (
        "a permission: the compressed DMA wire it allows moves the plan (comm.dma_wire_mode)"
    ),
    "comm.nccl.proto": _NCCL_TRANSPORT,
    "comm.nccl.p2p_level": _NCCL_TRANSPORT,
    "comm.nccl.ib_disable": _NCCL_TRANSPORT,
    "comm.nccl.socket_ifname": _NCCL_TRANSPORT,
    "comm.nccl.buffsize": _UNMODELLED
    + "NCCL's connection buffers scale with it (the rig measured ~208 MiB/GPU more idle headroom at 1 MiB "
    "against the 4 MiB default, malaiwah/glm52-exl3-vast docs/glm52-r17-maintenance-results.md L49); "
    "charging it re-fits the runtime demand terms, which the turnkey's runtime band cannot absorb yet",
    "comm.nccl.cumem_enable": (
        "NCCL's allocator (cuMem or legacy cudaMalloc): marks NCCL's figures an estimate; no measured size "
        "difference"
    ),
    "dcp_policy.query_split_min_context_tokens": "when the query split applies: its slab is built either way",
    "dcp_policy.ckv_gather_min_tokens": "from which prefill length the gather runs: its capacity is "
    "dcp_policy.ckv_gather_max_tokens",
    "indexer.fused": "the fused decode plan is absorbed by the larger prefill plan in the grow-only arena",
    "cudagraph.max_capture_size": (
        "vLLM's capture-size cap: graphs are sized by the capture sizes, which a rule keeps at or below it"
    ),
    "cudagraph.custom_ops": "compilation passes (no memory the ledger sizes)",
    "cudagraph.fuse_allreduce_rms": "a compilation pass (no memory the ledger sizes)",
    "server.host": _LAUNCH + ": the API address",
    "server.port": _LAUNCH + ": the API port",
    "server.moe_backend": _ROUTE_FLAG,
    "server.dcp_comm_backend": _ROUTE_FLAG + " (the DCP pools follow comm.dcp_a2a)",
    "server.enable_flashinfer_autotune": "autotunes kernels at start-up (time, not memory)",
    "server.enable_auto_tool_choice": _API,
    "server.tool_call_parser": _API,
    "server.reasoning_parser": _API,
    "server.default_chat_template_kwargs.": _API,
    "server.enable_prompt_tokens_details": _API,
    "server.enable_force_include_usage": _API,
    "server.enable_request_id_headers": _API,
    "server.use_index_cache": (
        "the checkpoint's indexer-cache sharing (hf-override): the KV record already counts only the F "
        "layers' indexer cache"
    ),
    "vllm_args": "extra flags passed through unread (a managed flag there is refused)",
    "env.": "passthrough names: each declared in MANAGED or KNOWN_PASSTHROUGH with its reason",
}

#: glmlaunch's own variables (TOOL_VARS) and what they do to a plan's memory
TOOL_PLAN_EFFECT: dict[str, str] = {
    GLMLAUNCH_PROFILE: "selects the configuration (its settings move the plan, the name does not)",
    GLMLAUNCH_PROFILE_PATH: "where profiles are found",
    GLMLAUNCH_SET: "overrides settings (each moves the plan as that setting does)",
    GLMLAUNCH_DEBUG: "tracebacks (no memory)",
    GLMLAUNCH_QUIET: "stderr verbosity (no memory)",
    GLMLAUNCH_VLLM_BIN: _LAUNCH + ": the executable",
    GLMLAUNCH_CACHE_DIR: "where calibration records live: the records move the plan, the path does not",
    GLMLAUNCH_INVENTORY: "the hardware facts check compares against (a plan's T is hardware.memory_per_gpu)",
    GLMLAUNCH_BACKEND: "the preflight's backend (measures; allocates nothing the plan charges)",
    GLMLAUNCH_SKIP_PREFLIGHT: _LAUNCH,
    GLMLAUNCH_STRICT: "exit status policy (no memory)",
    GLMLAUNCH_RIG_DEFAULTS: "moves the plan: the term model the rig's residuals come from",
    GLMLAUNCH_SUPERVISE: _LAUNCH,
    GLMLAUNCH_STOP_GRACE: _LAUNCH,
    GLMLAUNCH_STRICT_EXIT: "exit status policy (no memory)",
    GLMLAUNCH_LMCACHE_BIN: _LAUNCH + ": the executable",
    GLMLAUNCH_LMCACHE_START_TIMEOUT: _LAUNCH,
}


def plan_neutral_reason(key: str) -> str | None:
    """Why the setting ``key`` cannot move the plan's memory (:data:`PLAN_NEUTRAL`), or None."""
    if key in PLAN_NEUTRAL:
        return PLAN_NEUTRAL[key]
    return next((why for k, why in PLAN_NEUTRAL.items() if k.endswith(".") and key.startswith(k)), None)


#: vLLM / library variables that glmlaunch does not manage but knows to be real, each with why it is not a
#: setting, so passing them through `env:` raises no "unknown name" warning.
KNOWN_PASSTHROUGH: dict[str, str] = {
    "VLLM_LOGGING_LEVEL": "vLLM logging",
    "VLLM_CONFIGURE_LOGGING": "vLLM logging",
    "VLLM_LOGGING_CONFIG_PATH": "vLLM logging",
    "VLLM_CACHE_ROOT": _HOST_PATH,
    "VLLM_CACHE_DIR": _HOST_PATH,
    "VLLM_CONFIG_ROOT": _HOST_PATH,
    "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR": _HOST_PATH,
    "VLLM_USE_MODELSCOPE": "where vLLM downloads from",
    "VLLM_WORKER_MULTIPROC_METHOD": "how vLLM starts its workers",
    "VLLM_HOST_IP": "vLLM's distributed bootstrap address",
    "VLLM_PORT": "vLLM's distributed bootstrap port",
    "VLLM_RPC_TIMEOUT": "vLLM timeouts",
    "VLLM_ENGINE_ITERATION_TIMEOUT_S": "vLLM timeouts",
    "VLLM_ENGINE_READY_TIMEOUT_S": "vLLM timeouts (the appliance allows an hour for cold K6 loads)",
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "vLLM's context-length guard",
    "VLLM_DEBUG_WORKSPACE": "vLLM prints every workspace resize (a measurement aid)",
    "VLLM_SLEEP_WHEN_IDLE": "vLLM's idle loop",
    "VLLM_USE_FLASHINFER_SAMPLER": _VLLM_ROUTE,
    "VLLM_FLASHINFER_MOE_BACKEND": _VLLM_ROUTE,
    "VLLM_TORCH_PROFILER_DIR": "vLLM's torch profiler output",
    "VLLM_NO_USAGE_STATS": "telemetry off",
    "VLLM_DO_NOT_TRACK": "telemetry off",
    "VLLM_API_KEY": "the server's API key (a secret: masked everywhere)",
    "VLLM_MARLIN_USE_ATOMIC_ADD": _VLLM_ROUTE,
    "VLLM_ATTENTION_BACKEND": "the attention backend (the profile's server.attention_backend is the flag)",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "how vLLM starts its engine",
    "VLLM_USE_AOT_COMPILE": "vLLM's ahead-of-time compile cache (start-up time, not memory)",
    "VLLM_USE_MEGA_AOT_ARTIFACT": "vLLM's ahead-of-time compile cache (start-up time, not memory)",
    "VLLM_USE_BREAKABLE_CUDAGRAPH": _VLLM_ROUTE,
    "VLLM_USE_FUSED_MOE_GROUPED_TOPK": _VLLM_ROUTE,
    "VLLM_DISABLED_KERNELS": _VLLM_ROUTE,
    "VLLM_USE_B12X_FP8_GEMM": _VLLM_ROUTE,
    "VLLM_USE_B12X_MHC": _VLLM_ROUTE,
    "VLLM_USE_B12X_MOE": _VLLM_ROUTE,
    "VLLM_USE_B12X_WO_PROJECTION": _VLLM_ROUTE,
    "VLLM_USE_B12X_PCIE_DMA": "the r12 chain's DMA switch; comm.dma_min_bytes decides if the DMA is built",
    "VLLM_CPP_AR_1STAGE_NCCL_CUTOFF": _CPP_AR,
    "VLLM_CPP_AR_IGNORE_CUTOFF_MAX_ROWS": _CPP_AR,
    "VLLM_RTX6K_FUSED_ALLREDUCE_ADD": _VLLM_ROUTE,
    "VLLM_RTX6K_FUSED_ALLREDUCE_ADD_END_BARRIER": _VLLM_ROUTE,
    "VLLM_DCP_GLOBAL_TOPK": _DCP_ROUTE,
    "VLLM_DCP_A2A_LARGE_BACKEND": "route of DCP exchanges above VLLM_DCP_A2A_MAX_TOKENS (ag_rs: all-gather + "
    "reduce-scatter; a2a also drops the profile's AG/RS transient, ledger/dcp_prefill.py)",
    "VLLM_DCP_SHARD_DRAFT": _DCP_ROUTE,
    "VLLM_B12X_MLA_SPEC_DECODE_MAX_Q": _DCP_ROUTE,
    "VLLM_B12X_MLA_EXTEND_MAX_CHUNKS": _DCP_ROUTE,
    "VLLM_NVFP4_MLA_SCALES_FILE": "the static-calibrated NVFP4 scale artifact (a path; static mode needs it)",
    "VLLM_NF3_GRID188_DECODE": "a kernel switch of the NF3-hybrid checkpoints (no EXL3 memory)",
    "VLLM_EXL3_PREFILL_TRELLIS": "EXL3 route switch of the r12 chain",
    "VLLM_EXL3_TRELLIS_MIN_M": "EXL3 route floor (smallest Trellis batch)",
    "VLLM_EXL3_ENCODER_REVISION": "the exllamav3 revision encoding online K6 (r34 line)",
    # the r14 GLM-5.2 EXL3 launcher's `profile runtime:` knobs (real boot logs, tests/fixtures/boot-logs)
    "VLLM_B12X_MLA_SPEC_EXTEND_AS_DECODE": _DCP_ROUTE,
    "VLLM_DISABLE_SHARED_EXPERTS_STREAM": "shared-experts stream on/off (one CUDA stream more or less)",
    "VLLM_EXL3_PREFILL_BLOCK_M": "EXL3 prefill route block: the r34 / ii mixed-Trellis arenas are sized with "
    "it (ledger/r7.py); 64 on three-tier K3/K4/K5 experts cannot launch on SM120 (a rule refuses it)",
    "VLLM_EXL3_PREFILL_CHUNK": "EXL3 prefill chunk rows (its arena is sized by the prefill capacity)",
    "VLLM_EXL3_TRELLIS_BLOCK_M": "EXL3 Trellis tile rows",
    "VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD": _VLLM_ROUTE,
    "VLLM_PCIE_ONESHOT_ALLOW_CROSS_NUMA": "lets the one-shot all-reduce run across NUMA nodes (no memory)",
    "VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD": _VLLM_ROUTE,
    "SPARKINFER_INDEXER_DIRECT_K": _SPARK_ROUTE,
    "SPARKINFER_INDEXER_STREAM_SCORER": _SPARK_ROUTE,
    "SPARKINFER_MLA_PREFILL_STRATEGY": _SPARK_ROUTE,
    "SPARKINFER_MLA_SM120_NUM_SPLITS": _SPARK_ROUTE,
    "SPARKINFER_MLA_SM120_PREFILL_MG": _SPARK_ROUTE,
    "SPARKINFER_W4A16_SMALL_M_DIRECT": _SPARK_ROUTE,
    "B12X_DENSE_SPLITK_TURBO": _B12X_ROUTE,
    "B12X_MLA_SM120_UNIFIED": _B12X_ROUTE,
    "B12X_MOE_FORCE_A16": _B12X_ROUTE,
    "B12X_MOE_FORCE_A8": _B12X_ROUTE,
    "B12X_W4A16_TC_DECODE": _B12X_ROUTE,
    "B12X_W4A8_TINY_DECODE": _B12X_ROUTE,
    "B12X_MHC_MAX_TOKENS": "token cap of the b12x mHC kernel route (its scratch is not modelled)",
    "B12X_CUTE_COMPILE_CACHE_DIR": _HOST_PATH,
    "CUDA_DEVICE_MAX_CONNECTIONS": _TOOLCHAIN,
    "CUTE_DSL_ARCH": _TOOLCHAIN,
    "TORCH_CUDA_ARCH_LIST": _TOOLCHAIN,
    "FLASHINFER_CUDA_ARCH_LIST": _TOOLCHAIN,
    "FLASHINFER_DISABLE_VERSION_CHECK": _TOOLCHAIN,
    "OMP_NUM_THREADS": _TOOLCHAIN,
    "SAFETENSORS_FAST_GPU": "safetensors loads straight to the GPU (load time)",
    "DO_NOT_TRACK": "telemetry off",
    "HF_HUB_DISABLE_TELEMETRY": "telemetry off",
    HF_HUB_OFFLINE: "no hub downloads at serve time (`glmlaunch fetch` or `serve --fetch` fetched them)",
    HF_HOME: "Hugging Face's cache root (the hub cache is HF_HOME/hub): where `glmlaunch fetch` downloads",
    HF_HUB_CACHE: "the hub cache itself: where `glmlaunch fetch` downloads and vLLM loads from",
    HUGGINGFACE_HUB_CACHE: "the hub cache's older name (HF_HUB_CACHE wins)",
    HF_ENDPOINT: "the hub `glmlaunch fetch` downloads from (a mirror; default the public hub)",
    HF_TOKEN: "the hub token for gated or private checkpoints (a secret: masked everywhere)",
    "INSTANTTENSOR_BACKEND": "the InstantTensor loader (model.load_format instanttensor)",
    "INSTANTTENSOR_COPY": "the InstantTensor loader: 0 borrows its ring buffers (no loader-owned copy)",
    "INSTANTTENSOR_BUFFER_SIZE": _IT_RING,
    "INSTANTTENSOR_MAX_FREE_MEM_USAGE": _IT_RING,
    "INSTANTTENSOR_CHUNK_SIZE": _IT_RING,
    "INSTANTTENSOR_CONCURRENCY": _IT_RING,
    "INSTANTTENSOR_IO_DEPTH": _IT_RING,
    # the R7 mixed-Trellis path of vLLM's EXL3 (r34 and the Infernal Invocation line)
    "VLLM_EXL3_R7_FUSED": "0 runs the projection-wise R7 fallback with its own graph arena instead of B12X's "
    "fused arenas (the ledger then marks the R7 arenas an estimate)",
    "VLLM_EXL3_R7_ROUTE_BLOCK": "route block of the projection-wise R7 fallback (VLLM_EXL3_R7_FUSED=0 "
    "only): its scratch, concurrency x block x hidden, is not modelled",
    "VLLM_EXL3_R7_FUSED_LAYERS": "caps how many layers take the fused R7 route (the rest fall back)",
    "VLLM_EXL3_R7_A1_MIN_ROWS": _VLLM_ROUTE + " (the R7 retile entry; off by default)",
    "VLLM_EXL3_R7_DEBUG": "R7 debug logging",
    "VLLM_EXL3_EXT_PATH": "the exllamav3 extension the EXL3 kernels load (the image's path)",
    "B12X_DISABLE_STANDALONE_K6": _B12X_ROUTE + " (the CuTe K6 small-row kernel; B12X master)",
    "B12X_PCIE_ALLREDUCE_ALGORITHM": "B12X's PCIe all-reduce algorithm choice above TP8 (inert at TP4)",
    "B12X_PCIE_ISLAND_RS_NANOSLEEP_CYCLES": "B12X's island reduce-scatter above TP8 (inert at TP4)",
    "B12X_PCIE_ISLAND_RS_THREADS": "B12X's island reduce-scatter above TP8 (inert at TP4)",
    "B12X_PCIE_VOCAB_ARGMAX_NANOSLEEP_CYCLES": "B12X's vocabulary argmax exchange above TP8 (inert at TP4)",
    # the serving images' NCCL (the ii image sets NCCL_CUMEM_ENABLE, managed as comm.nccl.cumem_enable)
    "NCCL_P2P_DISABLE": _IMAGE_NCCL,
    "NCCL_NET_PLUGIN": _IMAGE_NCCL,
    "NCCL_TUNER_PLUGIN": _IMAGE_NCCL,
    "NCCL_VERSION": _IMAGE_NCCL,
    "NCCL_LOCAL_INFERENCE_PATH": _IMAGE_NCCL_LIB,
    "NCCL_PR2127_PATH": _IMAGE_NCCL_LIB,
    "VLLM_NCCL_SO_PATH": _IMAGE_NCCL_LIB,
    "LD_PRELOAD": _IMAGE_NCCL_LIB,
    "LD_LIBRARY_PATH": _TOOLCHAIN,
    "LMCACHE_L1_GB": "LMCache's DRAM tier, sized on the host from lmcache_config.offload_fraction",
    "LMCACHE_L2_PATH": "LMCache's NVMe tier directory (host-derived path)",
    "DCP_TOPK_OWNER_MERGE": "the appliance calibrator's input; vLLM reads VLLM_DCP_TOPK_OWNER_MERGE",
    "DCP_INDEXER_SHARDS": "the appliance calibrator's input; vLLM reads VLLM_DCP_INDEXER_SHARDS (managed)",
    "DCP_PREFILL_WORKSPACE": "the r34 launcher's input; vLLM reads VLLM_B12X_MLA_CKV_PREFETCH_WORKSPACE_MIB",
    "TORCHINDUCTOR_CACHE_DIR": _HOST_PATH,
    "TRITON_CACHE_DIR": _HOST_PATH,
    "CUDA_CACHE_PATH": _HOST_PATH,
    XDG_CACHE_HOME: _HOST_PATH,
    # the rest of the old chain's compile caches (CONTAINER_CACHES below)
    "TILELANG_CACHE_DIR": _HOST_PATH,
    "TILELANG_TMP_DIR": _HOST_PATH,
    "TVM_CACHE_DIR": _HOST_PATH,
    "TVM_FFI_CACHE_DIR": _HOST_PATH,
    TORCH_EXTENSIONS_DIR: _HOST_PATH,
    "FLASHINFER_WORKSPACE_BASE": _HOST_PATH,
    "CUTE_DSL_CACHE_DIR": _HOST_PATH,
    "DG_JIT_CACHE_DIR": _HOST_PATH,
    "MM_SPARSE_ATTN_AOT_CACHE": _HOST_PATH,
    "MINFER_FMHA_CACHE_DIR": _HOST_PATH,
    "CUPY_CACHE_DIR": _HOST_PATH,
    "NUMBA_CACHE_DIR": _HOST_PATH,
    "TMPDIR": _HOST_PATH,
    "LOCAL_INFERENCE_CACHE_FINGERPRINT": "names the image's JIT cache tree (a label, no memory)",
    "CMAKE_CUDA_ARCHITECTURES": _TOOLCHAIN,
    "FLASHINFER_LOCAL_VERSION": _TOOLCHAIN,
    "NVCC_THREADS": _TOOLCHAIN,
    "CUTLASS_DSL_VERSION": _TOOLCHAIN,
    "VIRTUAL_ENV": _TOOLCHAIN,
    "PYTHONPATH": _TOOLCHAIN,
}

#: The compile and JIT caches of the container (scripts/Dockerfile.glmlaunch), all under the /cache volume so
#: a restarted or replaced container compiles nothing twice: the old launcher chain's names and values,
#: local-inference-lab/blackwell-llm-docker launchers/serve-glm52-v16.sh L287-306 @3dd078a (L258-277 at
#: 513bd84, the chain glmlaunch was built on: `export XDG_CACHE_HOME="${XDG_CACHE_HOME:-/cache}"`, then
#: `${XDG_CACHE_HOME}/triton` and so on), with XDG_CACHE_HOME = /cache. Its TMPDIR (/container-tmp) is
#: scratch, not a cache, and stays out. tests/fetch/test_fetch_container.py holds the Dockerfile's ENV block
#: to this.
CONTAINER_CACHE_ROOT = "/cache"
CONTAINER_CACHES: dict[str, str] = {
    XDG_CACHE_HOME: CONTAINER_CACHE_ROOT,
    "VLLM_CACHE_ROOT": "/cache/vllm",
    "VLLM_CACHE_DIR": "/cache/vllm",
    "TILELANG_CACHE_DIR": "/cache/tilelang",
    "TILELANG_TMP_DIR": "/cache/tilelang/tmp",
    "TVM_CACHE_DIR": "/cache/tvm",
    "TVM_FFI_CACHE_DIR": "/cache/tvm-ffi",
    "TRITON_CACHE_DIR": "/cache/triton",
    "TORCHINDUCTOR_CACHE_DIR": "/cache/torchinductor",
    TORCH_EXTENSIONS_DIR: "/cache/torch_extensions",
    "FLASHINFER_WORKSPACE_BASE": "/cache/flashinfer",
    "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR": "/cache/flashinfer-autotune",
    "CUTE_DSL_CACHE_DIR": "/cache/cute-dsl",
    "B12X_CUTE_COMPILE_CACHE_DIR": "/cache/b12x-cute",
    "DG_JIT_CACHE_DIR": "/cache/deep-gemm",
    "MM_SPARSE_ATTN_AOT_CACHE": "/cache/minfer/mm_sparse_attn",
    "MINFER_FMHA_CACHE_DIR": "/cache/minfer/fmha_sm100",
    "CUDA_CACHE_PATH": "/cache/cuda",
    "CUPY_CACHE_DIR": "/cache/cupy",
    "NUMBA_CACHE_DIR": "/cache/numba",
    # not the old chain's (it mounted the weights elsewhere): the hub cache vLLM loads from and
    # `serve --fetch` fills, on the same volume
    HF_HOME: "/cache/huggingface",
}


#: The managed names of every stack, so a name that only another stack reads can be flagged.
def names_for_stack(stack: Stack) -> frozenset[str]:
    return frozenset(spec.name for spec in MANAGED if stack in spec.stacks)


# --- what each generation's library reads ------------------------------------------------------------

#: glmlaunch/config/library_env.json: every SPARKINFER_* / B12X_* name each generation's library reads, with
#: the file:line of the read in its tree (scripts/gen_library_env.py writes it from the recorded
#: generations, tests/fixtures/generations/*.json; tests/ledger/test_generations.py re-records the trees)
LIBRARY_ENV_FILE = "library_env.json"


@lru_cache(maxsize=1)
def _library_env() -> dict[str, dict[str, str]]:
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).with_name(LIBRARY_ENV_FILE)).read_text(encoding="utf-8"))
    return {stack: dict(g["reads"]) for stack, g in data["generations"].items()}


def library_reads(stack: str) -> dict[str, str]:
    """The library-prefixed names the stack's library reads, each with where (``path:line`` in its tree)."""
    return _library_env().get(stack, {})


def generations_reading(name: str) -> tuple[str, ...]:
    """The stacks whose library reads ``name``, in generation order."""
    return tuple(s for s in STACKS if name in library_reads(s))


def library_spelling(name: str, stack: str) -> str | None:
    """The stack's own spelling of a library name written with the other library's prefix
    (``SPARKINFER_FUSED_INDEXER`` on b12x-r32 -> ``B12X_FUSED_INDEXER``), when that library reads it."""
    for prefix in LIBRARY_PREFIXES:
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            own = ("SPARKINFER_" if stack in SPARKINFER_STACKS else "B12X_") + rest
            return own if own != name and own in library_reads(stack) else None
    return None


def stack_label(stack: str) -> str:
    """``b12x-r29 (releases r29-r31)``, ``b12x-ii (releases ii-r16-r18)``; the lab row says it is no
    release."""
    return f"{stack} ({'releases ' if stack in RELEASE_BANDS else ''}{releases_text(stack)})"


def managed_env(config: DeploymentConfig) -> dict[str, str]:
    """The managed variables a configuration produces, in registry order."""
    out: dict[str, str] = {}
    for spec in MANAGED:
        value = spec.value(config)
        if value is not None:
            out[spec.name] = value
    return out


def reference_markdown() -> str:
    """docs/environment.md: every name this registry declares (scripts/gen_env_docs.py writes it)."""
    lines = [
        "# Environment variables",
        "",
        "Generated from `glmlaunch/config/registry.py` by `scripts/gen_env_docs.py`; a test keeps it "
        "current.",
        "",
        "## glmlaunch's own",
        "",
        "| variable | meaning |",
        "|---|---|",
    ]
    lines += [f"| `{name}` | {doc} |" for name, doc in TOOL_VARS.items()]
    lines += [
        "",
        "Every setting is also reachable as `GLMLAUNCH_<SECTION>__<FIELD>` (for example",
        "`GLMLAUNCH_SCHEDULER__MAX_NUM_SEQS=4`); passthrough variables as `GLMLAUNCH_ENV__<NAME>`.",
        "",
        "## Produced for vLLM and the kernels",
        "",
        "One setting becomes every name its library stack reads, and nothing it never reads.",
        "",
        "| variable | stacks | from settings | meaning |",
        "|---|---|---|---|",
    ]
    for spec in MANAGED:
        stacks = ", ".join(sorted(spec.stacks))
        settings = ", ".join(f"`{s}`" for s in spec.settings) or "(fixed)"
        lines.append(f"| `{spec.name}` | {stacks} | {settings} | {spec.doc} |")
    return "\n".join(lines) + "\n"
