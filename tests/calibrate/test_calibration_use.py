"""plan, check, serve and preflight use the term model (rig defaults + ingested real boots) and say so."""

from __future__ import annotations

import json

from conftest import FIXTURES, run_cli

REAL = FIXTURES / "boot-logs"
V3 = REAL / "vllm-current210-cap1024-mtp3-v3-server.log"
RIG = FIXTURES / "inventories" / "rtxpro6000x4.json"


def test_plan_and_check_use_the_ingested_boots(clean_env: dict[str, str]) -> None:
    before = run_cli("plan", "-p", "r12-exl3", "--json", env=clean_env)
    # which calibration the figures rest on is part of the plan (JSON `calibration`, the text header)
    said = json.loads(before.stdout)["calibration"]
    assert "using the rig defaults" in said and "no record applies" in said

    for log in sorted(REAL.glob("*.log")):
        assert run_cli("calibrate", "ingest", str(log), env=clean_env).returncode == 0

    after = run_cli("plan", "-p", "r12-exl3", "--json", env=clean_env)
    assert after.returncode == 0, after.stderr
    doc = json.loads(after.stdout)
    assert "term model fitted on 5 record(s)" in doc["calibration"]
    assert "over the rig defaults" in doc["calibration"]
    # the shipped profile's checkpoint (3.0 bpw) was never booted here: W is the appliance's documented
    # 3.0 bpw figure (another release: an estimate), never the 3.25 bpw boots' figure rescaled
    weights = next(e for e in doc["ranks"][0]["entries"] if e["name"] == "weights")
    assert weights["origin"] == "estimate" and "77.66 GiB" in weights["formula"]
    assert weights["requested_bytes"] == round(77.66 * 1024**3)

    check = run_cli("check", "-p", "r12-exl3", "--inventory", str(RIG), "--json", env=clean_env)
    report = json.loads(check.stdout)
    assert "term model fitted on 5 record(s)" in report["calibration"]
    row = next(r for r in report["results"] if r["name"] == "memory_verdict")
    assert row["status"] == "OK"

    # Another rig shape (DCP 2): the TP4/DCP4 boots do not apply, and the reason is named.
    other = run_cli("plan", "-p", "r12-exl3", "--set", "parallel.dcp=2", env=clean_env)
    header = other.stdout + other.stderr
    assert "no record applies" in header or "skipped" in header


def test_a_boot_of_the_same_checkpoint_makes_w_calibrated(clean_env: dict[str, str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    for log in sorted(REAL.glob("*.log")):
        assert run_cli("calibrate", "ingest", str(log), env=clean_env).returncode == 0
    profile = tmp_path / "v3.yaml"
    assert run_cli("profiles", "import", str(V3), "-o", str(profile), env=clean_env).returncode == 0
    res = run_cli("plan", "-p", str(profile), "--set", "exl3.prefill_capacity=1536", "--json", env=clean_env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    weights = next(e for e in doc["ranks"][0]["entries"] if e["name"] == "weights")
    assert weights["origin"] == "calibrated"
    arena = next(e for e in doc["ranks"][0]["entries"] if e["name"] == "exl3.trellis_arena")
    assert arena["requested_bytes"] > 240 * 1024 * 1536  # 240 KiB per prefill token plus the fixed part


def test_preflight_says_which_calibration_it_uses(clean_env: dict[str, str]) -> None:
    assert run_cli("calibrate", "ingest", str(V3), env=clean_env).returncode == 0
    res = run_cli(
        "preflight",
        "-p",
        "r12-exl3",
        "--set",
        "parallel.tp=2",
        "--set",
        "parallel.dcp=2",
        "--backend",
        "replay",
        "--device",
        "cpu",
        "--json",
        env=clean_env,
        timeout=180,
    )
    # TP2 is another rig shape than the ingested TP4 boot: the record is skipped and the reason named.
    assert "another rig shape" in res.stderr
    assert json.loads(res.stdout)["backend"]
