"""Every shipped profile named after a deployment reproduces it: env and argv, setting by setting.

The fixtures in tests/fixtures/upstream/ record what upstream itself resolves (its own code run, never
retyped): the appliance's variants through malaiwah/glm52-exl3-vast's entrypoint in CONFIG_SMOKE mode with
the r28 image's calibrator call, the old launcher chain's DRY_RUN=1 output (blackwell-llm-docker
launchers/ at 513bd84), and the R7 composes of Gilded Gnosis r34 and Infernal Invocation r18 through their
chains with DRY_RUN=1 (launchers/ at 98224d1 and d568788, scripts/record_launcher_chain.py). Each fixture
names its repository, commit and command.

Differences allowed, each for a documented reason and nothing else:

* host-derived values: the GPU order (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER) and the local model
  directory (upstream downloads MODEL_REPO@MODEL_REVISION into it; glmlaunch names the same checkpoint as
  the hub id with --revision, which the test checks against the fixture's checkpoint);
* values upstream's PCIe calibrator measures on the host (the fixture lists them): glmlaunch keeps the
  value measured on the rig, or, for the old chain, the calibrator's dry-run fallback, which must match;
* the old chain's own launcher variables (MODEL, TP, GRAPH, …), which only the chain's scripts read;
* the LMCache server wrapper: glmlaunch passes the connector and the wrapper's variable itself (they are
  compared), starting the server belongs to the container;
* the R7 chains at DCP 1: serve-glm52-v19.sh exports its DCP prefill policy at any DCP and v16 always
  passes ``--decode-context-parallel-size``; glmlaunch exports the DCP names and the flag only with DCP > 1
  (vLLM reads them only then, and 1 is vLLM's default size). The values are still compared: the names
  glmlaunch would export for the same settings at DCP 2 must equal the chain's;
* the image's own ENV (the fixture's ``image_env``, from its Dockerfile): the container gives it to the
  chain and to glmlaunch alike; a name glmlaunch states too must have the image's value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from glmlaunch.config.environment import produced_env
from glmlaunch.config.registry import KNOWN_PASSTHROUGH, MANAGED_BY_NAME, TOOL_VARS
from glmlaunch.config.render_args import full_argv
from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"

#: shipped profile -> the fixture of the deployment it is named after
PROFILES = {
    "turnkey": "exl3-tr3",
    "exl3-tr3-3.25bpw": "exl3-tr3-3.25bpw",
    "exl3-tr3-3.36bpw": "exl3-tr3-3.36bpw",
    "exl3-tr3-3.42bpw": "exl3-tr3-3.42bpw",
    "r12-exl3": "old-chain-r12",
    "gate": "old-chain-gate",
    "r34-exl3-r7": "r34-exl3-r7",
    "ii-r18-exl3-r7": "ii-r18-exl3-r7",
}
#: the launcher chains' profiles (the chain names the hub checkpoint itself)
CHAINS = frozenset({"r12-exl3", "gate", "r34-exl3-r7", "ii-r18-exl3-r7"})
#: the chains recorded at DCP 1 (scripts/record_launcher_chain.py)
DCP1_CHAINS = frozenset({"r34-exl3-r7", "ii-r18-exl3-r7"})
GPU_ORDER = {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"}
#: serve-gilded-gnosis.sh's preset variables, read by the chain's own scripts (v19/v16) and by nothing else
CHAIN_KNOBS = frozenset(
    {
        "ASYNC_SCHEDULING", "DCP", "DCP_KV_CACHE_INTERLEAVE_SIZE", "F8_DMA", "GPU_MEMORY_UTILIZATION",
        "GRAPH",
        "KV_CACHE_DTYPE", "LOAD_FORMAT", "MAX_BATCHED_TOKENS", "MAX_MODEL_LEN", "MAX_NUM_SEQS", "MODEL",
        "MODEL_FAMILY", "MODEL_REVISION", "MOE_BACKEND", "MOE_MODE", "MTP", "MTP_DRAFT_SAMPLE_METHOD",
        "MTP_MOE_BACKEND", "ONLINE_QUANT", "QUANTIZATION", "SERVED_MODEL_NAME", "TP",
        # the R7 composes' GPUS and PORT (serve-glm52-v16.sh L16-17 read them) and the Infernal Invocation
        # shim's GLM52_SERVER (serve-infernal-invocation.sh L7, read by serve-gilded-gnosis.sh)
        "GPUS", "PORT", "GLM52_SERVER",
    }
)  # fmt: skip


def _fixture(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return doc


def _calibrated(fx: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in fx["excluded"] if e.get("kind") == "calibrator" and "name" in e}


def _upstream_env(fx: dict[str, Any]) -> dict[str, str]:
    env = dict(fx["env"])
    wrapper = fx.get("lmcache_wrapper")
    if wrapper:
        env.update(wrapper["vllm_env_changed"])
    return env


def _upstream_argv(fx: dict[str, Any]) -> list[str]:
    wrapper = fx.get("lmcache_wrapper")
    return list(fx["argv"]) + (list(wrapper["vllm_argv_appended"]) if wrapper else [])


def _flags(argv: list[str]) -> dict[str, Any]:
    """``--flag value`` pairs after ``vllm serve MODEL``; JSON values parsed, bare flags True."""
    out: dict[str, Any] = {}
    i = 3
    while i < len(argv):
        name = argv[i]
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value: Any = argv[i + 1]
            if value[:1] in "{[":
                value = json.loads(value)
            assert name not in out, f"{name} given twice"
            out[name] = value
            i += 2
        else:
            out[name] = True
            i += 1
    return out


def _dcp_only(config: DeploymentConfig) -> dict[str, str]:
    """The names glmlaunch exports for ``config``'s settings only with DCP > 1, with their values there."""
    at1 = {e.name for e in produced_env(config)}
    dcp2 = config.model_copy(update={"parallel": config.parallel.model_copy(update={"dcp": 2})})
    return {e.name: e.value for e in produced_env(dcp2) if e.name not in at1}


@pytest.mark.parametrize("profile", list(PROFILES))
def test_env_equals_upstream(profile: str) -> None:
    fx = _fixture(PROFILES[profile])
    config = resolve_config(profile, (), environ={}).config
    ours = {e.name: e.value for e in produced_env(config)}
    theirs = _upstream_env(fx)
    calibrated = _calibrated(fx)
    chain = profile in CHAINS
    dcp_only = _dcp_only(config) if profile in DCP1_CHAINS else {}
    image = {n: row["value"] for n, row in fx.get("image_env", {}).items() if n not in theirs}
    diffs = []
    for name in sorted(set(ours) | set(theirs)):
        if name in GPU_ORDER or (chain and name in CHAIN_KNOBS):
            continue
        if name in image and name not in theirs:
            if ours[name] != image[name]:
                diffs.append(f"{name}: glmlaunch {ours[name]!r}, the image's ENV {image[name]!r}")
            continue
        if name in dcp_only and name not in ours:
            # the chain's dry run shows the calibrator's fallback for a calibrated name, the value otherwise
            want = calibrated[name]["values"]["dry_run"] if name in calibrated else theirs.get(name)
            if dcp_only[name] != want:
                diffs.append(f"{name}: glmlaunch (at DCP > 1) {dcp_only[name]!r}, upstream {want!r}")
            continue
        if name in calibrated:
            if chain:
                # the chain's dry run shows the calibrator's fallback: the preset keeps exactly that
                assert ours.get(name) == calibrated[name]["values"]["dry_run"], name
            else:
                assert name in ours, f"{name}: glmlaunch keeps a measured value for what upstream calibrates"
            continue
        if ours.get(name) != theirs.get(name):
            diffs.append(f"{name}: glmlaunch {ours.get(name)!r}, upstream {theirs.get(name)!r}")
    assert diffs == [], f"{profile} env differs from {PROFILES[profile]}:\n" + "\n".join(diffs)


@pytest.mark.parametrize("profile", list(PROFILES))
def test_argv_equals_upstream(profile: str) -> None:
    fx = _fixture(PROFILES[profile])
    config = resolve_config(profile, (), environ={}).config
    ours, theirs = full_argv(config), _upstream_argv(fx)
    assert ours[:2] == theirs[:2] == ["vllm", "serve"]
    mine, upstream = _flags(ours), _flags(theirs)
    if profile in ("r12-exl3", "gate"):
        # the old chain names the hub checkpoint itself: parity is exact, order included
        assert ours == theirs
        return
    if profile in DCP1_CHAINS:
        # v16 always passes the DCP size; glmlaunch only above vLLM's default of 1
        assert upstream.pop("--decode-context-parallel-size") == "1" and config.parallel.dcp == 1
        assert ours[2] == theirs[2] == config.model.path
        assert mine == upstream
        return
    # upstream serves its local download of MODEL_REPO@MODEL_REVISION; glmlaunch names that checkpoint
    ck = fx["checkpoint"]
    assert ours[2] == ck["repo"] and theirs[2].rstrip("/").rsplit("/", 1)[-1] == ck["dirname"]
    assert mine.pop("--revision") == ck["revision"] and "--revision" not in upstream
    assert mine == upstream


def test_every_fixture_names_its_source() -> None:
    for name in set(PROFILES.values()):
        src = _fixture(name)["source"]
        assert len(src["commit"]) == 40 and src["repo"] and src["command"]


@pytest.mark.parametrize("profile", sorted(DCP1_CHAINS))
def test_the_recorded_chain_execs_what_its_dry_run_shows(profile: str) -> None:
    """The recorder ran the chain again without DRY_RUN (a calibrator that skips, a stand-in vllm): the same
    argv and environment; with a calibrator reporting sentinel values only the calibrated names moved."""
    fx = _fixture(PROFILES[profile])
    check = fx["exec_check"]
    assert check["argv_equal"] and check["sentinel_argv_equal"] and check["env_differs"] == []
    assert set(fx["calibrator_measured_names"]) == set(_calibrated(fx))
    assert {"VLLM_PCIE_DMA_MIN_BYTES", "VLLM_DCP_QUERY_SPLIT_MIN_CONTEXT_TOKENS"} == set(_calibrated(fx))
    # the dry run's fallback, which the profile keeps (6 MB: serve-glm52-v19.sh L236)
    assert _calibrated(fx)["VLLM_PCIE_DMA_MIN_BYTES"]["values"]["dry_run"] == "6MB"
    assert "VLLM_EXL3_PREFILL_BLOCK_M" not in fx["env"]


@pytest.mark.parametrize("profile", sorted(DCP1_CHAINS))
def test_every_name_the_r7_chains_and_images_set_is_known(profile: str) -> None:
    """Each name the chain exports or the image's Dockerfile sets is managed, a known passthrough with its
    reason, or a launcher input only the chain reads; the B12X image's leftover SPARKINFER_* names are the
    exception: a B12X stack warns about them by design."""
    fx = _fixture(PROFILES[profile])
    names = set(fx["env"]) | set(fx["image_env"]) | {e["name"] for e in fx["excluded"]}
    known = set(MANAGED_BY_NAME) | set(KNOWN_PASSTHROUGH) | set(TOOL_VARS) | CHAIN_KNOBS
    unknown = {n for n in names - known if not n.startswith("SPARKINFER_")}
    assert unknown == set()
    for name in names & set(KNOWN_PASSTHROUGH):
        assert KNOWN_PASSTHROUGH[name], name


def test_the_two_r7_chains_differ_only_where_the_lines_do() -> None:
    """r34 and ii r18 serve the same checkpoint and shape: the chains differ in the shim's GLM52_SERVER and
    the online-quant spelling; the image adds NCCL_CUMEM_ENABLE=0 on the ii line only."""
    gg, ii = _fixture("r34-exl3-r7"), _fixture("ii-r18-exl3-r7")
    differ = {n for n in set(gg["env"]) | set(ii["env"]) if gg["env"].get(n) != ii["env"].get(n)}
    assert differ == {"GLM52_SERVER", "ONLINE_QUANT"}
    assert (gg["env"]["ONLINE_QUANT"], ii["env"]["ONLINE_QUANT"]) == ("exl3-b6", "trellis-mcg-b6")
    assert gg["argv"] == ii["argv"]
    assert ii["image_env"]["NCCL_CUMEM_ENABLE"]["value"] == "0" and "NCCL_CUMEM_ENABLE" not in gg["image_env"]
    a = resolve_config("r34-exl3-r7", (), environ={}).config
    b = resolve_config("ii-r18-exl3-r7", (), environ={}).config
    assert full_argv(a) == full_argv(b)


def test_no_shipped_profile_warns_about_itself() -> None:
    for profile in PROFILES:
        resolved = resolve_config(profile, (), environ={})
        assert resolved.warnings == (), [d.one_line() for d in resolved.warnings]
        assert resolved.notes == (), [d.one_line() for d in resolved.notes]
