"""How long ``glmlaunch explain-oom`` takes on a log of N distinct CUDA OOM lines, against the parse alone.

Usage: .venv/bin/python bench/explain_oom.py [--lines 5000] [--json]

The log: N OOMs as a worker logs them (tests/fixtures/watch/oom.log's line), each with its own
``Tried to allocate`` and ``free`` figures, after the fixture's ready line. Timed, best of 3: the parse
(:func:`glmlaunch.vllmlog.boot.parse_log_text`) and the whole command (``explain-oom -p h200.yaml LOG``,
text and ``--json``, a new interpreter each, as an operator runs it). The command should cost the parse
plus one explanation, not one per OOM (issue 31 follow-up). Run it with another tree on PYTHONPATH to
measure that tree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WATCH = REPO / "tests" / "fixtures" / "watch"
FIXTURE = (WATCH / "oom.log").read_text().splitlines()
OOM = next(line for line in FIXTURE if "Tried to allocate 512.00 MiB" in line)
READY = next(line for line in FIXTURE if "Application startup complete" in line)


def oom_log(n: int) -> str:
    lines = [READY]
    for i in range(n):
        lines.append(OOM.replace("512.00 MiB", f"{i + 1}.00 MiB").replace("67.12 MiB", f"{i % 97}.00 MiB"))
    return "\n".join(lines) + "\n"


def best_of(runs: int, fn: object) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=5000, help="distinct OOM lines")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = ap.parse_args()
    from glmlaunch.vllmlog.boot import parse_log_text

    text = oom_log(args.lines)
    doc: dict[str, object] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "lines": args.lines,
        "bytes": len(text),
    }
    doc["parse_s"] = best_of(args.runs, lambda: parse_log_text(text))
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "ooms.log"
        log.write_text(text)
        env = {**os.environ, "GLMLAUNCH_CACHE_DIR": str(Path(tmp) / "cache")}
        for name, extra in (("command_text_s", []), ("command_json_s", ["--json"])):
            cmd = [sys.executable, "-m", "glmlaunch", "explain-oom", "-p", str(WATCH / "h200.yaml"), str(log)]

            def run(cmd: list[str] = cmd + extra) -> None:
                subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

            doc[name] = best_of(args.runs, run)
    print(
        f"{args.lines} OOM lines ({len(text) / 2**20:.2f} MiB): parse {doc['parse_s']:.3f} s, "
        f"explain-oom {doc['command_text_s']:.3f} s, --json {doc['command_json_s']:.3f} s",
        file=sys.stderr,
    )
    if args.json:
        print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
