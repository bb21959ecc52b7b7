"""Hostile OOM logs never crash, hang or leak `explain-oom` (issue 31: the fuzzing grows to its surface).

Each case writes a log built from the real boot logs' lines and hostile OOM / free-memory lines (absurd,
negative, non-finite and enormous figures; the OOM text echoed inside a request's prompt; a traceback cut in
the middle; binary noise), runs `glmlaunch explain-oom` in this process on it, with and without a profile,
`--json` and `--ingest`, and asserts the suite's contract (fuzzkit.assert_contract: a documented exit code,
never 1, no traceback, no secret in any output, under 5 s). With `--json` the contract also parses stdout.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzzkit import (
    BOOT_LOGS,
    HF_SECRET,
    Outcome,
    assert_contract,
    base_environ,
    fuzz_settings,
    run_inprocess,
    seeded,
    text_mutations,
    write,
)
from fuzzkit import cases as fuzzkit_cases
from hypothesis import given
from hypothesis import strategies as st


class Case:
    """A case's private directory: cwd, home and the calibration cache `--ingest` writes to."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="glmfuzz-oom-"))
        self.work = self.root / "work"
        for d in (self.work, self.root / "home"):
            d.mkdir()
        self.env = base_environ(self.root)

    def run(self, *args: str) -> Outcome:
        o = run_inprocess(args, self.env, self.work)
        assert_contract(o)
        return o

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def case() -> Iterator[Any]:
    yield from fuzzkit_cases(Case)


_REAL = {p.name: p.read_text(encoding="utf-8", errors="replace").splitlines(True) for p in BOOT_LOGS}

#: real figures (the 3.42 shape's canonical first-request OOM, a 95 GiB card), drawn as often as absurd ones
_REALISTIC = st.sampled_from(["48.00 MiB", "32.81 MiB", "94.97 GiB", "2.00 GiB", "512.00 MiB"])
_ABSURD = st.sampled_from(
    [
        "0 B",
        "900.00 GiB",
        "-1.00 GiB",
        "nan GiB",
        "inf MiB",
        "1e308 GiB",
        "99999999999999999999999.00 GiB",
        "1.5 XiB",
        "",
        "12,345.67 MiB",
        "0.00 KiB",
    ]
)
_FIGURES = st.one_of(_REALISTIC, _REALISTIC, _ABSURD)
_PREFIXES = st.sampled_from(
    [
        "(EngineCore_DP0 pid=4242) ERROR 12-03 10:00:00 [core.py:708] ",
        "(Worker_TP1 pid=4243) ",
        "ERROR 12-03 10:00:01 [gpu_worker.py:123] ",
        "INFO 12-03 10:00:02 [logger.py:39] Received request cmpl-1: prompt: '",
        "",
        "    ",
        "\x1b[31m",
    ]
)


@st.composite
def oom_line(draw: st.DrawFn) -> str:
    tried, free, total = draw(_FIGURES), draw(_FIGURES), draw(_FIGURES)
    gpu = draw(st.sampled_from(["0", "3", "-1", "99", "x"]))
    body = draw(
        st.sampled_from(
            [
                f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried}. GPU {gpu} has a "
                f"total capacity of {total} of which {free} is free.",
                f"CUDA out of memory. Tried to allocate {tried}",
                f"torch.OutOfMemoryError: Tried to allocate {tried}; {free} is free",
                f"Free memory on device (4.2/{total}) on startup is less than desired GPU memory utilization",
                f"Available KV cache memory: {free}",
                "Traceback (most recent call last):",
                '  File "/usr/lib/python3/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 2000, in '
                "execute_model",
            ]
        )
    )
    return draw(_PREFIXES) + body + draw(st.sampled_from(["\n", "'\n", "", "\r\n", f" {HF_SECRET}\n"]))


@st.composite
def oom_log(draw: st.DrawFn) -> str:
    parts: list[str] = []
    if draw(st.booleans()):
        lines = _REAL[draw(st.sampled_from(sorted(_REAL)))]
        start = draw(st.integers(0, max(0, len(lines) - 1)))
        parts.append("".join(lines[start : start + draw(st.sampled_from([20, 200, 2000]))]))
    parts.extend(draw(st.lists(oom_line(), min_size=1, max_size=6)))
    if draw(st.booleans()):
        parts.append(draw(st.binary(max_size=64)).decode("latin-1"))
    text = "".join(draw(st.permutations(parts)))
    return text if draw(st.integers(0, 3)) else draw(text_mutations(text))


@seeded
@fuzz_settings(120)
@given(
    log=oom_log(),
    command=st.sampled_from(
        [
            ("explain-oom", "{log}"),
            ("explain-oom", "{log}", "--json"),
            ("explain-oom", "-p", "turnkey", "{log}", "--json"),
            ("explain-oom", "-p", "r12-exl3", "{log}"),
            ("explain-oom", "-p", "turnkey", "{log}", "--ingest", "--json"),
            ("explain-oom", "{log}", "--ingest"),
        ]
    ),
)
def test_explain_oom_logs(case: Any, log: str, command: tuple[str, ...]) -> None:
    c = case()
    path = write(c.work / "vllm.log", log.encode("utf-8", errors="surrogateescape"))
    c.run(*[str(path) if a == "{log}" else a for a in command])
