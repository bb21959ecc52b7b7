"""The watch feeds the runtime peak it saw to calibration: each rank's lowest free memory after ready is
written as ``GPU N: X MiB free`` (``--readings FILE``), the form ``calibrate ingest`` reads after a log's
ready line, so the boot's record raises the runtime demand of exactly that configuration (issue 19).

The readings here are the recorded H200 OOM run's (tests/fixtures/watch/oom.json), appended to a real boot
of the rig (tests/fixtures/boot-logs/): the two are different machines, which does not matter to what is
tested: that the readings reach the record and the next plan."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import FIXTURES, run_cli

from glmlaunch.vllmlog.boot import parse_log_text

WATCH = FIXTURES / "watch"
BOOT = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log"


def test_readings_append_the_lowest_free_memory_as_calibrate_reads_it(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    readings = tmp_path / "readings.log"
    done = run_cli(
        "watch",
        "-p",
        str(WATCH / "h200.yaml"),
        "--replay",
        str(WATCH / "leak.json"),
        "--readings",
        str(readings),
        env=clean_env,
    )
    assert done.returncode == 0, done.stderr
    lines = readings.read_text().splitlines()
    # one line per new low (at least a MiB lower), each lower than the one before
    frees = [int(line.split("GPU 0: ")[1].split(" MiB")[0]) for line in lines]
    assert frees == sorted(frees, reverse=True) and len(set(frees)) == len(frees) > 10
    events = parse_log_text("Application startup complete.\n" + readings.read_text()).runtime_events
    assert [e.free_bytes // (1 << 20) for e in events] == frees and all(e.after_ready for e in events)
    assert oct(readings.stat().st_mode & 0o777) == oct(0o600)


def test_the_readings_raise_the_demand_of_that_configuration(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    profile = tmp_path / "boot.yaml"
    assert run_cli("profiles", "import", str(BOOT), "-o", str(profile), env=clean_env).returncode == 0
    before = json.loads(run_cli("plan", "-p", str(profile), "--json", env=clean_env).stdout)
    readings = tmp_path / "readings.log"
    done = run_cli(
        "-q",
        "watch",
        "-p",
        str(WATCH / "h200.yaml"),
        "--replay",
        str(WATCH / "oom.json"),
        "--readings",
        str(readings),
        env=clean_env,
    )
    assert done.returncode == 0, done.stderr
    serve = tmp_path / "serve.log"
    serve.write_text(BOOT.read_text() + readings.read_text())
    assert run_cli("calibrate", "ingest", str(serve), env=clean_env).returncode == 0
    after = json.loads(run_cli("plan", "-p", str(profile), "--json", env=clean_env).stdout)
    lowest = min(int(line.split("GPU 0: ")[1].split(" MiB")[0]) for line in readings.read_text().splitlines())
    growth = next(t for t in after["runtime_demand"]["transients"] if t["name"] == "demand.prefill_growth")
    assert (
        growth["formula"].startswith("learned: ")
        and f"read {lowest * (1 << 20):,} B free" in growth["formula"]
    )
    assert after["budget"]["runtime_demand_bytes"] > before["budget"]["runtime_demand_bytes"]
    # a reading proves the demand is at least (the plan's free memory after startup - the reading): at the
    # peak, the plan now leaves what was read (to the allocator's 2 MiB page)
    margin = after["budget"]["runtime_margin_bytes"]
    assert lowest * (1 << 20) - 2 * (1 << 20) <= margin <= lowest * (1 << 20)
