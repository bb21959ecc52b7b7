"""The EXL3 arena, DCP transient and KV record formulas against the five real TP4/DCP4 boot logs.

The logs are read from tests/fixtures/boot-logs when present, else from the shared folder they were
collected in; with neither, the tests fail (nothing is skipped). Rank 0 lines only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import FIXTURES

from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.units import GIB, MIB
from glmlaunch.ledger import build_ledger, dcp_prefill, exl3, kv_cache

_CANDIDATES = (FIXTURES / "boot-logs", Path("/work/shared/boot-logs"))
LOG_NAMES = (
    "vllm-current210-cap1024-mtp0-v1-server.log",
    "vllm-current210-cap1024-mtp3-v1-server.log",
    "vllm-current210-cap1024-mtp3-v3-server.log",
    "vllm-current210-unset-mtp3-v1-server.log",
    "vllm-r14-field-baseline-mtp3-c8-v2-server.log",
)

RANK0 = "Worker_TP0_DCP0"
TRELLIS = re.compile(
    r"EXL3 mixed Trellis runtime planned: .*decode_capacity=(\d+) prefill_capacity=(\d+) "
    r"scheduler_capacity=(\d+) buffers=([\d.]+) ?MiB"
)
DRAFTER = re.compile(
    r"EXL3 rank-sliced runtime planned: Trellis m=1\.\.(\d+) .*capacity=(\d+) arena=([\d.]+) ?MiB "
    r"scheduler_capacity=(\d+)"
)
DCP_TRANSIENT = re.compile(r"Including ([\d.]+) MiB of B12X sparse DCP transient memory in the profile peak")
CKV_GATHER = re.compile(r"Using transient full-CKV gather for B12X sparse MLA prefill \(capacity=(\d+)")
AVAILABLE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
REFUSED = re.compile(
    r"ValueError: To serve at least one request with the model's max seq len \((\d+)\), \(([\d.]+) GiB KV "
    r"cache is needed, which is larger than the available KV cache memory \(([\d.]+) GiB\)\. Based on the "
    r"available memory, the estimated maximum model length is (\d+)\."
)
#: the logs print 0.1 MiB; 39.75 MiB sits exactly on the edge for both D=6 boots (plus float slack)
TOL_MIB = 0.05 + 1e-6
HEADER = re.compile(r"^\s+([A-Z0-9_]+)\s+= (\S+)\s+\[")


@dataclass
class BootLog:
    name: str
    header: dict[str, str] = field(default_factory=dict)
    trellis: list[tuple[int, int, int, float]] = field(default_factory=list)  # D, C, S, MiB
    drafter: list[tuple[int, int, int, float]] = field(default_factory=list)  # m, C, S, MiB
    dcp_transient: list[float] = field(default_factory=list)
    ckv_capacity: list[int] = field(default_factory=list)
    available_gib: float | None = None
    kv_tokens: int | None = None
    refused: tuple[int, float, float, int] | None = None


def _log_dir() -> Path:
    for d in _CANDIDATES:
        if d.is_dir() and all((d / n).is_file() for n in LOG_NAMES):
            return d
    raise AssertionError(f"the five boot logs are in none of {[str(d) for d in _CANDIDATES]}")


def _parse(path: Path) -> BootLog:
    log = BootLog(path.name)
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if m := HEADER.match(line):
            log.header.setdefault(m.group(1), m.group(2))
        if m := KV_TOKENS.search(line):
            log.kv_tokens = int(m.group(1).replace(",", ""))
        if log.refused is None and (m := REFUSED.search(line)):
            log.refused = (int(m.group(1)), float(m.group(2)), float(m.group(3)), int(m.group(4)))
        if RANK0 not in line:
            continue
        if m := TRELLIS.search(line):
            log.trellis.append((int(m.group(1)), int(m.group(2)), int(m.group(3)), float(m.group(4))))
        if m := DRAFTER.search(line):
            log.drafter.append((int(m.group(1)), int(m.group(2)), int(m.group(4)), float(m.group(3))))
        if m := DCP_TRANSIENT.search(line):
            log.dcp_transient.append(float(m.group(1)))
        if m := CKV_GATHER.search(line):
            log.ckv_capacity.append(int(m.group(1)))
        if m := AVAILABLE.search(line):
            log.available_gib = float(m.group(1))
    return log


@pytest.fixture(scope="module")
def logs() -> list[BootLog]:
    d = _log_dir()
    return [_parse(d / n) for n in LOG_NAMES]


def test_trellis_arena_reproduces_every_logged_buffers_figure(logs: list[BootLog]) -> None:
    seen = set()
    for log in logs:
        assert log.trellis, log.name
        for d, c, s, mib in log.trellis:
            got = exl3.trellis_arena_bytes(c, d) / MIB
            assert abs(got - mib) <= TOL_MIB, (log.name, c, d, s, mib, got)
            seen.add((c, d, s, mib))
    assert seen == {(1024, 6, 3072, 279.7), (3072, 6, 3072, 759.8), (1024, 32, 2048, 294.6)}


def test_drafter_arena_reproduces_every_logged_arena_figure(logs: list[BootLog]) -> None:
    seen = set()
    for log in logs:
        mtp = int(log.header["MTP_TOKENS"])
        if mtp == 0:
            assert not log.drafter, log.name  # no drafter arena without MTP
        for m, c, s, mib in log.drafter:
            got = exl3.drafter_arena_bytes(c) / MIB
            assert abs(got - mib) <= TOL_MIB, (log.name, c, m, s, mib, got)
            seen.add((c, m, s, mib))
    assert seen == {(1024, 6, 3072, 414.1), (3072, 6, 3072, 1054.2), (1024, 32, 2048, 414.1)}


def test_arena_slopes_are_exact() -> None:
    assert exl3.trellis_arena_bytes(3072, 6) - exl3.trellis_arena_bytes(1024, 6) == 480 * MIB
    assert exl3.drafter_arena_bytes(3072) - exl3.drafter_arena_bytes(1024) == 640 * MIB
    assert exl3.TRELLIS_PER_TOKEN == 6144 * 40


def test_dcp_transient_matches_every_log(logs: list[BootLog]) -> None:
    # vLLM's own profile-time AG/RS allocation (mla_attention.py _get_sparse_memory_profile_bytes), from
    # each log's batched tokens and its A2A cap of 16 (every log: "max_batch_size=16"): 1,024 rows each
    for log in logs:
        assert log.dcp_transient, log.name
        mnbt = int(log.header["MAX_NUM_BATCHED_TOKENS"])
        cfg = _cfg(f"scheduler.max_num_batched_tokens={mnbt}", "comm.dcp_a2a_max_tokens=16")
        entry = build_ledger(cfg).entry("dcp.ckv_gather_transient")
        assert entry is not None and entry.origin == "exact"
        for mib in log.dcp_transient:
            assert mib == 233.25 == entry.requested_bytes / MIB, log.name
    assert dcp_prefill.CKV_TRANSIENT_LOGGED == 244_580_352


def test_dcp_transient_follows_its_inputs() -> None:
    base = build_ledger(_cfg()).entry("dcp.ckv_gather_transient")
    assert base is not None and base.requested_bytes == 244_580_352
    # the gather capacity is not an input (it was scaled by it before the code was read)
    same = build_ledger(_cfg("dcp_policy.ckv_gather_max_tokens=70000")).entry("dcp.ckv_gather_transient")
    assert same is not None and same.requested_bytes == base.requested_bytes
    # without the prefill workspace every chunk up to the batch takes the AG/RS path: 3,072 rows, and the
    # rows above project-before-merge's threshold are costed projected (D 256 plus the gathered W_UV)
    wide = build_ledger(_cfg("dcp_policy.gather_in_workspace=false")).entry("dcp.ckv_gather_transient")
    projected = dcp_prefill.ag_rs_transient_bytes(
        rows=3072,
        local_heads=16,
        dcp=4,
        q_head_dim=576,
        output_head_dim=256,
        lora=512,
        v_head=256,
        projected=True,
    )
    assert wide is not None and wide.requested_bytes == projected
    # pure A2A (cap 0), no attention in the profile, DCP 1: nothing
    for sets in (("comm.dcp_a2a_max_tokens=0",), ("memory.profile_include_attn=false",), ("parallel.dcp=1",)):
        assert build_ledger(_cfg(*sets)).entry("dcp.ckv_gather_transient") is None, sets


def _bytes_per_token(mtp: int, mode: str | None) -> int:
    overrides = [
        f"speculative.num_speculative_tokens={mtp}",
        "memory.kv_cache_dtype=nvfp4_ds_mla",
        "parallel.dcp=4",
        f"memory.kv_scale_mode={mode if mode else 'null'}",
        "cudagraph.capture_rule=null",
        "cudagraph.capture_sizes=[4]",
        "scheduler.max_num_seqs=1",
    ]
    cfg = resolve_config("r12-exl3", overrides).config
    return kv_cache.geometry(cfg).bytes_per_token


def _block_window(gib: float, per_token: int) -> range:
    """Block counts per rank vLLM could have derived from a KV size that prints as ``gib`` (2 decimals)."""
    lo = math.ceil((gib - 0.005) * GIB)
    hi = math.floor((gib + 0.005) * GIB)
    return range(lo // (64 * per_token), hi // (64 * per_token) + 1)


def test_kv_record_reproduces_every_logged_kv_cache_size(logs: list[BootLog]) -> None:
    checked = 0
    for log in logs:
        if log.available_gib is None or log.kv_tokens is None:
            continue
        mtp = int(log.header["MTP_TOKENS"])
        dcp = int(log.header["DCP"])
        per_token = _bytes_per_token(mtp, "dynamic-token")
        assert per_token == 368 * (78 + (mtp > 0)) + 132 * (21 + (mtp > 0))
        window = _block_window(log.available_gib, per_token)
        assert log.kv_tokens % (64 * dcp) == 0
        blocks = log.kv_tokens // (64 * dcp)
        # exactly one block count in the window gives the logged tokens, and it is in the window
        matching = [b for b in window if b * 64 * dcp == log.kv_tokens]
        assert matching == [blocks], (log.name, list(window), blocks)
        # the static 416 B estimate would not reproduce it
        static = _block_window(log.available_gib, _bytes_per_token(mtp, None))
        assert blocks not in static, log.name
        checked += 1
    assert checked == 3  # mtp0, mtp3-v3, r14 baseline (mtp3-v1 is truncated, unset-mtp3 was refused)


def test_refused_boot_need_and_estimate(logs: list[BootLog]) -> None:
    log = next(x for x in logs if "unset" in x.name)
    assert log.refused is not None
    max_len, need_gib, avail_gib, est_len = log.refused
    cfg = resolve_config(
        "r12-exl3",
        [f"scheduler.max_model_len={max_len}", "memory.kv_scale_mode=dynamic-token"],
    ).config
    per_token = kv_cache.geometry(cfg).bytes_per_token
    assert round(kv_cache.request_bytes(cfg, per_token) / GIB, 2) == need_gib
    window = _block_window(avail_gib, per_token)
    assert any(b * 64 * 4 == est_len for b in window)


# --- the ledger entries, through resolved configurations ----------------------------------------


def _cfg(*overrides: str, profile: str = "r12-exl3"):  # type: ignore[no-untyped-def]
    return resolve_config(profile, list(overrides)).config


def test_ledger_arenas_match_the_logged_cap1024_boot() -> None:
    # the logged boot: one sequence, Trellis window 6
    led = build_ledger(_cfg("exl3.prefill_capacity=1024", "exl3_trellis_max_m=6", "scheduler.max_num_seqs=1"))
    t, d = led.entry("exl3.trellis_arena"), led.entry("exl3.drafter_arena")
    assert t is not None and d is not None
    assert abs(t.requested_bytes / MIB - 279.7) <= TOL_MIB
    assert abs(d.requested_bytes / MIB - 414.1) <= TOL_MIB
    for e in (t, d):
        assert (e.kind, e.lifetime, e.origin) == ("torch", "profiled", "calibrated")
        assert "cannot tell" in t.note or e is d
    assert "598,898 * 6" in t.formula and "exl3_trellis_max_m" in t.formula


def test_prefill_capacity_follows_batched_tokens_when_unset() -> None:
    cfg = _cfg("exl3_trellis_max_m=6", "scheduler.max_num_seqs=1")
    assert cfg.exl3.prefill_capacity is None
    assert cfg.exl3_prefill_capacity_effective == cfg.scheduler.max_num_batched_tokens == 3072
    t = build_ledger(cfg).entry("exl3.trellis_arena")
    assert t is not None and abs(t.requested_bytes / MIB - 759.8) <= TOL_MIB


def test_trellis_decode_capacity_defaults_to_largest_capture_size() -> None:
    cfg = _cfg("exl3.prefill_capacity=1024", "exl3_trellis_max_m=null")
    assert cfg.exl3_trellis_max_m is None and max(cfg.capture_sizes()) == 32
    t = build_ledger(cfg).entry("exl3.trellis_arena")
    assert t is not None and abs(t.requested_bytes / MIB - 294.6) <= TOL_MIB
    assert "largest capture size" in t.formula


def test_no_arenas_without_exl3_quantization() -> None:
    led = build_ledger(_cfg("model.quantization=null"))
    assert led.entry("exl3.trellis_arena") is None and led.entry("exl3.drafter_arena") is None


def test_no_drafter_arena_without_mtp() -> None:
    led = build_ledger(_cfg("speculative.num_speculative_tokens=0", "cudagraph.capture_rule.max=8"))
    assert led.entry("exl3.trellis_arena") is not None
    assert led.entry("exl3.drafter_arena") is None


def test_arenas_shrink_the_kv_cache() -> None:
    small = build_ledger(_cfg("exl3.prefill_capacity=1024")).entry("kv_cache")
    large = build_ledger(_cfg("exl3.prefill_capacity=2048")).entry("kv_cache")
    assert small is not None and large is not None
    # 1024 more tokens: 240 KiB + 320 KiB each (footprints round to whole segments)
    assert abs((small.requested_bytes - large.requested_bytes) - 1024 * 560 * 1024) <= 8 * MIB


CKV_RING = re.compile(r"Preallocated ([\d.]+) MiB for (\d+) persistent CKV execution lane")


def _log_text(name: str) -> str | None:
    for root in _CANDIDATES:
        if (root / name).exists():
            return (root / name).read_text(encoding="utf-8", errors="replace")
    return None


@pytest.mark.parametrize("name", LOG_NAMES)
def test_the_ckv_prefetch_ring_formula_reproduces_every_log(name: str) -> None:
    text = _log_text(name)
    if text is None:
        pytest.skip(f"{name} is not on this machine")
    header = {m.group(1): m.group(2) for m in (HEADER.match(ln) for ln in text.splitlines()) if m}
    (mib, lanes) = next(
        (float(m.group(1)), int(m.group(2)))
        for ln in text.splitlines()
        if RANK0 in ln and (m := CKV_RING.search(ln))
    )
    seqs = int(header["MAX_NUM_SEQS"])
    depth = int(header["DCP_CKV_PREFETCH_DEPTH"])
    # every log: DCP4, gather capacity 140000, the 368 B dynamic-token record, interleave 1
    local = dcp_prefill.ring_local_capacity(int(header["DCP_CKV_GATHER_MAX_TOKENS"]), 4, seqs, 1)
    whole = lanes * dcp_prefill.ring_lane_bytes(depth, 4, local, kv_cache.NVFP4_DYNAMIC_RECORD)
    assert abs(whole / MIB - mib) <= TOL_MIB, (whole / MIB, mib)
    # the ledger's lanes: two with MTP (the drafter's), one without
    assert lanes == (2 if "mtp0" not in name else 1)


def test_the_prefetch_lookahead_is_charged_to_w_and_moves_with_its_knobs() -> None:
    zero = build_ledger(_cfg("dcp_policy.ckv_prefetch_depth=0"))
    ring0 = zero.entry("dcp.prefill_workspace")
    assert ring0 is not None and ring0.requested_bytes == 0 and ring0.origin == "exact"
    one = build_ledger(_cfg("dcp_policy.ckv_prefetch_depth=1"))
    ring1 = one.entry("dcp.prefill_workspace")
    assert ring1 is not None and ring1.lifetime == "budget-term"
    local = dcp_prefill.ring_local_capacity(140_000, 4, 8, 1)
    rec = kv_cache.geometry(_cfg()).record_bytes
    lanes = 2  # r12-exl3 runs MTP
    assert ring1.requested_bytes == lanes * 1 * 4 * local * rec
    # charged to W: the budget's W grows by exactly the lookahead, the KV pool shrinks with it
    assert one.base_terms.w - zero.base_terms.w == ring1.requested_bytes
    # the workspace MiB is the ring's budget: a budget below the depth-1 ring caps the depth to 0
    small = build_ledger(_cfg("dcp_policy.ckv_prefetch_depth=3", "dcp_policy.ckv_prefetch_workspace_mib=60"))
    capped = small.entry("dcp.prefill_workspace")
    assert capped is not None and capped.requested_bytes == 0 and "capped" in capped.formula
    # unset depth: vLLM's default (1) applies, and the entry says so
    unset = build_ledger(_cfg("dcp_policy.ckv_prefetch_depth=null")).entry("dcp.prefill_workspace")
    assert unset is not None and unset.origin == "default" and unset.requested_bytes == ring1.requested_bytes
    # no ring at DCP 1, with the gather off, or where W is the operator's own figure
    assert build_ledger(_cfg("parallel.dcp=1")).entry("dcp.prefill_workspace") is None
    assert build_ledger(_cfg("dcp_policy.ckv_gather=false")).entry("dcp.prefill_workspace") is None
    pinned = build_ledger(_cfg("dcp_policy.ckv_prefetch_depth=1", "model.weights_per_rank=80GiB"))
    assert pinned.entry("dcp.prefill_workspace") is None


def test_indexer_shards_grow_the_kv_record() -> None:
    # DCP4, two shards: each rank keeps half of the tokens' indexer cache, not a quarter
    base = kv_cache.geometry(_cfg("dcp_policy.indexer_shards=0"))
    two = kv_cache.geometry(_cfg("dcp_policy.indexer_shards=2"))
    assert two.bytes_per_token - base.bytes_per_token == base.index_layers * base.index_record_bytes
    assert kv_cache.geometry(_cfg("dcp_policy.indexer_shards=4")).bytes_per_token == base.bytes_per_token
    # the appliance's r25 -> r26 A/B (771,584 -> 717,312 tokens at the same memory) within 0.3 %
    predicted = 771_584 * base.bytes_per_token / two.bytes_per_token
    assert abs(predicted - 717_312) / 717_312 < 0.003


def test_kv_record_by_scale_mode() -> None:
    dyn = kv_cache.geometry(_cfg("memory.kv_scale_mode=dynamic-token"))
    assert (dyn.record_bytes, dyn.origin) == (368, "exact")
    assert "368" in dyn.formula
    for mode in ("static", "null"):
        st = kv_cache.geometry(_cfg(f"memory.kv_scale_mode={mode}"))
        assert (st.record_bytes, st.origin) == (432, "exact")
    a = build_ledger(_cfg("memory.kv_scale_mode=dynamic-token")).entry("kv_cache")
    b = build_ledger(_cfg()).entry("kv_cache")
    assert a is not None and b is not None and "368 B" in a.note and "432 B" in b.note
