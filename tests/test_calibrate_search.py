"""calibrate search: the answer is the largest feasible grid value, and the next step up fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli

from glmlaunch.budget import compute_budget
from glmlaunch.calibrate.apply import ledger_calibration
from glmlaunch.calibrate.fingerprint import make_fingerprint
from glmlaunch.calibrate.logs import parse_log_file
from glmlaunch.calibrate.records import Calibration, build_calibration
from glmlaunch.calibrate.search import Evaluation, SearchResult, overlay_yaml, search
from glmlaunch.config import DeploymentConfig
from glmlaunch.errors import ConfigError
from glmlaunch.ledger import build_ledger
from glmlaunch.resolve import resolve_config
from glmlaunch.units import GIB, MIB

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
NO_VLLM = {"vllm": None, "torch": None, "b12x": None, "sparkinfer": None}


def r12(*overrides: str) -> DeploymentConfig:
    return resolve_config("r12-exl3", overrides, environ={}).config


@pytest.fixture(scope="module")
def rec() -> Calibration:
    cfg = r12()
    boot = parse_log_file(LOGS / "tp4_dcp4_boot.log")
    return build_calibration(
        boot,
        make_fingerprint(cfg, versions=NO_VLLM),
        profile="r12-exl3",
        total_bytes=cfg.hardware.memory_per_gpu,
    )


def independent_margins(config: DeploymentConfig, rec: Calibration) -> tuple[list[int], int, int, bool]:
    """Each rank's margin at the common KV, straight from ledger + budget (not through the search code)."""
    budgets = []
    for terms in rec.ranks:
        cal = ledger_calibration(config, rec, rank_terms=terms)
        budgets.append(
            compute_budget(
                config, build_ledger(config, calibration=cal), total_bytes=terms.total_bytes, calibration=cal
            )
        )
    kv = min(b.kv for b in budgets)
    gate_ok = all(b.f0 >= b.gate for b in budgets)
    return [b.margin + b.kv - kv for b in budgets], kv, max(b.request_bytes for b in budgets), gate_ok


def feasible_independently(config: DeploymentConfig, rec: Calibration) -> bool:
    margins, kv, need, gate_ok = independent_margins(config, rec)
    return gate_ok and min(margins) >= config.memory.min_margin and kv >= need


def test_max_batched_tokens_is_the_largest_feasible_value(rec: Calibration) -> None:
    result = search(r12(), "max-batched-tokens", record=rec, calibration_message="m", upper=16384)
    assert result.best is not None and result.next_up is not None
    best = int(result.best.value)
    assert best % 256 == 0 and best > 3072
    assert result.next_up.value == best + 256 and not result.next_up.feasible
    # brute force over the whole grid, checked without the search's evaluator
    for tokens in range(256 * 4, 16384 + 1, 256):  # from the smallest legal batch: 8 seqs x (1 + MTP 3)
        cfg = r12(f"scheduler.max_num_batched_tokens={tokens}")
        assert feasible_independently(cfg, rec) == (tokens <= best), tokens


def test_max_kv_bytes_next_mib_breaks_a_rank_margin(rec: Calibration) -> None:
    result = search(r12(), "max-kv-bytes", record=rec, calibration_message="m")
    assert result.best is not None and result.next_up is not None
    best = int(result.best.value)
    assert best % MIB == 0
    assert best == result.best.recommended_kv_cache_memory_bytes  # the budget's own answer agrees
    at_best, _, _, _ = independent_margins(r12(f"memory.kv_cache_memory_bytes={best}"), rec)
    above, _, _, _ = independent_margins(r12(f"memory.kv_cache_memory_bytes={best + MIB}"), rec)
    assert min(at_best) >= GIB > min(above)
    assert any("margin" in r for r in result.next_up.reasons)
    for kv in range(best - 8 * MIB, best + 9 * MIB, MIB):
        assert feasible_independently(r12(f"memory.kv_cache_memory_bytes={kv}"), rec) == (kv <= best)


def test_max_gmu_and_a_stricter_margin(rec: Calibration) -> None:
    loose = search(r12(), "max-gmu", record=rec, calibration_message="m")
    strict = search(r12(), "max-gmu", record=rec, calibration_message="m", min_margin=2 * GIB)
    assert loose.best is not None and strict.best is not None and loose.next_up is not None
    assert strict.best.value < loose.best.value
    assert loose.next_up.value == pytest.approx(float(loose.best.value) + 0.001)
    feasible = [
        t
        for t in range(900, 1001)
        if feasible_independently(r12(f"memory.gpu_memory_utilization={t / 1000}"), rec)
    ]
    # small GMUs leave too little KV for one request, large ones eat the margin: one interval, ending at best
    assert feasible == list(range(feasible[0], feasible[-1] + 1))
    assert feasible[-1] == round(float(loose.best.value) * 1000)
    assert feasible[0] > 900


def test_nothing_feasible_is_reported_with_the_failing_anchor(rec: Calibration) -> None:
    result = search(r12(), "max-gmu", record=rec, calibration_message="m", min_margin=60 * GIB)
    assert result.best is None and result.lower_bound is not None
    assert any("margin" in r for r in result.lower_bound.reasons)


def test_lossless_only(rec: Calibration) -> None:
    data = r12().model_dump(mode="python")
    data["comm"]["dma_wire_mode"] = "i8"
    compressed = DeploymentConfig.model_validate(data)
    with pytest.raises(ConfigError, match="lossless only"):
        search(compressed, "max-batched-tokens", record=None, calibration_message="m")
    data["comm"]["allow_compressed_wire"] = True
    opted_in = DeploymentConfig.model_validate(data)
    result = search(opted_in, "max-batched-tokens", record=None, calibration_message="m", upper=8192)
    assert result.best is not None and result.best.config.comm.dma_wire_mode == "i8"
    plain = search(r12(), "max-batched-tokens", record=None, calibration_message="m", upper=8192)
    assert plain.best is not None and plain.best.config.comm.dma_wire_mode == "0"


def test_overlay_extends_the_original_and_resolves(rec: Calibration, tmp_path: Path) -> None:
    result: SearchResult = search(
        r12(), "max-batched-tokens", record=rec, calibration_message="cal", min_margin=2 * GIB, upper=16384
    )
    assert result.best is not None
    path = tmp_path / "overlay.yaml"
    path.write_text(overlay_yaml(result, extends="r12-exl3", command="glmlaunch calibrate search"))
    resolved = resolve_config(str(path), environ={})
    assert [p.name for p in resolved.profile_chain] == ["r12-exl3", "overlay"]
    assert resolved.config.scheduler.max_num_batched_tokens == result.best.value
    assert resolved.config.memory.min_margin == 2 * GIB
    assert resolved.config.comm.dma_wire_mode == "0"
    best: Evaluation = result.best
    assert f"memory.kv_cache_memory_bytes: {best.recommended_kv_cache_memory_bytes}" in path.read_text()
    assert "next step up" in path.read_text()


def test_cli_search_with_a_stored_calibration(clean_env: dict[str, str], tmp_path: Path) -> None:
    ingest = run_cli("calibrate", "ingest", str(LOGS / "tp4_dcp4_boot.log"), "-p", "r12-exl3", env=clean_env)
    assert ingest.returncode == 0, ingest.stderr
    out = tmp_path / "cal.yaml"
    res = run_cli(
        "calibrate",
        "search",
        "-p",
        "r12-exl3",
        "--objective",
        "max-kv-bytes",
        "-o",
        str(out),
        "--json",
        env=clean_env,
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["calibration"]["record_id"] is not None
    assert "using calibration" in res.stderr
    assert doc["best"]["feasible"] and not doc["next_step_up"]["feasible"]
    assert doc["next_step_up"]["value"] == doc["best"]["value"] + MIB
    assert doc["kv_cache_memory_bytes"] == doc["best"]["value"]
    assert f"--kv-cache-memory-bytes={doc['best']['value']}" in res.stderr
    assert resolve_config(str(out), environ={}).config.memory.kv_cache_memory_bytes == doc["best"]["value"]

    none = run_cli("calibrate", "search", "-p", "gate", "--objective", "max-gmu", "--no-write", env=clean_env)
    assert "no matching calibration" in none.stderr and "ledger's defaults" in none.stderr

    impossible = run_cli(
        "calibrate",
        "search",
        "-p",
        "r12-exl3",
        "--objective",
        "max-gmu",
        "--min-margin",
        "60GiB",
        "--no-write",
        env=clean_env,
    )
    assert impossible.returncode == 4, impossible.stderr
    assert "no value of memory.gpu_memory_utilization" in impossible.stderr
    assert "Traceback" not in impossible.stderr
