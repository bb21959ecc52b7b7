"""``glmlaunch serve`` with a managed LMCache server: real glmlaunch processes, a stand-in server, fake vLLM.

The stand-in (tests/lmcache/fake_lmcache.py) keeps the real server's contract: it listens on the port vLLM's
connector names, answers ``/healthcheck`` on its HTTP port, logs the ready line and has a worker in its own
process group. The fake vLLM (tests/supervise/fake_vllm.py) connects to the LMCache port its
``--kv-transfer-config`` names before it writes its first log line, and exits 1 when nothing listens there:
a launch that started vLLM first could not reach ready. ``glmlaunch`` is called as an executable
(``glmlaunch_exe()``): the supervisor blocks signals and becomes a subreaper, which a test process must not.

Every test but the first moves the deployment to free ports (``server.port`` = 8000 + k moves LMCache's
5555, 8089 and 9090 by k, as upstream's wrapper does), so runs side by side never share a port.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import FIXTURES, REPO, glmlaunch_exe
from lmcache_ports import free_offset, is_free

FAKE_VLLM = REPO / "tests" / "supervise" / "fake_vllm.py"
FAKE_LMC = REPO / "tests" / "lmcache" / "fake_lmcache.py"
LOG = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp0-v1-server.log"
INVENTORY = FIXTURES / "inventories" / "rtxpro6000x4.json"
BOOTS_SCHEMA = json.loads((REPO / "docs" / "schemas" / "boots.schema.json").read_text())
BASE = ("serve", "-p", "turnkey", "--skip-preflight", "--inventory", str(INVENTORY))
DONE_WHEN = (
    *BASE[:3],
    "--supervise",
    *BASE[3:],
    "--vllm-bin",
    str(FAKE_VLLM),
    "--lmcache-bin",
    str(FAKE_LMC),
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the supervisor needs Linux")


@pytest.fixture
def env(clean_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    record = tmp_path / "record"
    record.mkdir()
    return dict(
        clean_env,
        FAKE_VLLM_LOG=str(LOG),
        FAKE_VLLM_RECORD=str(record),
        FAKE_LMCACHE_RECORD=str(record),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
    )


@pytest.fixture
def moved() -> tuple[str, ...]:
    """``--set server.port=8000+k``: the deployment and its LMCache ports on free ports."""
    k = free_offset()
    return ("--set", f"server.port={8000 + k}")


_STARTED: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _stop_what_was_started() -> Iterator[None]:
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def start(env: dict[str, str], *args: str, **fake: str) -> subprocess.Popen[bytes]:
    home = Path(env["HOME"])
    extra = {f"FAKE_{k.upper()}": v for k, v in fake.items()}
    with (home / "stdout").open("wb") as out, (home / "stderr").open("wb") as err:
        proc = subprocess.Popen(
            [*glmlaunch_exe(), *args],
            env={**env, **extra},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=home,
        )
    _STARTED.append(proc)
    return proc


def finish(proc: subprocess.Popen[bytes], env: dict[str, str], timeout: float = 90) -> tuple[int, str]:
    proc.wait(timeout=timeout)
    return proc.returncode, (Path(env["HOME"]) / "stderr").read_text(errors="replace")


def records(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    out = {}
    for path in Path(env["FAKE_VLLM_RECORD"]).glob("*.json"):
        facts = json.loads(path.read_text())
        out[facts.get("role", "lmcache")] = facts
    return out


def events(env: dict[str, str], pid: int) -> list[tuple[float, str]]:
    path = Path(env["FAKE_LMCACHE_RECORD"]) / f"lmcache-events-{pid}"
    if not path.exists():
        return []
    return [(float(t), text) for t, text in (line.split(" ", 1) for line in path.read_text().splitlines())]


def the_boot(env: dict[str, str]) -> Path:
    [boot] = list((Path(env["GLMLAUNCH_CACHE_DIR"]) / "boots").iterdir())
    return boot


def outcome(env: dict[str, str]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((the_boot(env) / "outcome.json").read_text())
    jsonschema.Draft202012Validator(
        {**BOOTS_SCHEMA["$defs"]["outcome"], "$defs": BOOTS_SCHEMA["$defs"]}
    ).validate(doc)
    return doc


def alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text.rpartition(")")[2].split()[0] != "Z"


def wait_for(predicate: Any, timeout: float = 45.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def vllm_ready(env: dict[str, str]) -> bool:
    root = Path(env["GLMLAUNCH_CACHE_DIR"]) / "boots"
    return root.is_dir() and any((b / "outcome.json").exists() for b in root.iterdir())


def every_pid(env: dict[str, str]) -> dict[str, int]:
    recs = records(env)
    pids = {role: facts["pid"] for role, facts in recs.items()}
    if "lmcache" in recs:
        pids["lmcache-worker"] = recs["lmcache"]["worker_pid"]
    return pids


# --- the done-when command: order on the way up and on the way down -----------------------------------


def test_lmcache_starts_before_vllm_and_sigterm_stops_vllm_then_drains_lmcache(env: dict[str, str]) -> None:
    if not all(is_free(p) for p in (5555, 8089, 9090)):
        pytest.skip("the default LMCache ports are taken here (another run?)")
    proc = start(env, *DONE_WHEN)
    wait_for(lambda: vllm_ready(env))
    recs = records(env)
    lmc, api = recs["lmcache"], recs["api"]
    # up: LMCache listened before vLLM connected to it, at the port vLLM's connector names
    assert lmc["listening_at"] < api["lmcache"]["connected_at"]
    argv = api["argv"]
    conf = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    lmc_argv = lmc["argv"]
    assert conf["kv_connector_extra_config"]["lmcache.mp.port"] == int(lmc_argv[lmc_argv.index("--port") + 1])
    assert api["lmcache"]["port"] == 5555
    assert any("connection from" in text for _, text in events(env, lmc["pid"]))
    # its own session and process group, glmlaunch's child; expandable segments off, no banner
    assert lmc["pid"] == lmc["pgid"] == lmc["sid"]
    assert lmc["env"]["PYTORCH_CUDA_ALLOC_CONF"].startswith("expandable_segments:False")
    assert lmc["env"]["LMCACHE_DISABLE_BANNER"] == "1"
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc, env)
    assert code == 0, err
    # down: vLLM drained first, then the server got its SIGTERM
    drained = float((Path(env["FAKE_VLLM_RECORD"]) / f"drained-{api['pid']}").read_text())
    [(termed, _)] = [e for e in events(env, lmc["pid"]) if e[1] == "signal SIGTERM"]
    assert drained < termed
    assert "fake vllm: SIGTERM: draining" in err
    assert "supervise: LMCache server: exited after SIGTERM (exit 0)" in err
    for role, pid in every_pid(env).items():
        assert not alive(pid), role
    doc = outcome(env)
    assert doc["outcome"] == "served" and doc["left_behind"] == []
    assert doc["lmcache"]["ended"] == "exited after SIGTERM (exit 0)"
    assert doc["lmcache"]["ready_by"] in ("healthcheck", "log line")
    assert not doc["lmcache"]["died_while_serving"]
    # its log beside vLLM's, private
    log = the_boot(env) / "lmcache.log"
    assert "LMCache ZMQ cache server is running" in log.read_text()
    assert (log.stat().st_mode & 0o777) == 0o600
    launch = json.loads((the_boot(env) / "launch.json").read_text())
    assert launch["lmcache"]["endpoint"]["source"].startswith("malaiwah/glm52-exl3-vast@eba43a5")
    assert err.rstrip().splitlines()[-1] == "vllm exited 0"


# --- LMCache dies while vLLM serves ---------------------------------------------------------------


def test_sigkill_to_lmcache_stops_vllm_and_ends_the_boot_with_12(
    env: dict[str, str], moved: tuple[str, ...]
) -> None:
    # no --supervise: a managed server makes serve supervise anyway, and says why
    proc = start(env, *BASE, *moved, "--vllm-bin", str(FAKE_VLLM), "--lmcache-bin", str(FAKE_LMC))
    wait_for(lambda: vllm_ready(env))
    pids = every_pid(env)
    os.kill(pids["lmcache"], signal.SIGKILL)
    code, err = finish(proc, env)
    assert code == 12, err
    assert "vLLM runs supervised, not exec'd" in err
    assert (
        f"the LMCache server (pid {pids['lmcache']}) exited while vLLM was running (signal 9 (SIGKILL))"
        in err
    )
    assert err.rstrip().splitlines()[-1] == (
        "warning: the LMCache server died while vLLM was running; glmlaunch exits 12"
    )
    signals = (Path(env["FAKE_VLLM_RECORD"]) / f"signals-{pids['api']}").read_text().split()
    assert signals == ["SIGTERM"]  # vLLM was stopped because of it
    for role, pid in pids.items():
        assert not alive(pid), role
    doc = outcome(env)
    assert doc["outcome"] == "lmcache-failed"
    assert doc["diagnosis"].startswith("the LMCache server exited while vLLM was running (signal 9 (SIGKILL)")
    assert doc["glmlaunch_exit"] == {"code": 12, "signal": None, "status": "exit 12"}
    assert doc["lmcache"]["died_while_serving"] is True
    record = json.loads(next((Path(env["GLMLAUNCH_CACHE_DIR"]) / "calibration").glob("*.json")).read_text())
    assert record["supervised"]["outcome"] == "lmcache-failed"
    assert "lmcache| [fake lmcache] starting" in err  # its log tail


# --- LMCache never ready, or dead before ready -------------------------------------------------------


def test_a_server_never_ready_ends_after_the_timeout_with_its_log_tail(
    env: dict[str, str], moved: tuple[str, ...]
) -> None:
    env = {**env, "GLMLAUNCH_LMCACHE_START_TIMEOUT": "2"}
    began = time.monotonic()
    proc = start(env, *DONE_WHEN, *moved, lmcache_ready="never")
    code, err = finish(proc, env)
    took = time.monotonic() - began
    assert code == 12, err
    assert took < 30, took
    error = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and "the LMCache server was not ready within 2.0 s" in error[0]
    assert "vLLM was not started" in error[0] and "GLMLAUNCH_LMCACHE_START_TIMEOUT" in error[0]
    assert "lmcache| [fake lmcache] starting: server --host 127.0.0.1" in err
    recs = records(env)
    assert "api" not in recs  # vLLM never ran
    for role, pid in every_pid(env).items():
        assert not alive(pid), role
    doc = outcome(env)
    assert doc["outcome"] == "lmcache-failed" and doc["pid"] is None and doc["lmcache"]["ready_s"] is None
    assert doc["lmcache"]["ended"] == "exited after SIGTERM (exit 0)"


def test_a_server_that_crashes_at_start_names_its_exception(
    env: dict[str, str], moved: tuple[str, ...]
) -> None:
    code, err = finish(start(env, *DONE_WHEN, *moved, lmcache_crash="start"), env)
    assert code == 12, err
    assert (
        "error: lmcache: the LMCache server exited before it was ready (exit 1): RuntimeError: fake lmcache: "
        "cannot register the L1 arena (pinned memory); vLLM was not started"
    ) in err
    assert "api" not in records(env)


def test_a_stop_while_lmcache_starts_stops_it_and_never_starts_vllm(
    env: dict[str, str], moved: tuple[str, ...]
) -> None:
    proc = start(env, *DONE_WHEN, *moved, lmcache_ready="never")
    wait_for(lambda: "lmcache" in records(env))
    lmc = records(env)["lmcache"]
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc, env)
    assert code == 130, err
    assert "SIGTERM while the LMCache server was starting: it is stopped; vLLM is not started" in err
    assert [t for _, t in events(env, lmc["pid"])][-2:] == ["signal SIGTERM", "exit 0"]
    assert "api" not in records(env)
    for role, pid in every_pid(env).items():
        assert not alive(pid), role
    assert outcome(env)["outcome"] == "exited"


def test_a_taken_lmcache_port_is_refused_before_anything_starts(
    env: dict[str, str], moved: tuple[str, ...]
) -> None:
    port = int(moved[1].split("=")[1]) - 8000 + 5555
    with socket.create_server(("127.0.0.1", port)):
        code, err = finish(start(env, *DONE_WHEN, *moved), env)
    assert code == 12, err
    assert f"lmcache_config.port: the LMCache port 127.0.0.1:{port} already accepts connections" in err
    assert records(env) == {}


# --- external servers, --exec, a missing executable ---------------------------------------------------


def test_external_without_a_listener_is_one_line_and_nothing_starts(
    env: dict[str, str], moved: tuple[str, ...]
) -> None:
    args = (*BASE, *moved, "--set", "lmcache_config.server=external", "--vllm-bin", str(FAKE_VLLM))
    code, err = finish(start(env, *args), env)
    assert code == 12, err
    [error] = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "error: lmcache_config.server: the external LMCache server on 127.0.0.1:" in error
    assert "does not answer" in error and "vLLM was not started" in error
    assert records(env) == {}


def test_external_with_a_listener_execs_vllm_which_connects_to_it(
    env: dict[str, str], moved: tuple[str, ...]
) -> None:
    port = int(moved[1].split("=")[1]) - 8000 + 5555
    args = (*BASE, *moved, "--set", "lmcache_config.server=external", "--vllm-bin", str(FAKE_VLLM))
    with socket.create_server(("127.0.0.1", port)):
        proc = start(env, *args, vllm_then="exit:0")
        code, err = finish(proc, env)
    assert code == 0, err
    api = records(env)["api"]
    assert api["pid"] == proc.pid  # exec: nothing of glmlaunch's is left to supervise, none needed
    assert api["lmcache"]["port"] == port
    assert "exec: " in err and "supervise:" not in err


def test_exec_with_a_managed_server_is_refused(env: dict[str, str], moved: tuple[str, ...]) -> None:
    code, err = finish(start(env, *DONE_WHEN[:3], "--exec", *DONE_WHEN[4:], *moved), env)
    assert code == 2, err
    assert "error: --exec: cannot exec with a managed LMCache server" in err
    assert "nothing would start, watch or stop the server" in err
    assert records(env) == {} and not (Path(env["GLMLAUNCH_CACHE_DIR"]) / "boots").exists()


def test_a_missing_lmcache_executable_is_exit_6_before_anything_starts(
    env: dict[str, str], moved: tuple[str, ...]
) -> None:
    args = (
        *BASE,
        "--supervise",
        *moved,
        "--vllm-bin",
        str(FAKE_VLLM),
        "--lmcache-bin",
        "/nonexistent/lmcache",
    )
    code, err = finish(start(env, *args), env)
    assert code == 6, err
    assert "error: --lmcache-bin: cannot start the LMCache server: /nonexistent/lmcache does not exist" in err
    assert records(env) == {}


def test_dry_run_shows_the_server_and_why_the_launch_is_supervised(env: dict[str, str]) -> None:
    done = subprocess.run(
        [
            *glmlaunch_exe(),
            *BASE,
            "--dry-run",
            "--json",
            "--vllm-bin",
            str(FAKE_VLLM),
            "--lmcache-bin",
            str(FAKE_LMC),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["mode"]["mode"] == "supervise" and doc["mode"]["source"] == "lmcache_config.server=managed"
    lm = doc["lmcache"]
    assert lm["server"] == "managed" and lm["binary"]["path"] == str(FAKE_LMC)
    assert lm["command"]["argv"][:6] == [str(FAKE_LMC), "server", "--host", "127.0.0.1", "--port", "5555"]
    assert lm["endpoint"]["http_port"] == 8089 and lm["endpoint"]["prometheus_port"] == 9090
    schema = json.loads((REPO / "docs" / "schemas" / "serve-dry-run.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)


def test_a_dry_run_without_lmcache_installed_notes_it_and_keeps_the_launchs_exit_code(
    env: dict[str, str],
) -> None:
    done = subprocess.run(
        [*glmlaunch_exe(), *BASE, "--dry-run", "--json", "--vllm-bin", str(FAKE_VLLM)],
        env=env,  # PATH has no lmcache
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["would_start"] is False and doc["exit_code"] == 6 and doc["dry_run_exit_code"] == 0
    assert [b["stage"] for b in doc["blocking"]] == ["lmcache"]
    assert "cannot start the LMCache server: no executable 'lmcache' on PATH" in doc["blocking"][0]["error"]
    assert "a launch would stop at the lmcache stage with exit 6" in done.stderr
