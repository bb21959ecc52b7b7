"""A boot's configuration as glmlaunch settings.

What :mod:`glmlaunch.vllmlog.bootconfig` read from a boot log, mapped onto glmlaunch's dotted setting keys.

:func:`boot_settings` gives the settings; :func:`map_boot` also says where each value came from and which
launcher environment is left over for ``env:`` passthrough.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from glmlaunch.config.releases import release_of, stack_of_release
from glmlaunch.vllmlog.bootconfig import BootConfig

#: vLLM's default GPU memory utilization in this fork, when neither the args nor the launcher say.
VLLM_DEFAULT_GMU = 0.92

#: `>>> profile runtime:` variables that are glmlaunch settings (and so never passed through ``env:``).
RUNTIME_SETTINGS: dict[str, str] = {
    "VLLM_DCP_TOPK_OWNER_MERGE": "dcp_policy.topk_owner_merge",
    "VLLM_PCIE_ONESHOT_SINGLE_CHANNEL": "comm.single_channel",
    "SPARKINFER_FUSED_INDEXER": "indexer.fused",
    "B12X_FUSED_INDEXER": "indexer.fused",
    "SPARKINFER_PAGED_INDEX_SUPERTILE_K": "indexer.supertile_k",
    "B12X_PAGED_INDEX_SUPERTILE_K": "indexer.supertile_k",
    "SPARKINFER_INDEXER_TWO_LEVEL_FOLD_MAX_MIB": "indexer.fold_max_mib",
    "B12X_INDEXER_TWO_LEVEL_FOLD_MAX_MIB": "indexer.fold_max_mib",
    "SPARKINFER_INDEXER_TWO_LEVEL_FOLD": "indexer.fold",
    "B12X_INDEXER_TWO_LEVEL_FOLD": "indexer.fold",
    "PYTORCH_CUDA_ALLOC_CONF": "memory.allocator.expandable_segments",
    "VLLM_EXL3_TRELLIS_MAX_M": "exl3_trellis_max_m",
    # the r20-r28 launchers' knobs (pinned pools, online K6, LMCache, the DCP policy they set)
    "VLLM_DCP_A2A_MAX_TOKENS": "comm.dcp_a2a_max_tokens",
    "VLLM_DCP_PROJECT_BEFORE_MERGE": "dcp_policy.project_before_merge",
    "VLLM_DCP_PROJECT_BEFORE_MERGE_MIN_PREFILL_TOKENS": "dcp_policy.project_before_merge_min_prefill_tokens",
    "VLLM_B12X_MLA_CKV_GATHER_MIN_TOKENS": "dcp_policy.ckv_gather_min_tokens",
    "VLLM_B12X_MLA_DCP_GATHER_IN_WORKSPACE": "dcp_policy.gather_in_workspace",
    "VLLM_B12X_ABSORB_BMM": "model.absorb_bmm",
    "NCCL_BUFFSIZE": "comm.nccl.buffsize",
    "LMCACHE_L2_GB": "lmcache_config.disk_gb",
    "VLLM_EXL3_ENCODER_SOURCE": "exl3.online_encoder_source",
    "VLLM_EXL3_ONLINE_CACHE_DIR": "exl3.online_cache_dir",
    "VLLM_EXL3_ONLINE_CACHE_MODE": "exl3.online_cache_mode",
    "VLLM_NVFP4_MLA_DYNAMIC_SCALE": "memory.kv_scale_mode",
}
_BOOL_SETTINGS = frozenset(
    {
        "dcp_policy.topk_owner_merge",
        "comm.single_channel",
        "indexer.fused",
        "dcp_policy.project_before_merge",
        "dcp_policy.gather_in_workspace",
        "model.absorb_bmm",
    }
)
_INT_SETTINGS = frozenset(
    {
        "indexer.supertile_k",
        "indexer.fold_max_mib",
        "exl3_trellis_max_m",
        "comm.dcp_a2a_max_tokens",
        "dcp_policy.project_before_merge_min_prefill_tokens",
        "dcp_policy.ckv_gather_min_tokens",
        "comm.nccl.buffsize",
        "lmcache_config.disk_gb",
    }
)
#: launcher variables that only say which setting a boot ran (read, never passed through)
_MARKER_ENV = frozenset(
    {"VLLM_EXL3_ONLINE_TRELLIS_BITS", "KV_FP8_ROPE", "LMCACHE_MODE", "LMCACHE_DISABLE_BANNER"}
)

#: vLLM args with a setting each (args key -> dotted setting).
_ARG_SETTINGS: dict[str, str] = {
    "model": "model.path",
    "quantization": "model.quantization",
    "load_format": "model.load_format",
    "revision": "model.revision",
    "trust_remote_code": "model.trust_remote_code",
    "tensor_parallel_size": "parallel.tp",
    "decode_context_parallel_size": "parallel.dcp",
    "max_num_batched_tokens": "scheduler.max_num_batched_tokens",
    "max_num_seqs": "scheduler.max_num_seqs",
    "max_model_len": "scheduler.max_model_len",
    "enable_chunked_prefill": "scheduler.enable_chunked_prefill",
    "enable_prefix_caching": "scheduler.enable_prefix_caching",
    "async_scheduling": "scheduler.async_scheduling",
    "kv_cache_dtype": "memory.kv_cache_dtype",
    "kv_cache_memory_bytes": "memory.kv_cache_memory_bytes",
    "host": "server.host",
    "port": "server.port",
    "attention_backend": "server.attention_backend",
    "moe_backend": "server.moe_backend",
    "dcp_comm_backend": "server.dcp_comm_backend",
    "dcp_kv_cache_interleave_size": "server.dcp_kv_cache_interleave_size",
    "tool_call_parser": "server.tool_call_parser",
    "reasoning_parser": "server.reasoning_parser",
    "default_chat_template_kwargs": "server.default_chat_template_kwargs",
}
#: store-true server flags: absent from `non-default args` means vLLM's default, off.
_SERVER_FLAGS = (
    "enable_auto_tool_choice",
    "enable_prompt_tokens_details",
    "enable_force_include_usage",
    "enable_request_id_headers",
    "enable_flashinfer_autotune",
)
#: args read elsewhere (speculative, compilation, hf overrides) or that carry no setting of their own.
_ARGS_CONSUMED = frozenset(
    {
        *_ARG_SETTINGS,
        *_SERVER_FLAGS,
        "gpu_memory_utilization",
        "served_model_name",
        "speculative_config",
        "compilation_config",
        "hf_overrides",
        "model_tag",
        "max_cudagraph_capture_size",
        "num_gpu_blocks_override",
        "quantization_config",
        "kv_transfer_config",
    }
)


@dataclass
class BootSettings:
    """A boot as glmlaunch settings, each with its source; the leftover environment; unmapped args."""

    settings: dict[str, object] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    env_sources: dict[str, str] = field(default_factory=dict)
    unmapped_args: list[str] = field(default_factory=list)

    def put(self, key: str, value: object, source: str) -> None:
        self.settings[key] = value
        self.sources[key] = source


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _float_or_none(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.strip())
    except ValueError:
        return None


def _flag(text: str) -> bool | None:
    low = text.strip().lower()
    if low in {"1", "true", "yes", "on"}:
        return True
    if low in {"0", "false", "no", "off"}:
        return False
    return None


def _enum_member(value: object) -> object:
    """'CUDAGraphMode.FULL_AND_PIECEWISE' -> 'FULL_AND_PIECEWISE'."""
    return value.rsplit(".", 1)[-1] if isinstance(value, str) and "." in value else value


def map_boot(bc: BootConfig) -> BootSettings:
    """The boot as glmlaunch settings (dotted keys), each with its source, plus the leftover environment."""
    out = BootSettings()
    args: Mapping[str, Any] = bc.vllm_args or {}
    eff = bc.effective

    def eff_value(name: str) -> str | None:
        row = eff.get(name)
        return None if row is None or row[0] in {"", "-"} else row[0]

    def eff_source(name: str) -> str:
        return f"launcher effective {name} [{eff[name][1]}]"

    for arg, key in _ARG_SETTINGS.items():
        if arg in args:
            out.put(key, args[arg], f"vllm args {arg}")
    if bc.vllm_version is not None:
        out.put("vllm_version", bc.vllm_version, "vLLM's version banner")
        # the release a build names (none for a bare dev build) decides the kernel library generation
        out.put("release", release_of(bc.vllm_version), "vLLM's version banner (its release suffix)")
        stack = stack_of_release(release_of(bc.vllm_version))
        if stack is not None:
            out.put("stack", stack, f"the library generation of release {release_of(bc.vllm_version)}")
    if bc.vllm_args is not None and "revision" not in args:
        out.put("model.revision", None, "vLLM default (no revision in non-default args)")
    if "served_model_name" in args:
        names = args["served_model_name"]
        out.put(
            "model.served_name",
            names[0] if isinstance(names, list) and names else names,
            "vllm args served_model_name",
        )
    for flag in _SERVER_FLAGS:
        if flag in args:
            out.put(f"server.{flag}", bool(args[flag]), f"vllm args {flag}")
        elif bc.vllm_args is not None:
            out.put(f"server.{flag}", False, f"vLLM default (no {flag} in non-default args)")

    # GPU memory utilization: vLLM's args, else the launcher's table, else the fork's default.
    if "gpu_memory_utilization" in args:
        out.put(
            "memory.gpu_memory_utilization",
            args["gpu_memory_utilization"],
            "vllm args gpu_memory_utilization",
        )
    elif (gmu := _float_or_none(eff_value("GPU_MEMORY_UTILIZATION"))) is not None:
        out.put("memory.gpu_memory_utilization", gmu, eff_source("GPU_MEMORY_UTILIZATION"))
    elif bc.vllm_args is not None:
        out.put("memory.gpu_memory_utilization", VLLM_DEFAULT_GMU, "vLLM default (0.92 in this fork)")
    if "kv_cache_memory_bytes" not in args and _int_or_none(eff_value("KV_CACHE_MEMORY_BYTES")) == 0:
        out.put("memory.kv_cache_memory_bytes", None, eff_source("KV_CACHE_MEMORY_BYTES"))

    _map_speculative(bc, args, out)
    _map_compilation(bc, args, out, eff_value, eff_source)
    hf = args.get("hf_overrides")
    if isinstance(hf, dict):
        if "use_index_cache" in hf:
            out.put(
                "server.use_index_cache",
                bool(hf["use_index_cache"]),
                "vllm args hf_overrides.use_index_cache",
            )
        if "index_topk_pattern" in hf:
            out.put(
                "model.geometry.index_topk_pattern",
                hf["index_topk_pattern"],
                "vllm args hf_overrides.index_topk_pattern",
            )
        clamp = hf.get("max_position_embeddings")
        if clamp is not None and clamp == args.get("max_model_len"):
            # the appliance's CLAMP_ROPE_TABLES: the RoPE tables sized for max_model_len
            out.put("model.clamp_rope_tables", True, "vllm args hf_overrides.max_position_embeddings")
        elif clamp is not None:
            out.put(
                "model.geometry.max_position_embeddings",
                clamp,
                "vllm args hf_overrides.max_position_embeddings",
            )
        if clamp is None or clamp != args.get("max_model_len"):
            out.put("model.clamp_rope_tables", False, "vllm args hf_overrides (no max_model_len clamp)")
    _map_pool_and_offload(bc, args, out)

    if bc.runner is not None:
        out.put("runner", bc.runner, "log: Using V2 Model Runner")
    if (max_m := _int_or_none(eff_value("VLLM_EXL3_TRELLIS_MAX_M"))) is not None:
        out.put("exl3_trellis_max_m", max_m, eff_source("VLLM_EXL3_TRELLIS_MAX_M"))
    if bc.exl3_prefill_capacity is not None:
        out.put("exl3.prefill_capacity", bc.exl3_prefill_capacity, "log: EXL3 mixed Trellis runtime planned")
    if bc.kv_scale_mode is not None:
        out.put("memory.kv_scale_mode", bc.kv_scale_mode, "log: >>> NVFP4 MLA scale mode")
    elif (mode := eff_value("KV_SCALE_MODE")) is not None:
        out.put("memory.kv_scale_mode", mode, eff_source("KV_SCALE_MODE"))
    if bc.dma_min_bytes is not None:
        out.put("comm.dma_min_bytes", bc.dma_min_bytes, "log: Configured b12x PCIe crossovers (DMA min)")
    if bc.oneshot_max_bytes is not None:
        out.put("comm.oneshot_allreduce_max_size", bc.oneshot_max_bytes, "log: PCIe crossovers (oneshot max)")
    if bc.fused_max_bytes is not None:
        out.put("comm.oneshot_fused_max_size", bc.fused_max_bytes, "log: PCIe crossovers (fused max)")
    _map_dcp_policy(bc, out, eff_value, eff_source)
    if bc.gpu_model is not None:
        out.put("hardware.gpu_model", bc.gpu_model, "log: nvidia-smi GPU lines")
    if bc.gpu_count is not None:
        out.put("hardware.gpu_count", bc.gpu_count, "log: nvidia-smi GPU lines")
    _map_runtime(bc, out)
    out.unmapped_args = sorted(k for k in args if k not in _ARGS_CONSUMED)
    return out


def _map_speculative(bc: BootConfig, args: Mapping[str, Any], out: BootSettings) -> None:
    if bc.vllm_args is None:
        return
    spec = args.get("speculative_config")
    if not isinstance(spec, dict):
        out.put("speculative.num_speculative_tokens", 0, "vllm args (no speculative_config)")
        return
    src = "vllm args speculative_config"
    out.put("speculative.num_speculative_tokens", int(spec.get("num_speculative_tokens") or 0), src)
    if "method" in spec:
        out.put("speculative.method", spec["method"], src)
    if "draft_sample_method" in spec:
        out.put("speculative.draft_sample_method", spec["draft_sample_method"], src)
    if "moe_backend" in spec:
        out.put("speculative.moe_backend", spec["moe_backend"], src)
    if "rejection_sample_method" in spec:
        out.put("speculative.rejection_sample_method", spec["rejection_sample_method"], src)
    else:
        out.put("speculative.rejection_sample_method", None, src + " (no rejection_sample_method)")
    model = spec.get("model")
    out.put("speculative.model", None if model in (None, args.get("model")) else model, src)
    # no model key: the checkpoint's own MTP layer; the target's own path named: the r12 chain's spelling
    out.put(
        "speculative.draft", "target" if model is not None and model == args.get("model") else "native", src
    )


def _map_pool_and_offload(bc: BootConfig, args: Mapping[str, Any], out: BootSettings) -> None:
    """The pinned KV pool, online quantization and LMCache a boot ran (vLLM's args name all three)."""
    if bc.vllm_args is None:
        return
    if "num_gpu_blocks_override" in args:
        out.put(
            "memory.num_gpu_blocks_override",
            int(args["num_gpu_blocks_override"]),
            "vllm args num_gpu_blocks_override",
        )
    else:
        out.put("memory.num_gpu_blocks_override", None, "vLLM default (no num_gpu_blocks_override)")
    if "max_cudagraph_capture_size" in args:
        out.put(
            "cudagraph.max_capture_size",
            int(args["max_cudagraph_capture_size"]),
            "vllm args max_cudagraph_capture_size",
        )
    else:
        out.put("cudagraph.max_capture_size", None, "vLLM default (no max_cudagraph_capture_size)")
    qconf = args.get("quantization_config")
    bits = bc.runtime_env.get("VLLM_EXL3_ONLINE_TRELLIS_BITS")
    if isinstance(qconf, dict) and qconf:
        # exl3-b6 selects the eligible BF16 modules with the MXFP8 selector and converts them to K6
        quant = "exl3-b6" if (bits or "").strip() == "6" else "mxfp8"
        out.put(
            "model.online_quant",
            quant,
            "vllm args quantization_config" + (" + VLLM_EXL3_ONLINE_TRELLIS_BITS" if bits else ""),
        )
    else:
        out.put("model.online_quant", "none", "vLLM default (no quantization_config)")
    transfer = args.get("kv_transfer_config")
    connector = transfer.get("kv_connector") if isinstance(transfer, dict) else None
    out.put(
        "lmcache", connector == "LMCacheMPConnector", f"vllm args kv_transfer_config ({connector or 'none'})"
    )
    if connector == "LMCacheMPConnector" and isinstance(transfer, dict):
        extra = transfer.get("kv_connector_extra_config")
        if isinstance(extra, dict):
            host = str(extra.get("lmcache.mp.host") or "").removeprefix("tcp://")
            if host:
                out.put("lmcache_config.host", host, "vllm args kv_transfer_config lmcache.mp.host")
            if isinstance(extra.get("lmcache.mp.port"), int):
                out.put(
                    "lmcache_config.port",
                    extra["lmcache.mp.port"],
                    "vllm args kv_transfer_config lmcache.mp.port",
                )


def _map_compilation(
    bc: BootConfig, args: Mapping[str, Any], out: BootSettings, eff_value: Any, eff_source: Any
) -> None:
    comp = args.get("compilation_config")
    comp = comp if isinstance(comp, dict) else {}
    src = "vllm args compilation_config"
    if comp.get("cudagraph_mode") is not None:
        out.put("cudagraph.mode", _enum_member(comp["cudagraph_mode"]), src + ".cudagraph_mode")
    sizes = comp.get("cudagraph_capture_sizes")
    if isinstance(sizes, list) and sizes:
        out.put("cudagraph.capture_sizes", [int(s) for s in sizes], src + ".cudagraph_capture_sizes")
        out.put("cudagraph.capture_rule", None, "explicit capture sizes")
    elif (listed := eff_value("CUDAGRAPH_CAPTURE_SIZES")) is not None:
        parsed = [_int_or_none(p) for p in listed.split(",")]
        if parsed and all(p is not None for p in parsed):
            out.put("cudagraph.capture_sizes", parsed, eff_source("CUDAGRAPH_CAPTURE_SIZES"))
            out.put("cudagraph.capture_rule", None, "explicit capture sizes")
    if isinstance(comp.get("custom_ops"), list):
        out.put("cudagraph.custom_ops", [str(o) for o in comp["custom_ops"]], src + ".custom_ops")
    passes = comp.get("pass_config")
    if isinstance(passes, dict) and "fuse_allreduce_rms" in passes:
        out.put("cudagraph.fuse_allreduce_rms", bool(passes["fuse_allreduce_rms"]), src + ".pass_config")


def _map_dcp_policy(bc: BootConfig, out: BootSettings, eff_value: Any, eff_source: Any) -> None:
    policy = bc.dcp_prefill_policy
    if policy is not None:
        src = "log: GLM-5.2 DCP prefill policy"
        if "query-split" in policy:
            out.put("dcp_policy.query_split", bool(policy["query-split"]), src)
        if "min-context" in policy and policy["min-context"] >= 0:
            out.put("dcp_policy.query_split_min_context_tokens", policy["min-context"], src)
        if "CKV-gather" in policy:
            out.put("dcp_policy.ckv_gather", bool(policy["CKV-gather"]), src)
        if "owner-merge" in policy:
            out.put("dcp_policy.topk_owner_merge", bool(policy["owner-merge"]), src)
        if policy.get("indexer-shards", 0) > 0:
            out.put("dcp_policy.indexer_shards", policy["indexer-shards"], src)
        if "prefetch-depth" in policy:
            out.put("dcp_policy.ckv_prefetch_depth", policy["prefetch-depth"], src)
    else:
        if (depth := _int_or_none(eff_value("DCP_CKV_PREFETCH_DEPTH"))) is not None and depth >= 0:
            out.put("dcp_policy.ckv_prefetch_depth", depth, eff_source("DCP_CKV_PREFETCH_DEPTH"))
        if (low := _int_or_none(eff_value("DCP_QUERY_SPLIT_MIN_CONTEXT_TOKENS"))) is not None and low >= 0:
            out.put(
                "dcp_policy.query_split_min_context_tokens",
                low,
                eff_source("DCP_QUERY_SPLIT_MIN_CONTEXT_TOKENS"),
            )
    if bc.ckv_gather_capacity_tokens is not None:
        out.put(
            "dcp_policy.ckv_gather_max_tokens",
            bc.ckv_gather_capacity_tokens,
            "log: GLM-5.2 full CKV gather capacity",
        )
    elif (cap := _int_or_none(eff_value("DCP_CKV_GATHER_MAX_TOKENS"))) is not None and cap > 0:
        out.put("dcp_policy.ckv_gather_max_tokens", cap, eff_source("DCP_CKV_GATHER_MAX_TOKENS"))
    if (mib := _int_or_none(eff_value("DCP_PREFILL_WORKSPACE_MIB"))) is not None:
        out.put("dcp_policy.ckv_prefetch_workspace_mib", mib, eff_source("DCP_PREFILL_WORKSPACE_MIB"))


def _map_runtime(bc: BootConfig, out: BootSettings) -> None:
    for name, value in bc.runtime_env.items():
        key = RUNTIME_SETTINGS.get(name)
        src = f"launcher profile runtime {name}"
        if name in _MARKER_ENV:
            continue  # read with the setting it marks (vLLM's args say which)
        if key == "memory.kv_scale_mode":
            if "memory.kv_scale_mode" not in out.settings and (flag := _flag(value)) is not None:
                out.put(key, "dynamic-token" if flag else "static", src)
            continue
        if key is None:
            out.env[name] = value
            out.env_sources[name] = src
            continue
        if key in out.settings and out.sources[key].startswith("log: GLM-5.2 DCP"):
            continue  # the policy line is what the library applied
        if key == "memory.allocator.expandable_segments":
            opts = [p.strip() for p in value.split(",") if p.strip()]
            extra = [p for p in opts if not p.startswith("expandable_segments")]
            expandable = next(
                (p.split(":", 1)[1] for p in opts if p.startswith("expandable_segments:")), None
            )
            if expandable is not None and (flag := _flag(expandable)) is not None:
                out.put(key, flag, src)
            out.put("memory.allocator.extra", ",".join(extra) or None, src)
        elif key in _BOOL_SETTINGS:
            if (flag := _flag(value)) is not None:
                out.put(key, flag, src)
        elif key in _INT_SETTINGS:
            if (number := _int_or_none(value)) is not None:
                out.put(key, number, src)
        else:
            out.put(key, value, src)


def boot_settings(bc: BootConfig) -> dict[str, object]:
    """The boot as glmlaunch dotted settings (see :func:`map_boot` for sources and the leftover env)."""
    return dict(map_boot(bc).settings)


def boot_env(bc: BootConfig) -> dict[str, str]:
    """The launcher environment no setting covers: what a profile passes through ``env:``."""
    return dict(map_boot(bc).env)
