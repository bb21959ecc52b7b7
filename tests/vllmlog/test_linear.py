"""The log parser's work grows with the log, not with its square (issue 31, item 3).

The cost is counted, not timed: every Python and C function call the parse makes (``cProfile``'s call
count, which is the same on every run and every machine), for a log of N and of 4N distinct lines of each
kind that the parser keeps one of per distinct line: CUDA OOMs, free-memory readings, vLLM's refusals, a
worker's pids, the R7 arena lines it accumulates. Linear work is four times the calls; the quadratic
dedup this replaced (every new event compared with the dump of every earlier one) was about sixteen.
The speed itself is measured in bench/log_parse.py (bench/RESULTS.md, "Log parsing").
"""

from __future__ import annotations

import cProfile
import pstats
from pathlib import Path

from glmlaunch.vllmlog.boot import parse_log_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
#: PyTorch's OOM as a real worker logged it (tests/fixtures/watch/oom.log), its figures replaced below
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


def hostile_log(n: int) -> str:
    """n distinct lines of each kind the parser keeps one of per distinct line."""
    out: list[str] = []
    for i in range(n):
        out.append(OOM.replace("512.00 MiB", f"{i + 1}.00 MiB").replace("67.12 MiB", f"{i % 97}.00 MiB"))
        out.append(f"2026-12-04T03:00:00+00:00 glmlaunch watch: GPU 0: {i + 1} MiB free (rank 0, GPU-x)")
        out.append(REFUSAL.replace("(131072)", f"({131072 + i})"))
        out.append(f"(Worker_TP1 pid={1000 + i}) INFO 12-02 02:10:06 [gpu_worker.py:1] a line of its own")
        out.append(
            "(Worker_TP0 pid=7) INFO 12-02 02:10:06 [r7.py:1] R7 fused MoE scratch arena (worst-case sized):"
            f" capacity={i + 1} block_m=64 topk=8 max_m_blocks=4"
        )
    return "\n".join(out) + "\n"


def calls(text: str) -> int:
    profile = cProfile.Profile()
    profile.enable()
    parse_log_text(text)
    profile.disable()
    return pstats.Stats(profile).total_calls  # type: ignore[attr-defined,no-any-return]


def test_the_parse_is_linear_in_distinct_events() -> None:
    small, large = hostile_log(150), hostile_log(600)
    log = parse_log_text(large)
    # nothing was dropped to get there: every distinct line is kept once
    assert sum(e.kind == "oom" for e in log.runtime_events) == 600
    assert sum(e.kind == "free" for e in log.runtime_events) == 600
    assert len(log.engine.refusals) == 600
    assert len(log.rank("Worker_TP1").pids) == 600
    assert len(log.rank("Worker_TP0").r7_arenas) == 600
    ratio = calls(large) / calls(small)
    assert 3.5 < ratio < 5.0, f"4x the lines cost {ratio:.1f}x the calls"


def test_an_echoed_event_is_kept_once() -> None:
    """The parent process echoing a worker's OOM unprefixed is the same event (one per distinct message)."""
    body = OOM.split("] ", 1)[1]  # the message without the worker's prefix
    log = parse_log_text(f"{OOM}\n{body}\n{OOM}\n")
    assert [e.process for e in log.runtime_events] == ["Worker_TP0"]
