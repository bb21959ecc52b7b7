"""The ``vllm serve`` argument vector of a resolved configuration.

The order reproduces the r12 launcher chain's own ``DRY_RUN=1`` output (docs/configuration.md §3) so the
two can be compared line by line. JSON-valued flags are built as data and serialised compactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from glmlaunch.config.lmcache_endpoint import connector
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.errors import ConfigError

#: Flags glmlaunch builds itself, and the setting to change instead of passing them again.
MANAGED_FLAGS: dict[str, str] = {
    "--revision": "model.revision",
    "--served-model-name": "model.served_name",
    "--host": "server.host",
    "--port": "server.port",
    "--trust-remote-code": "model.trust_remote_code",
    "--tensor-parallel-size": "parallel.tp",
    "-tp": "parallel.tp",
    "--decode-context-parallel-size": "parallel.dcp",
    "-dcp": "parallel.dcp",
    "--dcp-comm-backend": "server.dcp_comm_backend",
    "--dcp-kv-cache-interleave-size": "server.dcp_kv_cache_interleave_size",
    "--kv-cache-dtype": "memory.kv_cache_dtype",
    "--attention-backend": "server.attention_backend",
    "--moe-backend": "server.moe_backend",
    "--quantization": "model.quantization",
    "-q": "model.quantization",
    "--load-format": "model.load_format",
    "--compilation-config": "cudagraph.*",
    "-O": "cudagraph.*",
    "--gpu-memory-utilization": "memory.gpu_memory_utilization",
    "--kv-cache-memory-bytes": "memory.kv_cache_memory_bytes",
    "--num-gpu-blocks-override": "memory.num_gpu_blocks_override",
    "--max-cudagraph-capture-size": "cudagraph.max_capture_size",
    "--quantization-config": "model.online_quant",
    "--kv-transfer-config": "lmcache / lmcache_config.*",
    "--max-model-len": "scheduler.max_model_len",
    "--max-num-seqs": "scheduler.max_num_seqs",
    "--max-num-batched-tokens": "scheduler.max_num_batched_tokens",
    "--async-scheduling": "scheduler.async_scheduling",
    "--no-async-scheduling": "scheduler.async_scheduling",
    "--enable-chunked-prefill": "scheduler.enable_chunked_prefill",
    "--no-enable-chunked-prefill": "scheduler.enable_chunked_prefill",
    "--enable-prefix-caching": "scheduler.enable_prefix_caching",
    "--no-enable-prefix-caching": "scheduler.enable_prefix_caching",
    "--hf-overrides": "model.geometry.index_topk_pattern / server.use_index_cache",
    "--speculative-config": "speculative.*",
    "--tool-call-parser": "server.tool_call_parser",
    "--reasoning-parser": "server.reasoning_parser",
    "--enable-auto-tool-choice": "server.enable_auto_tool_choice",
    "--default-chat-template-kwargs": "server.default_chat_template_kwargs",
}


def standalone_values(config: DeploymentConfig) -> list[tuple[str, str]]:
    """(setting, value) for every setting ``vllm serve`` receives as an argument of its own: the model
    (a positional) and each flag's separate value. One that starts with ``-`` would be read as an option
    (``model.path=--chat-template=/etc/passwd``): validation refuses it."""
    m, srv = config.model, config.server
    pairs: list[tuple[str, str | None]] = [
        ("model.path", m.path),
        ("model.revision", m.revision),
        ("model.served_name", m.served_name),
        ("model.quantization", m.quantization),
        ("model.load_format", m.load_format),
        ("server.host", srv.host),
        ("server.attention_backend", srv.attention_backend),
        ("server.moe_backend", srv.moe_backend),
        ("server.dcp_comm_backend", srv.dcp_comm_backend),
        ("server.tool_call_parser", srv.tool_call_parser),
        ("server.reasoning_parser", srv.reasoning_parser),
    ]
    return [(key, value) for key, value in pairs if isinstance(value, str)]


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def compilation_config(config: DeploymentConfig) -> dict[str, Any]:
    cg = config.cudagraph
    out: dict[str, Any] = {"cudagraph_mode": cg.mode}
    sizes = config.capture_sizes()
    if cg.mode != "NONE" and (cg.capture_sizes is not None or cg.capture_rule is not None):
        out["cudagraph_capture_sizes"] = sizes
    out["custom_ops"] = list(cg.custom_ops)
    out["pass_config"] = {"fuse_allreduce_rms": cg.fuse_allreduce_rms}
    return out


def speculative_config(config: DeploymentConfig) -> dict[str, Any] | None:
    spec = config.speculative
    if spec.num_speculative_tokens == 0:
        return None
    out: dict[str, Any] = {}
    # vLLM's MTP reads the target's own MTP layer when no model is named; the r12 chain named the target.
    draft = spec.model or (config.model.path if spec.draft == "target" else None)
    if draft:
        out["model"] = draft
    out["method"] = spec.method
    out["num_speculative_tokens"] = spec.num_speculative_tokens
    if spec.moe_backend:
        out["moe_backend"] = spec.moe_backend
    out["draft_sample_method"] = spec.draft_sample_method
    if spec.rejection_sample_method is not None:
        out["rejection_sample_method"] = spec.rejection_sample_method
    return out


#: ``--quantization-config`` per online quantization of GLM-5.2's BF16 linears. exl3-b6 uses vLLM's MXFP8
#: selector only to pick the eligible modules (VLLM_EXL3_ONLINE_TRELLIS_BITS=6 converts them to Trellis K6
#: instead); both skip the MLA down-projections, the router and the MTP layer's eh_proj.
ONLINE_QUANT_CONFIG: dict[str, dict[str, Any]] = {
    "mxfp8": {
        "linear": {"weight": "mxfp8"},
        "ignore": [r"re:.*\.q_a_proj$", r"re:.*kv_a_proj_with_mqa", "lm_head"],
    },
    "exl3-b6": {
        "linear": {"weight": "mxfp8"},
        "shared_experts": {"weight": "mxfp8"},
        "ignore": [
            r"re:.*\.fused_qkv_a_proj$",
            r"re:.*\.q_a_proj$",
            r"re:.*kv_a_proj_with_mqa",
            r"re:.*\.mlp\.gate$",
            "model.layers.78.eh_proj",
            "lm_head",
        ],
    },
}


def quantization_config(config: DeploymentConfig) -> dict[str, Any] | None:
    return ONLINE_QUANT_CONFIG.get(config.model.online_quant)


def kv_transfer_config(config: DeploymentConfig) -> dict[str, Any] | None:
    """The LMCache connector, as the profile's LMCache wrapper appends it; its port is the one the server
    is started on (both from :func:`glmlaunch.config.lmcache_endpoint.endpoint`)."""
    if not config.lmcache:
        return None
    return connector(config)


def hf_overrides(config: DeploymentConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "use_index_cache": config.server.use_index_cache,
        "index_topk_pattern": config.model.geometry.index_topk_pattern,
    }
    if config.model.clamp_rope_tables:
        out["max_position_embeddings"] = config.scheduler.max_model_len
    return out


def _bool_flag(argv: list[str], enabled: bool, name: str, negated: str | None = None) -> None:
    if enabled:
        argv.append(name)
    elif negated:
        argv.append(negated)


def serve_args(config: DeploymentConfig) -> list[str]:
    """The argv after ``vllm serve`` (model first), without the caller's extra arguments."""
    if not config.model.path:
        raise ConfigError(
            "no model to serve", key="model.path", hint="set model.path in the profile or with --set"
        )
    m, s, srv = config.model, config.scheduler, config.server
    argv: list[str] = [m.path or ""]
    if m.revision:
        argv += ["--revision", m.revision]
    if m.served_name:
        argv += ["--served-model-name", m.served_name]
    argv += ["--host", srv.host, "--port", str(srv.port)]
    _bool_flag(argv, m.trust_remote_code, "--trust-remote-code")
    argv += ["--tensor-parallel-size", str(config.parallel.tp)]
    if config.parallel.dcp > 1:
        argv += ["--decode-context-parallel-size", str(config.parallel.dcp)]
        if srv.dcp_comm_backend:
            argv += ["--dcp-comm-backend", srv.dcp_comm_backend]
        if srv.dcp_kv_cache_interleave_size is not None:
            argv += ["--dcp-kv-cache-interleave-size", str(srv.dcp_kv_cache_interleave_size)]
    argv += ["--kv-cache-dtype", config.memory.kv_cache_dtype]
    if srv.attention_backend:
        argv += ["--attention-backend", srv.attention_backend]
    if srv.moe_backend:
        argv += ["--moe-backend", srv.moe_backend]
    if m.quantization:
        argv += ["--quantization", m.quantization]
    if m.load_format:
        argv += ["--load-format", m.load_format]
    argv += ["--compilation-config", _json(compilation_config(config))]
    if config.cudagraph.max_capture_size is not None:
        argv += ["--max-cudagraph-capture-size", str(config.cudagraph.max_capture_size)]
    qconf = quantization_config(config)
    if qconf is not None:
        argv += ["--quantization-config", _json(qconf)]
    argv += ["--gpu-memory-utilization", repr(config.memory.gpu_memory_utilization)]
    if config.memory.kv_cache_memory_bytes is not None:
        argv += ["--kv-cache-memory-bytes", str(config.memory.kv_cache_memory_bytes)]
    if config.memory.num_gpu_blocks_override is not None:
        argv += ["--num-gpu-blocks-override", str(config.memory.num_gpu_blocks_override)]
    argv += ["--max-model-len", str(s.max_model_len)]
    argv += ["--max-num-seqs", str(s.max_num_seqs)]
    argv += ["--max-num-batched-tokens", str(s.max_num_batched_tokens)]
    _bool_flag(argv, s.async_scheduling, "--async-scheduling", "--no-async-scheduling")
    _bool_flag(argv, s.enable_chunked_prefill, "--enable-chunked-prefill", "--no-enable-chunked-prefill")
    _bool_flag(argv, s.enable_prefix_caching, "--enable-prefix-caching", "--no-enable-prefix-caching")
    _bool_flag(argv, srv.enable_flashinfer_autotune, "--enable-flashinfer-autotune")
    _bool_flag(argv, srv.enable_auto_tool_choice, "--enable-auto-tool-choice")
    if srv.tool_call_parser:
        argv += ["--tool-call-parser", srv.tool_call_parser]
    if srv.reasoning_parser:
        argv += ["--reasoning-parser", srv.reasoning_parser]
    if srv.default_chat_template_kwargs:
        argv += ["--default-chat-template-kwargs", _json(srv.default_chat_template_kwargs)]
    _bool_flag(argv, srv.enable_prompt_tokens_details, "--enable-prompt-tokens-details")
    _bool_flag(argv, srv.enable_force_include_usage, "--enable-force-include-usage")
    _bool_flag(argv, srv.enable_request_id_headers, "--enable-request-id-headers")
    argv += ["--hf-overrides", _json(hf_overrides(config))]
    spec = speculative_config(config)
    if spec is not None:
        argv += ["--speculative-config", _json(spec)]
    transfer = kv_transfer_config(config)
    if transfer is not None:
        argv += ["--kv-transfer-config", _json(transfer)]
    argv += list(config.vllm_args)
    return argv


def full_argv(config: DeploymentConfig, extra: Sequence[str] = (), vllm_bin: str = "vllm") -> list[str]:
    return [vllm_bin, "serve", *serve_args(config), *extra]


def _flag_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def managed_flag_conflicts(args: Iterable[str]) -> list[tuple[str, str]]:
    """(flag, setting) for each argument that repeats a flag glmlaunch manages."""
    found: list[tuple[str, str]] = []
    for arg in args:
        name = _flag_name(arg)
        if name in MANAGED_FLAGS:
            found.append((name, MANAGED_FLAGS[name]))
        elif name.startswith("--") and "_" in name and name.replace("_", "-") in MANAGED_FLAGS:
            # vLLM's argparse accepts --max_num_seqs for --max-num-seqs.
            dashed = name.replace("_", "-")
            found.append((name, MANAGED_FLAGS[dashed]))
    return found
