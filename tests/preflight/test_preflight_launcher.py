"""The preflight orchestration on CPU: real worker processes, real gloo process groups, real faults."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.errors import ExitCode
from glmlaunch.preflight.api import parse_timeouts, planned_allocations, run_preflight
from glmlaunch.preflight.report import build_report
from glmlaunch.preflight.types import FaultSpec
from tests.conftest import REPO, glmlaunch_exe

SCALE = ("parallel.tp=2", "parallel.dcp=2")


def _config(profile: str = "gate", *extra: str) -> DeploymentConfig:
    return resolve_config(profile, [*SCALE, *extra], environ={}).config


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose; /proc tells.
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except FileNotFoundError:
        return False


def _assert_all_gone(run_pids: list[int]) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in run_pids):
        time.sleep(0.05)
    assert not [p for p in run_pids if _alive(p)]


def _pids(run: object) -> list[int]:
    return [r.pid for r in run.outcome.results if r is not None]  # type: ignore[attr-defined]


def test_replay_cpu_runs_every_ledger_entry_on_every_rank() -> None:
    config = _config()
    run = run_preflight(config, backend="auto", device="cpu")
    report = build_report(run)
    assert report.exit_code == 0, report.root_cause
    assert report.backend == "replay" and "CPU device mode" in report.backend_reason
    assert [r.status for r in run.outcome.results if r] == ["ok", "ok"]
    covered = {name for c in report.comparisons for name in c.entries}
    replayable = {a.name for a in planned_allocations(run.ledger)}
    assert replayable and covered == replayable
    # Each capture pass is replayed as vLLM makes it: every entry's instance i inside pass i, on a stream
    # of its own (on CPU only the order shows), the handle exchange first.
    rank0 = next(r for r in run.outcome.results if r is not None and r.rank == 0)
    capture = [s.name for s in rank0.steps if s.name.endswith(tuple(f".capture#{i}" for i in (1, 2, 3)))]
    assert capture == [
        f"{entry}.capture#{i}"
        for i in (1, 2, 3)
        for entry in ("capture_stream.exchange", "oneshot.slab", "oneshot.rank_data", "dcp_a2a.slab")
    ]
    residue = [s for s in rank0.steps if s.name.endswith("profiling-residue")]
    assert residue and all("rollback" in s.note for s in residue)
    # IPC stand-ins were real files exchanged between ranks and removed at teardown; a successful run then
    # removes its whole working directory (nothing left in /tmp).
    assert not list(Path(run.outcome.workdir).glob("ipc-*"))
    assert not run.outcome.workdir_kept and not Path(run.outcome.workdir).exists()
    assert report.workdir is None
    assert set(report.phases) >= {"spawn", "imports", "process_group", "allocations", "teardown"}
    _assert_all_gone(_pids(run))


@pytest.mark.parametrize(
    ("fault", "limits", "kind", "rank", "phase", "text"),
    [
        ("1:allocations:raise", [], "error", 1, "allocations", "injected fault: rank 1 raised"),
        ("1:process_group:kill", [], "signal", 1, "process_group", "Signal 9 (SIGKILL)"),
        ("0:build:hang", ["build=2", "allocations=2"], "timeout", 0, "build", "hung"),
        ("1:baseline:exit", [], "exit", 1, "baseline", "exited with code 3"),
    ],
)
def test_a_faulty_rank_tears_everything_down(
    fault: str, limits: list[str], kind: str, rank: int, phase: str, text: str
) -> None:
    run = run_preflight(
        _config(), backend="replay", device="cpu", fault=FaultSpec.parse(fault), limits=parse_timeouts(limits)
    )
    root = run.outcome.root_cause
    assert root is not None
    assert (root.kind, root.rank, root.phase) == (kind, rank, phase)
    assert text in root.message
    assert run.outcome.survivors == ()
    _assert_all_gone(_pids(run))
    report = build_report(run)
    assert report.exit_code == ExitCode.PREFLIGHT
    assert report.root_cause == f"rank {rank}, phase {phase}: {root.message}"
    # a failed run keeps its directory, with the rank logs, for the operator to read
    kept = Path(run.outcome.workdir)
    assert run.outcome.workdir_kept and kept.is_dir() and report.workdir == str(kept)
    assert (kept / f"rank{rank}.log").exists()
    shutil.rmtree(kept)


def test_fault_spec_is_validated() -> None:
    assert FaultSpec.parse("1:allocations:kill") == FaultSpec(1, "allocations", "kill")
    for bad in ("1:allocations", "x:build:raise", "0:spawn:raise", "0:build:explode"):
        with pytest.raises(ValueError):
            FaultSpec.parse(bad)


def test_timeouts_parse() -> None:
    limits = parse_timeouts(["30", "build=600"])
    assert limits["allocations"] == 30 and limits["build"] == 600 and limits["spawn"] == 30


def _start_hanging_preflight(env: dict[str, str], tmp: Path) -> tuple[subprocess.Popen[str], list[int]]:
    """A real `glmlaunch preflight` whose rank 1 hangs in allocations; returns it and its worker pids."""
    args = [
        *glmlaunch_exe(), "preflight", "-p", "gate", "--set", SCALE[0], "--set", SCALE[1],
        "--device", "cpu", "--inject-fault", "1:allocations:hang", "--timeout", "120", "--json",
    ]
    tmp.mkdir(exist_ok=True)
    env = {**env, "TMPDIR": str(tmp)}  # the run's working directory is made here, and nothing else is
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    seen = ""
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if "rank 1:" in line and line.rstrip().endswith("allocations"):
            break
    (workdir,) = tmp.glob("glmlaunch-preflight-*")
    time.sleep(0.3)
    pids = [json.loads((workdir / f"rank{r}.json").read_text())["pid"] for r in (0, 1)]
    assert all(_alive(p) for p in pids)
    return proc, pids


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_parent_tears_down_every_worker(
    sig: signal.Signals, clean_env: dict[str, str], tmp_path: Path
) -> None:
    proc, pids = _start_hanging_preflight(clean_env, tmp_path / "tmp")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert "tearing down every worker" in err
    doc = json.loads(out)
    assert doc["verdict"] == "interrupted"
    assert f"Signal {int(sig)} ({sig.name}) to the parent" in doc["root_cause"]
    _assert_all_gone(pids)
    # an interrupted run is not a successful one: its directory is kept, and the error line says where
    (kept,) = (tmp_path / "tmp").glob("glmlaunch-preflight-*")
    assert doc["workdir"] == str(kept) and sum(str(kept) in line for line in err.splitlines()) == 1


def test_workers_die_with_a_parent_killed_outright(clean_env: dict[str, str], tmp_path: Path) -> None:
    proc, pids = _start_hanging_preflight(clean_env, tmp_path / "tmp")
    proc.kill()
    proc.communicate(timeout=30)
    _assert_all_gone(pids)


# --- the working directory: removed after a success, kept and named after a failure ------------------


def _preflight_cli(env: dict[str, str], tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    tmp.mkdir(exist_ok=True)
    args = [*glmlaunch_exe(), "preflight", "-p", "gate", "--set", SCALE[0], "--set", SCALE[1]]
    return subprocess.run(
        [*args, "--device", "cpu", *extra],
        env={**env, "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_successful_preflight_leaves_nothing_behind(clean_env: dict[str, str], tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    done = _preflight_cli(clean_env, tmp, "--json")
    assert done.returncode == 0, done.stderr
    assert list(tmp.iterdir()) == []
    doc = json.loads(done.stdout)
    assert doc["workdir"] is None
    schema = json.loads((REPO / "docs" / "schemas" / "preflight.schema.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    assert next(iter(doc)) == "schema_version"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "undescribed": 1}, schema, cls=jsonschema.Draft202012Validator)
    text = _preflight_cli(clean_env, tmp)
    assert text.returncode == 0, text.stderr
    assert list(tmp.iterdir()) == [] and "glmlaunch-preflight-" not in text.stdout + text.stderr


def test_a_failed_preflight_keeps_its_directory_and_says_where_once(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    tmp = tmp_path / "tmp"
    done = _preflight_cli(clean_env, tmp, "--inject-fault", "1:allocations:raise", "--json")
    assert done.returncode == ExitCode.PREFLIGHT, done.stderr
    (kept,) = tmp.glob("glmlaunch-preflight-*")
    assert (kept / "rank1.log").exists() and (kept / "rank1.json").exists()
    lines = [line for line in done.stderr.splitlines() if str(kept) in line]
    assert len(lines) == 1 and lines[0].startswith("error: preflight failed: rank 1, phase allocations")
    assert f"the workers' results and logs are kept in {kept}" in lines[0]
    doc = json.loads(done.stdout)
    assert doc["workdir"] == str(kept)
    schema = json.loads((REPO / "docs" / "schemas" / "preflight.schema.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)


def test_a_missing_torch_is_said_before_any_worker_starts(clean_env: dict[str, str]) -> None:
    # `pip install glmlaunch` without the gpu extra: one error naming torch and the extra, no workers
    code = (
        "import sys; sys.modules['torch'] = None; "
        "sys.argv = ['glmlaunch', 'preflight', '-p', 'gate', '--device', 'cpu']; "
        "from glmlaunch.cli import main; main()"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], env=clean_env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("error: ") == 1 and "glmlaunch[gpu]" in res.stderr
    assert "rank" not in res.stderr and "Traceback" not in res.stderr
