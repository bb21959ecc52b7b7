"""A max_model_len shortfall decides the verdict only when W and KV bytes/token are known."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, run_cli

from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger import build_ledger
from glmlaunch.ledger.budget import compute_budget

# Without calibration (the ledger's built-in defaults) the turnkey's margin holds its runtime demand only
# at a lower GMU: the request fit, not the runtime margin, is what these tests look at.
ROOMY = "memory.gpu_memory_utilization=0.945"


def budget(*overrides: str):  # type: ignore[no-untyped-def]
    config = resolve_config("turnkey", [ROOMY, *overrides], environ={}).config
    return compute_budget(config, build_ledger(config))


# A checkpoint nothing is known of: W is the built-in fallback figure, a default.
UNKNOWN = ("model.path=/models/unknown-checkpoint", "model.revision=null")
# twice the turnkey's context: the KV cache cannot hold one request
LONG = "scheduler.max_model_len=1048576"


def test_default_weights_give_a_caution_not_a_refusal() -> None:
    b = budget(*UNKNOWN, LONG)
    assert b.w_source == "default"
    assert not b.request_fits and not b.request_fit_confirmed
    assert b.verdict == "ok"
    (caution,) = b.cautions
    assert caution.startswith("unconfirmed: one 1,048,576-token request needs")
    assert "is a default" in caution


def test_documented_weights_decide() -> None:
    # the documented 3.0 bpw figure (another release: an estimate, but a figure of this checkpoint)
    b = budget(LONG)
    assert b.w_source == "estimate" and b.request_fit_confirmed and not b.request_fits
    assert b.verdict == "refused" and not b.cautions


def test_known_weights_and_exact_record_make_it_a_refusal() -> None:
    # fp8 records are exact; weights given by the operator are taken as known.
    b = budget("memory.kv_cache_dtype=fp8", "model.weights_per_rank=83GiB")
    assert b.request_fit_confirmed and not b.request_fits
    assert b.verdict == "refused" and not b.cautions
    assert any("524,288-token request" in r for r in b.reasons)


def test_a_fitting_request_has_no_caution() -> None:
    b = budget("scheduler.max_model_len=131072")
    assert b.request_fits and not b.cautions and b.verdict == "ok"


# A GPU with no rig defaults: the ledger's own defaults (W a default, the nvfp4 record an estimate) stand.
OTHER_GPU = "hardware.gpu_model=NVIDIA H200"


def test_plan_json_and_check_report_the_caution(clean_env: dict[str, str]) -> None:
    unknown = [a for kv in (*UNKNOWN, LONG, ROOMY) for a in ("--set", kv)]
    res = run_cli("plan", "-p", "turnkey", "--set", OTHER_GPU, *unknown, "--json", env=clean_env)
    assert res.returncode == 0, res.stderr
    verdict = json.loads(res.stdout)["verdict"]
    assert verdict["status"] == "ok" and verdict["request_fit_confirmed"] is False
    assert verdict["cautions"] and "unconfirmed" in verdict["cautions"][0]
    refused = run_cli(
        "plan",
        "-p",
        "turnkey",
        "--set",
        OTHER_GPU,
        *unknown,
        "--set",
        "memory.kv_cache_dtype=fp8",
        "--set",
        "model.weights_per_rank=83GiB",
        env=clean_env,
    )
    assert refused.returncode == 4 and "plan verdict refused" in refused.stderr


def test_turnkey_on_its_rig_comes_out_clean_with_the_rig_defaults(clean_env: dict[str, str]) -> None:
    res = run_cli("plan", "-p", "turnkey", "--json", env=clean_env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["verdict"]["status"] == "ok" and not doc["verdict"]["cautions"]
    assert doc["budget"]["max_model_len_fits"] is True
    # which calibration applies is part of the plan (its header, JSON `calibration`), not a message:
    # a shipped profile's plan says nothing about itself on stderr
    assert "rig defaults" in doc["calibration"]
    assert res.stderr == ""


@pytest.mark.parametrize("profile", sorted(p.stem for p in (REPO / "profiles").glob("*.yaml")))
def test_a_shipped_profile_plans_without_a_word_on_stderr(profile: str, clean_env: dict[str, str]) -> None:
    res = run_cli("plan", "-p", profile, env=clean_env)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert "verdict: ok" in res.stdout and "calibration: " in res.stdout
