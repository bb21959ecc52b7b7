"""The recorded NVML traces (tests/fixtures/watch/, recorded on the H200 by bench/watch_gpu.py) replayed
through the real command give the expected states, and the same states the live watch said on the GPU
(bench/watch/h200-transitions.json). The plan is tests/fixtures/watch/h200.yaml, the one the recording
watched against."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from conftest import FIXTURES, REPO, run_cli

from glmlaunch.config.resolve import resolve_config
from glmlaunch.hardware.memory import MemorySample
from glmlaunch.ledger.inputs import UNCALIBRATED
from glmlaunch.plan.plan import make_plan
from glmlaunch.watch.ranks import map_ranks
from glmlaunch.watch.session import Options, Watcher
from glmlaunch.watch.states import Settings
from glmlaunch.watch.trace import TracePlayer, load_trace

WATCH = FIXTURES / "watch"
PROFILE = str(WATCH / "h200.yaml")
SCENARIOS = ("clean", "leak", "foreign", "prefill", "oom")
LIVE = json.loads((REPO / "bench" / "watch" / "h200-transitions.json").read_text())
MIB = 1 << 20
GIB = 1 << 30


def replay(name: str, env: dict[str, str], *extra: str) -> list[dict[str, Any]]:
    done = run_cli(
        "watch",
        "-p",
        PROFILE,
        "--replay",
        str(WATCH / f"{name}.json"),
        "--json",
        "--drift-window",
        "20",
        *extra,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def primary(docs: list[dict[str, Any]]) -> list[str]:
    states: list[str] = []
    for d in docs:
        s = d["ranks"][0]["state"]
        if not states or states[-1] != s:
            states.append(s)
    return states


def conditions(docs: list[dict[str, Any]]) -> set[str]:
    return {c for d in docs for c in d["ranks"][0]["conditions"]}


@pytest.fixture(scope="module")
def replays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    from conftest import _clean_env

    env = _clean_env(tmp_path_factory.mktemp("replays"))
    return {name: replay(name, env) for name in SCENARIOS}


def test_each_trace_was_recorded_by_the_watch_on_a_gpu() -> None:
    for name in SCENARIOS:
        trace = load_trace(WATCH / f"{name}.json")
        assert trace.source.startswith("glmlaunch ") and "watch --record" in trace.source
        assert trace.driver_version and trace.devices[0].name == "NVIDIA H200"
        assert "watch -p tests/fixtures/watch/h200.yaml" in trace.command and f"{name}.json" in trace.command
        assert trace.interval_s == 0.5 and len(trace.samples) > 40
        # the samples are NVML's own: used + free is the usable total of the device, every time
        usable = trace.devices[0].total_bytes - trace.devices[0].reserved_bytes
        assert all(s.gpus[0].used + s.gpus[0].free == usable for s in trace.samples)
        assert any("Application startup complete" in line.text for line in trace.log)


def test_every_line_is_a_versioned_document_valid_against_its_schema(
    replays: dict[str, list[dict[str, Any]]],
) -> None:
    schema = json.loads((REPO / "docs" / "schemas" / "watch.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    for docs in replays.values():
        for doc in docs:
            assert next(iter(doc)) == "schema_version"
            validator.validate(doc)


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_replay_says_what_the_live_watch_said(name: str, replays: dict[str, list[dict[str, Any]]]) -> None:
    live = [c["state"] for c in LIVE[name]]
    live_primary = [s for i, s in enumerate(live) if i == 0 or live[i - 1] != s]
    assert primary(replays[name]) == live_primary


def test_a_clean_serve_stays_ok_and_its_transients_fire_as_planned(
    replays: dict[str, list[dict[str, Any]]],
) -> None:
    docs = replays["clean"]
    assert primary(docs) == ["starting", "ok", "starting"]
    assert conditions(docs) == set()
    serving = [d["ranks"][0] for d in docs if d["ranks"][0]["state"] == "ok"]
    first, last = serving[0], serving[-1]
    # at ready: the deployment holds what the plan says, to the allocator's 2 MiB pages
    assert abs(first["baseline_resident_bytes"] - first["planned_resident_bytes"]) < 2 * MIB
    assert first["largest_pending"]["name"] == "demand.prefill_growth"
    # after the long prefill: both transients fired (cached), nothing pending, growth = the plan's demand
    assert last["fired"] == ["demand.fragmentation", "demand.prefill_growth"]
    assert last["largest_pending"] is None
    # the allocator's 2 MiB pages round the 26.14 MiB fragmentation allowance up: a page over the plan
    assert (
        abs(last["realized_demand_bytes"] - 1_724_002_725) < 4 * MIB and last["unexplained_bytes"] < 4 * MIB
    )


def test_a_slow_leak_is_drift_with_its_rate_then_warn_then_critical(
    replays: dict[str, list[dict[str, Any]]],
) -> None:
    docs = replays["leak"]
    assert primary(docs) == ["starting", "ok", "drift", "warn", "critical"]
    last = docs[-1]["ranks"][0]
    assert set(last["conditions"]) == {"critical", "drift"}
    # once the window holds nothing but the leak, the rate is the recorded 64 MiB a second
    rates = [d["ranks"][0]["drift_bytes_per_s"] for d in docs if d["ranks"][0]["drift_bytes_per_s"]]
    assert max(rates) == pytest.approx(64 * MIB, rel=0.01)
    assert last["unexplained_bytes"] > 0


def test_a_foreign_process_is_named_and_its_memory_is_not_the_deployments(
    replays: dict[str, list[dict[str, Any]]],
) -> None:
    docs = replays["foreign"]
    assert primary(docs) == ["starting", "ok", "warn", "critical", "ok"]
    server_pid = int(
        next(line.text for line in load_trace(WATCH / "foreign.json").log if "APIServer pid=" in line.text)
        .split("pid=")[1]
        .split(")")[0]
    )
    held = [d["ranks"][0] for d in docs if "foreign" in d["ranks"][0]["conditions"]]
    assert held and all(r["foreign"] and r["foreign"][0]["pid"] != server_pid for r in held)
    # the foreign memory is not the deployment's: its resident memory stays at the baseline meanwhile (but
    # for the few MiB of the other context that NVML's per-process figure leaves out: 5.56 MiB here)
    assert all(0 <= r["resident_bytes"] - r["baseline_resident_bytes"] < 8 * MIB for r in held)
    assert {r["state"] for r in held} == {"warn", "critical"}


def test_a_long_prefill_eats_a_margin_startup_had_already_cut(
    replays: dict[str, list[dict[str, Any]]],
) -> None:
    docs = replays["prefill"]
    assert primary(docs) == ["starting", "ok", "warn", "critical", "starting"]
    ready = next(d["ranks"][0] for d in docs if d["ranks"][0]["state"] == "ok")
    assert ready["baseline_resident_bytes"] - ready["planned_resident_bytes"] == pytest.approx(
        1.85 * GIB, abs=4 * MIB
    )
    critical = next(d["ranks"][0] for d in docs if d["ranks"][0]["state"] == "critical")
    assert critical["free_bytes"] < critical["largest_pending"]["bytes"]


def test_steps_toward_the_limit_end_in_an_oom_that_is_explained(
    replays: dict[str, list[dict[str, Any]]],
) -> None:
    docs = replays["oom"]
    assert primary(docs) == ["starting", "ok", "warn", "critical", "starting"]
    ooms = [e for d in docs for e in d["events"] if e["kind"] == "oom"]
    assert len(ooms) == 1
    ex = ooms[0]["explanation"]
    assert ex["tried_bytes"] == 512 * MIB and ex["after_ready"] is True
    assert ex["entry"]["name"] == "demand.prefill_growth"
    assert {f["kind"] for f in ex["fixes"]} == {"pool-pin", "gmu", "batched-tokens"}
    gone = [e for d in docs for e in d["events"] if e["kind"] == "gone"]
    assert gone and docs.index(
        next(d for d in docs if d["events"] and d["events"][0]["kind"] == "oom")
    ) < len(docs)


def _watcher(name: str, *, drop_log: bool, settle_s: float = 60.0) -> tuple[Watcher, TracePlayer]:
    trace = load_trace(WATCH / f"{name}.json")
    if drop_log:
        trace = trace.model_copy(update={"log": []})
    player = TracePlayer(trace)
    config = resolve_config(PROFILE, ()).config
    ranks = map_ranks(player.devices, "0", config.parallel.tp)
    plan = make_plan(config, device_total=ranks[0].device.usable_bytes, inputs=UNCALIBRATED)
    watcher = Watcher(
        plan,
        player,
        ranks,
        profile="h200",
        options=Options(settings=Settings(drift_window_s=20, settle_s=settle_s)),
        lines=player,
        has_ready_signal=bool(trace.log),
        paced=False,
    )
    return watcher, player


def _baseline_seq(watcher: Watcher) -> tuple[int, int]:
    """(the sample at which the baseline was learned, the resident memory it learned)."""
    while True:
        snap = watcher.step()
        assert snap is not None, "no baseline learned"
        for e in snap.events:
            if e.kind == "baseline":
                return snap.seq, e.data["resident_bytes"]


def test_without_a_log_the_baseline_is_the_first_stable_plateau() -> None:
    at_ready, resident = _baseline_seq(_watcher("clean", drop_log=False)[0])
    settled_at, settled = _baseline_seq(_watcher("clean", drop_log=True, settle_s=3.0)[0])
    # the same plateau, learned once it had held still for the settle time (3 s: 6 samples at 2 Hz)
    assert settled == resident
    assert settled_at > at_ready


def test_the_lowest_free_memory_after_ready_is_kept_for_calibration() -> None:
    watcher, player = _watcher("oom", drop_log=False)
    watcher.run()
    events = watcher.runtime_events()
    ooms = [e for e in events if e.kind == "oom"]
    readings = [e for e in events if e.kind == "free"]
    assert len(ooms) == 1 and ooms[0].tried_bytes == 512 * MIB
    assert len(readings) == 1 and readings[0].after_ready and readings[0].gpu == 0
    lowest = min(
        s.gpus[0].free
        for s in player.trace.samples
        if s.t >= next(line.t for line in player.trace.log if "startup complete" in line.text)
        and s.gpus[0].used > 100 * GIB
    )
    assert readings[0].free_bytes == lowest // MIB * MIB
    assert readings[0].line.split(" glmlaunch watch: ", 1)[1].startswith(f"GPU 0: {lowest // MIB} MiB free")


def test_a_sample_is_what_the_trace_holds() -> None:
    trace = load_trace(WATCH / "foreign.json")
    player = TracePlayer(trace)
    first = player.read()
    assert isinstance(first, MemorySample) and first.t == trace.samples[0].t
    assert first.devices[0].used_bytes == trace.samples[0].gpus[0].used
    count = 1
    while player.read() is not None:
        count += 1
    assert count == len(trace.samples)
