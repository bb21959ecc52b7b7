"""The booted configuration read back from the five real boot logs (tests/fixtures/boot-logs/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from glmlaunch.calibrate.bootconfig import boot_env, boot_settings, map_boot
from glmlaunch.calibrate.learn import logged_config
from glmlaunch.errors import ConfigError
from glmlaunch.vllmlog.boot import parse_log_file
from glmlaunch.vllmlog.bootconfig import (
    BootConfig,
    BootConfigError,
    parse_args_repr,
    parse_boot_config,
    replace_enum_reprs,
)

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "boot-logs"
BASELINE = "vllm-r14-field-baseline-mtp3-c8-v2-server.log"
MTP0 = "vllm-current210-cap1024-mtp0-v1-server.log"
MTP3_V1 = "vllm-current210-cap1024-mtp3-v1-server.log"
MTP3_V3 = "vllm-current210-cap1024-mtp3-v3-server.log"
UNSET = "vllm-current210-unset-mtp3-v1-server.log"
VERSION = "0.11.2.dev280+gilded.gnosis.v20.vllm749050e.si8110e3e.fi801d57a.cu132.20260730.r14"
MODEL = "/workspace/GLM-5.2-EXL3-TR3-3.25bpw"
PATTERN = "FFFSSS" + "FSSS" * 18


def load(name: str) -> BootConfig:
    return parse_boot_config((LOGS / name).read_text(encoding="utf-8"))


# What every one of the five boots shares (read from the logs).
COMMON: dict[str, object] = {
    "model.path": MODEL,
    "model.revision": None,
    "model.quantization": "exl3",
    "model.load_format": "safetensors",
    "model.served_name": "GLM-5.2",
    "model.trust_remote_code": True,
    "model.geometry.index_topk_pattern": PATTERN,
    # max_position_embeddings = max_model_len in --hf-overrides: the RoPE-table clamp
    "model.clamp_rope_tables": True,
    # no pinned pool, no online quantization, no LMCache connector in vLLM's args
    "memory.num_gpu_blocks_override": None,
    "model.online_quant": "none",
    "lmcache": False,
    "parallel.tp": 4,
    "parallel.dcp": 4,
    "scheduler.max_model_len": 131072,
    "scheduler.enable_chunked_prefill": True,
    "scheduler.enable_prefix_caching": True,
    "scheduler.async_scheduling": False,
    "memory.kv_cache_dtype": "nvfp4_ds_mla",
    "memory.kv_cache_memory_bytes": None,
    "memory.kv_scale_mode": "dynamic-token",
    "memory.allocator.expandable_segments": True,
    "memory.allocator.extra": None,
    "cudagraph.mode": "FULL_AND_PIECEWISE",
    "cudagraph.capture_rule": None,
    "cudagraph.custom_ops": ["all"],
    "cudagraph.fuse_allreduce_rms": True,
    "server.host": "0.0.0.0",
    "server.port": 18000,
    "server.attention_backend": "B12X_MLA_SPARSE",
    "server.moe_backend": "b12x",
    "server.dcp_comm_backend": "a2a",
    "server.dcp_kv_cache_interleave_size": 64,
    "server.tool_call_parser": "glm47",
    "server.reasoning_parser": "glm45",
    "server.default_chat_template_kwargs": {"reasoning_effort": "high"},
    "server.enable_auto_tool_choice": True,
    "server.enable_prompt_tokens_details": True,
    "server.enable_force_include_usage": True,
    "server.enable_request_id_headers": False,
    "server.enable_flashinfer_autotune": False,
    "server.use_index_cache": True,
    "runner": "v2",
    "comm.oneshot_allreduce_max_size": 65536,
    "comm.oneshot_fused_max_size": 86016,
    "comm.single_channel": False,
    "dcp_policy.topk_owner_merge": True,
    "dcp_policy.ckv_prefetch_depth": 0,
    "dcp_policy.ckv_gather_max_tokens": 140000,
    "dcp_policy.ckv_prefetch_workspace_mib": 1024,
    "indexer.fold_max_mib": 64,
    "indexer.supertile_k": 32768,
    "indexer.fused": True,
    "hardware.gpu_model": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "hardware.gpu_count": 4,
}
MTP3: dict[str, object] = {
    "speculative.num_speculative_tokens": 3,
    "speculative.method": "mtp",
    "speculative.draft_sample_method": "probabilistic",
    "speculative.moe_backend": "triton",
    "speculative.model": None,
    "speculative.draft": "native",
    "speculative.rejection_sample_method": "standard",
}
#: the r14 build names its release: the r14 SparkInfer generation
R14 = {"release": "r14", "stack": "sparkinfer-r14"}
CAP1024 = {
    "scheduler.max_num_batched_tokens": 3072,
    "scheduler.max_num_seqs": 1,
    "cudagraph.capture_sizes": [1, 2, 3, 4, 5, 6],
    "cudagraph.max_capture_size": 6,
    "exl3_trellis_max_m": 6,
    **R14,
}
POLICY = {
    "dcp_policy.query_split": True,
    "dcp_policy.query_split_min_context_tokens": 0,
    "dcp_policy.ckv_gather": True,
}
EXPECTED: dict[str, dict[str, object]] = {
    BASELINE: {
        **COMMON,
        **MTP3,
        **POLICY,
        "scheduler.max_num_batched_tokens": 2048,
        "scheduler.max_num_seqs": 8,
        "cudagraph.capture_sizes": [4, 8, 12, 16, 20, 24, 28, 32],
        "cudagraph.max_capture_size": 32,
        "exl3_trellis_max_m": 32,
        "release": None,  # the overlay build's banner says "dev": no release
        "memory.gpu_memory_utilization": 0.92,
        "exl3.prefill_capacity": 1024,
        "comm.dma_min_bytes": 25165824,
    },
    MTP0: {
        **COMMON,
        **CAP1024,
        "speculative.num_speculative_tokens": 0,
        "memory.gpu_memory_utilization": 0.9,
        "exl3.prefill_capacity": 1024,
        "comm.dma_min_bytes": 6291456,
    },
    MTP3_V1: {
        **COMMON,
        **CAP1024,
        **MTP3,
        "memory.gpu_memory_utilization": 0.9,
        "exl3.prefill_capacity": 1024,
        "comm.dma_min_bytes": 6291456,
    },
    MTP3_V3: {
        **COMMON,
        **CAP1024,
        **MTP3,
        **POLICY,
        "memory.gpu_memory_utilization": 0.92,
        "exl3.prefill_capacity": 1024,
        "comm.dma_min_bytes": 25165824,
    },
    UNSET: {
        **COMMON,
        **CAP1024,
        **MTP3,
        **POLICY,
        "memory.gpu_memory_utilization": 0.92,
        "exl3.prefill_capacity": 3072,
        "comm.dma_min_bytes": 25165824,
    },
}
ENV = {
    "VLLM_B12X_MLA_SPEC_EXTEND_AS_DECODE": "0",
    "VLLM_DISABLE_SHARED_EXPERTS_STREAM": "1",
    "VLLM_EXL3_PREFILL_BLOCK_M": "64",
    "VLLM_EXL3_PREFILL_CHUNK": "128",
    "VLLM_EXL3_TRELLIS_BLOCK_M": "8",
    "VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD": "1024",
    "VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD": "16",
    "VLLM_PCIE_ONESHOT_ALLOW_CROSS_NUMA": "1",
    "SPARKINFER_INDEXER_DIRECT_K": "1",
    "SPARKINFER_INDEXER_STREAM_SCORER": "1",
    "SPARKINFER_MLA_PREFILL_STRATEGY": "auto",
    "SPARKINFER_MLA_SM120_NUM_SPLITS": "0",
    "SPARKINFER_MLA_SM120_PREFILL_MG": "1",
    "SPARKINFER_W4A16_SMALL_M_DIRECT": "1",
    "SAFETENSORS_FAST_GPU": "1",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_boot_settings_of_every_log(name: str) -> None:
    bc = load(name)
    settings = boot_settings(bc)
    # The vLLM build is asserted on its own: the banner's version string, "dev" for the overlay build.
    assert settings.pop("vllm_version") == ("dev" if "r14-field" in name else VERSION)
    assert settings == EXPECTED[name]
    assert boot_env(bc) == ENV
    mapped = map_boot(bc)
    assert set(mapped.sources) == set(mapped.settings)
    assert mapped.unmapped_args == []


def test_sources_say_where_each_value_came_from() -> None:
    sources = map_boot(load(MTP3_V3)).sources
    assert sources["scheduler.max_num_seqs"] == "vllm args max_num_seqs"
    # vLLM's args lack gpu_memory_utilization here: the launcher's table says 0.92
    assert sources["memory.gpu_memory_utilization"] == "launcher effective GPU_MEMORY_UTILIZATION [env]"
    assert sources["comm.dma_min_bytes"] == "log: Configured b12x PCIe crossovers (DMA min)"
    assert sources["dcp_policy.topk_owner_merge"] == "log: GLM-5.2 DCP prefill policy"
    assert (
        sources["indexer.fold_max_mib"]
        == "launcher profile runtime SPARKINFER_INDEXER_TWO_LEVEL_FOLD_MAX_MIB"
    )
    assert sources["exl3.prefill_capacity"] == "log: EXL3 mixed Trellis runtime planned"
    # without the policy line (PCIe calibration failed), the owner merge comes from the runtime env
    assert map_boot(load(MTP0)).sources["dcp_policy.topk_owner_merge"] == (
        "launcher profile runtime VLLM_DCP_TOPK_OWNER_MERGE"
    )


def test_the_enum_bearing_args_dict() -> None:
    args = load(BASELINE).vllm_args
    assert args is not None
    comp = args["compilation_config"]
    assert comp["cudagraph_mode"] == "CUDAGraphMode.FULL_AND_PIECEWISE"
    assert comp["dynamic_shapes_config"] == {
        "type": "DynamicShapesType.BACKED",
        "evaluate_guards": False,
        "assume_32_bit_indexing": False,
    }
    assert comp["cudagraph_capture_sizes"] == [4, 8, 12, 16, 20, 24, 28, 32]
    assert comp["inductor_compile_config"] == {
        "enable_auto_functionalized_v2": False,
        "combo_kernels": True,
        "benchmark_combo_kernel": True,
    }
    assert comp["static_all_moe_layers"] == []
    assert args["speculative_config"] == {
        "method": "mtp",
        "num_speculative_tokens": 3,
        "moe_backend": "triton",
        "draft_sample_method": "probabilistic",
        "rejection_sample_method": "standard",
    }
    assert args["served_model_name"] == ["GLM-5.2"]
    assert args["hf_overrides"] == {
        "use_index_cache": True,
        "index_topk_pattern": PATTERN,
        "max_position_embeddings": 131072,
    }
    assert (args["max_num_seqs"], args["max_num_batched_tokens"], args["port"]) == (8, 2048, 18000)
    assert "gpu_memory_utilization" not in args
    assert load(MTP0).vllm_args is not None
    assert "speculative_config" not in (load(MTP0).vllm_args or {})
    assert (load(MTP0).vllm_args or {})["gpu_memory_utilization"] == 0.9


def test_launcher_header_and_worker_lines() -> None:
    bc = load(BASELINE)
    assert bc.vllm_version == "dev"
    assert load(MTP0).vllm_version == VERSION
    assert bc.effective["MAX_NUM_SEQS"] == ("8", "env")
    assert bc.effective["DCP_KV_CACHE_INTERLEAVE_SIZE"] == ("64", "variant")
    assert bc.effective["MODEL_ID"] == ("-", "not applicable to this family")
    assert bc.effective["DRAFT_MODEL"] == ("", "default")
    assert bc.effective["CUDAGRAPH_CAPTURE_SIZES"] == ("4,8,12,16,20,24,28,32", "env")
    assert len(bc.effective) == 45
    assert bc.runtime_env["SPARKINFER_INDEXER_TWO_LEVEL_FOLD_MAX_MIB"] == "64"
    assert bc.runtime_env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert len(bc.runtime_env) == 22
    assert bc.model_family == "GLM-5.2 753B (MLA + EXL3/NVFP4) — the measured default"
    assert (bc.kv_scale_mode, bc.kv_scale_detail) == ("dynamic-token", "FP8-RoPE 368-byte record")
    assert bc.dcp_prefill_policy == {
        "query-split": 1,
        "min-context": 0,
        "CKV-gather": 1,
        "owner-merge": 1,
        "indexer-shards": 0,
        "prefetch-depth": 0,
    }
    assert bc.ckv_gather_capacity_tokens == 140000
    assert bc.runner == "v2"
    assert (bc.gpu_model, bc.gpu_memory_mib, bc.gpu_driver, bc.gpu_count) == (
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        97887,
        "610.43.02",
        4,
    )
    assert (bc.exl3_decode_capacity, bc.exl3_prefill_capacity, bc.exl3_scheduler_capacity) == (32, 1024, 2048)
    assert (bc.oneshot_max_bytes, bc.fused_max_bytes, bc.dma_min_bytes) == (65536, 86016, 25165824)
    # the logs whose PCIe calibration failed print no policy line and no CKV capacity line
    assert load(MTP0).dcp_prefill_policy is None and load(MTP0).ckv_gather_capacity_tokens is None


def test_boot_log_carries_its_boot_config() -> None:
    boot = parse_log_file(LOGS / UNSET)
    assert boot.boot_config == load(UNSET)


def test_enum_reprs_become_strings() -> None:
    text = "{'a': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'b': [<X.Y: 'a>b'>], 'c': '<not an enum>'}"
    assert (
        replace_enum_reprs(text)
        == "{'a': 'CUDAGraphMode.FULL_AND_PIECEWISE', 'b': ['X.Y'], 'c': '<not an enum>'}"
    )
    assert parse_args_repr(text) == {
        "a": "CUDAGraphMode.FULL_AND_PIECEWISE",
        "b": ["X.Y"],
        "c": "<not an enum>",
    }
    assert parse_args_repr("{'t': (1, 2), 's': {3}, 'n': None}") == {"t": [1, 2], "s": [3], "n": None}


@pytest.mark.parametrize(
    "text",
    [
        "{'model': __import__('os').system('touch /tmp/glmlaunch-pwned')}",
        "{'x': __import__('os')}",
        "{'x': open('/etc/passwd').read()}",
        "{'x': (lambda: 1)()}",
        "{'x': <function f at 0x7f>}",
        "{'x': <CUDAGraphMode.FULL: (2, 1)}",
        "[1, 2]",
    ],
)
def test_code_in_the_args_dict_is_refused_not_run(text: str, tmp_path: Path) -> None:
    with pytest.raises(BootConfigError):
        parse_args_repr(text)
    assert not Path("/tmp/glmlaunch-pwned").exists()


def test_a_bad_args_line_is_reported_not_raised() -> None:
    log = (
        "(APIServer pid=1) INFO 07-31 00:00:00 [api_utils.py:273] non-default args: {'x': __import__('os')}\n"
    )
    bc = parse_boot_config(log)
    assert bc.vllm_args is None
    assert bc.vllm_args_error is not None and "not a Python literal" in bc.vllm_args_error
    assert boot_settings(bc) == {}


def test_a_log_cut_anywhere_never_raises() -> None:
    text = (LOGS / BASELINE).read_text(encoding="utf-8")
    start = text.index("non-default args")
    for cut in range(start, start + 4000, 37):
        parse_boot_config(text[:cut])


def test_logged_config_resolves_the_configuration_a_log_booted(tmp_path: Path) -> None:
    path = LOGS / BASELINE
    config = logged_config(parse_log_file(path), path)
    assert config is not None
    assert (config.parallel.tp, config.parallel.dcp, config.model.path) == (4, 4, MODEL)
    # a log without a `non-default args:` line shows no configuration
    bare = LOGS.parent / "watch" / "oom.log"
    assert logged_config(parse_log_file(bare), bare) is None
    # settings that do not resolve here: a ConfigError on the log, naming why
    odd = tmp_path / "odd.log"
    text = path.read_text(encoding="utf-8")
    assert "'kv_cache_dtype': 'nvfp4_ds_mla'" in text
    odd.write_text(text.replace("'kv_cache_dtype': 'nvfp4_ds_mla'", "'kv_cache_dtype': 'bogus'"))
    with pytest.raises(ConfigError) as err:
        logged_config(parse_log_file(odd), odd)
    assert err.value.key == "LOG" and err.value.value == str(odd)
    assert err.value.message.startswith("the configuration this log booted does not resolve here (")
    assert "memory.kv_cache_dtype" in err.value.message
