"""``glmlaunch serve --supervise`` end to end: real glmlaunch processes supervising a fake ``vllm``.

The fake (tests/supervise/fake_vllm.py) replays a real boot log of the rig line by line, with an
EngineCore child and two workers (one in a session of its own), and does what vLLM does when it drains,
dies by SIGKILL leaving its children, exits 0 after an engine error, or refuses the KV cache. The
launched profile is imported from the same log (``profiles import``), so the launch and the log agree,
as they do on a real rig; the check stage reads the recorded 4x RTX PRO 6000 inventory and the preflight
is skipped. Nothing here is mocked: signals, process groups, sessions, the subreaper, pipes and ptys are
the kernel's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import tty
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import FIXTURES, REPO, glmlaunch_exe, run_cli, run_cli_process

from glmlaunch.calibrate.fingerprint import make_fingerprint
from glmlaunch.config.resolve import resolve_config
from glmlaunch.hardware.inventory import load_inventory
from glmlaunch.plan.profile_import import build_profile

FAKE = Path(__file__).resolve().parent / "fake_vllm.py"
LOGS = FIXTURES / "boot-logs"
OK_LOG = LOGS / "vllm-current210-cap1024-mtp0-v1-server.log"
REFUSED_LOG = LOGS / "vllm-current210-unset-mtp3-v1-server.log"
INVENTORY = FIXTURES / "inventories" / "rtxpro6000x4.json"
BOOTS_SCHEMA = json.loads((REPO / "docs" / "schemas" / "boots.schema.json").read_text())

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the supervisor's tests need Linux"
)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Profiles that reproduce the two logs' boots, and rig defaults 512 MiB too optimistic about P."""
    where = tmp_path_factory.mktemp("profiles")
    out = {}
    for name, log in (("ok", OK_LOG), ("refused", REFUSED_LOG)):
        path = where / f"{name}.yaml"
        path.write_text(build_profile(log, environ={}).text, encoding="utf-8")
        out[name] = path
    rig = json.loads((REPO / "glmlaunch" / "calibrate" / "rig_defaults.json").read_text())
    rig["terms"]["p"]["coefficients"]["const"] -= 512 * 2**20
    rig["description"] = "test rig defaults, P 512 MiB too low"
    out["optimistic"] = where / "optimistic-rig-defaults.json"
    out["optimistic"].write_text(json.dumps(rig))
    return out


@pytest.fixture
def env(clean_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    record = tmp_path / "fake-record"
    record.mkdir()
    return dict(
        clean_env,
        GLMLAUNCH_VLLM_BIN=str(FAKE),
        GLMLAUNCH_INVENTORY=str(INVENTORY),
        GLMLAUNCH_SKIP_PREFLIGHT="1",
        FAKE_VLLM_RECORD=str(record),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
    )


_HOMES: dict[int, Path] = {}
_STARTED: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _stop_what_was_started() -> Iterator[None]:
    """A test that fails half-way leaves no supervisor running: SIGTERM (it drains vLLM), then SIGKILL."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def start(profile: Path, env: dict[str, str], *args: str, **fake: str) -> subprocess.Popen[bytes]:
    """``glmlaunch serve --supervise`` in the background; its stdout and stderr go to files (a pipe nobody
    reads would fill and hold vLLM's output back, as it would hold vLLM's own under exec)."""
    fake_env = {f"FAKE_VLLM_{k.upper()}": v for k, v in {"log": str(OK_LOG), **fake}.items()}
    home = Path(env["HOME"])
    with (home / "stdout").open("wb") as out, (home / "stderr").open("wb") as err:
        proc = subprocess.Popen(
            [*glmlaunch_exe(), "serve", "-p", str(profile), "--supervise", *args],
            env={**env, **fake_env},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=home,
        )
    _HOMES[proc.pid] = home
    _STARTED.append(proc)
    return proc


def finish(proc: subprocess.Popen[bytes], timeout: float = 60) -> tuple[int, bytes, str]:
    proc.wait(timeout=timeout)
    home = _HOMES.pop(proc.pid)
    return proc.returncode, (home / "stdout").read_bytes(), (home / "stderr").read_text(errors="replace")


def boots_dir(env: dict[str, str]) -> Path:
    return Path(env["GLMLAUNCH_CACHE_DIR"]) / "boots"


def the_boot(env: dict[str, str]) -> Path:
    [boot] = list(boots_dir(env).iterdir())
    return boot


def outcome(env: dict[str, str]) -> dict[str, Any]:
    doc = json.loads((the_boot(env) / "outcome.json").read_text())
    jsonschema.Draft202012Validator(
        {**BOOTS_SCHEMA["$defs"]["outcome"], "$defs": BOOTS_SCHEMA["$defs"]}
    ).validate(doc)
    return doc


def fake_processes(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """What each process of the fake said about itself: role -> facts."""
    out = {}
    for path in Path(env["FAKE_VLLM_RECORD"]).glob("*.json"):
        facts = json.loads(path.read_text())
        out[facts["role"]] = facts
    return out


def alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text.rpartition(")")[2].split()[0] != "Z"


def wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def ready(env: dict[str, str]) -> bool:
    root = boots_dir(env)
    return root.is_dir() and any((b / "outcome.json").exists() for b in root.iterdir())


def stored_record(env: dict[str, str]) -> dict[str, Any]:
    [path] = list((Path(env["GLMLAUNCH_CACHE_DIR"]) / "calibration").glob("*.json"))
    data: dict[str, Any] = json.loads(path.read_text())
    return data


# --- a boot that serves --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(
    profiles: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, str], int, bytes, str, str, str]]:
    """One supervised boot of the OK log that exits 0 after the replay, with the plans before and after."""
    from conftest import _clean_env

    tmp = tmp_path_factory.mktemp("served")
    (tmp / "home").mkdir()
    (tmp / "fake-record").mkdir()
    env = dict(
        _clean_env(tmp),
        GLMLAUNCH_VLLM_BIN=str(FAKE),
        GLMLAUNCH_INVENTORY=str(INVENTORY),
        GLMLAUNCH_SKIP_PREFLIGHT="1",
        FAKE_VLLM_RECORD=str(tmp / "fake-record"),
    )
    before = run_cli("plan", "-p", str(profiles["ok"]), env=env)
    code, out, err = finish(start(profiles["ok"], env, then="exit:0"))
    after = run_cli("plan", "-p", str(profiles["ok"]), env=env)
    plan_before, plan_after = before.stdout + before.stderr, after.stdout + after.stderr
    yield env, code, out, err, plan_before, plan_after


def test_output_is_vllms_byte_for_byte_and_the_boot_is_kept(served: Any) -> None:
    env, code, out, err, _, _ = served
    assert code == 0, err
    assert out == OK_LOG.read_bytes()
    boot = the_boot(env)
    # the copy: the boot up to the ready line, then the rest; together the whole log
    assert (boot / "boot.log").read_bytes() + (boot / "serve.log").read_bytes() == OK_LOG.read_bytes()
    assert (boot / "boot.log").read_bytes().rstrip(b"\n").endswith(b"Application startup complete.")
    assert err.rstrip().splitlines()[-1] == "vllm exited 0"
    for name in (
        "launch.json",
        "config.json",
        "plan.json",
        "preflight.json",
        "inventory.json",
        "outcome.json",
    ):
        assert json.loads((boot / name).read_text())["schema_version"] == 1, name
    # private to the user
    assert stat.S_IMODE(boot.stat().st_mode) == 0o700
    assert stat.S_IMODE(boot.parent.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in boot.iterdir()} == {0o600}


def test_ready_block_compares_plan_and_boot_term_by_term(served: Any) -> None:
    _, _, _, err, _, _ = served
    block = err.split("supervise: plan vs boot", 1)[1].split("the plan used:", 1)[0]
    rows = {line.split()[1]: line for line in block.splitlines()[1:] if line.startswith("supervise:   ")}
    assert set(rows) == {"term", "W", "P", "N", "G_e", "T", "KV"}
    assert "81.93 GiB" in rows["W"] and "328,960" in rows["KV"]
    assert "supervise: the plan used: using the rig defaults" in err
    assert "supervise: vLLM is ready: load " in err


def test_the_record_is_keyed_on_the_launch_and_measures_what_ingest_measures(
    served: Any, profiles: dict[str, Path], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    env = served[0]
    mine = stored_record(env)
    boot_log = the_boot(env) / "boot.log"
    # `calibrate ingest` of the same file, in another store
    other = dict(clean_env, GLMLAUNCH_CACHE_DIR=str(tmp_path / "other"))
    done = run_cli("calibrate", "ingest", str(boot_log), env=other)
    assert done.returncode == 0, done.stderr
    theirs = stored_record(other)
    for key in ("boot", "ranks", "total_bytes_exact"):
        assert mine[key] == theirs[key], key
    # keyed on what glmlaunch launched: the profile's configuration, never re-inferred from the log
    config = resolve_config(str(profiles["ok"]), (), environ={}).config
    vllm = mine["boot"]["engine"]["vllm_version"]
    # with the hardware identity of the inventory the check stage read
    expected = make_fingerprint(config, load_inventory(INVENTORY), vllm_version=vllm)
    assert mine["fingerprint"] == expected.model_dump(mode="json")
    assert mine["config"] == config.model_dump(mode="json")
    assert mine["notes"] == []  # the log agrees with the launch in every setting it shows
    assert mine["supervised"]["outcome"] == "served" and mine["supervised"]["exit_status"] == "exit 0"
    assert mine["supervised"]["boot_id"] == the_boot(env).name


def test_the_next_plan_is_calibrated_by_the_supervised_boot(served: Any) -> None:
    env, _, _, _, before, after = served
    record_id = stored_record(env)["record_id"]
    assert "calibration: using the rig defaults" in before
    assert f"calibration: using the term model fitted on 1 record(s) ({record_id[:12]} boot.log)" in after


def test_calibrate_list_and_boots_show_the_outcome(served: Any) -> None:
    env = served[0]
    boot_id = the_boot(env).name
    listed = run_cli("calibrate", "list", "--json", env=env)
    [rec] = json.loads(listed.stdout)["records"]
    assert rec["supervised"]["boot_id"] == boot_id and rec["supervised"]["outcome"] == "served"
    shown = run_cli("calibrate", "show", rec["record_id"][:12], env=env)
    assert f"supervised boot {boot_id} (glmlaunch boots {boot_id}): served, exit 0" in shown.stderr
    table = run_cli("calibrate", "list", env=env).stdout
    # the log column says the supervised boot after the log's path (the column wraps)
    assert f"{boot_id}:served(exit0)" in "".join(table.replace("│", "").split())
    boots = run_cli("boots", "--json", env=env)
    assert boots.returncode == 0, boots.stderr
    doc = json.loads(boots.stdout)
    jsonschema.Draft202012Validator(BOOTS_SCHEMA).validate(doc)
    assert [(b["boot_id"], b["outcome"], b["exit"]) for b in doc["boots"]] == [(boot_id, "served", "exit 0")]
    one = run_cli("boots", "last", "--json", env=env)
    full = json.loads(one.stdout)
    jsonschema.Draft202012Validator(BOOTS_SCHEMA).validate(full)
    phases = [p["name"] for p in full["boot"]["outcome"]["timeline"]["phases"]]
    assert phases == ["load", "profile", "graph capture", "api start"]
    text = run_cli("boots", boot_id[:10], env=env)
    assert text.returncode == 0, text.stderr
    for phase in ("load", "profile", "graph capture", "api start"):
        assert phase in text.stdout
    assert "outcome: served (exit 0)" in text.stdout


@pytest.mark.parametrize("columns", [80, 100, 140])
def test_boots_tables_cut_nothing_at_any_width(served: Any, columns: int) -> None:
    """Issue 31, item 11: the boots list and a boot's timeline on a terminal: no cell cut with "…", no line
    wider than the terminal, the boot id and the record id whole."""
    from tests.plan.ptyrun import run_on_tty

    env = {k: v for k, v in served[0].items() if k != "COLUMNS"}
    boot_id = the_boot(env).name
    [rec] = json.loads(run_cli("calibrate", "list", "--json", env=env).stdout)["records"]
    for args in (("boots",), ("boots", boot_id)):
        run = run_on_tty(*args, env=env, stream="stdout", columns=columns)
        assert run.returncode == 0, run.other
        text = "\n".join(run.tty_lines)
        assert "…" not in text, text
        assert all(len(line) <= columns for line in run.tty_lines), text
        assert boot_id in text
    listed = "\n".join(run_on_tty("boots", env=env, stream="stdout", columns=columns).tty_lines)
    assert rec["record_id"] in listed


# --- signals, exit status, leftovers -----------------------------------------------------------------


def test_sigkill_is_passed_through_and_the_orphans_are_reaped(
    profiles: dict[str, Path], env: dict[str, str]
) -> None:
    # vllm issue 55510: the API server dies by SIGKILL, EngineCore and the workers keep running
    code, out, err = finish(start(profiles["ok"], env, then="sigkill", at="ready", orphans="1"))
    assert code == -signal.SIGKILL, err
    procs = fake_processes(env)
    assert set(procs) == {"api", "engine", "worker0", "worker1"}
    assert procs["worker1"]["sid"] != procs["api"]["sid"]  # another session: only a subreaper finds it
    for role in ("engine", "worker0", "worker1"):
        assert not alive(procs[role]["pid"]), role
    doc = outcome(env)
    assert doc["outcome"] == "killed" and doc["exit"]["status"] == "signal 9 (SIGKILL)"
    assert doc["glmlaunch_exit"] == {"code": None, "signal": 9, "status": "signal 9 (SIGKILL)"}
    left = {p["pid"]: p["ended"] for p in doc["left_behind"]}
    assert left == {procs[r]["pid"]: "exited after SIGTERM" for r in ("engine", "worker0", "worker1")}
    assert "vLLM left 3 process(es) behind; terminated and reaped" in err
    assert err.rstrip().splitlines()[-1] == "vllm exited: signal 9 (SIGKILL)"
    # the boot reached ready: its record exists and knows how the boot ended
    assert stored_record(env)["supervised"]["exit_status"] == "signal 9 (SIGKILL)"
    assert out.startswith(OK_LOG.read_bytes().split(b"Application startup complete.")[0])


def test_exit_code_passes_through_and_stubborn_orphans_are_killed(
    profiles: dict[str, Path], env: dict[str, str]
) -> None:
    code, out, err = finish(start(profiles["ok"], env, then="exit:3", orphans="stubborn"))
    assert code == 3, err
    assert out == OK_LOG.read_bytes()
    procs = fake_processes(env)
    doc = outcome(env)
    assert doc["outcome"] == "exited" and doc["diagnosis"] == "vLLM exited 3 after ready"
    left = {p["pid"]: p["ended"] for p in doc["left_behind"]}
    assert left == {procs[r]["pid"]: "killed (SIGKILL)" for r in ("engine", "worker0", "worker1")}
    for role in ("engine", "worker0", "worker1"):
        assert not alive(procs[role]["pid"]), role
    assert err.rstrip().splitlines()[-1] == "vllm exited 3"


def test_signals_are_forwarded_and_sigterm_drains(profiles: dict[str, Path], env: dict[str, str]) -> None:
    proc = start(profiles["ok"], env)  # serves until signalled
    wait_for(lambda: ready(env))
    api = fake_processes(env)["api"]["pid"]
    for sig in (signal.SIGUSR1, signal.SIGHUP, signal.SIGWINCH):
        proc.send_signal(sig)
    signals = Path(env["FAKE_VLLM_RECORD"]) / f"signals-{api}"
    wait_for(lambda: signals.exists() and len(signals.read_text().split()) == 3)
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc)
    assert code == 0, err
    # pending standard signals are taken lowest number first, not in the order sent: all, then SIGTERM
    received = signals.read_text().split()
    assert sorted(received[:3]) == ["SIGHUP", "SIGUSR1", "SIGWINCH"] and received[3:] == ["SIGTERM"]
    assert "fake vllm: SIGTERM: draining" in err and "fake vllm: drained, exiting 0" in err
    doc = outcome(env)
    forwarded = [s["signal"] for s in doc["signals_forwarded"]]
    assert sorted(forwarded[:3]) == sorted(received[:3]) and forwarded[3:] == ["SIGTERM"]
    assert doc["outcome"] == "served" and doc["escalations"] == [] and doc["left_behind"] == []
    assert doc["diagnosis"].endswith("from glmlaunch's caller") and "SIGTERM" in doc["diagnosis"]
    assert out == OK_LOG.read_bytes()


def test_a_stop_past_the_deadline_ends_with_term_then_kill_to_the_group(
    profiles: dict[str, Path], env: dict[str, str]
) -> None:
    # a drain that never ends; GLMLAUNCH_STOP_GRACE=8: deadline 1 s, then SIGTERM, SIGKILL 2 s later
    proc = start(profiles["ok"], {**env, "GLMLAUNCH_STOP_GRACE": "8"}, ignore_term="1")
    wait_for(lambda: ready(env))
    stopped = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code, _, err = finish(proc)
    took = time.monotonic() - stopped
    assert code == -signal.SIGKILL, err
    assert 3.0 <= took < 8.0, took
    doc = outcome(env)
    assert [e["signal"] for e in doc["escalations"]] == ["SIGTERM", "SIGKILL"]
    assert "did not exit within 1.0 s of the stop signal: SIGTERM to its process group" in err
    assert "SIGKILL to its process group" in err
    for role, facts in fake_processes(env).items():
        assert not alive(facts["pid"]), role


def test_exit_0_after_an_engine_error_and_strict_exit(profiles: dict[str, Path], env: dict[str, str]) -> None:
    code, _, err = finish(start(profiles["ok"], env, then="engine-error"))
    assert code == 0, err
    doc = outcome(env)
    assert doc["outcome"] == "engine-error"
    assert doc["diagnosis"].startswith("vLLM exited 0 after a fatal engine error: EngineCore: ")
    code, _, err = finish(start(profiles["ok"], env, "--strict-exit", then="engine-error"))
    assert code == 9, err
    assert "vllm exited 0 after a fatal engine error; --strict-exit: glmlaunch exits 9" in err


def test_a_refused_boot_is_diagnosed_recorded_and_refused_by_the_next_plan(
    profiles: dict[str, Path], env: dict[str, str]
) -> None:
    env = dict(env, GLMLAUNCH_RIG_DEFAULTS=str(profiles["optimistic"]))
    plan = run_cli("plan", "-p", str(profiles["refused"]), env=env)
    assert plan.returncode == 0, plan.stderr  # the optimistic defaults let it through
    code, out, err = finish(start(profiles["refused"], env, log=str(REFUSED_LOG), then="exit:1"))
    assert code == 1, err
    assert out == REFUSED_LOG.read_bytes()
    doc = outcome(env)
    assert doc["outcome"] == "refused" and not doc["ready"]
    assert doc["diagnosis"] == (
        "vLLM refused to start: one 131,072-token request needs 0.98 GiB of KV cache, 0.82 GiB available "
        "(vLLM's estimated maximum model length 110,080)"
    )
    assert f"refused: {doc['diagnosis']}" in err
    record = stored_record(env)
    assert record["supervised"]["outcome"] == "refused" and record["boot"]["sha256"] == doc_sha(REFUSED_LOG)
    again = run_cli("plan", "-p", str(profiles["refused"]), env=env)
    assert again.returncode == 4, again.stderr
    assert "verdict: refused" in again.stderr + again.stdout
    assert f"fitted on 1 record(s) ({record['record_id'][:12]} boot.log)" in again.stderr + again.stdout


def doc_sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_on_a_terminal_vllm_writes_into_a_pty(profiles: dict[str, Path], env: dict[str, str]) -> None:
    leader, follower = os.openpty()
    tty.setraw(follower)  # the test's terminal passes bytes as they are
    proc = subprocess.Popen(
        [*glmlaunch_exe(), "serve", "-p", str(profiles["ok"]), "--supervise"],
        env={**env, "FAKE_VLLM_LOG": str(OK_LOG), "FAKE_VLLM_THEN": "exit:0"},
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert fake_processes(env)["api"]["stdout_tty"] is True
    assert b"".join(chunks) == OK_LOG.read_bytes()


def test_no_secret_reaches_the_boot_files(
    profiles: dict[str, Path], env: dict[str, str], tmp_path: Path
) -> None:
    token, api_key = "hf_TESTtokenVALUE0123456789", "sk-TESTapikeyVALUE9876543210"
    log = tmp_path / "with-secrets.log"
    text = OK_LOG.read_bytes().replace(
        b"'model_tag': ", f"'api_key': ['{api_key}'], 'hf_token': '{token}', 'model_tag': ".encode(), 1
    )
    log.write_bytes(text + f"HF_TOKEN={token}\n".encode())
    code, out, err = finish(
        start(
            profiles["ok"],
            {**env, "HF_TOKEN": token},
            "--",
            "--api-key",
            api_key,
            log=str(log),
            then="exit:0",
        )
    )
    assert code == 0, err
    assert out == log.read_bytes()  # vLLM's own output is vLLM's: forwarded as it is
    assert token not in err and api_key not in err
    files = [p for p in Path(env["GLMLAUNCH_CACHE_DIR"]).rglob("*") if p.is_file()]
    assert any(p.name == "boot.log" for p in files)
    for path in files:
        data = path.read_bytes()
        assert token.encode() not in data and api_key.encode() not in data, path
    assert b"'api_key': ['****']" in (the_boot(env) / "boot.log").read_bytes()


def test_dry_run_says_which_mode_runs(profiles: dict[str, Path], env: dict[str, str]) -> None:
    base = ["serve", "-p", str(profiles["ok"]), "--dry-run"]
    lines = run_cli(*base, "--supervise", "--strict-exit", env=env).stdout.splitlines()
    assert any(
        line.startswith("# mode supervise (--supervise)") and "--strict-exit" in line for line in lines
    )
    doc = json.loads(run_cli(*base, "--json", env={**env, "GLMLAUNCH_SUPERVISE": "1"}).stdout)
    assert doc["mode"] == {
        "mode": "supervise",
        "source": "GLMLAUNCH_SUPERVISE=1",
        "strict_exit": False,
        "stop_grace_s": None,
        "watch": None,
    }
    exec_line = run_cli(*base, "--exec", env={**env, "GLMLAUNCH_SUPERVISE": "1"}).stdout
    assert "# mode exec (--exec)" in exec_line
    assert "# mode exec (default)" in run_cli(*base, env=env).stdout
    refused = run_cli(*base, "--strict-exit", env=env)
    assert refused.returncode == 2
    assert "--strict-exit: needs a supervised launch" in refused.stderr
    assert not boots_dir(env).exists()  # a dry run starts nothing and keeps nothing


def test_a_missing_executable_is_exit_6_before_anything_starts(
    profiles: dict[str, Path], env: dict[str, str]
) -> None:
    bad = Path(env["HOME"]) / "vllm"
    bad.write_text("not a program\n")
    bad.chmod(0o755)
    # a real process: a supervised launch makes glmlaunch a subreaper before it spawns vLLM
    done = run_cli_process(
        "serve", "-p", str(profiles["ok"]), "--supervise", env={**env, "GLMLAUNCH_VLLM_BIN": str(bad)}
    )
    assert done.returncode == 6, done.stderr
    assert "exec: cannot execute" in done.stderr


@pytest.fixture(scope="module")
def pid_namespaces() -> bool:
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--map-root-user", "--mount-proc", "true"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def test_as_pid_1_death_by_a_signal_is_128_plus_n(
    profiles: dict[str, Path], env: dict[str, str], pid_namespaces: bool
) -> None:
    if not pid_namespaces:
        pytest.skip("no unprivileged PID namespaces here (unshare --pid --map-root-user)")
    fake = {
        "FAKE_VLLM_LOG": str(OK_LOG),
        "FAKE_VLLM_THEN": "sigkill",
        "FAKE_VLLM_AT": "ready",
        "FAKE_VLLM_ORPHANS": "1",
    }
    done = subprocess.run(
        [
            "unshare",
            "--pid",
            "--fork",
            "--map-root-user",
            "--mount-proc",
            *glmlaunch_exe(),
            "serve",
            "-p",
            str(profiles["ok"]),
            "--supervise",
        ],
        env={**env, **fake},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )
    err = done.stderr.decode()
    assert done.returncode == 128 + signal.SIGKILL, err
    assert "vllm exited: signal 9 (SIGKILL); glmlaunch exits 137 (PID 1)" in err
    assert outcome(env)["glmlaunch_exit"] == {"code": 137, "signal": None, "status": "exit 137"}


# --- the EXL3 lines of r28+ / Infernal Invocation builds ---------------------------------------------------


LAYER_LINE = re.compile(
    r"(\(Worker_TP\d+\S* pid=\d+\)) (INFO \S+ \S+ )\[exl3\.py:\d+\] EXL3 mixed Trellis model"
)


def _with_r7_lines(tmp: Path) -> Path:
    """The OK log with the R7 lines (format strings of blackwell-llm-docker@3dd078a
    patches/releases/infernal-invocation-r18/vllm/integration.patch, see tests/vllmlog/test_r7_lines.py)
    spliced in after each rank's first layer line, in that rank's own prefix."""
    out: list[str] = []
    done: set[str] = set()
    arena = "R7 fused MoE scratch arena (worst-case sized): capacity={} block_m={} topk=8 max_m_blocks={}"
    for line in OK_LOG.read_text(encoding="utf-8").splitlines():
        out.append(line)
        m = LAYER_LINE.match(line)
        if m and m.group(1) not in done:
            done.add(m.group(1))
            head = f"{m.group(1)} {m.group(2)}"
            out += [
                f"{head}[exl3.py:6971] " + arena.format(6, 8, 48),
                f"{head}[exl3.py:6971] " + arena.format(3072, 32, 1024),
                f"{head}[exl3.py:10402] Warmed up 12 EXL3 mixed-Trellis route-pack variant(s); "
                "free-memory delta 8.0 MiB.",
            ]
    assert len(done) == 4
    path = tmp / "r7.log"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def test_the_supervised_serve_records_the_r7_lines(
    profiles: dict[str, Path], env: dict[str, str], tmp_path: Path
) -> None:
    code, _, err = finish(start(profiles["ok"], env, then="exit:0", log=str(_with_r7_lines(tmp_path))))
    assert code == 0, err
    ranks = stored_record(env)["boot"]["ranks"]
    assert len(ranks) == 4
    for rank in ranks:
        assert [(a["capacity"], a["block_m"]) for a in rank["r7_arenas"]] == [(6, 8), (3072, 32)]
        assert rank["route_pack_warmup"] == {"variants": 12, "free_delta_bytes": 8 * 2**20}
        assert "r7_arena" in rank["found"]
