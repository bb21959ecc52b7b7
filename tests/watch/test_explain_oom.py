"""``glmlaunch explain-oom``: the OOM the H200 run recorded (tests/fixtures/watch/oom.log: torch's own
message, written by bench/watch_gpu_server.py as vLLM's worker writes it) mapped to its ledger entry, with
fixes the planner computes and a plan under the proven demand confirms."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli

from glmlaunch.calibrate.apply import _with, with_demand_floor
from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger import build_ledger
from glmlaunch.ledger.budget import compute_budget
from glmlaunch.ledger.inputs import UNCALIBRATED, LedgerInputs
from glmlaunch.plan.plan import make_plan
from glmlaunch.vllmlog.boot import parse_log_file
from glmlaunch.vllmlog.events import is_ready_line, runtime_events_of
from glmlaunch.watch.oom import explain, match_runtime

WATCH = FIXTURES / "watch"
PROFILE = str(WATCH / "h200.yaml")
OOM_LOG = WATCH / "oom.log"
MIB = 1 << 20


def _doc(env: dict[str, str], *args: str) -> dict[str, object]:
    done = run_cli("explain-oom", *args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    doc: dict[str, object] = json.loads(done.stdout)
    return doc


def test_the_recorded_oom_is_the_long_prefill_and_proves_its_demand(clean_env: dict[str, str]) -> None:
    doc = _doc(clean_env, "-p", PROFILE, str(OOM_LOG))
    (oom,) = doc["ooms"]  # type: ignore[misc]
    assert oom["after_ready"] and oom["rank"] == 0 and oom["process"] == "Worker_TP0"
    assert oom["tried_bytes"] == 512 * MIB
    plan = doc["plan"]
    # the plan said margin free after startup; at the OOM only `free` was: the difference was allocated
    assert oom["realized_bytes"] == plan["margin_bytes"] - oom["free_bytes"]  # type: ignore[index]
    assert oom["demand_floor_bytes"] == oom["realized_bytes"] + oom["tried_bytes"]
    assert oom["entry"]["name"] == "demand.prefill_growth"
    assert oom["entry"]["phase"] == "long-prefill" and oom["entry"]["reader"].startswith("sparse indexer")
    # 4.5 GiB were allocated, past the whole long-prefill phase (1.61 GiB): the smallest that holds 512 MiB
    assert oom["entry"]["matched_by"] == "holds-it"
    assert [f["kind"] for f in oom["fixes"]] == ["pool-pin", "gmu", "batched-tokens"]


def test_each_fix_keeps_the_proven_demand_by_the_plan(clean_env: dict[str, str]) -> None:
    doc = _doc(clean_env, "-p", PROFILE, str(OOM_LOG))
    (oom,) = doc["ooms"]  # type: ignore[misc]
    config = resolve_config(PROFILE, ()).config
    floor = oom["demand_floor_bytes"]
    raised = with_demand_floor(build_ledger(config), floor, "test")
    assert raised is not None and raised.runtime_prefill_bytes is not None
    before = compute_budget(config, build_ledger(config, raised))
    assert before.verdict == "runtime-oom"  # as it is, the configuration cannot hold what the OOM proves
    for fix in oom["fixes"]:
        fixed = _with(config, fix["key"], fix["value"])
        cal = raised
        if fix["kind"] == "batched-tokens":  # the prefill's growth scales with the chunk it runs
            share = fix["value"] / config.scheduler.max_num_batched_tokens
            cal = replace(raised, runtime_prefill_bytes=round(raised.runtime_prefill_bytes * share))
        budget = compute_budget(fixed, build_ledger(fixed, cal))
        assert budget.verdict == "ok", fix
        assert budget.runtime_margin == fix["runtime_margin_bytes"] >= 0


def test_the_text_names_the_entry_its_reader_and_the_settings(clean_env: dict[str, str]) -> None:
    done = run_cli("explain-oom", "-p", PROFILE, str(OOM_LOG), env=clean_env)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "OOM on rank 0 after ready: tried 512.00 MiB with 67.12 MiB free" in out
    for text in ("demand.prefill_growth", "sparse indexer", "memory.num_gpu_blocks_override=", "--set"):
        assert text in out
    # the log shows no configuration: the command that keeps the demand names the profile it was read with
    assert f"glmlaunch explain-oom -p {PROFILE} {OOM_LOG} --ingest" in done.stderr
    assert out.splitlines()[0] == "against profile h200"


def test_an_oom_in_a_boot_that_never_sized_its_pool_is_a_startup_allocation(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    # a real boot cut before its KV-cache line, then the recorded OOM: the server never served
    boot = (FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log").read_text().splitlines()
    cut = next(i for i, ln in enumerate(boot) if "Available KV cache memory" in ln)
    oom_line = next(ln for ln in OOM_LOG.read_text().splitlines() if "Tried to allocate" in ln)
    log = tmp_path / "startup-oom.log"
    log.write_text("\n".join([*boot[:cut], oom_line]) + "\n")
    doc = _doc(clean_env, "-p", PROFILE, str(log))
    (oom,) = doc["ooms"]  # type: ignore[misc]
    assert oom["after_ready"] is False and oom["when"] == "startup" and oom["demand_floor_bytes"] == 0
    assert [c["phase"] for c in oom["candidates"]] == ["startup"]
    assert oom["entry"]["phase"] is None and oom["entry"]["lifetime"] != "runtime"
    assert any("startup allocation" in n for n in oom["notes"])
    kinds = [f["kind"] for f in oom["fixes"]]
    assert "gmu" in kinds and set(kinds) <= {"gmu", "pool-pin"}
    gmu = next(f["value"] for f in oom["fixes"] if f["kind"] == "gmu")
    assert gmu < resolve_config(PROFILE, ()).config.memory.gpu_memory_utilization


def test_an_oom_with_no_ready_line_is_read_both_ways(clean_env: dict[str, str], tmp_path: Path) -> None:
    # the recorded run, its ready lines left out: nothing in the log says whether it had started serving
    lines = [ln for ln in OOM_LOG.read_text().splitlines() if not is_ready_line(ln)]
    log = tmp_path / "no-ready.log"
    log.write_text("\n".join(lines) + "\n")
    doc = _doc(clean_env, "-p", PROFILE, str(log))
    (oom,) = doc["ooms"]  # type: ignore[misc]
    assert oom["after_ready"] is False and oom["when"] == "unknown"
    phases = [c["phase"] for c in oom["candidates"]]
    assert sorted(phases) == ["runtime", "startup"]
    # ranked by how far the plan would be off: the most likely first, its reading on the top level
    off = [c["unexplained_bytes"] for c in oom["candidates"]]
    assert off == sorted(off) and oom["phase"] == phases[0]
    assert oom["entry"] == oom["candidates"][0]["entry"]


def test_an_allocation_of_an_entrys_size_is_that_entry() -> None:
    config = resolve_config(PROFILE, ()).config
    plan = make_plan(config, inputs=UNCALIBRATED)
    entry = next(t.entry for t in plan.ledger.runtime.transients if t.entry.name == "demand.prefill_growth")
    mib = entry.requested_bytes / MIB
    line = (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {mib:.2f} MiB. GPU 0 has a total "
        "capacity of 139.80 GiB of which 1.00 GiB is free."
    )
    (event,) = runtime_events_of(line, after_ready=True)
    match = match_runtime(event, plan)
    assert match is not None and match.entry.name == "demand.prefill_growth" and match.how == "size"
    assert explain(event, plan).match == match


def test_no_oom_in_the_log_is_a_usage_error(clean_env: dict[str, str]) -> None:
    log = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log"
    done = run_cli("explain-oom", str(log), env=clean_env)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].startswith("error: LOG: no CUDA out-of-memory line")


def test_ingest_keeps_the_proven_demand_for_the_next_plan(clean_env: dict[str, str], tmp_path: Path) -> None:
    """A real boot of the rig, then the recorded OOM line after its ready line: ``--ingest`` stores it, and
    the next plan of that configuration carries the demand (calibrate's runtime evidence, issue 19)."""
    boot = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log"
    oom_line = next(ln for ln in OOM_LOG.read_text().splitlines() if "Tried to allocate" in ln)
    # the recorded OOM is an H200's: on this rig's GPU it states the rig's total (an OOM of a larger GPU
    # than the log's own is no evidence: calibrate.evidence)
    oom_line = oom_line.replace("139.80 GiB", "94.97 GiB")
    log = tmp_path / "serve.log"
    log.write_text(boot.read_text() + oom_line + "\n")
    profile = tmp_path / "boot.yaml"
    assert run_cli("profiles", "import", str(boot), "-o", str(profile), env=clean_env).returncode == 0
    doc = _doc(clean_env, str(log), "--ingest")
    assert doc["ingested_record"]
    plan = json.loads(run_cli("plan", "-p", str(profile), "--json", env=clean_env).stdout)
    assert "the runtime demand is raised by record" in plan["calibration"]
    growth = next(t for t in plan["runtime_demand"]["transients"] if t["name"] == "demand.prefill_growth")
    assert growth["formula"].startswith("learned: ")


@pytest.mark.parametrize("events", [parse_log_file(OOM_LOG).runtime_events])
def test_the_log_parser_reads_the_recorded_line(events: list[object]) -> None:
    ooms = [e for e in events if getattr(e, "kind", None) == "oom"]
    assert len(ooms) == 1 and getattr(ooms[0], "after_ready", False)


def test_a_blank_calibration_plans_like_none() -> None:
    # the fixes plan with a calibration that only raises the demand: without it, it must change nothing
    config = resolve_config(PROFILE, ()).config
    blank = LedgerInputs(record_id="runtime-evidence")
    a = compute_budget(config, build_ledger(config, UNCALIBRATED))
    b = compute_budget(config, build_ledger(config, blank))
    assert a.terms == b.terms and a.runtime_demand == b.runtime_demand


def test_ingest_with_a_named_profile_applies_to_its_next_plan(clean_env: dict[str, str]) -> None:
    # the recorded run shows no configuration: -p names it, and the record is keyed on it, whole
    done = run_cli("explain-oom", "-p", PROFILE, str(OOM_LOG), "--ingest", env=clean_env)
    assert done.returncode == 0, done.stderr
    assert "the next plan of h200: runtime demand" in done.stderr
    plan = json.loads(run_cli("plan", "-p", PROFILE, "--json", env=clean_env).stdout)
    assert "the runtime demand is raised by record" in plan["calibration"]
    assert plan["verdict"]["status"] == "runtime-oom"
