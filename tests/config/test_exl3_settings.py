"""The exl3 section, the NVFP4 KV scale mode and the DCP prefill workspace: settings, env and validation."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from glmlaunch.config.commands import profile_schema_document
from glmlaunch.config.registry import MANAGED_BY_NAME, managed_env
from glmlaunch.config.resolve import resolve_config, setting_env_name
from glmlaunch.config.validate import validate_config
from glmlaunch.errors import ConfigErrors


@pytest.mark.parametrize("profile", ["r12-exl3", "gate", "turnkey", "exl3-tr3-3.25bpw", "exl3-tr3-3.42bpw"])
def test_set_prefill_capacity_on_every_shipped_profile(profile: str, clean_env: dict[str, str]) -> None:
    res = run_cli("config", "-p", profile, "--set", "exl3.prefill_capacity=1536", "--json", env=clean_env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["config"]["exl3"]["prefill_capacity"] == 1536
    assert doc["sources"]["exl3.prefill_capacity"] == "cli --set exl3.prefill_capacity"


def test_prefill_capacity_from_the_environment() -> None:
    name = setting_env_name("exl3.prefill_capacity")
    assert name == "GLMLAUNCH_EXL3__PREFILL_CAPACITY"
    r = resolve_config("r12-exl3", environ={name: "1024"})
    assert r.config.exl3.prefill_capacity == 1024
    assert r.config.exl3_prefill_capacity_effective == 1024
    # the top-level field keeps its own name, distinct from the section
    r2 = resolve_config("r12-exl3", environ={"GLMLAUNCH_EXL3_TRELLIS_MAX_M": "48"})
    assert r2.config.exl3_trellis_max_m == 48 and r2.config.exl3.prefill_capacity is None


def test_schema_lists_the_new_settings() -> None:
    schema = json.dumps(profile_schema_document())
    for word in ("Exl3Section", "prefill_capacity", "kv_scale_mode", "dynamic-token"):
        assert word in schema


def test_prefill_capacity_must_be_positive() -> None:
    with pytest.raises(ConfigErrors) as exc:
        resolve_config("r12-exl3", ["exl3.prefill_capacity=0"])
    assert exc.value.key == "exl3.prefill_capacity"


def test_prefill_capacity_rendered_only_when_set() -> None:
    assert "VLLM_EXL3_PREFILL_CAPACITY" not in managed_env(resolve_config("r12-exl3").config)
    env = managed_env(resolve_config("r12-exl3", ["exl3.prefill_capacity=1024"]).config)
    assert env["VLLM_EXL3_PREFILL_CAPACITY"] == "1024"


def test_scale_mode_env() -> None:
    def env(*ov: str) -> dict[str, str]:
        return managed_env(resolve_config("r12-exl3", list(ov)).config)

    dyn = env("memory.kv_scale_mode=dynamic-token")
    assert (dyn["VLLM_NVFP4_MLA_DYNAMIC_SCALE"], dyn["KV_FP8_ROPE"]) == ("1", "1")
    st = env("memory.kv_scale_mode=static")
    assert (st["VLLM_NVFP4_MLA_DYNAMIC_SCALE"], st["KV_FP8_ROPE"]) == ("0", "0")
    unset = env()
    assert "VLLM_NVFP4_MLA_DYNAMIC_SCALE" not in unset and "KV_FP8_ROPE" not in unset
    assert "memory.kv_scale_mode" in MANAGED_BY_NAME["KV_FP8_ROPE"].settings


def test_prefill_workspace_env_is_the_launchers_knob() -> None:
    spec = MANAGED_BY_NAME["VLLM_B12X_MLA_CKV_PREFETCH_WORKSPACE_MIB"]
    assert "DCP_PREFILL_WORKSPACE_MIB" in spec.doc
    env = managed_env(resolve_config("r12-exl3", ["dcp_policy.ckv_prefetch_workspace_mib=1024"]).config)
    assert env["VLLM_B12X_MLA_CKV_PREFETCH_WORKSPACE_MIB"] == "1024"


def test_scale_mode_with_another_kv_dtype_is_ignored_with_a_note(clean_env: dict[str, str]) -> None:
    r = resolve_config("gate", ["memory.kv_scale_mode=dynamic-token"])  # gate runs fp8 KV
    (note,) = r.notes
    assert note.rule == "kv-scale-mode-dtype" and note.level == "note"
    text = note.one_line()
    assert "memory.kv_scale_mode" in text and "ignored" in text and "nvfp4_ds_mla" in text
    assert not r.warnings
    env = managed_env(r.config)
    assert "KV_FP8_ROPE" not in env and "VLLM_NVFP4_MLA_DYNAMIC_SCALE" not in env
    # a note on stderr (silenced by -q), the configuration on stdout
    out = run_cli("env", "-p", "gate", "--set", "memory.kv_scale_mode=dynamic-token", env=clean_env)
    assert out.returncode == 0 and "memory.kv_scale_mode: ignored" in out.stderr
    quiet = run_cli("-q", "env", "-p", "gate", "--set", "memory.kv_scale_mode=dynamic-token", env=clean_env)
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_prefill_capacity_above_batched_tokens_is_refused() -> None:
    # upstream's exl3-prefill-capacity-above-scheduler: the arena lives inside one scheduler chunk
    with pytest.raises(ConfigErrors) as exc:
        resolve_config("r12-exl3", ["exl3.prefill_capacity=4096"])
    (err,) = [e for e in exc.value.errors if e.key == "exl3.prefill_capacity"]
    assert "3072" in err.message and err.hint and err.source == "cli --set exl3.prefill_capacity"
    ok = resolve_config("r12-exl3", ["exl3.prefill_capacity=3072"])
    assert not [d for d in validate_config(ok.config, ok.provenance) if d.key == "exl3.prefill_capacity"]
