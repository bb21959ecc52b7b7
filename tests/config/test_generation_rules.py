"""The library generation (``stack``): its names, the names its library reads, and the release it runs.

Each generation's reads come from its own tree (glmlaunch/config/library_env.json, written from
tests/fixtures/generations/ by scripts/gen_library_env.py; test_generations.py re-records the trees).
Real YAML profiles and the real CLI in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from glmlaunch.config.profiles import list_profiles
from glmlaunch.config.releases import stack_of_release
from glmlaunch.config.resolve import resolve_config

REPO = Path(__file__).resolve().parents[2]


def warnings(profile: str, *sets: str) -> dict[str, str]:
    r = resolve_config(profile, list(sets), environ={})
    return {w.key: w.message + (f" (hint: {w.hint})" if w.hint else "") for w in r.warnings}


def test_sparkinfer_names_on_a_b12x_stack_are_told_so() -> None:
    got = warnings("gate", "stack=b12x-r32", "release=r34", "env.SPARKINFER_INDEXER_DIRECT_K=1")
    assert set(got) == {"env.SPARKINFER_INDEXER_DIRECT_K"}
    text = got["env.SPARKINFER_INDEXER_DIRECT_K"]
    assert "reads no SPARKINFER_* name" in text and "its b12x-r32 spelling is B12X_INDEXER_DIRECT_K" in text


def test_b12x_names_on_a_sparkinfer_stack_are_told_so() -> None:
    got = warnings(
        "turnkey", "env.B12X_INDEXER_DIRECT_K=1", "env.B12X_ENABLE_FP6=1", "env.B12X_MOE_FORCE_A16=1"
    )
    # SparkInfer reads its own spelling; its legacy FP6 plugin reads B12X_ENABLE_FP6; the deployments export
    # B12X_MOE_FORCE_A16 for vLLM's own b12x MoE backend (a known passthrough)
    assert set(got) == {"env.B12X_INDEXER_DIRECT_K"}
    text = got["env.B12X_INDEXER_DIRECT_K"]
    assert "sparkinfer-r28 (releases r17-r28) is SparkInfer" in text
    assert "its sparkinfer-r28 spelling is SPARKINFER_INDEXER_DIRECT_K" in text


def test_a_managed_name_of_another_generation_names_the_setting() -> None:
    got = warnings("gate", "stack=b12x-r29", "release=r29", "env.SPARKINFER_FUSED_INDEXER=1")
    assert (
        "B12X_FUSED_INDEXER, which glmlaunch sets from indexer.fused" in got["env.SPARKINFER_FUSED_INDEXER"]
    )
    got = warnings("gate", "stack=b12x-r29", "release=r29", "env.B12X_PCIE_TP8_OWNER_REDUCE=0")
    assert "the b12x-r29 stack never reads this variable" in got["env.B12X_PCIE_TP8_OWNER_REDUCE"]


def test_a_name_no_generation_reads() -> None:
    got = warnings("gate", "stack=b12x-r32", "release=r34", "env.B12X_FUSED_INDEXR=1")
    assert "no library generation glmlaunch knows reads this name" in got["env.B12X_FUSED_INDEXR"]
    got = warnings("gate", "stack=b12x-r29", "release=r29", "env.B12X_PCIE_TP2_PLAIN_REMOTE_PUSH=1")
    assert "b12x-1.5 (no release) does" in got["env.B12X_PCIE_TP2_PLAIN_REMOTE_PUSH"]


def test_the_stack_must_be_the_release_generation() -> None:
    got = warnings("turnkey", "stack=sparkinfer-r14")
    assert "release r28 runs the sparkinfer-r28 (releases r17-r28) library generation" in got["stack"]
    assert "--set stack=sparkinfer-r28" in got["stack"]
    assert "stack" not in warnings("turnkey", "stack=b12x-r32", "release=r33")
    assert "stack" not in warnings("turnkey", "stack=b12x-1.5")  # the lab row runs with any release


def test_earlier_names_still_resolve(tmp_path: Path) -> None:
    path = tmp_path / "old.yaml"
    path.write_text("extends: gate\nstack: sparkinfer-r12\n")
    assert resolve_config(str(path), environ={}).config.stack == "sparkinfer-r14"
    assert resolve_config("gate", ["stack=b12x"], environ={}).config.stack == "b12x-1.5"


def test_topology_settings_exist_from_r32() -> None:
    r = resolve_config(
        "gate", ["stack=b12x-r29", "release=r29", "comm.oneshot_tp8_owner_reduce=false"], environ={}
    )
    assert [n.key for n in r.notes] == ["comm.oneshot_tp8_owner_reduce"]
    assert "B12X r32-r34 and ii-r16-r18 read it" in r.notes[0].message


def test_every_shipped_profile_names_the_generation_of_its_release() -> None:
    for profile in list_profiles():
        config = resolve_config(profile.name, environ={}).config
        assert config.release_effective is not None, profile.name
        assert config.stack == stack_of_release(config.release_effective), profile.name


@pytest.mark.parametrize("profile", ["turnkey", "r12-exl3", "gate", "exl3-tr3-3.42bpw"])
def test_plan_cites_the_generation_in_its_header_and_json(profile: str, clean_env: dict[str, str]) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "glmlaunch", "plan", "-p", profile, *args],
            cwd=REPO,
            env=clean_env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    config = resolve_config(profile, environ={}).config
    text = run().stdout.splitlines()
    doc = json.loads(run("--json").stdout)
    gen = doc["library"]["generation"]
    assert gen["stack"] == config.stack
    if config.stack == "sparkinfer-r28":
        assert text[1] == (
            "generation: sparkinfer-r28 (r17-r28): local-inference-lab/sparkinfer tree 200c1db7 = 272a84bd "
            "+ PR 106 + PR 117; one channel per named pass (vLLM PR 216)"
        )
        assert gen["tree"] == "200c1db7ef98ff8bbfd4f621555326e20f42282e" and gen["commit"] is None
        assert gen["base"] == "272a84bd97ce791a1e92d1f3a0da3dd5f3c6565f" and len(gen["pull_requests"]) == 2
        assert gen["patch"].endswith("gilded-gnosis-v20-r28/sparkinfer/integration.patch")
        assert gen["semantic_channels"] is True and gen["releases"] == "r17-r28"
    else:
        assert text[1] == (
            "generation: sparkinfer-r14 (r12-r16): local-inference-lab/sparkinfer@de04125508c7; "
            "a new channel per capture() call"
        )
        assert gen["commit"] == "de04125508c75e748016493f851e6bd4513b515b"
        assert gen["tree"] == "35aebc6d46a0d3d4f7275b81251211864f410269" and gen["patch"] is None
