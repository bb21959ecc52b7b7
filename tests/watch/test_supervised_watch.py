"""``serve --supervise --watch``: the watch on a thread of the supervisor.

The whole supervised session runs in a real process (the supervisor becomes a subreaper and blocks
signals, so never inside pytest) over the fake vLLM of tests/supervise/ (a real boot log replayed by a
process tree). Its memory is the recorded H200 OOM run (``--watch-replay``, hidden: live NVML needs the
GPU, and the H200 fails the serve stage's hardware check for these kernels, rightly), watched against the
plan that run was recorded against; the session is driven through ``supervise()`` with the launch ``serve``
would hand it. Without NVML, ``serve --supervise --watch`` says so and vLLM runs as ever.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import FIXTURES, REPO, run_cli, run_cli_process

from glmlaunch.vllmlog.boot import parse_log_text

FAKE = REPO / "tests" / "supervise" / "fake_vllm.py"
BOOT_LOG = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp0-v1-server.log"
TRACE = FIXTURES / "watch" / "oom.json"
SPEED = 4.0

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the supervisor needs Linux")

SESSION = """
import json, os, signal, sys, threading
from pathlib import Path
from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger.inputs import UNCALIBRATED
from glmlaunch.plan.plan import make_plan
from glmlaunch.supervise.session import Launch, supervise
from glmlaunch.supervise.watching import WatchSetup
from glmlaunch.watch.trace import load_trace

profile, fake, trace, speed, out = sys.argv[1:6]
config = resolve_config(profile, ()).config
plan = make_plan(config, inputs=UNCALIBRATED)
# vLLM serves until the recorded run has played out, then its caller stops it, as an operator would
seconds = load_trace(trace).duration_s / float(speed) + 2.0
threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
result = supervise(
    Launch(
        argv=(sys.executable, fake),
        env=dict(os.environ, CUDA_VISIBLE_DEVICES="0"),
        caller_env=dict(os.environ),
        profile="h200",
        config=config,
        inventory=None,
        command_line="vllm serve (fake)",
        watch=WatchSetup(
            plan=plan, metrics_port=0, replay=Path(trace),
            replay_speed=float(speed),
        ),
    )
)
Path(out).write_text(json.dumps({"code": result.code, "sig": result.sig, "outcome": result.outcome}))
"""


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from conftest import _clean_env

    tmp = tmp_path_factory.mktemp("supervised-watch")
    env = dict(_clean_env(tmp), FAKE_VLLM_LOG=str(BOOT_LOG), FAKE_VLLM_THEN="serve", PYTHONPATH=str(REPO))
    out = tmp / "result.json"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SESSION,
            str(FIXTURES / "watch" / "h200.yaml"),
            str(FAKE),
            str(TRACE),
            str(SPEED),
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    boot = Path(env["GLMLAUNCH_CACHE_DIR"]) / "boots" / result["outcome"]["boot_id"]
    return {"result": result, "stderr": done.stderr, "boot": boot, "cache": Path(env["GLMLAUNCH_CACHE_DIR"])}


def test_vllm_serves_and_ends_as_ever(session: dict[str, Any]) -> None:
    result = session["result"]
    assert result["code"] == 0 and result["outcome"]["outcome"] == "served"


def test_the_states_and_the_oom_are_said_on_stderr_once_each(session: dict[str, Any]) -> None:
    err = session["stderr"]
    assert "supervise: watching 1 rank(s) against the plan (rank 0: GPU-43b39da1" in err
    assert err.count("warning: watch: rank 0 (GPU 0, GPU-43b39da1): ok -> warn:") == 1
    assert err.count("warning: watch: rank 0 (GPU 0, GPU-43b39da1): warn -> critical:") == 1
    assert err.count("warning: watch: OOM on rank 0 after ready: tried 512.00 MiB with 67.12 MiB free") == 1
    assert "supervise: watch: metrics on http://127.0.0.1:" in err


def test_the_outcome_keeps_the_watch_summary(session: dict[str, Any]) -> None:
    outcome = json.loads((session["boot"] / "outcome.json").read_text())
    schema = json.loads((REPO / "docs" / "schemas" / "boots.schema.json").read_text())
    jsonschema.Draft202012Validator({**schema["$defs"]["outcome"], "$defs": schema["$defs"]}).validate(
        outcome
    )
    watch = outcome["watch"]
    (rank,) = watch["ranks"]
    assert rank["worst_state"] == "critical" and rank["uuid"].startswith("GPU-43b39da1")
    assert rank["lowest_free_bytes"] == 70_385_664  # the last sample before the OOM, NVML's figure
    assert watch["ooms"][0]["entry"]["name"] == "demand.prefill_growth"
    assert json.loads((session["boot"] / "watch.json").read_text())["ranks"] == watch["ranks"]


def test_the_readings_and_the_oom_reach_the_calibration_record(session: dict[str, Any]) -> None:
    readings = (session["boot"] / "watch.log").read_text()
    lows = parse_log_text("Application startup complete.\n" + readings).runtime_events
    assert lows and lows[-1].free_bytes == 70_385_664 // (1 << 20) * (1 << 20)
    record_id = session["result"]["outcome"]["record"]["record_id"]
    record = json.loads((session["cache"] / "calibration" / f"{record_id}.json").read_text())
    events = [e for e in record["boot"]["runtime_events"] if e["after_ready"]]
    assert {e["kind"] for e in events} == {"free", "oom"}
    (low,) = [e for e in events if e["kind"] == "free"]
    assert low["process"] == "glmlaunch watch" and low["free_bytes"] == lows[-1].free_bytes
    assert record["supervised"]["outcome"] == "served"


def test_without_nvml_the_watch_is_a_note_and_vllm_runs(clean_env: dict[str, str], tmp_path: Path) -> None:
    profile = tmp_path / "boot.yaml"
    assert run_cli("profiles", "import", str(BOOT_LOG), "-o", str(profile), env=clean_env).returncode == 0
    env = dict(clean_env, FAKE_VLLM_LOG=str(BOOT_LOG), FAKE_VLLM_THEN="exit:0")
    # a real process: the supervised launch (a subreaper, signals forwarded, vLLM in its own session)
    done = run_cli_process(
        "serve",
        "-p",
        str(profile),
        "--supervise",
        "--watch",
        "--skip-preflight",
        "--inventory",
        str(FIXTURES / "inventories" / "rtxpro6000x4.json"),
        "--vllm-bin",
        str(FAKE),
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "supervise: no watch: no NVIDIA driver" in done.stderr
    assert done.stderr.splitlines()[-1] == "vllm exited 0"


def test_watch_needs_a_supervised_launch(clean_env: dict[str, str]) -> None:
    done = run_cli("serve", "-p", "turnkey", "--watch", "--dry-run", env=clean_env)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].startswith("error: --watch: needs a supervised launch")


def test_a_dry_run_says_the_watch_and_its_endpoint(clean_env: dict[str, str], tmp_path: Path) -> None:
    vllm = tmp_path / "vllm"
    vllm.write_text("#!/bin/sh\nexit 0\n")
    vllm.chmod(0o755)
    done = run_cli(
        "serve",
        "-p",
        "turnkey",
        "--supervise",
        "--watch",
        "--metrics-port",
        "9400",
        "--dry-run",
        "--json",
        "--skip-preflight",
        "--inventory",
        str(FIXTURES / "inventories" / "rtxpro6000x4.json"),
        "--vllm-bin",
        str(vllm),
        env=clean_env,
    )
    doc = json.loads(done.stdout)
    assert doc["mode"]["watch"] == {"metrics": "127.0.0.1:9400"}
    schema = json.loads((REPO / "docs" / "schemas" / "serve-dry-run.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)
