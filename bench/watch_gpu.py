#!/usr/bin/env python3
"""Issue 21's GPU run (bench/WATCH.md): `glmlaunch watch` against real GPU memory, recorded.

On the GPU machine, from the repository root (glmlaunch importable, torch with CUDA):

    python3 bench/watch_gpu.py OUTDIR [SCENARIO,...]
    python3 bench/watch_gpu.py --summarize OUTDIR      # the state changes of a run, as JSON

For each scenario, `glmlaunch watch -p tests/fixtures/watch/h200.yaml` (the shipped turnkey sized to one
H200) samples NVML at 2 Hz, follows the serve-like process's log (`--log`: its ready line, its OOM), and
records what it read (`--record`: the NVML trace the tests replay) and what it said (`--json` lines;
stderr); meanwhile bench/watch_gpu_server.py holds the plan's resident memory and behaves as the scenario
says (the figures come from `glmlaunch plan --json` of the same profile on the same GPU):

* `clean`: the long prefill's transients as the plan sizes them, twice (the second reuses the cache);
* `leak`: 64 MiB a second for 50 s after ready;
* `foreign`: the deployment idle; another process takes 1.75 GiB, then 1.75 GiB more, then exits;
* `prefill`: startup 1.85 GiB over the plan, then prefill chunks of 256 MiB eat the rest of the margin;
* `oom`: chunks of 512 MiB every 0.5 s toward the device limit until CUDA refuses one; here the watch also
  serves its Prometheus endpoint, scraped every 0.5 s (`oom.scrapes.jsonl`, the page at each state change).

Everything lands in OUTDIR (one folder: the device tool brings back a tarball of it).
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

PROFILE = "tests/fixtures/watch/h200.yaml"
GIB = 1 << 30
MIB = 1 << 20
SERVER = [sys.executable, "bench/watch_gpu_server.py"]
GLM = [sys.executable, "-m", "glmlaunch"]
METRICS_PORT = 9466


def plan_figures() -> dict[str, object]:
    out = subprocess.run([*GLM, "plan", "-p", PROFILE, "--json"], capture_output=True, text=True, check=False)
    if out.returncode not in (0, 4):
        raise SystemExit(f"plan failed: {out.stderr}")
    doc: dict[str, object] = json.loads(out.stdout)
    return doc


def scenarios(plan: dict[str, object]) -> dict[str, dict[str, object]]:
    budget = plan["budget"]
    assert isinstance(budget, dict)
    resident = int(budget["total_bytes"]) - int(budget["used_by_others_bytes"]) - int(budget["margin_bytes"])
    demand = plan["runtime_demand"]
    assert isinstance(demand, dict)
    transients = [
        str(t["device_bytes"])
        for t in demand["transients"]
        if demand["phase_of"][t["name"]] == demand["phase"] and t["device_bytes"] > 0
    ]
    r = ["--resident", str(resident)]
    return {
        "clean": {
            "duration": 32,
            "server": [
                *r,
                "--scenario",
                "clean",
                *[arg for t in transients for arg in ("--transient", t)],
                "--hold",
                "8",
            ],
            "note": "serve-like plateau at the plan's resident memory; the plan's long-prefill transients "
            "fire once (the second long prefill reuses the cached memory)",
        },
        "leak": {
            "duration": 66,
            "server": [
                *r,
                "--scenario",
                "leak",
                "--step",
                str(64 * MIB),
                "--every",
                "1",
                "--steps",
                "50",
                "--hold",
                "4",
            ],
            "note": "plateau at the plan's resident memory, then a leak of 64 MiB a second for 50 s",
        },
        "foreign": {
            "duration": 46,
            "server": [*r, "--scenario", "idle", "--hold", "36"],
            "foreign": [
                "--role",
                "foreign",
                "--after",
                "12",
                "--step",
                str(round(1.75 * GIB)),
                "--steps",
                "2",
                "--every",
                "8",
                "--hold",
                "8",
            ],
            "note": "plateau at the plan's resident memory; a foreign process takes 1.75 GiB, then 1.75 GiB "
            "more, holds it 8 s and exits",
        },
        "prefill": {
            "duration": 34,
            "server": [
                *r,
                "--scenario",
                "prefill",
                "--excess",
                str(round(1.85 * GIB)),
                "--step",
                str(256 * MIB),
                "--steps",
                "5",
                "--every",
                "2",
                "--hold",
                "8",
            ],
            "note": "startup 1.85 GiB over the plan, then a long prefill in chunks of 256 MiB every 2 s "
            "(5 chunks)",
        },
        "oom": {
            "duration": 26,
            "server": [*r, "--scenario", "oom", "--step", str(512 * MIB), "--every", "0.5"],
            "note": "plateau at the plan's resident memory, then chunks of 512 MiB every 0.5 s until CUDA "
            "OOM",
            "metrics": True,
        },
    }


def scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


def states_of(page: str) -> dict[str, str]:
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, str] = {}
    for fam in text_string_to_metric_families(page):
        if fam.name == "glmlaunch_watch_state":
            for s in fam.samples:
                if s.value == 1.0:
                    found[s.labels["rank"]] = s.labels["state"]
    return found


def run(name: str, spec: dict[str, object], out: Path) -> dict[str, object]:
    log = out / f"{name}.server.log"
    log.write_text("")
    argv = [
        *GLM,
        "watch",
        "-p",
        PROFILE,
        "--log",
        str(log),
        "--record",
        str(out / f"{name}.json"),
        "--note",
        str(spec["note"]),
        "--duration",
        str(spec["duration"]),
        "--interval",
        "0.5",
        "--drift-window",
        "20",
        "--json",
    ]
    if spec.get("metrics"):
        argv += ["--metrics-port", str(METRICS_PORT)]
    started = time.time()
    with open(out / f"{name}.states.jsonl", "w") as so, open(out / f"{name}.watch.err", "w") as se:
        watch = subprocess.Popen(argv, stdout=so, stderr=se)
        time.sleep(2.0)
        with open(log, "a") as lo:
            server = subprocess.Popen([*SERVER, *spec["server"]], stdout=lo, stderr=subprocess.STDOUT)  # type: ignore[list-item]
            foreign = None
            if "foreign" in spec:
                foreign = subprocess.Popen([*SERVER, *spec["foreign"]], stdout=lo, stderr=subprocess.STDOUT)  # type: ignore[list-item]
            scrapes = []
            last: dict[str, str] = {}
            while watch.poll() is None:
                if spec.get("metrics"):
                    page = scrape(f"http://127.0.0.1:{METRICS_PORT}/metrics")
                    if page is not None:
                        st = states_of(page)
                        entry: dict[str, object] = {"t": round(time.time() - started, 2), "states": st}
                        if st != last:
                            entry["page"] = page
                            last = st
                        scrapes.append(entry)
                time.sleep(0.5)
            for p in (server, foreign):
                if p is not None and p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(10)
                    except subprocess.TimeoutExpired:
                        p.kill()
    if spec.get("metrics"):
        with open(out / f"{name}.scrapes.jsonl", "w") as f:
            for e in scrapes:
                f.write(json.dumps(e) + "\n")
    return {
        "scenario": name,
        "watch_exit": watch.returncode,
        "server_exit": server.returncode,
        "seconds": round(time.time() - started, 1),
        "command": " ".join(argv),
        "server_command": " ".join(["python3", "bench/watch_gpu_server.py", *spec["server"]]),  # type: ignore[list-item]
    }


def transitions(out: Path) -> dict[str, list[dict[str, object]]]:
    """Each scenario's state changes as the live watch said them (its --json lines): what bench/WATCH.md
    tabulates and tests/watch/ replays the traces against."""
    found: dict[str, list[dict[str, object]]] = {}
    for path in sorted(out.glob("*.states.jsonl")):
        changes: list[dict[str, object]] = []
        prev = None
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            for r in doc["ranks"]:
                key = (r["rank"], r["state"], tuple(r["conditions"]))
                if prev is None or key != prev:
                    changes.append(
                        {
                            "seq": doc["seq"],
                            "t_s": doc["t_s"],
                            "rank": r["rank"],
                            "state": r["state"],
                            "conditions": r["conditions"],
                            "free_bytes": r["free_bytes"],
                            "resident_bytes": r["resident_bytes"],
                            "largest_pending": r["largest_pending"]["name"] if r["largest_pending"] else None,
                            "drift_bytes_per_s": r["drift_bytes_per_s"],
                            "foreign": r["foreign"],
                            "events": [e["kind"] for e in doc["events"]],
                        }
                    )
                    prev = key
        found[path.name.split(".")[0]] = changes
    return found


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--summarize":
        print(json.dumps(transitions(Path(sys.argv[2])), indent=1))
        return 0
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "watch-gpu-out")
    out.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONUNBUFFERED"] = "1"
    plan = plan_figures()
    (out / "plan.json").write_text(json.dumps(plan, indent=1))
    # No CUDA in this process: a context here would be one more process on the GPU in every scenario.
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    torch_version = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    meta = {
        "host": platform.node(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "torch": torch_version.stdout.strip(),
        "gpu": smi.stdout.strip(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": [],
    }
    wanted = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    for name, spec in scenarios(plan).items():
        if wanted and name not in wanted:
            continue
        print(f"--- {name}", flush=True)
        meta["runs"].append(run(name, spec, out))  # type: ignore[union-attr]
        print(json.dumps(meta["runs"][-1]), flush=True)  # type: ignore[index]
        time.sleep(3.0)  # the last process's memory back before the next scenario's first sample
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    (out / "transitions.json").write_text(json.dumps(transitions(out), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
