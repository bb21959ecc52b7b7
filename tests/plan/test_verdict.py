"""One verdict, with its blocker and its confidence, the same in plan, check, serve and diff, text and JSON.

Real subprocesses of glmlaunch; the budgets come from the shipped profiles with the rig defaults (the
4x RTX PRO 6000 rig the profiles describe) or, with another GPU model, the ledger's own defaults.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import jsonschema
import pytest
from conftest import FIXTURES, REPO, run_cli

from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger import build_ledger
from glmlaunch.ledger.budget import compute_budget
from glmlaunch.ledger.verdict import judge

PROFILES = sorted(p.stem for p in (REPO / "profiles").glob("*.yaml"))
INVENTORY = FIXTURES / "inventories" / "rtxpro6000x4.json"
OTHER_GPU = "hardware.gpu_model=NVIDIA H200"
#: on OTHER_GPU's defaults the turnkey keeps its runtime margin only with a lower GMU and a shorter context
ROOMY = ("memory.gpu_memory_utilization=0.93", "scheduler.max_model_len=131072")


def validate(doc: object, name: str) -> None:
    schema = json.loads((REPO / "docs" / "schemas" / f"{name}.schema.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)


def fake_vllm_env(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` with a real executable script named vllm first on PATH."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "vllm"
    exe.write_text(f"#!{sys.executable}\nimport sys\nprint('fake vllm', *sys.argv[1:])\n")
    exe.chmod(0o755)
    return {
        **env,
        "PATH": os.pathsep.join([str(bindir), str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
    }


# --- the verdict object -----------------------------------------------------------------------------


def verdict(profile: str, *overrides: str):  # type: ignore[no-untyped-def]
    config = resolve_config(profile, list(overrides), environ={}).config
    ledger = build_ledger(config)
    return judge(config, ledger, compute_budget(config, ledger))


@pytest.mark.parametrize(
    ("overrides", "blocker", "words"),
    [
        # a GMU low enough that the runtime demand fits (and a context its pool holds): the margin alone
        (("memory.min_margin=20GiB", *ROOMY), "margin", "the margin: "),
        (("memory.gpu_memory_utilization=0.955",), "runtime", "the runtime margin: "),
        (("memory.gpu_memory_utilization=0.999",), "start-gate", "the start gate: free memory at startup"),
        (("memory.gpu_memory_utilization=0.5",), "no-kv", "the KV cache: no memory is left for it"),
        (
            ("memory.kv_cache_dtype=fp8", "model.weights_per_rank=83GiB"),
            "request-fit",
            "the request fit: one 524,288-token request needs",
        ),
    ],
)
def test_every_non_ok_verdict_names_its_real_blocker(
    overrides: tuple[str, ...], blocker: str, words: str
) -> None:
    v = verdict("turnkey", OTHER_GPU, *overrides)
    assert not v.ok and v.blocker is not None
    assert v.blocker.id == blocker
    assert v.summary().startswith(f"{v.status}: blocked by {words}")
    if blocker != "margin":
        # the margin is not blamed for what something else blocks
        assert not v.summary().startswith(f"{v.status}: blocked by the margin")


def test_confidence_names_the_terms_it_rests_on() -> None:
    # On another GPU nothing is calibrated: U_pre, P, N and G_e are built-in defaults; W of an unknown
    # checkpoint is the built-in fallback; the KV record of a known dtype is exact.
    other = verdict("turnkey", OTHER_GPU, "model.path=/models/unknown", "model.revision=null", *ROOMY)
    assert other.confidence == "estimate"
    assert dict(other.sources)["W"] == "default" and dict(other.sources)["KV bytes/token"] == "exact"
    assert "W, P, N and G_e are built-in defaults" in other.confidence_text()
    # the shipped turnkey's W is the documented 3.0 bpw figure of another release: an estimate
    shipped = verdict("turnkey", OTHER_GPU, *ROOMY)
    assert dict(shipped.sources)["W"] == "estimate" and "W is an estimate" in shipped.confidence_text()
    # An exact KV record (fp8) and W given by the profile: the request fit's inputs other than the
    # profiled terms are known; the margin alone rests on U_pre, a built-in default here.
    below = verdict("gate", OTHER_GPU, "memory.min_margin=20GiB", *ROOMY)
    assert below.deciding == ("U_pre",) and below.unconfirmed == ("U_pre",)
    assert below.confidence_text() == "estimate (U_pre is a built-in default)"


def test_json_is_the_verdict_object() -> None:
    v = verdict("turnkey", OTHER_GPU, "memory.min_margin=20GiB", *ROOMY)
    doc = v.to_json()
    assert doc["status"] == "below-margin" and doc["blocker"] == "margin" and doc["confidence"] == "estimate"
    assert doc["blockers"][0]["terms"] == ["U_pre"] and doc["summary"] == v.summary()
    assert doc["reasons"] and doc["reasons"] == list(v.budget.reasons)
    b = v.budget
    assert doc["runtime"] == {
        "phase": b.runtime_phase,
        "demand_bytes": b.runtime_demand,
        "margin_bytes": b.margin - b.runtime_demand,
        "min_margin_bytes": 0,
        "deciding": b.runtime_deciding,
    }


# --- the same verdict everywhere ----------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
def test_plan_serve_and_check_agree_on_every_shipped_profile(
    profile: str, clean_env: dict[str, str], tmp_path: Path
) -> None:
    plan = run_cli("plan", "-p", profile, "--json", env=clean_env)
    assert plan.returncode == 0, plan.stderr
    plan_verdict = json.loads(plan.stdout)["verdict"]
    # the profile's own figures (no GPU here): the dry run's plan stage is plan's budget exactly
    env = fake_vllm_env(tmp_path, clean_env)
    dry = run_cli("serve", "-p", profile, "--dry-run", "--json", env=env)
    assert json.loads(dry.stdout)["verdict"] == plan_verdict
    # on the rig's inventory: check's memory_verdict row and serve's plan stage judge the same budget
    check = run_cli("check", "-p", profile, "--inventory", str(INVENTORY), "--json", env=clean_env)
    failed = [r["name"] for r in json.loads(check.stdout)["results"] if r["status"] == "FAIL"]
    if resolve_config(profile, environ={}).config.hardware.min_cuda == "13.3":
        # the Infernal Invocation image is CUDA 13.3; the recorded rig's driver supports 13.2: only the
        # driver check fails, and the memory verdict is judged all the same
        assert check.returncode == 3 and failed == ["driver"], check.stderr
    else:
        assert check.returncode == 0, check.stderr
    check_verdict = json.loads(check.stdout)["verdict"]
    served = run_cli("serve", "-p", profile, "--dry-run", "--json", "--inventory", str(INVENTORY), env=env)
    assert json.loads(served.stdout)["verdict"] == check_verdict
    for a, b in ((plan_verdict, check_verdict),):
        for key in ("status", "confidence", "blocker", "deciding_terms", "unconfirmed_terms", "term_sources"):
            assert a[key] == b[key], key
    # the text outputs print the same summary
    text = run_cli("plan", "-p", profile, env=clean_env)
    assert f"confidence: {plan_verdict['summary'].split('; confidence ', 1)[1]}" in text.stdout
    row = next(r for r in json.loads(check.stdout)["results"] if r["name"] == "memory_verdict")
    assert row["message"].startswith(check_verdict["summary"] + " on GPU 0")


def test_plan_text_says_the_confidence_and_the_blocker(clean_env: dict[str, str]) -> None:
    ok = run_cli("plan", "-p", "turnkey", env=clean_env)
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("verdict: ok"))
    assert lines[i + 1].startswith("confidence: ")
    assert "come from the rig defaults" in lines[i + 1]
    assert "glmlaunch calibrate ingest" in lines[i + 1]
    low = run_cli("plan", "-p", "gate", "--set", "memory.min_margin=20GiB", env=clean_env)
    assert low.returncode == 4
    assert any(
        line.startswith("verdict: below-margin  blocked by the margin: ") for line in low.stdout.splitlines()
    )
    assert (
        low.stderr.strip()
        .splitlines()[-1]
        .startswith("error: plan verdict below-margin: blocked by the margin: ")
    )
    assert "confidence rig-defaults (U_pre comes from the rig defaults)" in low.stderr


def test_plan_json_verdict_has_confidence_and_blocker(clean_env: dict[str, str]) -> None:
    done = run_cli(
        "plan",
        "-p",
        "turnkey",
        "--set",
        OTHER_GPU,
        "--set",
        "memory.gpu_memory_utilization=0.999",
        "--json",
        env=clean_env,
    )
    assert done.returncode == 4
    v = json.loads(done.stdout)["verdict"]
    assert v["status"] == "refused" and v["blocker"] == "start-gate"
    assert v["blockers"][0]["message"].startswith("the start gate: ")
    assert v["confidence"] == "estimate" and "U_pre" in v["unconfirmed_terms"]


# --- diff -----------------------------------------------------------------------------------------------


def test_diff_says_the_calibration_message_once(clean_env: dict[str, str]) -> None:
    rig = run_cli("diff", "gate", "turnkey", env=clean_env)
    assert rig.returncode == 0, rig.stderr
    assert rig.stderr.count("using the rig defaults") == 1, rig.stderr
    other = run_cli("diff", "gate", "turnkey", "--set", OTHER_GPU, env=clean_env)
    # the sides differ (rig defaults on the left, none on the right): each side says its own, once
    assert other.stderr.count("no calibration records") == 1, other.stderr
    assert other.stderr.count("using the rig defaults") == 1, other.stderr
    both = run_cli("diff", "turnkey", "--set", OTHER_GPU, "--set", "memory.min_margin=2GiB", env=clean_env)
    assert both.returncode == 0, both.stderr
    assert both.stderr.count("no calibration records") <= 1


def test_diff_json_carries_both_verdicts(clean_env: dict[str, str]) -> None:
    done = run_cli("diff", "gate", "turnkey", "--json", env=clean_env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert next(iter(doc)) == "schema_version"
    assert doc["verdicts"]["left"]["status"] == doc["verdict"]["left"]
    validate(doc, "diff")
