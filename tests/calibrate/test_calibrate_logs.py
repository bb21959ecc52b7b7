"""The boot-log parser against log files written in the real r14 formats (docs/memory-model.md §6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from glmlaunch.config.units import GIB, MIB
from glmlaunch.vllmlog.boot import parse_log_file, parse_log_text
from glmlaunch.vllmlog.lines import iter_messages

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"

REAL_FREE_LINE = (
    "(Worker_TP0_DCP0 pid=2817) INFO 11-28 14:03:42 [gpu_worker.py:420] "
    "Free memory on device (93.63/95.01 GiB) on startup. "
    "Desired GPU memory utilization is (0.92, 87.41 GiB). "
    "Actual usage is 83.28 GiB for weight, 1.32 GiB for peak activation, "
    "0.45 GiB for non-torch memory, and 0.14 GiB for CUDAGraph memory. "
    "Replace gpu_memory_utilization config with `--kv-cache-memory-bytes=2226076283` (2.07 GiB) "
    "to fit into requested memory, or `--kv-cache-memory-bytes=8907990528` (8.3 GiB) "
    "to fully utilize gpu memory. Current kv cache memory in use is 1.87 GiB.\n"
)


def gib(x: float) -> int:
    return round(x * GIB)


def test_every_line_of_a_complete_boot_per_rank() -> None:
    boot = parse_log_file(LOGS / "tp4_dcp4_boot.log")
    assert [r.rank for r in boot.ranks] == [f"Worker_TP{i}_DCP{i}" for i in range(4)]
    assert [r.tp_rank for r in boot.ranks] == [0, 1, 2, 3]
    assert [r.dcp_rank for r in boot.ranks] == [0, 1, 2, 3]
    assert boot.complete and not boot.refused and not boot.ends_mid_line
    r0 = boot.rank("Worker_TP0_DCP0")
    assert r0.pids == [2817]
    assert r0.weights_bytes == gib(83.28)
    assert r0.load_seconds == pytest.approx(33.448102)
    assert r0.kv_available_bytes == gib(1.87)
    assert r0.graph_estimate_bytes == gib(0.49)
    assert r0.graph_estimate_retained_bytes == gib(0.43)
    assert r0.graph_actual_bytes == gib(0.14)
    assert r0.graph_pool_estimate_bytes == gib(0.49)
    assert (r0.free_at_start_bytes, r0.total_bytes) == (gib(93.63), gib(95.01))
    assert (r0.gpu_memory_utilization, r0.requested_bytes) == (0.92, gib(87.41))
    assert (r0.peak_activation_bytes, r0.non_torch_bytes, r0.cudagraph_bytes) == (
        gib(1.32),
        gib(0.45),
        gib(0.14),
    )
    assert (r0.kv_bytes_to_requested, r0.kv_bytes_to_gpu) == (2226076283, 8907990528)
    assert r0.kv_in_use_bytes == gib(1.87)
    # F0 - R to the byte, from the two suggestions
    assert r0.start_headroom_bytes == 8907990528 - 2226076283
    assert r0.dcp is not None
    assert (r0.dcp.world_size, r0.dcp.max_batch_size, r0.dcp.heads) == (4, 16, 64)
    assert (r0.dcp.query_head_dim, r0.dcp.output_head_dim) == (576, 512)
    assert r0.dcp_transient_bytes == round(233.25 * MIB)
    assert all(not r.missing and not r.unparsed for r in boot.ranks)
    assert boot.engine.kv_cache_tokens == 251_392
    assert boot.engine.max_concurrency == pytest.approx(0.48)
    assert boot.engine.max_concurrency_tokens == 524_288
    assert boot.engine.vllm_version == "0.11.2.dev0+r14"


def test_interleaved_ranks_keep_their_own_values() -> None:
    boot = parse_log_file(LOGS / "tp4_dcp4_boot.log")
    non_torch = {r.rank: r.non_torch_bytes for r in boot.ranks}
    assert non_torch == {
        "Worker_TP0_DCP0": gib(0.45),
        "Worker_TP1_DCP1": gib(0.44),
        "Worker_TP2_DCP2": gib(0.43),
        "Worker_TP3_DCP3": gib(0.45),
    }
    # TP1's graph-pool line was glued after TP3's progress bar and ended in a carriage return
    assert boot.rank("Worker_TP1_DCP1").graph_actual_bytes == gib(0.14)
    assert boot.rank("Worker_TP3_DCP3").graph_actual_bytes == gib(0.15)
    # TP1's first line was glued onto TP0's shard-loading bar, which had no newline
    assert boot.rank("Worker_TP1_DCP1").weights_bytes == gib(83.28)


def test_ansi_colour_codes_and_carriage_returns_are_noise() -> None:
    coloured = "\x1b[1;36m(Worker_TP2_DCP2 pid=7)\x1b[0;0m INFO 11-28 14:02:44 [gpu_model_runner.py:3321] "
    text = (
        "(Worker_TP2_DCP2 pid=7) INFO 11-28 14:02:11 [loader.py:1] Loading: 10%|█ | 1/10"
        "\rLoading: 90%|█████████ | 9/10\r"
        + coloured
        + "Model loading took 83.31 GiB and 30.000001 seconds\r\n"
    )
    boot = parse_log_text(text)
    assert boot.rank("Worker_TP2_DCP2").weights_bytes == gib(83.31)
    assert boot.rank("Worker_TP2_DCP2").load_seconds == pytest.approx(30.000001)


def test_the_reference_free_memory_line_verbatim() -> None:
    boot = parse_log_text(REAL_FREE_LINE)
    r = boot.rank("Worker_TP0_DCP0")
    assert r.found == ["free_memory"]
    assert r.weights_bytes == gib(83.28)  # from the free-memory line when the load line is absent
    assert r.missing == ["weights", "kv_available", "graph_estimate", "graph_pool", "dcp_collectives"]


def test_kv_refusal_is_reported_with_its_numbers() -> None:
    boot = parse_log_file(LOGS / "tp4_dcp4_kv_refusal.log")
    assert boot.refused and boot.complete
    (refusal,) = boot.engine.refusals
    assert refusal.kind == "kv-too-small"
    assert refusal.max_model_len == 524_288
    assert refusal.kv_needed_bytes == gib(3.90)
    assert refusal.kv_available_bytes == gib(0.01)
    assert refusal.estimated_max_model_len == 1792
    # the unprefixed echo of the same exception is not a second refusal
    assert boot.unattributed_refusals == []
    # a refused boot stops before graph capture: those lines are not "missing"
    assert all(r.missing == [] for r in boot.ranks)
    assert all(r.kv_available_bytes == gib(0.01) for r in boot.ranks)


def test_start_gate_refusal() -> None:
    boot = parse_log_file(LOGS / "start_gate_refusal.log")
    (refusal,) = boot.rank("Worker_TP0_DCP0").refusals
    assert refusal.kind == "start-gate"
    assert (refusal.free_bytes, refusal.total_bytes) == (gib(52.33), gib(95.01))
    assert (refusal.gpu_memory_utilization, refusal.requested_bytes) == (0.957, gib(90.92))
    assert boot.rank("Worker_TP1_DCP1").missing == []


def test_truncated_log_reports_what_was_and_was_not_found() -> None:
    boot = parse_log_file(LOGS / "tp4_dcp4_truncated.log")
    assert boot.ends_mid_line and not boot.complete and not boot.refused
    r3 = boot.rank("Worker_TP3_DCP3")
    assert r3.missing == ["free_memory"]
    assert len(r3.unparsed) == 1 and r3.unparsed[0].startswith(
        "free_memory: Free memory on device (93.61/95.01"
    )
    assert r3.peak_activation_bytes is None
    # the lines before the cut are all there
    assert r3.weights_bytes == gib(83.28) and r3.kv_available_bytes == gib(1.85)
    for name in ("Worker_TP0_DCP0", "Worker_TP1_DCP1", "Worker_TP2_DCP2"):
        assert boot.rank(name).missing == ["free_memory"]
        assert boot.rank(name).unparsed == []


def test_a_log_cut_at_every_byte_never_raises() -> None:
    text = (LOGS / "tp4_dcp4_boot.log").read_text(encoding="utf-8")
    full = parse_log_text(text)
    for cut in range(0, len(text), 97):
        boot = parse_log_text(text[:cut])
        for r in boot.ranks:
            whole = full.rank(r.rank)
            # whatever was parsed from a prefix equals what the whole log says (or the line was cut short)
            for key in r.found:
                if key == "weights":
                    assert r.weights_bytes == whole.weights_bytes


def test_second_boot_in_one_file_is_flagged() -> None:
    text = (LOGS / "tp4_dcp4_boot.log").read_text(encoding="utf-8")
    boot = parse_log_text(text + text.replace("83.28 GiB and", "83.30 GiB and"))
    assert set(boot.repeated_ranks) == {f"Worker_TP{i}_DCP{i}" for i in range(4)}
    assert boot.rank("Worker_TP0_DCP0").weights_bytes == gib(83.30)


def test_messages_split_at_prefixes_inside_a_physical_line() -> None:
    msgs = list(
        iter_messages(
            "bar 50%(Worker_TP0 pid=1) INFO 01-01 00:00:00 [a.py:1] one(EngineCore_DP0 pid=2) two\n"
        )
    )
    assert [(m.process, m.text) for m in msgs] == [
        (None, "bar 50%"),
        ("Worker_TP0", "one"),
        ("EngineCore_DP0", "two"),
    ]


def test_binary_garbage_is_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "garbage.log"
    path.write_bytes(b"\xff\xfe\x00" + REAL_FREE_LINE.encode() + b"\x80\x81")
    boot = parse_log_file(path)
    assert boot.rank("Worker_TP0_DCP0").kv_bytes_to_gpu == 8907990528
    assert boot.size_bytes == path.stat().st_size
