"""The free-memory line in either spelling vLLM prints (issue 31 follow-up): the shared boot logs' builds
suggest ``--kv-cache-memory-bytes=N``, newer builds of local-inference-lab/vllm ``--kv-cache-memory=N``
(main 28be48fa944d, vllm/v1/worker/gpu_worker.py L704-722). The line is built below from that format
string; both spellings parse to the same figures, and the evidence checks read them alike."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import FIXTURES

from glmlaunch.calibrate.evidence import boot_disagreements
from glmlaunch.calibrate.ingest import ingest_logs
from glmlaunch.calibrate.store import Store
from glmlaunch.vllmlog.boot import BootLog, RankObservation, parse_log_text

BOOTS = FIXTURES / "boot-logs"
BASELINE = BOOTS / "vllm-r14-field-baseline-mtp3-c8-v2-server.log"
OLD, NEW = "--kv-cache-memory-bytes=", "--kv-cache-memory="
GIB = 1 << 30
VERSIONS = {"vllm": None, "torch": None, "b12x": None, "sparkinfer": None}


def format_gib(b: int) -> str:
    """vllm/utils/mem_utils.py ``format_gib``."""
    return f"{round(b / GIB, 2)}"


def vllm_free_memory_line(o: RankObservation, weights: int, flag: str) -> str:
    """The message of gpu_worker.py L704-722 (``flag``: ``--kv-cache-memory`` there), from a rank's figures
    (``weights``: the W of the line, which the parse keeps only where the load line states none)."""
    assert o.free_at_start_bytes is not None and o.total_bytes is not None and o.requested_bytes is not None
    assert o.peak_activation_bytes is not None
    assert o.non_torch_bytes is not None and o.cudagraph_bytes is not None and o.kv_in_use_bytes is not None
    assert o.kv_bytes_to_requested is not None and o.kv_bytes_to_gpu is not None
    to_requested, to_gpu = o.kv_bytes_to_requested, o.kv_bytes_to_gpu
    return (
        f"Free memory on device "
        f"({format_gib(o.free_at_start_bytes)}/"
        f"{format_gib(o.total_bytes)} GiB) on startup. "
        f"Desired GPU memory utilization is "
        f"({o.gpu_memory_utilization}, "
        f"{format_gib(o.requested_bytes)} GiB). "
        f"Actual usage is {format_gib(weights)} "
        f"GiB for weight, {format_gib(o.peak_activation_bytes)} GiB "
        f"for peak activation, {format_gib(o.non_torch_bytes)} GiB "
        f"for non-torch memory, and {format_gib(o.cudagraph_bytes)} "
        f"GiB for CUDAGraph memory. Replace gpu_memory_utilization "
        f"config with `{flag}="
        f"{to_requested}` "
        f"({format_gib(to_requested)} GiB) to fit "
        f"into requested memory, or `{flag}="
        f"{to_gpu}` "
        f"({format_gib(to_gpu)} GiB) to fully "
        f"utilize gpu memory. Current kv cache memory in use is "
        f"{format_gib(o.kv_in_use_bytes)} GiB."
    )


def _figures(boot: BootLog) -> list[dict[str, object]]:
    return [r.model_dump() for r in boot.ranks]


@pytest.mark.parametrize("path", sorted(BOOTS.glob("*.log")), ids=lambda p: p.name)
def test_the_real_logs_parse_alike_in_either_spelling(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    old, new = parse_log_text(text), parse_log_text(text.replace(OLD, NEW))
    assert _figures(new) == _figures(old)
    assert new.engine == old.engine
    if OLD in text:  # the logs that print the line: every figure of it read
        assert all(r.kv_bytes_to_gpu is not None for r in new.ranks if r.free_at_start_bytes is not None)
        assert any(r.kv_bytes_to_gpu is not None for r in new.ranks)


def test_a_line_from_vllms_format_string_is_read_in_the_newer_spelling() -> None:
    text = BASELINE.read_text(encoding="utf-8")
    boot = parse_log_text(text)
    rank = next(r for r in boot.ranks if r.kv_bytes_to_gpu is not None)
    real = next(line for line in text.splitlines() if "Free memory on device (" in line)
    head, said = real.split("] ", 1)
    w = re.search(r"Actual usage is ([0-9.]+) GiB", said)
    assert w is not None
    weights = round(float(w.group(1)) * GIB)
    # the format string is vLLM's: with the older flag it is the real line, character for character
    assert vllm_free_memory_line(rank, weights, OLD.rstrip("=")) == said
    newer = f"{head}] {vllm_free_memory_line(rank, weights, NEW.rstrip('='))}"
    assert NEW in newer and OLD not in newer
    again = parse_log_text(text.replace(real, newer))
    assert _figures(again) == _figures(boot)


def test_the_evidence_checks_read_the_newer_spelling(tmp_path: Path) -> None:
    text = BASELINE.read_text(encoding="utf-8").replace(OLD, NEW)
    log = tmp_path / "newer.log"
    log.write_text(text, encoding="utf-8")
    [item] = ingest_logs(
        [log], config=None, profile=None, inventory=None, store=Store(tmp_path), versions=VERSIONS
    )
    assert item.record.evidence_refused is None
    assert all(r.kv_bytes_to_gpu is not None for r in item.record.boot.ranks)  # read, so checked
    # the forgery (free reading and suggestion changed together), in the newer spelling: refused
    forged = text.replace(
        "Free memory on device (93.63/95.01 GiB)", "Free memory on device (94.90/95.01 GiB)"
    )
    forged = re.sub(rf"{NEW}8914281984\b", f"{NEW}{8914281984 + round((94.90 - 93.63) * GIB)}", forged)
    assert forged.count(NEW) == text.count(NEW) and forged != text
    why = [d.text() for d in boot_disagreements(parse_log_text(forged), None)]
    assert any(
        "--kv-cache-memory-bytes to fully use the GPU 10,277,934,100 disagrees with the 8.30 GiB vLLM "
        "printed beside it" in w
        for w in why
    ), why
