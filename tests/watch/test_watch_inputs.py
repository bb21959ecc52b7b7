"""The watch's own inputs (issue 31, item 7): numbers in range, ``--readings`` by the output-path rule,
the metrics host named, what ``--record`` writes ``--replay`` reads, and a replay ends on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, glmlaunch_exe, run_cli

from glmlaunch.config.limits import MAX_KEYS
from glmlaunch.hardware.memory import MemorySample
from glmlaunch.watch.trace import Recorder, TracePlayer, load_trace, save_trace, trace_json

WATCH = FIXTURES / "watch"
PROFILE = str(WATCH / "h200.yaml")
REPLAY = ("watch", "-p", PROFILE, "--replay", str(WATCH / "clean.json"))


def _refused(env: dict[str, str], *args: str, cwd: Path | None = None) -> str:
    proc = run_cli(*args, env=env, timeout=30, cwd=cwd)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return errors[0]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--speed", "1e-300"),
        ("--speed", "1e300"),
        ("--speed", "inf"),
        ("--speed", "nan"),
        ("--speed", "0"),
        ("--interval", "1e300"),
        ("--interval", "0"),
        ("--drift-window", "inf"),
        ("--settle", "-1"),
        ("--duration", "nan"),
    ],
)
def test_the_numbers_are_in_their_range(clean_env: dict[str, str], option: str, value: str) -> None:
    error = _refused(clean_env, *REPLAY, option, value, "--samples", "3")
    assert option in error and "allowed: " in error


def test_a_trace_time_out_of_range_is_refused(clean_env: dict[str, str], tmp_path: Path) -> None:
    doc = json.loads((WATCH / "clean.json").read_text())
    doc["samples"][5]["t"] = 1e300  # a gap no replay at the recorded pace can wait out
    (tmp_path / "gap.json").write_text(json.dumps(doc))
    error = _refused(
        clean_env, "watch", "-p", PROFILE, "--replay", str(tmp_path / "gap.json"), "--speed", "1"
    )
    assert "samples.5.t" in error


def test_a_replay_waiting_out_a_long_gap_ends_on_sigterm(clean_env: dict[str, str], tmp_path: Path) -> None:
    doc = json.loads((WATCH / "clean.json").read_text())
    for s in doc["samples"][3:]:
        s["t"] += 30 * 86400.0  # a month between two samples: the replay waits it out at the recorded pace
    (tmp_path / "gap.json").write_text(json.dumps(doc))
    proc = subprocess.Popen(
        [
            *glmlaunch_exe(),
            "watch",
            "-p",
            PROFILE,
            "--replay",
            str(tmp_path / "gap.json"),
            "--speed",
            "1",
            "--json",
        ],
        env=clean_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for _ in range(3):
            assert proc.stdout.readline()  # three samples out: it is waiting for the fourth
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err


# --- --readings ------------------------------------------------------------------------------------


def test_readings_refuse_a_symbolic_link(clean_env: dict[str, str], tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "readings").symlink_to(victim)
    error = _refused(clean_env, *REPLAY, "--readings", str(tmp_path / "readings"))
    assert "--readings" in error and "symbolic link" in error
    assert victim.read_text() == "keep\n"


def test_readings_refuse_a_fifo_without_blocking(clean_env: dict[str, str], tmp_path: Path) -> None:
    fifo = tmp_path / "readings"
    os.mkfifo(fifo)
    started = time.monotonic()
    error = _refused(clean_env, *REPLAY, "--readings", str(fifo))
    assert "--readings" in error and "FIFO" in error and time.monotonic() - started < 20


@pytest.mark.parametrize("name", ["/dev/null", "-x", "."])
def test_readings_follow_the_output_path_rule(clean_env: dict[str, str], name: str, tmp_path: Path) -> None:
    assert "--readings" in _refused(clean_env, *REPLAY, "--readings", name, cwd=tmp_path)


def test_readings_swapped_for_a_fifo_while_watching_end_with_a_warning(tmp_path: Path) -> None:
    from glmlaunch.config.resolve import resolve_config
    from glmlaunch.ledger.inputs import UNCALIBRATED
    from glmlaunch.plan.plan import make_plan
    from glmlaunch.watch.ranks import map_ranks
    from glmlaunch.watch.session import Options, Watcher
    from glmlaunch.watch.states import Settings

    readings = tmp_path / "readings"
    player = TracePlayer(load_trace(WATCH / "oom.json"))
    config = resolve_config(PROFILE, ()).config
    ranks = map_ranks(player.devices, "0", 1)
    plan = make_plan(config, device_total=ranks[0].device.usable_bytes, inputs=UNCALIBRATED)
    watcher = Watcher(
        plan,
        player,
        ranks,
        profile="h200",
        options=Options(settings=Settings(drift_window_s=20), readings=readings),
        lines=player,
        paced=False,
    )
    while not readings.exists():
        assert watcher.step() is not None, "no reading written"
    readings.unlink()
    os.mkfifo(readings)
    watcher.run()  # a new low would have blocked on the FIFO: it is refused, and the readings end
    assert watcher.options.readings is None


# --- the metrics host ------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["", " ", "[]"])
def test_an_empty_metrics_host_is_refused(clean_env: dict[str, str], host: str) -> None:
    error = _refused(clean_env, *REPLAY, "--metrics-host", host, "--metrics-port", "0")
    assert "--metrics-host" in error and "0.0.0.0" in error


def test_every_interface_is_said(clean_env: dict[str, str]) -> None:
    proc = run_cli(
        *REPLAY, "--metrics-host", "0.0.0.0", "--metrics-port", "0", "--samples", "2", env=clean_env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "metrics listen on every interface (0.0.0.0" in proc.stderr


def test_serve_refuses_an_empty_metrics_host(clean_env: dict[str, str]) -> None:
    error = _refused(
        clean_env,
        "serve", "-p", "turnkey", "--dry-run", "--supervise", "--vllm-bin", "/bin/true",
        "--metrics-port", "0", "--metrics-host", "",
    )  # fmt: skip
    assert "--metrics-host" in error


# --- record and replay agree -----------------------------------------------------------------------


class _Cycling:
    """The samples of a recorded trace over and over, a second apart: a long recording, made of real reads."""

    def __init__(self, samples: int) -> None:
        self.player = TracePlayer(load_trace(WATCH / "clean.json"))
        self.devices = self.player.devices
        self.left = samples
        self.t = 0.0

    def read(self) -> MemorySample | None:
        if self.left <= 0:
            return None
        self.left -= 1
        sample = self.player.read()
        if sample is None:
            self.player = TracePlayer(self.player.trace)
            sample = self.player.read()
        assert sample is not None
        self.t += 0.5
        return MemorySample(t=self.t, devices=sample.devices)

    def close(self) -> None:
        return None


def _record(source: Any, **limits: Any) -> Recorder:
    rec = Recorder(source, command="glmlaunch watch --record t.json", note="", interval_s=0.5, host="h",
                   origin="test", **limits)  # fmt: skip
    while rec.read() is not None:
        pass
    return rec


def test_what_record_writes_replay_reads(clean_env: dict[str, str], tmp_path: Path) -> None:
    # 34 minutes of one GPU were 20,000 keys: more than a JSON document may hold, refused by --replay
    rec = _record(_Cycling(6000))
    path = save_trace(rec.trace(), tmp_path / "long.json")
    keys = sum(2 + 3 * len(s["gpus"]) for s in json.loads(path.read_text())["samples"])
    assert keys > MAX_KEYS
    assert len(load_trace(path).samples) == 6000
    proc = run_cli("watch", "-p", PROFILE, "--replay", str(path), "--samples", "5", env=clean_env)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_full_recording_stops_and_the_watch_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = _record(_Cycling(40), max_samples=25)
    assert len(rec.samples) == 25 and rec.full is not None
    assert capsys.readouterr().err.count("the recording is full") == 1
    rec = _record(_Cycling(40), max_bytes=len(trace_json(_record(_Cycling(10)).trace())) + 10)
    text = trace_json(rec.trace())  # counted as written, never under: the 11th sample did not fit
    assert len(text) <= rec.max_bytes and len(rec.samples) == 10
    save_trace(rec.trace(), tmp_path / "t.json")
    assert len(load_trace(tmp_path / "t.json").samples) == 10
