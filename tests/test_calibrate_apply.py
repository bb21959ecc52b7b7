"""Calibration applied to the ledger: residual entries reproduce the logged terms; residuals; the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli

from glmlaunch.calibrate.apply import ledger_calibration
from glmlaunch.calibrate.fingerprint import make_fingerprint
from glmlaunch.calibrate.logs import parse_log_file
from glmlaunch.calibrate.records import Calibration, build_calibration
from glmlaunch.calibrate.residuals import compute_residuals
from glmlaunch.config import DeploymentConfig
from glmlaunch.ledger import build_ledger
from glmlaunch.ledger.terms import terms
from glmlaunch.resolve import resolve_config

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
NO_VLLM = {"vllm": None, "torch": None, "b12x": None, "sparkinfer": None}


def r12(*overrides: str) -> DeploymentConfig:
    return resolve_config("r12-exl3", overrides, environ={}).config


def record(config: DeploymentConfig, log: str = "tp4_dcp4_boot.log") -> Calibration:
    boot = parse_log_file(LOGS / log)
    fp = make_fingerprint(config, versions=NO_VLLM)
    return build_calibration(boot, fp, profile="r12-exl3", total_bytes=config.hardware.memory_per_gpu)


def test_calibrated_ledger_reproduces_the_worst_rank_terms() -> None:
    cfg = r12("memory.gpu_memory_utilization=0.92")
    rec = record(cfg)
    worst = rec.worst()
    cal = ledger_calibration(cfg, rec)
    ledger = build_ledger(cfg, calibration=cal)
    t = terms(ledger.rank0.entries)
    assert t.w == worst.weights_bytes
    assert t.p == worst.activation_peak_bytes
    assert t.n == worst.non_torch_bytes
    assert t.g_e == worst.graph_estimate_bytes
    assert t.u_pre == worst.pre_snapshot_bytes
    for name in ("weights", "activations", "runtime.nontorch_profiled", "cudagraph.pool", "runtime.nccl"):
        entry = ledger.entry(name)
        assert entry is not None and entry.origin == "calibrated", name
    # the CUDA context cannot be told apart from NCCL in a boot log: it stays a default, and says so
    ctx = ledger.entry("runtime.cuda_context")
    assert ctx is not None and ctx.origin == "default"
    assert any("cannot split CUDA context" in n for n in cal.notes)
    # KV per token from the boot: KV / (tokens / DCP), rounded up with the log's rounding added
    assert cal.kv_bytes_per_token is not None
    per_rank_tokens = 251_392 // 4
    assert cal.kv_bytes_per_token * per_rank_tokens >= min(t.kv_cache_bytes or 0 for t in rec.ranks)


def test_activation_residual_scales_with_batched_tokens() -> None:
    cfg = r12("memory.gpu_memory_utilization=0.92")
    rec = record(cfg)
    at_3072 = ledger_calibration(cfg, rec).activation_bytes
    at_6144 = ledger_calibration(
        r12("memory.gpu_memory_utilization=0.92", "scheduler.max_num_batched_tokens=6144"), rec
    )
    assert at_3072 is not None and at_6144.activation_bytes == 2 * at_3072
    assert any("scaled by batched tokens 6144/3072" in n for n in at_6144.notes)
    # the itemized entries of the new size come from the ledger, not the residual
    big = terms(build_ledger(r12("scheduler.max_num_batched_tokens=6144"), calibration=at_6144).rank0.entries)
    small = terms(build_ledger(r12(), calibration=ledger_calibration(r12(), rec)).rank0.entries)
    assert big.p > small.p and big.u_pre > small.u_pre


def test_residuals_compare_the_uncalibrated_ledger_with_each_rank() -> None:
    cfg = r12()
    rec = record(cfg)
    doc = compute_residuals(cfg, rec)
    assert doc["gpu_memory_utilization"] == 0.92  # the boot's GMU, not the profile's 0.95
    assert [r["rank"] for r in doc["ranks"]] == [f"Worker_TP{i}_DCP{i}" for i in range(4)]
    predicted = terms(build_ledger(r12("memory.gpu_memory_utilization=0.92")).rank0.entries)
    for r, logged in zip(doc["ranks"], rec.ranks, strict=True):
        t = r["terms"]
        assert t["P"] == {
            "predicted": predicted.p,
            "logged": logged.activation_peak_bytes,
            "delta": (logged.activation_peak_bytes or 0) - predicted.p,
        }
        assert t["N"]["delta"] == (logged.non_torch_bytes or 0) - predicted.n
        assert t["T-F0"]["predicted"] == predicted.u_pre
        assert t["G"]["logged"] == logged.graph_actual_bytes
    assert doc["kv_tokens"]["logged"] == 251_392


def test_cli_ingest_list_show(clean_env: dict[str, str], tmp_path: Path) -> None:
    boot = str(LOGS / "tp4_dcp4_boot.log")
    cut = str(LOGS / "tp4_dcp4_truncated.log")
    res = run_cli("calibrate", "ingest", boot, cut, "-p", "r12-exl3", "--json", env=clean_env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    full, trunc = doc["records"]
    assert full["usable"] and not trunc["usable"]
    assert [r["missing"] for r in trunc["ranks"]] == [["free_memory"]] * 4
    assert full["residuals"]["ranks"][0]["terms"]["W"]["logged"] == full["ranks"][0]["weights_bytes"]
    assert "saved" in res.stderr and "will not replace defaults" in res.stderr
    assert "no inventory" in res.stderr

    listed = run_cli("calibrate", "list", "--json", env=clean_env)
    assert listed.returncode == 0
    ids = {r["record_id"] for r in json.loads(listed.stdout)["records"]}
    assert ids == {full["record_id"], trunc["record_id"]}

    shown = run_cli("calibrate", "show", "-p", "r12-exl3", "--json", env=clean_env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["record"]["record_id"] == full["record_id"]
    assert f"using calibration {full['record_id']}" in shown.stderr
    assert "matches but is not usable" in shown.stderr

    other = run_cli("calibrate", "show", "-p", "gate", env=clean_env)
    assert other.returncode == 0
    assert "no matching calibration; using defaults" in other.stderr
    assert 'settings.memory.kv_cache_dtype: recorded "nvfp4_ds_mla", here "fp8"' in other.stderr


def test_cli_ingest_errors(clean_env: dict[str, str], tmp_path: Path) -> None:
    missing = run_cli("calibrate", "ingest", str(tmp_path / "nope.log"), env=clean_env)
    assert missing.returncode == 2 and "no such log file" in missing.stderr
    empty = tmp_path / "empty.log"
    empty.write_text("hello\n")
    res = run_cli("calibrate", "ingest", str(empty), env=clean_env)
    assert res.returncode == 2 and "no vLLM worker lines" in res.stderr
    assert "Traceback" not in res.stderr


def test_calibration_for_plan_check_preflight(tmp_path: Path) -> None:
    from glmlaunch.budget import compute_budget
    from glmlaunch.calibrate.apply import calibration_for
    from glmlaunch.calibrate.store import Store

    store = Store(tmp_path / "cal")
    none = calibration_for(r12(), store=store)
    assert none.calibration is None and "using defaults" in none.message
    store.save(record(r12()))
    use = calibration_for(r12(), store=store)
    assert use.calibration is not None and use.message.startswith("using calibration")
    ledger = build_ledger(r12(), calibration=use.calibration)
    budget = compute_budget(r12(), ledger, calibration=use.calibration)
    assert budget.kv_bytes_per_token_origin == "calibrated"
    assert ledger.entry("weights").origin == "calibrated"  # type: ignore[union-attr]
    other = calibration_for(r12("memory.kv_cache_dtype=fp8"), store=store)
    assert other.calibration is None and "kv_cache_dtype" in other.message
