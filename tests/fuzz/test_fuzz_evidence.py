"""Hostile boot logs at the ingest surface (issue 31), in process: forged figures, prompt-echoed OOMs and
free readings, absurd numbers.

Two properties beside the contract (fuzzkit.assert_contract: a documented exit code, never 1, no traceback,
no secret, under 5 s):

* **a forged figure is refused**: one figure the record derives its terms from, changed on every rank of
  the real r14 boot by more than the printed figures' rounding can explain, makes ``calibrate ingest``
  refuse the log (exit 2, ``error: LOG: the log's figures are no evidence: …``) and store nothing;
* **an echo is no event**: whatever vLLM's request logger echoes (a prompt quoting an OOM, a free reading,
  absurd figures) never becomes a runtime event of the record, and the next plan runs.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzzkit import FIXTURES, assert_contract, base_environ, fuzz_settings, run_inprocess, seeded, write
from fuzzkit import cases as fuzzkit_cases
from hypothesis import given
from hypothesis import strategies as st

BASELINE = FIXTURES / "boot-logs" / "vllm-r14-field-baseline-mtp3-c8-v2-server.log"
TEXT = BASELINE.read_text(encoding="utf-8")
FREE = re.compile(
    r"Free memory on device \((?P<f0>[0-9.]+)/(?P<t>[0-9.]+) GiB\) on startup\. "
    r"Desired GPU memory utilization is \((?P<gmu>[0-9.]+), (?P<r>[0-9.]+) GiB\)\. "
    r"Actual usage is [0-9.]+ GiB for weight, (?P<p>[0-9.]+) GiB for peak activation, "
    r"(?P<n>[0-9.]+) GiB for non-torch memory, and (?P<g>[0-9.]+) GiB for CUDAGraph memory\. "
    r"Replace gpu_memory_utilization config with `--kv-cache-memory-bytes=(?P<kvreq>[0-9]+)` "
    r"\((?P<kvreqp>[0-9.]+) GiB\) to fit into requested memory, or "
    r"`--kv-cache-memory-bytes=(?P<kvgpu>[0-9]+)` \((?P<kvgpup>[0-9.]+) GiB\)"
)
LINE = FREE.search(TEXT)
assert LINE is not None
GIB = 1 << 30
READY = "(APIServer pid=229476) INFO:     Application startup complete.\n"


class Case:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="glmfuzz-evidence-"))
        (self.root / "home").mkdir()
        self.env = base_environ(self.root)

    @property
    def records(self) -> list[Path]:
        return sorted((self.root / "glmlaunch-cache" / "calibration").glob("*.json"))

    def ingest(self, text: str) -> Any:
        log = write(self.root / "boot.log", text)
        out = run_inprocess(["calibrate", "ingest", str(log)], self.env, self.root)
        assert_contract(out)
        return out

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def case() -> Iterator[Any]:
    yield from fuzzkit_cases(Case)


def _forged(name: str, value: str) -> str:
    """The real log with one figure of every rank's free-memory line replaced."""
    assert LINE is not None
    start, end = LINE.span(name)
    line = LINE.group(0)
    new = line[: start - LINE.start()] + value + line[end - LINE.start() :]
    return TEXT.replace(line, new)


#: the GiB figures and how far each must move to be beyond the rounding of everything it is checked with
GIB_FIGURES = {
    "f0": 0.05,
    "t": 0.05,
    "r": 0.05,
    "p": 0.05,
    "n": 0.05,
    "g": 0.05,
    "kvreqp": 0.02,
    "kvgpup": 0.02,
}


@seeded
@fuzz_settings(60)
@given(
    data=st.data(),
    name=st.sampled_from(sorted([*GIB_FIGURES, "gmu", "kvreq", "kvgpu"])),
)
def test_a_forged_figure_is_refused(case: Any, data: st.DataObject, name: str) -> None:
    assert LINE is not None
    real = LINE.group(name)
    if name in GIB_FIGURES:
        step = data.draw(st.floats(GIB_FIGURES[name], 500.0).map(lambda x: round(x, 2)), label="GiB")
        sign = data.draw(st.sampled_from([1, -1]), label="sign")
        value = f"{max(0.0, float(real) + sign * step):.2f}"
    elif name == "gmu":
        value = f"{data.draw(st.floats(0.05, 1.0).filter(lambda g: abs(g - 0.92) >= 0.01)):.2f}"
    else:
        step = data.draw(st.integers(64 << 20, 400 * GIB), label="bytes")
        value = str(max(0, int(real) + data.draw(st.sampled_from([1, -1])) * step))
    if value == real:
        return
    out = case().ingest(_forged(name, value))
    assert out.code == 2, out.describe()
    assert (
        out.stderr.strip().splitlines()[-1].startswith("error: LOG: the log's figures are no evidence: ")
    ), out.describe()


@st.composite
def echoed(draw: st.DrawFn) -> str:
    """A line vLLM's request logger writes for a hostile prompt (it writes the prompt with %r)."""
    size = draw(
        st.sampled_from(
            [
                "900.00 GiB",
                "1e308 GiB",
                "-5.00 MiB",
                "99999999999999999999.99 GiB",
                "48.00 MiB",
                "nan GiB",
                "0.00 B",
            ]
        )
    )
    total = draw(st.sampled_from(["94.97 GiB", "0.00 GiB", "1e400 GiB", "139.80 GiB"]))
    said = draw(
        st.sampled_from(
            [
                f"CUDA out of memory. Tried to allocate {size}. GPU 0 has a total capacity of {total} "
                "of which 10.00 MiB is free.",
                f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {size}. GPU 0 has a total "
                f"capacity of {total} of which 1.00 GiB is free.",
                "GPU 0: 1 MiB free",
                f"GPU 3: {size.split()[0]} MiB free",
                "Application startup complete",
            ]
        )
    )
    around = draw(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
    prompt = repr(around + said + around)
    return (
        "(APIServer pid=229476) INFO 07-31 11:09:00 [logger.py:39] Received request chatcmpl-"
        f"{draw(st.integers(0, 10**6))}: prompt: {prompt}, params: SamplingParams(n=1), "
        "prompt_token_ids: None, lora_request: None.\n"
    )


@seeded
@fuzz_settings(60)
@given(lines=st.lists(echoed(), min_size=1, max_size=6))
def test_an_echoed_prompt_is_never_an_event(case: Any, lines: list[str]) -> None:
    c = case()
    out = c.ingest(TEXT + READY + "".join(lines))
    assert out.code == 0, out.describe()
    [record] = c.records
    assert json.loads(record.read_text(encoding="utf-8"))["boot"]["runtime_events"] == []


@st.composite
def absurd_line(draw: st.DrawFn) -> str:
    """A line in vLLM's own form with absurd figures: the parser reads it or leaves it, never crashes."""
    num = draw(st.sampled_from(["0", "0.00", "-1.00", "1e308", "9" * 40, "nan", "inf", "3.4e38", "0.01"]))
    tag = draw(st.sampled_from(["(Worker_TP0_DCP0 pid=229732) ERROR 07-31 11:10:00 [x.py:1] ", "", "ERROR "]))
    return (
        tag
        + draw(
            st.sampled_from(
                [
                    f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {num} GiB. GPU 0 has a "
                    f"total capacity of {num} GiB of which {num} MiB is free.",
                    f"GPU 0: {num} MiB free",
                    f"Available KV cache memory: {num} GiB",
                    f"GPU KV cache size: {num} tokens",
                ]
            )
        )
        + "\n"
    )


@seeded
@fuzz_settings(60)
@given(lines=st.lists(absurd_line(), min_size=1, max_size=4), ready=st.booleans())
def test_absurd_figures_are_read_or_refused_never_a_crash(case: Any, lines: list[str], ready: bool) -> None:
    c = case()
    out = c.ingest(TEXT + (READY if ready else "") + "".join(lines))
    assert out.code in (0, 2), out.describe()
    if out.code == 2:
        assert out.stderr.strip().splitlines()[-1].startswith("error: LOG: "), out.describe()
        assert c.records == []
    else:
        plan = run_inprocess(["plan", "-p", "r12-exl3", "--json"], c.env, c.root)
        assert_contract(plan)
