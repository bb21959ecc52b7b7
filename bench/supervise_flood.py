"""``glmlaunch serve --supervise`` under a flood: peak memory, the drain after vLLM's exit, the newest log.

Usage: .venv/bin/python bench/supervise_flood.py [--json] [--cases NAME,...]

Each case runs the real supervisor with the flooding fake vLLM (tests/supervise/flood_vllm.py) writing as
fast as its pipe takes it, glmlaunch's stdout to /dev/null (the fastest reader there is), and measures:

* the supervising process's peak RSS (``VmHWM`` from /proc, read every 20 ms until it exits);
* the wall time, and the drain: from the fake's last byte (it writes ``time.monotonic()`` then) to
  glmlaunch's exit (the backlog parsed, boot.log read, outcome.json written);
* whether serve.log ends with the flood's last line, and the bytes the bounded backlog dropped.

Cases: ``lines-1g`` (1 GiB of 100-byte lines after the ready line), ``binary-16m-serve`` (16 MiB of random
bytes after it), ``binary-16m-boot`` (the same before any ready line: boot.log, then parsed whole),
``oom-20k-sigterm`` (20,000 distinct OOM lines before ready, then SIGTERM: the time to exit). Run it with
another tree on PYTHONPATH to measure that tree.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FLOOD = REPO / "tests" / "supervise" / "flood_vllm.py"
INVENTORY = REPO / "tests" / "fixtures" / "inventories" / "rtxpro6000x4.json"
OK_LOG = REPO / "tests" / "fixtures" / "boot-logs" / "vllm-current210-cap1024-mtp0-v1-server.log"
MIB = 2**20
CASES: dict[str, dict[str, str]] = {
    "lines-1g": {"kind": "lines", "bytes": str(1024 * MIB), "ready": "1"},
    "binary-16m-serve": {"kind": "binary", "bytes": str(16 * MIB), "ready": "1"},
    "binary-16m-boot": {"kind": "binary", "bytes": str(16 * MIB)},
    "oom-20k-sigterm": {"kind": "oom", "lines": "20000", "then": "wait"},
}


def hwm(pid: int) -> int:
    with contextlib.suppress(OSError):
        m = re.search(r"^VmHWM:\s+([0-9]+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
        if m:
            return int(m.group(1))
    return 0


def run_case(name: str, flood: dict[str, str], profile: Path, root: Path, limit_s: float) -> dict[str, Any]:
    home = root / name
    (home / "home").mkdir(parents=True)
    done = home / "done"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GLMLAUNCH_", "FLOOD_"))},
        "HOME": str(home / "home"),
        "GLMLAUNCH_CACHE_DIR": str(home / "cache"),
        "GLMLAUNCH_VLLM_BIN": str(FLOOD),
        "GLMLAUNCH_INVENTORY": str(INVENTORY),
        "GLMLAUNCH_SKIP_PREFLIGHT": "1",
        "NO_COLOR": "1",
        "FLOOD_DONE": str(done),
        **{f"FLOOD_{k.upper()}": v for k, v in flood.items()},
    }
    started = time.monotonic()
    with (home / "stderr").open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "glmlaunch", "serve", "-p", str(profile), "--supervise"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    peak = 0
    signalled: float | None = None
    timed_out = False
    while proc.poll() is None:
        peak = max(peak, hwm(proc.pid))
        if time.monotonic() - started > limit_s:
            timed_out = True
            proc.kill()
            proc.wait()
            break
        if flood.get("then") == "wait" and signalled is None and done.exists():
            time.sleep(1.0)  # the parser reads what is queued; then the stop
            proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
        time.sleep(0.02)
    ended = time.monotonic()
    [boot] = list((home / "cache" / "boots").iterdir())
    doc = json.loads((boot / "outcome.json").read_text()) if (boot / "outcome.json").exists() else None
    serve = boot / "serve.log"
    tail = b""
    if serve.exists():
        with serve.open("rb") as fh:
            fh.seek(max(0, serve.stat().st_size - 64))
            tail = fh.read()
    last = float(done.read_text()) if done.exists() else None
    return {
        "case": name,
        "exit": proc.returncode,
        "timed_out": timed_out,
        "wall_s": round(ended - started, 2),
        "peak_rss_mib": round(peak / 1024, 1),
        "drain_after_last_byte_s": round(ended - last, 2) if last is not None and signalled is None else None,
        "exit_after_sigterm_s": round(ended - signalled, 2) if signalled is not None else None,
        "outcome_json": doc is not None,
        "serve_log_ends_with_last_line": tail.endswith(b"the last line of the flood\n"),
        "dropped_bytes": (doc or {}).get("log", {}).get("dropped_bytes"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ap.add_argument("--limit", type=float, default=300.0, help="seconds a case may take before it is killed")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    import glmlaunch
    from glmlaunch.plan.profile_import import build_profile

    rows = []
    with tempfile.TemporaryDirectory(prefix="glmlaunch-flood-") as tmp:
        root = Path(tmp)
        profile = root / "ok.yaml"
        profile.write_text(build_profile(OK_LOG, environ={}).text, encoding="utf-8")
        for name in args.cases.split(","):
            row = run_case(name, CASES[name], profile, root, args.limit)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    if args.json:
        doc = {
            "glmlaunch": str(Path(glmlaunch.__file__).parent),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "rows": rows,
        }
        print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
