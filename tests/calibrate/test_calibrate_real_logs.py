"""The boot-log parser on five real vLLM boot logs of the target rig (tests/fixtures/boot-logs/README.md).

Every figure below was read from the log itself (grep) and is written literally: GiB values as printed
(two decimals, converted with the parser's rounding), the two ``--kv-cache-memory-bytes`` values as
exact ints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from glmlaunch.config.units import GIB, MIB
from glmlaunch.vllmlog.boot import BootLog, parse_log_file

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "boot-logs"
RANKS = [f"Worker_TP{i}_DCP{i}" for i in range(4)]
VERSION = "0.11.2.dev280+gilded.gnosis.v20.vllm749050e.si8110e3e.fi801d57a.cu132.20260730.r14"


def gib(x: float) -> int:
    return round(x * GIB)


def mib(x: float) -> int:
    return round(x * MIB)


@pytest.fixture(scope="module")
def boots() -> dict[str, BootLog]:
    return {p.name: parse_log_file(p) for p in sorted(LOGS.glob("*.log"))}


# Per log: what every rank states (W, P, N, G_e, G, F0/T, GMU, R, both KV byte suggestions, KV in use).
COMPLETE: dict[str, dict[str, Any]] = {
    "vllm-r14-field-baseline-mtp3-c8-v2-server.log": {
        "version": "dev",
        "W": 83.28,
        "P": 1.32,
        "N": 0.45,
        "G": 0.14,
        "G_e": 0.49,
        "G_e_retained": 0.42,
        "pool_est": 0.49,
        "capture_s": 31.0,
        "F0": 93.63,
        "T": 95.01,
        "gmu": 0.92,
        "R": 87.41,
        "kv_req": 2232367739,
        "kv_gpu": 8914281984,
        "kv_use": 1.88,
        "kv_avail": 1.88,
        "tokens": 252_416,
        "conc": 1.93,
        "conc_tokens": 131_072,
        "exl3": (32, 1024, 2048, 294.6),
        "draft": (1, 32, 1024, 414.1, 2048),
        "dma_min": 25165824,
    },
    "vllm-current210-cap1024-mtp0-v1-server.log": {
        "version": VERSION,
        "W": 81.93,
        "P": 0.75,
        "N": 0.23,
        "G": 0.05,
        "G_e": 0.18,
        "G_e_retained": 0.12,
        "pool_est": 0.18,
        "capture_s": 5.0,
        "F0": 93.61,
        "T": 95.01,
        "gmu": 0.9,
        "R": 85.51,
        "kv_req": 2572001690,
        "kv_gpu": 11275438080,
        "kv_use": 2.41,
        "kv_avail": 2.41,
        "tokens": 328_960,
        "conc": 2.51,
        "conc_tokens": 131_072,
        "exl3": (6, 1024, 3072, 279.7),
        "draft": None,
        "dma_min": 6291456,
    },
    "vllm-current210-cap1024-mtp3-v3-server.log": {
        "version": VERSION,
        "W": 83.57,
        "P": 1.41,
        "N": 0.24,
        "G": 0.14,
        "G_e": 0.27,
        "G_e_retained": 0.20,
        "pool_est": 0.27,
        "capture_s": 7.0,
        "F0": 93.61,
        "T": 95.01,
        "gmu": 0.92,
        "R": 87.41,
        "kv_req": 2045293179,
        "kv_gpu": 8708333056,
        "kv_use": 1.91,
        "kv_avail": 1.91,
        "tokens": 257_024,
        "conc": 1.96,
        "conc_tokens": 131_072,
        "exl3": (6, 1024, 3072, 279.7),
        "draft": (1, 6, 1024, 414.1, 3072),
        "dma_min": 25165824,
    },
}


def test_five_logs_four_ranks_each(boots: dict[str, BootLog]) -> None:
    assert len(boots) == 5
    for boot in boots.values():
        # `(Worker pid=N)` lines belong to the rank that pid becomes: no fifth "Worker" rank
        assert [r.rank for r in boot.ranks] == RANKS
        assert all(len(r.pids) == 1 for r in boot.ranks)


@pytest.mark.parametrize("name", sorted(COMPLETE))
def test_complete_boot_figures(boots: dict[str, BootLog], name: str) -> None:
    e = COMPLETE[name]
    boot = boots[name]
    assert boot.complete and not boot.refused and boot.failure is None
    assert boot.engine.vllm_version == e["version"]
    assert boot.engine.kv_cache_tokens == e["tokens"]
    assert boot.engine.max_concurrency == e["conc"]
    assert boot.engine.max_concurrency_tokens == e["conc_tokens"]
    assert boot.engine.missing == []
    for r in boot.ranks:
        assert r.missing == [] and r.unparsed == [], r.rank
        assert r.weights_bytes == gib(e["W"])
        assert r.peak_activation_bytes == gib(e["P"])
        assert r.non_torch_bytes == gib(e["N"])
        assert r.cudagraph_bytes == gib(e["G"])
        assert r.graph_estimate_bytes == gib(e["G_e"])
        assert r.graph_estimate_retained_bytes == gib(e["G_e_retained"])
        assert r.graph_actual_bytes == gib(e["G"])
        assert r.graph_pool_estimate_bytes == gib(e["pool_est"])
        assert r.graph_capture_bytes == gib(e["G"])
        assert r.graph_capture_seconds == e["capture_s"]
        assert (r.free_at_start_bytes, r.total_bytes) == (gib(e["F0"]), gib(e["T"]))
        assert (r.gpu_memory_utilization, r.requested_bytes) == (e["gmu"], gib(e["R"]))
        assert (r.kv_bytes_to_requested, r.kv_bytes_to_gpu) == (e["kv_req"], e["kv_gpu"])
        assert r.start_headroom_bytes == e["kv_gpu"] - e["kv_req"]
        assert r.kv_in_use_bytes == gib(e["kv_use"])
        assert r.dcp is not None and (r.dcp.world_size, r.dcp.max_batch_size, r.dcp.heads) == (4, 16, 64)
    r0, others = boots[name].ranks[0], boots[name].ranks[1:]
    # rank 0 alone logs these: the other ranks lack nothing for it
    assert r0.kv_available_bytes == gib(e["kv_avail"])
    assert r0.dcp_transient_bytes == mib(233.25)
    assert r0.ckv_gather_capacity_tokens == 140_000
    assert r0.crossovers is not None
    assert (r0.crossovers.oneshot_max_bytes, r0.crossovers.fused_max_bytes) == (65536, 86016)
    assert r0.crossovers.dma_min_bytes == e["dma_min"]
    decode, prefill, scheduler, buffers = e["exl3"]
    assert r0.exl3 is not None
    assert r0.exl3.tiers == "((3, 192), (4, 64))"
    assert (r0.exl3.decode_capacity, r0.exl3.prefill_capacity) == (decode, prefill)
    assert r0.exl3.scheduler_capacity == scheduler
    assert r0.exl3.buffers_bytes == mib(buffers)
    if e["draft"] is None:
        assert r0.exl3_draft is None
    else:
        m_lo, m_hi, capacity, arena, sched = e["draft"]
        d = r0.exl3_draft
        assert d is not None
        assert (d.trellis_m_min, d.trellis_m_max, d.capacity) == (m_lo, m_hi, capacity)
        assert (d.arena_bytes, d.scheduler_capacity) == (mib(arena), sched)
        assert (d.block_m, d.prefill_block_m, d.chunk, d.topk) == (8, 64, 128, 8)
    for r in others:
        assert r.kv_available_bytes is None and r.exl3 is None and r.crossovers is None


def test_truncated_boot_keeps_what_it_reached(boots: dict[str, BootLog]) -> None:
    boot = boots["vllm-current210-cap1024-mtp3-v1-server.log"]
    assert not boot.complete and not boot.refused
    assert boot.engine.vllm_version == VERSION
    assert boot.engine.kv_cache_tokens is None and boot.engine.missing == ["kv_cache_tokens"]
    assert boot.failure == "ModuleNotFoundError: No module named 'exllamav3_ext'"
    r0 = boot.rank("Worker_TP0_DCP0")
    assert r0.pids == [132081]
    assert r0.weights_bytes == gib(83.57)
    assert r0.missing == ["kv_available", "graph_estimate", "graph_pool", "free_memory", "dcp_collectives"]
    assert r0.exl3 is not None
    assert (r0.exl3.decode_capacity, r0.exl3.prefill_capacity, r0.exl3.scheduler_capacity) == (6, 1024, 3072)
    assert r0.exl3.buffers_bytes == mib(279.7)
    assert r0.exl3_draft is None
    assert r0.dcp_transient_bytes == mib(233.25)
    assert r0.crossovers is not None and r0.crossovers.dma_min_bytes == 6291456
    assert r0.kv_bytes_to_requested is None and r0.kv_bytes_to_gpu is None
    for name in RANKS[1:]:
        r = boot.rank(name)
        assert r.weights_bytes == gib(83.57)
        assert r.missing == ["graph_estimate", "graph_pool", "free_memory", "dcp_collectives"]


def test_refused_boot_keeps_every_number(boots: dict[str, BootLog]) -> None:
    boot = boots["vllm-current210-unset-mtp3-v1-server.log"]
    assert boot.refused and boot.complete and boot.failure is None
    assert boot.engine.vllm_version == VERSION
    (refusal,) = boot.engine.refusals
    assert refusal.kind == "kv-too-small"
    assert refusal.max_model_len == 131_072
    assert refusal.kv_needed_bytes == gib(0.98)
    assert refusal.kv_available_bytes == gib(0.82)
    assert refusal.estimated_max_model_len == 110_080
    assert boot.unattributed_refusals == []  # the unprefixed echo is the same refusal
    assert boot.engine.kv_cache_tokens is None
    r0 = boot.rank("Worker_TP0_DCP0")
    assert r0.kv_available_bytes == gib(0.82)
    assert r0.graph_estimate_bytes == gib(0.27) and r0.graph_estimate_retained_bytes == gib(0.22)
    assert r0.exl3 is not None
    assert (r0.exl3.decode_capacity, r0.exl3.prefill_capacity, r0.exl3.scheduler_capacity) == (6, 3072, 3072)
    assert r0.exl3.buffers_bytes == mib(759.8)
    assert r0.exl3_draft is not None
    assert (r0.exl3_draft.capacity, r0.exl3_draft.arena_bytes) == (3072, mib(1054.2))
    assert r0.crossovers is not None and r0.crossovers.dma_min_bytes == 25165824
    for r in boot.ranks:
        assert r.missing == [] and r.weights_bytes == gib(83.57)
        assert r.free_at_start_bytes is None and r.kv_bytes_to_gpu is None


def test_a_boot_log_round_trips_through_json(boots: dict[str, BootLog]) -> None:
    for boot in boots.values():
        again = BootLog.model_validate_json(boot.model_dump_json())
        assert again == boot
        assert again.boot_config is not None and again.boot_config.vllm_args is not None
