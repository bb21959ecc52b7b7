"""Runtime evidence in serve logs (issue 19): OOMs and free-memory readings after the server was ready are
read, stored with the record, and raise the long prefill's demand of exactly that configuration."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import FIXTURES, run_cli

from glmlaunch.vllmlog.boot import parse_log_text

LOG = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log"
OOM = (
    "(Worker_TP0_DCP0 pid=141281) ERROR 07-31 06:00:00 [multiproc_executor.py:700] torch.OutOfMemoryError: "
    "CUDA out of memory. Tried to allocate 48.00 MiB. GPU 0 has a total capacity of 94.97 GiB of which "
    "10.00 MiB is free. Including non-PyTorch memory, this process has 94.95 GiB memory in use."
)
MIB = 1024 * 1024


def test_ooms_and_readings_are_read_with_when_they_happened() -> None:
    text = "\n".join(
        [
            "(EngineCore_DP0 pid=1) ERROR torch.OutOfMemoryError: CUDA out of memory. "
            "Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 94.97 GiB of which 1.50 GiB is free.",
            "(APIServer pid=9) INFO:     Application startup complete.",
            "GPU 2: 2593 MiB free",
            OOM,
            # the parent process echoes the worker's exception: one event
            OOM.split("] ", 1)[1],
        ]
    )
    events = parse_log_text(text).runtime_events
    assert [(e.kind, e.after_ready, e.gpu) for e in events] == [
        ("oom", False, 1),
        ("free", True, 2),
        ("oom", True, 0),
    ]
    boot_oom, reading, oom = events
    assert boot_oom.tried_bytes == 2 * 1024 * MIB and boot_oom.free_bytes == round(1.5 * 1024 * MIB)
    assert reading.free_bytes == 2593 * MIB and reading.tried_bytes is None
    assert oom.tried_bytes == 48 * MIB and oom.free_bytes == 10 * MIB and oom.process == "Worker_TP0_DCP0"
    assert [e.line for e in parse_log_text(text).runtime_ooms] == [oom.line]


def test_a_real_boot_log_has_no_runtime_event() -> None:
    assert parse_log_text(LOG.read_text(encoding="utf-8")).runtime_events == []


def _plan(env: dict[str, str], profile: Path) -> dict[str, object]:
    done = run_cli("plan", "-p", str(profile), "--json", env=env)
    doc: dict[str, object] = json.loads(done.stdout)
    return doc


def test_a_runtime_oom_raises_the_demand_of_that_configuration(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    serve = tmp_path / "serve.log"
    serve.write_text(LOG.read_text(encoding="utf-8") + OOM + "\n", encoding="utf-8")
    profile = tmp_path / "boot.yaml"
    assert run_cli("profiles", "import", str(LOG), "-o", str(profile), env=clean_env).returncode == 0
    before = _plan(clean_env, profile)
    assert before["verdict"]["ok"]  # type: ignore[index]
    ingest = run_cli("calibrate", "ingest", str(serve), "-p", str(profile), env=clean_env)
    assert ingest.returncode == 0, ingest.stderr
    after = _plan(clean_env, profile)
    b = after["budget"]
    # the plan's free memory after startup, less the 10 MiB still free at the OOM, plus the 48 MiB it
    # tried: the demand is at least that, so the runtime margin is at most -38 MiB
    assert after["verdict"]["status"] == "runtime-oom"  # type: ignore[index]
    assert b["runtime_margin_bytes"] <= -38 * MIB  # type: ignore[index]
    growth = next(
        e
        for e in after["runtime_demand"]["transients"]
        if e["name"] == "demand.prefill_growth"  # type: ignore[index]
    )
    assert growth["formula"].startswith("learned: ") and "OOMed after ready" in growth["formula"]
    assert "serve.log" in growth["formula"]
    assert "the runtime demand is raised by record" in after["calibration"]  # type: ignore[operator]
    # another configuration is not moved by it
    other = run_cli(
        "plan", "-p", str(profile), "--set", "scheduler.max_num_batched_tokens=2048", "--json", env=clean_env
    )
    growth_other = next(
        e
        for e in json.loads(other.stdout)["runtime_demand"]["transients"]
        if e["name"] == "demand.prefill_growth"
    )
    assert not growth_other["formula"].startswith("learned")
