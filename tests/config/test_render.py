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


def test_gate_differs_only_by_kv_dtype_and_seqs() -> None:
    # the old chain's gate is its r12 preset with KV_CACHE_DTYPE=fp8 MAX_NUM_SEQS=1: graphs [4..32] too
    base, gate = argv("r12-exl3"), argv("gate")
    diff = [(a, b) for a, b in zip(base, gate, strict=True) if a != b]
    assert diff == [("nvfp4_ds_mla", "fp8"), ("8", "1")]


def test_turnkey_argv() -> None:
    a = argv("turnkey")
    assert a[a.index("--decode-context-parallel-size") + 1] == "2"
    assert a[a.index("--gpu-memory-utilization") + 1] == "0.957"
    comp = json.loads(a[a.index("--compilation-config") + 1])
    assert comp["cudagraph_capture_sizes"] == list(range(4, 65, 4))  # upstream's 4..64 step 4
    assert a[a.index("--max-cudagraph-capture-size") + 1] == "64"
    spec = json.loads(a[a.index("--speculative-config") + 1])
    # the native draft: no "model" key; the MTP rejection method named
    assert spec == {
        "method": "mtp",
        "num_speculative_tokens": 5,
        "moe_backend": "triton",
        "draft_sample_method": "probabilistic",
        "rejection_sample_method": "standard",
    }
    hf = json.loads(a[a.index("--hf-overrides") + 1])
    assert hf["max_position_embeddings"] == 524288  # the RoPE clamp
    transfer = json.loads(a[a.index("--kv-transfer-config") + 1])
    assert transfer["kv_connector"] == "LMCacheMPConnector"


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


def test_env_one_knob_every_name_the_generation_exports() -> None:
    # the r12 chain exports the DMA wire mode under all three names (B12X_ included, which de04125 never
    # reads) and leaves the indexer's library defaults unset
    r12 = managed_env(resolve_config("gate", environ={}).config)
    assert r12["VLLM_PCIE_DMA_FP8"] == r12["SPARKINFER_PCIE_DMA_FP8"] == r12["B12X_PCIE_DMA_FP8"] == "0"
    assert [n for n in r12 if n.startswith("B12X_")] == ["B12X_PCIE_DMA_FP8"]
    assert "SPARKINFER_PAGED_INDEX_SUPERTILE_K" not in r12
    # the r28 appliance exports the supertile under both names
    r28 = managed_env(resolve_config("turnkey", environ={}).config)
    assert r28["SPARKINFER_PAGED_INDEX_SUPERTILE_K"] == r28["B12X_PAGED_INDEX_SUPERTILE_K"] == "32768"
    # B12X (r29+) reads no SPARKINFER_ name; `b12x`, the earlier name of the PyPI 1.5 row, still resolves
    topology = ["comm.oneshot_tp2_remote_push=true", "comm.oneshot_tp8_owner_reduce=false"]
    for stack in ("b12x-r29", "b12x-r32", "b12x"):
        b12x = managed_env(resolve_config("turnkey", [f"stack={stack}", *topology], environ={}).config)
        assert b12x["B12X_PCIE_DMA_FP8"] == "0" and b12x["B12X_PAGED_INDEX_SUPERTILE_K"] == "32768"
        assert not any(name.startswith("SPARKINFER_") for name in b12x)
        # the r32 topology transports are exported where the library reads them, and only there
        r32 = {"B12X_PCIE_TP2_REMOTE_PUSH": "1", "B12X_PCIE_TP8_OWNER_REDUCE": "0"}
        expected = r32 if stack == "b12x-r32" else {}
        assert {n: v for n, v in b12x.items() if n.startswith("B12X_PCIE_TP")} == expected


def test_env_follows_settings() -> None:
    env = managed_env(resolve_config("turnkey", environ={}).config)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"  # the old chain exported 0..7 for TP4
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1"  # upstream's turnkey has always run V2
    assert env["VLLM_PCIE_ONESHOT_FUSED_ADD_RMS_NORM_MAX_SIZE"] == "84KB"
    assert env["VLLM_DCP_A2A_MAX_TOKENS"] == "16"
    assert env["VLLM_EXL3_TRELLIS_MAX_M"] == "64"  # emitted: the runtime's default 32 < the window 48
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
