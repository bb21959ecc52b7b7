"""The vllm argv and the environment a configuration produces."""

from __future__ import annotations

import json

from conftest import FIXTURES

from glmlaunch.config.registry import MANAGED, managed_env
from glmlaunch.config.render_args import full_argv
from glmlaunch.config.resolve import resolve_config


def argv(profile: str, *overrides: str) -> list[str]:
    return full_argv(resolve_config(profile, list(overrides), environ={}).config)


def test_r12_preset_argv_matches_the_old_chain_exactly() -> None:
    expected = (FIXTURES / "r12-exl3.argv").read_text(encoding="utf-8").splitlines()
    assert argv("r12-exl3") == expected


def test_gate_differs_only_by_kv_dtype_seqs_and_its_decode_window() -> None:
    base, gate = argv("r12-exl3"), argv("gate")
    diff = [(a, b) for a, b in zip(base, gate, strict=True) if a != b]
    assert [d for d in diff if not d[0].startswith("{")] == [("nvfp4_ds_mla", "fp8"), ("8", "1")]
    # one sequence x (1 + MTP 3): graphs up to 4 tokens, not 32
    (comp,) = [json.loads(b) for a, b in diff if a.startswith("{")]
    assert comp["cudagraph_capture_sizes"] == [4]


def test_turnkey_argv() -> None:
    a = argv("turnkey")
    assert a[a.index("--decode-context-parallel-size") + 1] == "2"
    assert a[a.index("--gpu-memory-utilization") + 1] == "0.957"
    comp = json.loads(a[a.index("--compilation-config") + 1])
    assert comp["cudagraph_capture_sizes"] == list(range(6, 49, 6))  # MTP+1 = 6 up to 8 x 6
    spec = json.loads(a[a.index("--speculative-config") + 1])
    assert spec == {
        "model": "brandonmusic/GLM-5.2-EXL3-TR3-3.0bpw",
        "method": "mtp",
        "num_speculative_tokens": 5,
        "moe_backend": "triton",
        "draft_sample_method": "probabilistic",
    }


def test_dcp1_mtp0_and_pinned_kv() -> None:
    a = argv(
        "gate",
        "parallel.dcp=1",
        "speculative.num_speculative_tokens=0",
        "memory.kv_cache_memory_bytes=2GiB",
        "cudagraph.capture_rule.max=4",
    )
    assert "--decode-context-parallel-size" not in a and "--dcp-comm-backend" not in a
    assert "--speculative-config" not in a
    assert a[a.index("--kv-cache-memory-bytes") + 1] == str(2 * 1024**3)
    assert json.loads(a[a.index("--compilation-config") + 1])["cudagraph_capture_sizes"] == [1, 2, 3, 4]


def test_env_one_knob_every_name_the_stack_reads() -> None:
    r12 = managed_env(resolve_config("gate", environ={}).config)
    assert r12["VLLM_PCIE_DMA_FP8"] == r12["SPARKINFER_PCIE_DMA_FP8"] == "0"
    assert not any(name.startswith("B12X_") for name in r12)
    b12x = managed_env(resolve_config("gate", ["stack=b12x"], environ={}).config)
    assert b12x["B12X_PCIE_DMA_FP8"] == "0" and b12x["B12X_PAGED_INDEX_SUPERTILE_K"] == "32768"
    assert not any(name.startswith("SPARKINFER_") for name in b12x)


def test_env_follows_settings() -> None:
    env = managed_env(resolve_config("turnkey", environ={}).config)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"  # the old chain exported 0..7 for TP4
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert env["VLLM_PCIE_ONESHOT_FUSED_ADD_RMS_NORM_MAX_SIZE"] == "84KB"
    assert env["VLLM_DCP_A2A_MAX_TOKENS"] == "64"
    off = managed_env(resolve_config("turnkey", ["comm.pcie_allreduce=false"], environ={}).config)
    assert off["VLLM_ENABLE_PCIE_ALLREDUCE"] == "0"
    assert not any("PCIE_DMA" in n or "ONESHOT" in n for n in off)
    dma_off = managed_env(resolve_config("turnkey", ["comm.dma_min_bytes=off"], environ={}).config)
    assert dma_off["VLLM_PCIE_DMA_MIN_BYTES"] == "off"
    lm = managed_env(resolve_config("turnkey", ["lmcache=true"], environ={}).config)
    assert lm["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False"
    no_dcp = managed_env(resolve_config("turnkey", ["parallel.dcp=1"], environ={}).config)
    assert "VLLM_DCP_A2A_MAX_TOKENS" not in no_dcp and "VLLM_USE_B12X_DCP_A2A" not in no_dcp


def test_registry_names_are_unique_and_settings_exist() -> None:
    names = [spec.name for spec in MANAGED]
    assert len(names) == len(set(names))
    flat = resolve_config("gate", environ={}).provenance
    for spec in MANAGED:
        for setting in spec.settings:
            assert any(k == setting or k.startswith(setting + ".") for k in flat), (spec.name, setting)


def test_environment_reference_is_current() -> None:
    from conftest import REPO

    from glmlaunch.config.registry import reference_markdown

    committed = (REPO / "docs" / "environment.md").read_text(encoding="utf-8")
    assert committed == reference_markdown(), "run: python scripts/gen_env_docs.py"
    for spec in MANAGED:
        assert f"`{spec.name}`" in committed
