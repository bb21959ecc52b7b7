"""plan and check use a matching calibration record instead of defaults, and say so."""

from __future__ import annotations

import json

from conftest import FIXTURES, run_cli

LOG = FIXTURES / "logs" / "tp4_dcp4_boot.log"
RIG = FIXTURES / "inventories" / "rtxpro6000x4.json"


def test_plan_and_check_use_an_ingested_boot(clean_env: dict[str, str]) -> None:
    before = run_cli("plan", "-p", "r12-exl3", "--json", env=clean_env)
    assert "no calibration records" in before.stderr
    assert json.loads(before.stdout)["budget"]["kv_bytes_per_token_origin"] == "estimate"

    ingest = run_cli("calibrate", "ingest", str(LOG), "-p", "r12-exl3", env=clean_env)
    assert ingest.returncode == 0, ingest.stderr

    after = run_cli("plan", "-p", "r12-exl3", "--json", env=clean_env)
    assert after.returncode == 0, after.stderr
    assert "using calibration" in after.stderr
    doc = json.loads(after.stdout)
    assert doc["budget"]["kv_bytes_per_token_origin"] == "calibrated"
    weights = next(e for e in doc["ranks"][0]["entries"] if e["name"] == "weights")
    assert weights["origin"] == "calibrated"

    check = run_cli("check", "-p", "r12-exl3", "--inventory", str(RIG), "--json", env=clean_env)
    assert "using calibration" in check.stderr
    row = next(r for r in json.loads(check.stdout)["results"] if r["name"] == "memory_verdict")
    assert row["status"] == "OK"

    # Another deployment (a setting that changes memory) does not match, and says why.
    other = run_cli("plan", "-p", "r12-exl3", "--set", "scheduler.max_num_batched_tokens=4096", env=clean_env)
    assert "using calibration" not in other.stderr
    assert "max_num_batched_tokens" in other.stderr


def test_preflight_says_which_calibration_it_uses(clean_env: dict[str, str]) -> None:
    assert run_cli("calibrate", "ingest", str(LOG), "-p", "r12-exl3", env=clean_env).returncode == 0
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
    # tp=2 is another deployment than the ingested TP4 boot: not used, and the reason is named.
    assert "using calibration" not in res.stderr and "parallel.tp" in res.stderr
    assert json.loads(res.stdout)["backend"]
