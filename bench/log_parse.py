"""How fast glmlaunch reads a vLLM log: lines per second of the boot parser (issue 31, item 3).

Usage: .venv/bin/python bench/log_parse.py [--sizes 1000,10000,100000] [--json]

Three logs per size N, each parsed by :func:`glmlaunch.vllmlog.boot.parse_log_text` (what ``calibrate
ingest``, ``explain-oom`` and the supervisor's end-of-boot read run; best of 3):

* ``boot``: the lines of a real boot log (tests/fixtures/boot-logs, the cap1024 MTP0 boot), repeated to N
  lines: the ordinary case, every line through the grammar;
* ``distinct events``: N lines alternating distinct CUDA OOMs (PyTorch's message as a worker logs it) and
  distinct free-memory readings (as ``glmlaunch watch --readings`` writes them): the case that was
  quadratic (each new event compared with every earlier one);
* ``refusals+pids``: N lines alternating distinct refusals and a worker's lines with distinct pids (the
  other per-line "seen already?" lists).

Then single hostile lines (16 KiB and 64 KiB of one pattern's opening words repeated), whose cost must grow
4x, not 16x, from one to the other. Run it with another tree on PYTHONPATH to measure that tree.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
BOOT = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp0-v1-server.log"
OOM = next(
    line
    for line in (FIXTURES / "watch" / "oom.log").read_text().splitlines()
    if "Tried to allocate 512.00 MiB" in line
)
REFUSAL = next(
    line
    for line in (FIXTURES / "boot-logs" / "vllm-current210-unset-mtp3-v1-server.log").read_text().splitlines()
    if line.startswith("(EngineCore pid=") and "KV cache is needed" in line
)
HOSTILE = (
    "A.",
    "EXL3 mixed Trellis runtime planned: tiers=((",
    "Free memory on device ",
    "(Worker_TP0 pid=1) ",
    "CUDA out of memory. Tried to allocate 1 GiB. GPU ",
)


def boot_log(n: int) -> str:
    base = [line for line in BOOT.read_text().splitlines() if line.strip()]
    return "\n".join(base[i % len(base)] for i in range(n)) + "\n"


def events_log(n: int) -> str:
    out = []
    for i in range(n):
        if i % 2:
            out.append(OOM.replace("512.00 MiB", f"{i + 1}.00 MiB").replace("67.12 MiB", f"{i % 97}.00 MiB"))
        else:
            out.append(f"2026-12-04T03:00:00+00:00 glmlaunch watch: GPU 0: {i + 1} MiB free (rank 0, GPU-x)")
    return "\n".join(out) + "\n"


def refusals_log(n: int) -> str:
    out = []
    for i in range(n):
        if i % 2:
            out.append(REFUSAL.replace("(131072)", f"({131072 + i})"))
        else:
            out.append(f"(Worker_TP1 pid={1000 + i}) INFO 12-02 02:10:06 [gpu_worker.py:1] a line of its own")
    return "\n".join(out) + "\n"


def best_of(text: str, runs: int = 3) -> float:
    from glmlaunch.vllmlog.boot import parse_log_text

    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        parse_log_text(text)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000", help="line counts, comma-separated")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = ap.parse_args()
    import glmlaunch

    sizes = [int(s) for s in args.sizes.split(",")]
    rows: list[dict[str, object]] = []
    for name, make in (("boot", boot_log), ("distinct events", events_log), ("refusals+pids", refusals_log)):
        for n in sizes:
            text = make(n)
            s = best_of(text, runs=3 if n <= 10_000 else 1)
            rows.append({"log": name, "lines": n, "bytes": len(text), "seconds": s, "lines_per_s": n / s})
            print(
                f"{name:16} {n:>8} lines {len(text) / 2**20:7.2f} MiB {s:8.3f} s {n / s:>10,.0f} lines/s",
                file=sys.stderr,
            )
    hostile: list[dict[str, object]] = []
    for tok in HOSTILE:
        times = [best_of((tok * (size // len(tok) + 1))[:size] + "\n") for size in (16_384, 65_536)]
        hostile.append(
            {"line": tok, "seconds_16k": times[0], "seconds_64k": times[1], "ratio": times[1] / times[0]}
        )
        print(
            f"hostile {tok[:30]!r:34} 16 KiB {times[0]:.4f} s, 64 KiB {times[1]:.4f} s"
            f" ({times[1] / times[0]:.1f}x)",
            file=sys.stderr,
        )
    doc = {
        "glmlaunch": str(Path(glmlaunch.__file__).parent),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "rows": rows,
        "hostile_lines": hostile,
    }
    if args.json:
        print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
