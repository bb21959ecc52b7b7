"""`glmlaunch plan / audit / diff` through real subprocesses, and the plan JSON schema's stability."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import SEED_TURNKEY

from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger import build_ledger
from glmlaunch.plan.audit import audit_ledger
from glmlaunch.plan.planner import SCHEMA_VERSION, PlanDoc, plan_document, plan_profile
from tests.conftest import REPO, glmlaunch_exe, run_cli

PROFILES = sorted(p.stem for p in (REPO / "profiles").glob("*.yaml"))
MIB = 1024 * 1024
GIB = 1024 * MIB


@pytest.mark.parametrize("profile", PROFILES)
def test_plan_json_of_every_shipped_profile_parses(profile: str, clean_env: dict[str, str]) -> None:
    exe = " ".join(glmlaunch_exe())
    pipeline = (
        f'{exe} plan -p {profile} --json | "{sys.executable}" -c "import json,sys; json.load(sys.stdin)"'
    )
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", pipeline], env=clean_env, capture_output=True, text=True, timeout=120
    )
    # pipefail: 0 when the verdict is ok, 4 (margin) otherwise; the JSON must parse either way
    assert proc.returncode in (0, 4), proc.stderr
    out = run_cli("plan", "-p", profile, "--json", env=clean_env)
    doc = PlanDoc.model_validate_json(out.stdout)
    assert doc.schema_version == SCHEMA_VERSION == 1
    assert doc.profile == profile
    assert len(doc.ranks) == doc.settings.tp
    assert out.returncode == (0 if doc.verdict.ok else 4)
    assert "Traceback" not in out.stderr


def test_schema_is_stable() -> None:
    committed = json.loads((REPO / "docs" / "plan-schema-v1.json").read_text())
    assert PlanDoc.model_json_schema() == committed, (
        "the plan JSON schema changed: a compatible addition updates docs/plan-schema-v1.json; "
        "a rename/removal also bumps SCHEMA_VERSION"
    )
    assert list(committed["properties"]) == [
        "schema_version",
        "tool",
        "tool_version",
        "profile",
        "overrides",
        "settings",
        "library",
        "ranks",
        "latent",
        "notes",
        "runtime_demand",
        "calibration",
        "moved_by",  # added in version 1 (compatible): the records that moved the plan
        "budget",
        "verdict",
        "load_time",  # added in version 1 (compatible), present only where loading holds more than W
        "warnings",  # added in version 1 (compatible)
    ]


def test_document_budget_matches_terms() -> None:
    result = plan_profile("turnkey")
    doc = plan_document(result)
    b = doc.budget
    assert b.f0_bytes == b.total_bytes - b.used_by_others_bytes - b.u_pre_bytes
    budgeted = b.weights_bytes + b.profiled_torch_bytes + b.profiled_non_torch_bytes + b.graph_estimate_bytes
    assert b.margin_bytes == b.f0_bytes - budgeted - b.kv_cache_bytes - b.unbudgeted_bytes
    entries = doc.ranks[0].entries
    assert b.u_pre_bytes == sum(e.device_bytes for e in entries if e.lifetime == "pre-snapshot")
    assert b.unbudgeted_bytes == sum(e.device_bytes for e in entries if e.lifetime == "unbudgeted")
    assert doc.ranks[0].device_bytes_by_lifetime["unbudgeted"] == b.unbudgeted_bytes


def test_recommended_kv_bytes_keeps_the_minimum_margin_and_the_runtime_demand() -> None:
    # half the turnkey's context: at its own the pool is smaller than one request and not recommended
    shorter = "scheduler.max_model_len=262144"
    rec = plan_profile("turnkey", [shorter]).budget.recommended_kv_cache_memory_bytes
    pinned = plan_profile("turnkey", [shorter, f"memory.kv_cache_memory_bytes={rec}"]).budget
    assert pinned.kv_pinned and pinned.kv == rec
    # the turnkey's runtime demand is larger than the 1 GiB minimum: the runtime margin binds
    keep = max(pinned.min_margin, pinned.runtime_demand + pinned.min_runtime_margin)
    assert keep > pinned.min_margin
    # no boot covers the turnkey's shape: the recommendation keeps them at the band's low edge
    assert not pinned.band.covered
    low = pinned.margin_range[0]
    assert keep <= low < keep + MIB
    assert 0 <= pinned.runtime_margin_range[0] < MIB and pinned.margin > low
    # a recommended pool holds one request (the plan planned it)
    assert pinned.request_fits and pinned.verdict == "ok"


def test_gpu_memory_option_changes_total(clean_env: dict[str, str]) -> None:
    out = run_cli("plan", "-p", "turnkey", "--gpu-memory", "140GiB", "--json", env=clean_env)
    doc = json.loads(out.stdout)
    assert doc["budget"]["total_bytes"] == 140 * GIB
    assert out.returncode in (0, 4)
    bad = run_cli("plan", "-p", "turnkey", "--gpu-memory", "lots", env=clean_env)
    assert bad.returncode == 2 and "--gpu-memory" in bad.stderr


def test_explain_shows_the_formula_with_values(clean_env: dict[str, str]) -> None:
    out = run_cli("plan", "-p", "turnkey", "--explain", "dma.slab", env=clean_env)
    assert out.returncode == 0, out.stderr
    assert "32,768 + 6 * 9,437,184" not in out.stdout  # the formula names its constants
    assert "256 * 128 + 6 * 9,437,184 = 56,655,872" in out.stdout
    assert "3072 * 6144 * 2 = 37,748,736" in out.stdout
    miss = run_cli("plan", "-p", "turnkey", "--explain", "dma", env=clean_env)
    assert miss.returncode == 2
    assert "did you mean" in miss.stderr and "dma.slab" in miss.stderr


def test_svg_memory_map(tmp_path: Path, clean_env: dict[str, str]) -> None:
    svg = tmp_path / "map.svg"
    out = run_cli("plan", "-p", "gate", "--svg", str(svg), env=clean_env)
    assert out.returncode in (0, 4)
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert texts.count("ranks 0\u20133, GPUs 0\u20133") == 1  # four identical ranks, drawn once
    assert any(t.startswith("KV cache:") for t in texts) and any(t.startswith("margin:") for t in texts)
    assert "whole GPU" in out.stdout and "zoom" in out.stdout


def test_svg_shows_the_verdicts_findings(tmp_path: Path, clean_env: dict[str, str]) -> None:
    svg = tmp_path / "turnkey.svg"
    # A checkpoint nothing is known of on a GPU without rig defaults: W is a default, so a max_model_len
    # shortfall is an unconfirmed caution.
    unknown = ("--set", "model.path=/models/unknown", "--set", "model.revision=null")
    longer = ("--set", "scheduler.max_model_len=1048576")
    # a GMU whose margin holds the runtime demand on that GPU's default figures
    roomy = ("--set", "memory.gpu_memory_utilization=0.93")
    args = ("plan", "-p", "turnkey", "--set", "hardware.gpu_model=NVIDIA H200", *unknown, *longer, *roomy)
    args += ("--svg", str(svg))
    assert run_cli(*args, env=clean_env).returncode == 0
    root = ET.parse(svg).getroot()
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    width = int(root.get("width") or 0)
    # The caution (an unconfirmed max_model_len shortfall) is in the picture, wrapped to its width.
    assert any(t.startswith("! unconfirmed: one 1,048,576-token request") for t in texts)
    assert all(len(t) * 6.5 < width for t in texts)  # ~6.5 px per character at 12 px sans-serif


def test_plan_does_not_import_torch_or_b12x() -> None:
    code = (
        "import sys; from glmlaunch.plan.planner import plan_profile; plan_profile('turnkey');"
        "import glmlaunch.plan.audit, glmlaunch.plan.diff, glmlaunch.plan.render;"
        "bad=[m for m in ('torch','b12x','pynvml') if m in sys.modules]; assert not bad, bad"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.b12x
def test_plan_library_b12x(clean_env: dict[str, str]) -> None:
    pytest.importorskip("b12x")
    out = run_cli("plan", "-p", "turnkey", "--json", "--library", "b12x", env=clean_env, timeout=120)
    doc = json.loads(out.stdout)
    assert doc["library"]["source"] == "b12x"
    assert "b12x 1.5" in doc["library"]["constants"] and "imported" in doc["library"]["constants"]
    assert "library:" in out.stderr
    builtin = json.loads(run_cli("plan", "-p", "turnkey", "--json", env=clean_env).stdout)
    assert [e["requested_bytes"] for e in doc["ranks"][0]["entries"]] == [
        e["requested_bytes"] for e in builtin["ranks"][0]["entries"]
    ]


def test_unknown_library_is_a_usage_error(clean_env: dict[str, str]) -> None:
    out = run_cli("plan", "-p", "turnkey", "--library", "cuda", env=clean_env)
    assert out.returncode == 2 and "--library" in out.stderr


# --- audit ------------------------------------------------------------------------------------------


def test_audit_turnkey_findings_and_totals(clean_env: dict[str, str]) -> None:
    out = run_cli("audit", "-p", "turnkey", "--json", env=clean_env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    found = {f["id"]: f for f in doc["findings"]}
    # upstream's turnkey (V2 runner, MTP 5) captures [4, 8, ..., 64]: the capture-size opinions are audit
    # findings, never warnings about the preset
    assert set(found) == {
        "oneshot-rank-data",
        "capture-beyond-decode-window",
        "capture-off-decode-step",
        "fp32-tile-logits",
        "indexer-lane1-duplicate",
    }
    # eager + target + drafter prefill + drafter decode rank_data: 4 x (8 MiB - 1 MiB)
    assert found["oneshot-rank-data"]["recoverable_bytes_per_rank"] == 4 * 7 * MIB
    assert found["fp32-tile-logits"]["recoverable_bytes_per_rank"] == 192 * MIB
    # sizes above 8 x 6 = 48 are priced by the capture finding
    from glmlaunch.calibrate.apply import calibration_for

    config = resolve_config("turnkey").config
    cal = calibration_for(config).inputs
    led = build_ledger(config, cal)
    pool = next(e for e in led.rank0.entries if e.name == "cudagraph.pool")
    wide = {f.id: f for f in audit_ledger(config, led).findings}
    kept = pool.device_bytes * 48 // 64
    assert wide["capture-beyond-decode-window"].recoverable_bytes == pool.device_bytes - kept
    assert found["capture-off-decode-step"]["recoverable_bytes_per_rank"] == 0
    assert doc["total_recoverable_bytes_per_rank"] == sum(
        f["recoverable_bytes_per_rank"] for f in doc["findings"]
    )
    assert doc["total_recoverable_device_bytes_per_rank"] == sum(
        f["recoverable_device_bytes_per_rank"] for f in doc["findings"]
    )
    table = run_cli("audit", "-p", "turnkey", env=clean_env)
    assert "total" in table.stdout and "multiples of MTP+1 = 6" in table.stdout


def test_audit_v1_turnkey_leaks_its_profiling_channel(clean_env: dict[str, str]) -> None:
    # the r12-era turnkey ran the V1 runner: its profiling capture's channel leaks for the process lifetime
    sets = [a for kv in SEED_TURNKEY for a in ("--set", kv)]
    out = run_cli("audit", "-p", "turnkey", *sets, "--json", env=clean_env)
    assert out.returncode == 0, out.stderr
    found = {f["id"]: f for f in json.loads(out.stdout)["findings"]}
    # eager + production rank_data: 2 x (8 MiB - 1 MiB); the leaked one is counted under the leak
    assert found["oneshot-rank-data"]["recoverable_bytes_per_rank"] == 2 * 7 * MIB
    led = build_ledger(resolve_config("turnkey", SEED_TURNKEY).config)
    leaked = [e for e in led.rank0.entries if e.name.endswith("leaked-profiling")]
    assert found["v1-leaked-profiling-channel"]["recoverable_bytes_per_rank"] == sum(
        e.total_requested for e in leaked
    )
    table = run_cli("audit", "-p", "turnkey", *sets, env=clean_env)
    assert "checkpoint_b12x_graph_channels" in table.stdout


def test_audit_gate_lane1_and_capture_window() -> None:
    config = resolve_config("gate").config
    found = {f.id: f for f in audit_ledger(config, build_ledger(config)).findings}
    assert found["indexer-lane1-duplicate"].recoverable_bytes == 557_999_104
    assert "v1-leaked-profiling-channel" not in found
    # the old chain's gate captures [4..32]: with max_num_seqs 1 x (1 + 3) = 4, sizes 8..32 only cost memory
    assert found["capture-beyond-decode-window"].recoverable_bytes == 512 * MIB - 512 * MIB * 4 // 32
    narrow = resolve_config("gate", ["cudagraph.capture_rule.max=4"]).config
    found = {f.id: f for f in audit_ledger(narrow, build_ledger(narrow)).findings}
    assert "capture-beyond-decode-window" not in found


def test_audit_dma_disabled_by_crossover() -> None:
    config = resolve_config("turnkey", ["comm.dma_min_bytes=64MiB"]).config
    led = build_ledger(config)
    found = {f.id: f for f in audit_ledger(config, led).findings}
    slab = led.entry("dma.slab")
    assert slab is not None
    assert found["dma-disabled-by-crossover"].recoverable_bytes == slab.requested_bytes + 2048


# --- diff -------------------------------------------------------------------------------------------


def test_diff_two_profiles(clean_env: dict[str, str]) -> None:
    out = run_cli("diff", "gate", "exl3-tr3-3.42bpw", "--json", env=clean_env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    keys = {s["setting"] for s in doc["settings"]}
    assert {"stack", "memory.kv_cache_dtype", "memory.num_gpu_blocks_override", "model.online_quant"} <= keys
    entries = {e["name"]: e for e in doc["entries"]}
    assert entries["dma.slab"]["left_device_bytes"] is not None
    for term in doc["budget"]:
        assert term["delta"] == term["right"] - term["left"]


def test_diff_profile_and_overrides(clean_env: dict[str, str]) -> None:
    out = run_cli("diff", "turnkey", "--set", "comm.single_channel=true", "--json", env=clean_env)
    doc = json.loads(out.stdout)
    assert doc["right"]["overrides"] == ["comm.single_channel=true"]
    assert [s["setting"] for s in doc["settings"]] == ["comm.single_channel"]
    gone = {e["name"] for e in doc["entries"] if e["right_device_bytes"] is None}
    assert "dcp_a2a.slab.capture" in gone  # one channel for eager and every capture
    text = run_cli("diff", "turnkey", "--set", "comm.single_channel=true", env=clean_env)
    assert "comm.single_channel" in text.stdout
    nothing = run_cli("diff", "turnkey", env=clean_env)
    assert nothing.returncode == 2 and "nothing to compare" in nothing.stderr
