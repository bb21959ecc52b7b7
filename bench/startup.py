"""Wall time of the light commands in a fresh interpreter, next to `python -c "import torch"`.

Usage: .venv/bin/python bench/startup.py [--runs N]
Each command runs N times as a new process (so every run pays interpreter start and imports);
the table gives min / median / max in milliseconds after one untimed warm-up run. Target: light
commands under 300 ms. The machine's timing noise is large (a shared 2-vCPU VM), so min is the figure
to compare across changes.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
COMMANDS: dict[str, list[str]] = {
    "glmlaunch config -p turnkey --json": [str(BIN / "glmlaunch"), "config", "-p", "turnkey", "--json"],
    "glmlaunch env -p turnkey --shell bash": [
        str(BIN / "glmlaunch"),
        "env",
        "-p",
        "turnkey",
        "--shell",
        "bash",
    ],
    "glmlaunch args -p turnkey": [str(BIN / "glmlaunch"), "args", "-p", "turnkey"],
    "glmlaunch profiles list": [str(BIN / "glmlaunch"), "profiles", "list"],
    'python -c "import torch"': [sys.executable, "-c", "import torch"],
}


def measure(argv: list[str], runs: int) -> list[float]:
    # A user's install keeps bytecode caches; this sandbox exports PYTHONDONTWRITEBYTECODE=1, which
    # would charge compiling glmlaunch's sources to every run.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GLMLAUNCH_", "VLLM_")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    times = []
    # One untimed run first, so the page cache and .pyc files are warm for every command alike.
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    print(
        f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, "
        f"Python {platform.python_version()}"
    )
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"command: {sys.executable} bench/startup.py --runs {args.runs}")
    print()
    print("| command | min ms | median ms | max ms |")
    print("|---|---|---|---|")
    for label, argv in COMMANDS.items():
        t = measure(argv, args.runs)
        print(f"| `{label}` | {min(t):.0f} | {statistics.median(t):.0f} | {max(t):.0f} |")


if __name__ == "__main__":
    main()
