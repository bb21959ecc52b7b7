"""What ``glmlaunch serve --supervise`` costs next to ``--exec``: start latency, log latency, memory.

Usage: .venv/bin/python bench/supervise_overhead.py [--runs N] [--rate LINES_PER_S] [--seconds S] [--json]

* **Start latency**: from running ``glmlaunch serve`` to the first instruction of the program it starts
  (a stand-in that records ``time.time_ns()`` at once and exits 0), for ``--exec`` and ``--supervise``,
  ``--runs`` times each, interleaved. Both resolve, check and plan the same launch (gate, the recorded
  4x RTX PRO 6000 inventory, preflight skipped); the difference is what supervising adds before vLLM
  starts: the boot directory and its JSON documents, the NVML baseline (none on a machine without a GPU:
  the probe fails fast), the subreaper, the pipes, fork and exec.
* **Log latency**: an emitter writes vLLM-like lines (~150 bytes, one ``write`` + flush each, as vLLM's
  logging does) at ``--rate`` lines/s for ``--seconds`` s, each carrying ``CLOCK_MONOTONIC`` (one clock for
  every process) at the moment of writing; this script reads them from a pipe and takes, per line, the
  time it arrived minus the time it was written. Once with the emitter's stdout piped straight to this
  script (the floor: what any pipe costs), once through ``glmlaunch serve --supervise``. Percentiles in
  microseconds, and the rate actually reached.
* **Memory and CPU**: the supervising glmlaunch process's peak RSS (VmHWM) and resident memory (VmRSS)
  during that run, and its CPU time (user + system, all its threads) per second while the lines streamed
  (from the first line's arrival to the last's: start-up and the end-of-boot work are not in it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
INVENTORY = REPO / "tests" / "fixtures" / "inventories" / "rtxpro6000x4.json"
GLMLAUNCH = [sys.executable, "-m", "glmlaunch"]

STARTED = textwrap.dedent(
    """\
    #!{python} -S
    import os, sys, time
    t = time.time_ns()
    with open(os.environ["BENCH_STARTED"], "w") as fh:
        fh.write(str(t))
    """
)

EMITTER = textwrap.dedent(
    """\
    #!{python} -S
    import os, sys, time
    rate, seconds = float(os.environ["BENCH_RATE"]), float(os.environ["BENCH_SECONDS"])
    out = sys.stdout.buffer
    pad = b"x" * 60
    n = int(rate * seconds)
    start = time.monotonic_ns()
    step = int(1e9 / rate)
    for i in range(n):
        due = start + i * step
        now = time.monotonic_ns()
        if due > now + 200_000:
            time.sleep((due - now) / 1e9)
        t = time.monotonic_ns()
        line = b"(APIServer pid=%d) INFO 12-01 00:00:00 [bench.py:1] seq=%d t=%d %s\\n"
        out.write(line % (os.getpid(), i, t, pad))
        out.flush()
    """
)


def _write_script(path: Path, template: str) -> Path:
    path.write_text(template.format(python=sys.executable))
    path.chmod(0o755)
    return path


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLMLAUNCH_", "VLLM_"))}
    env.update(
        GLMLAUNCH_CACHE_DIR=str(tmp / "cache"),
        GLMLAUNCH_INVENTORY=str(INVENTORY),
        GLMLAUNCH_SKIP_PREFLIGHT="1",
        GLMLAUNCH_QUIET="1",
        HOME=str(tmp),
        PYTHONPATH=str(REPO),
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def start_latency(tmp: Path, runs: int) -> dict[str, list[float]]:
    stand_in = _write_script(tmp / "started", STARTED)
    stamp = tmp / "started.ns"
    env = dict(_env(tmp), BENCH_STARTED=str(stamp))
    out: dict[str, list[float]] = {"exec": [], "supervise": []}
    for i in range(runs + 1):  # the first round warms the caches and is not counted
        for mode in ("exec", "supervise"):
            t0 = time.time_ns()
            done = subprocess.run(
                [*GLMLAUNCH, "serve", "-p", "gate", f"--{mode}", "--vllm-bin", str(stand_in)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                check=False,
            )
            if done.returncode != 0:
                raise SystemExit(f"{mode}: exit {done.returncode}: {done.stderr.decode()[-2000:]}")
            if i:
                out[mode].append((int(stamp.read_text()) - t0) / 1e6)
    return out


def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        out["cpu_ticks"] = int(fields[11]) + int(fields[12])
    except OSError:
        pass
    return out


def log_latency(tmp: Path, rate: float, seconds: float, supervised: bool) -> dict[str, Any]:
    emitter = _write_script(tmp / "emit", EMITTER)
    env = dict(_env(tmp), BENCH_RATE=str(rate), BENCH_SECONDS=str(seconds))
    if supervised:
        argv = [*GLMLAUNCH, "serve", "-p", "gate", "--supervise", "--vllm-bin", str(emitter)]
    else:
        argv = [str(emitter)]
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    samples: list[dict[str, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.25):
            samples.append(_status(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert proc.stdout is not None
    latencies: list[int] = []
    first = last = 0
    expected = int(rate * seconds)
    during: list[dict[str, int]] = []  # the supervisor at the first line and at the last
    for line in proc.stdout:
        now = time.monotonic_ns()
        t = int(line.split(b" t=", 1)[1].split(b" ", 1)[0])
        latencies.append(now - t)
        if not first:
            first = now
            during.append(_status(proc.pid))
        last = now
        if len(latencies) == expected:
            during.append(_status(proc.pid))
    end = _status(proc.pid)
    stop.set()
    err = proc.stderr.read() if proc.stderr is not None else b""
    proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"exit {proc.returncode}: {err.decode()[-2000:]}")
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] / 1e3

    result: dict[str, Any] = {
        "lines": len(latencies),
        "rate_reached": round(len(latencies) / max(1e-9, (last - first) / 1e9)),
        "p50_us": round(pct(50), 1),
        "p99_us": round(pct(99), 1),
        "p99_9_us": round(pct(99.9), 1),
        "max_us": round(latencies[-1] / 1e3, 1),
        "mean_us": round(statistics.fmean(latencies) / 1e3, 1),
    }
    if supervised:
        hz = os.sysconf("SC_CLK_TCK")
        rss = [s["VmRSS"] for s in samples if "VmRSS" in s]
        hwm = [s["VmHWM"] for s in [*samples, end] if "VmHWM" in s]
        streamed_s = max(1e-9, (last - first) / 1e9)
        ticks = [s["cpu_ticks"] for s in during if "cpu_ticks" in s]
        result.update(
            peak_rss_mib=round(max(hwm) / 1024, 1) if hwm else None,
            rss_mib_max_sampled=round(max(rss) / 1024, 1) if rss else None,
            # CPU while the lines streamed (start-up and the end of the boot excluded)
            cpu_s_per_s=round((ticks[-1] - ticks[0]) / hz / streamed_s, 3) if len(ticks) == 2 else None,
        )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rate", type=float, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="glmlaunch-supervise-bench-") as name:
        tmp = Path(name)
        starts = start_latency(tmp, args.runs)
        direct = log_latency(tmp, args.rate, args.seconds, supervised=False)
        supervised = log_latency(tmp, args.rate, args.seconds, supervised=True)
    doc = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "load_average": os.getloadavg(),
        "start_ms": {
            mode: {"median": round(statistics.median(v), 1), "min": round(min(v), 1), "max": round(max(v), 1)}
            for mode, v in starts.items()
        },
        "log_latency": {"direct_pipe": direct, "supervised": supervised},
        "rate": args.rate,
        "seconds": args.seconds,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    s = doc["start_ms"]
    print(f"start latency (ms, median [min-max] of {args.runs}):")
    for mode in ("exec", "supervise"):
        print(f"  {mode:<10} {s[mode]['median']:8.1f}  [{s[mode]['min']:.1f}-{s[mode]['max']:.1f}]")
    print(f"  supervise - exec: {s['supervise']['median'] - s['exec']['median']:+.1f} ms (medians)")
    print(f"log latency at {args.rate:,.0f} lines/s for {args.seconds:g} s (microseconds):")
    for label, r in (("direct pipe", direct), ("supervised", supervised)):
        print(
            f"  {label:<12} p50 {r['p50_us']:8.1f}  p99 {r['p99_us']:8.1f}  p99.9 {r['p99_9_us']:8.1f}  "
            f"max {r['max_us']:9.1f}  ({r['lines']:,} lines at {r['rate_reached']:,}/s)"
        )
    print(
        f"supervisor: peak RSS {supervised['peak_rss_mib']} MiB, CPU {supervised['cpu_s_per_s']} s per s "
        "of the run"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
