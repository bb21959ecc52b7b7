"""Each ledger entry's requested bytes against hand-computed values, and the footprint model against §1."""

from __future__ import annotations

import pytest
from conftest import SEED_TURNKEY

from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger import build_ledger, dcp_a2a, dma, oneshot
from glmlaunch.ledger.budget import compute_budget
from glmlaunch.ledger.constants import B12X_15, SPARKINFER_R14
from glmlaunch.ledger.footprint import Packer, torch_single, transient_peak
from glmlaunch.ledger.inputs import LedgerInputs
from glmlaunch.ledger.model import Ledger

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


def ledger_of(profile: str, *sets: str) -> Ledger:
    return build_ledger(resolve_config(profile, sets).config)


def req(ledger: Ledger, name: str) -> int:
    e = ledger.entry(name)
    assert e is not None, f"{name} missing from {ledger.names()}"
    return e.requested_bytes


R12 = "r12-exl3"


def test_oneshot_slab_and_rank_data() -> None:
    led = ledger_of(R12)
    # A256(150,528) + A256(86,016) + 86,016; E = max(64 KiB, 84 KiB, 16)
    assert req(led, "oneshot.slab.eager") == 150_528 + 86_016 + 86_016 == 322_560
    assert req(led, "oneshot.rank_data.eager") == 8 * 1024 * 1024
    pushed = ledger_of(R12, "comm.oneshot_push=true")
    assert req(pushed, "oneshot.slab.eager") == 150_528 + 4 * 86_016 + 4 * 86_016


def test_oneshot_b12x_topology_shards() -> None:
    # b12x 1.5: TP2 plain peer-push adds 2 incoming shards; TP8 owner-reduce uses W shards
    assert oneshot.eager_shards(B12X_15, 2, push=False) == 3
    assert oneshot.eager_shards(B12X_15, 4, push=False) == 1
    assert oneshot.eager_shards(B12X_15, 8, push=False) == 8
    assert oneshot.eager_shards(B12X_15, 4, push=True) == 4
    assert oneshot.eager_shards(SPARKINFER_R14, 8, push=False) == 1


def test_dma_entries() -> None:
    led = ledger_of(R12)
    # 32 KiB of flags + 2(4-1) slots of A256(ceil(3072*6144*2 / 4))
    assert req(led, "dma.slab") == 256 * 128 + 6 * (3072 * 6144 * 2 // 4) == 56_655_872
    assert req(led, "dma.counters") == 2 * 256 * 4
    assert led.entry("dma.fp8_stage") is None
    ag = ledger_of(R12, "comm.dma_wire_mode=ag", "comm.allow_compressed_wire=true")
    e = 3072 * 6144 * 2 // 2 // 4
    assert req(ag, "dma.fp8_stage") == 4 * (e + e // 128 * 4)


def test_dma_measured_h200_sizes() -> None:
    # The 2x H200 measurement: max_bytes 37,748,736 (3072 tokens, W = 2)
    mb = dma.max_bytes(3072, 6144)
    assert mb == 37_748_736
    assert dma.slab_bytes(SPARKINFER_R14, mb, 2) == 37_781_504
    assert dma.stage_bytes(SPARKINFER_R14, mb, 2) == 19_464_192


def test_dcp_a2a_measured_h200_size() -> None:
    # W = 2, B = 64, H = 48, D 512 / Dq 576 with the measured meta_size() 133,120 B
    assert (
        dcp_a2a.slab_bytes(signal_bytes=133_120, batch=64, heads=48, head_dim=512, query_head_dim=576)
        == 7_235_584
    )


def test_dcp_a2a_ledger_entry() -> None:
    led = ledger_of(R12)
    slot = 2 * 64 * 64 * 576 + 4 * 64 * 64  # both already 256-aligned
    assert req(led, "dcp_a2a.slab.eager") == 133_120 + 2 * slot
    capped = ledger_of(R12, "comm.dcp_a2a_max_tokens=16")
    slot16 = 2 * 16 * 64 * 576 + 4 * 16 * 64
    assert req(capped, "dcp_a2a.slab.eager") == 133_120 + 2 * slot16
    uncapped = ledger_of(R12, "comm.dcp_a2a_max_tokens=0")
    slot0 = 2 * 3072 * 64 * 576 + 4 * 3072 * 64
    assert req(uncapped, "dcp_a2a.slab.eager") == 133_120 + 2 * slot0


def test_topk_exchange_entry() -> None:
    led = ledger_of(R12, "dcp_policy.query_split=true")
    assert req(led, "dcp_topk.slab") == 266_240 + 2 * (8 * 64 * 2048)


def test_indexer_decode_plan() -> None:
    led = ledger_of(R12)  # capture max 32, MTP 3 -> shared page table, packed route
    expected = (
        32768 * 128  # gather K quant
        + 32768 * 4  # gather K scales
        + 1024
        + 1024  # two row-length vectors, 1 KiB-aligned
        + 4 * 32 * 32768  # tile logits
        + 2 * 32 * 2048 * 4  # top-k values + indices
        + 2 * 2 * 32 * 2048 * 4  # carry double buffer (16 chunks > 1)
        + 1024  # active width
    )
    assert req(led, "indexer.decode.lane0") == expected == 10_095_616


def test_indexer_fused_decode_plan_has_pack_regions() -> None:
    # MTP 0, 16 decode rows: the fused route; pack regions sized by the configured SM count (188)
    led = ledger_of(R12, "speculative.num_speculative_tokens=0", "cudagraph.capture_rule.max=16")
    expected = (
        1024
        + 1024  # lengths
        + 4 * 32 * 32768  # tile logits (rows rounded up to 32)
        + 2 * 16 * 2048 * 4  # top-k
        + 2 * 2 * 16 * 2048 * 4  # carry
        + 1024
        + 2 * 188 * 2048 * 4  # fused pack values + indices
        + 16 * 3088  # merge state (sparkinfer: 3,088 B per row), 1 KiB aligned below
    )
    expected = expected - 16 * 3088 + -(-(16 * 3088) // 1024) * 1024
    assert req(led, "indexer.decode.lane0") == expected


def test_fold_entry() -> None:
    led = ledger_of("turnkey", *SEED_TURNKEY)
    # largest call whose slab fits 256 MiB: floor(256 MiB / (32*2048*8 + 4)) = 511 rows
    assert req(led, "fold.candidates") == 511 * (32 * 2048 * 8 + 4)
    forced = ledger_of("turnkey", *SEED_TURNKEY, "indexer.fold=1")
    assert req(forced, "fold.candidates") == 3072 * (32 * 2048 * 8 + 4)
    small = ledger_of("turnkey", *SEED_TURNKEY, "indexer.fold_max_mib=64")
    assert req(small, "fold.candidates") == (64 * MIB // (32 * 2048 * 8 + 4)) * (32 * 2048 * 8 + 4)


def test_defaults_runtime_activations_graphs_weights() -> None:
    led = ledger_of(R12)
    assert req(led, "runtime.cuda_context") == 651 * MIB
    # the larger of the two measurements: 936 MiB (preflight, 2x H200) over memory-model.md's 842 MiB
    assert req(led, "runtime.nccl") == 936 * MIB
    assert req(led, "runtime.nccl_dcp") == 486 * MIB  # R12 runs DCP 4: vLLM's own DCP communicator
    for name in ("runtime.nccl", "runtime.nccl_dcp"):
        entry = led.entry(name)
        assert entry is not None and entry.origin == "default"
    assert req(led, "runtime.nontorch_profiled") == 448 * MIB
    assert req(led, "activations") == 3072 * 270 * KIB
    assert req(led, "cudagraph.pool") == 512 * MIB
    # the documented 3.0 bpw figure (TEST_RESULTS.md: 77.66 GiB/GPU), measured on another release: estimate
    w = led.entry("weights")
    assert w is not None and w.requested_bytes == round(77.66 * GIB) and w.origin == "estimate"
    assert "TEST_RESULTS.md" in w.formula
    assert req(ledger_of(R12, "model.weights_per_rank=80GiB"), "weights") == 80 * GIB


def test_calibration_replaces_defaults() -> None:
    config = resolve_config(R12).config
    cal = {
        "cuda_context_bytes": 600 * MIB,
        "nccl_bytes": 700 * MIB,
        "nontorch_bytes": 100 * MIB,
        "activation_bytes": 900 * MIB,
        "graph_bytes": 300 * MIB,
        "weights_bytes": 82 * GIB,
    }
    led = build_ledger(config, LedgerInputs(**cal))
    for name, key in (
        ("runtime.cuda_context", "cuda_context_bytes"),
        ("runtime.nccl", "nccl_bytes"),
        ("runtime.nontorch_profiled", "nontorch_bytes"),
        ("activations", "activation_bytes"),
        ("cudagraph.pool", "graph_bytes"),
        ("weights", "weights_bytes"),
    ):
        e = led.entry(name)
        assert e is not None and e.requested_bytes == cal[key] and e.origin == "calibrated"


def test_kv_entry_is_the_budget_remainder() -> None:
    config = resolve_config(R12).config
    led = build_ledger(config)
    b = compute_budget(config, led)
    t = 97_290 * MIB  # the profile's T (profiles/r12-exl3.yaml), the constructed rig's usable total
    assert b.total == t
    assert b.gate == -(-t * 95 // 100)  # R = ceil(GMU * T)
    assert req(led, "kv_cache") == b.gate - b.w - b.p - b.n - b.g_e == b.kv
    pinned = build_ledger(resolve_config(R12, ["memory.kv_cache_memory_bytes=3GiB"]).config)
    assert req(pinned, "kv_cache") == 3 * GIB


def test_weights_from_the_payload_in_the_inputs(tmp_path: object) -> None:
    """W from the checkpoint's payload the inputs carry (the plan reads the disk, tests/plan): the payload
    split over TP4 plus the measured payload-to-loaded offset; the ledger itself reads no file."""
    import json
    import struct
    from pathlib import Path

    from glmlaunch.ledger.inputs import CheckpointOnDisk
    from glmlaunch.ledger.weights import payload_offset

    d = Path(str(tmp_path)) / "model"
    d.mkdir()
    header = json.dumps({"t": {"dtype": "U8", "shape": [4096], "data_offsets": [0, 4096]}}).encode()
    (d / "model-0.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4096)
    config = resolve_config(
        R12, [f"model.path={d}", "model.revision=null", "speculative.num_speculative_tokens=0"]
    ).config
    # a local directory with weights on disk, and no payload in the inputs: nothing is read from it
    bare = build_ledger(config).entry("weights")
    assert bare is not None and bare.origin == "default" and "safetensors headers" not in bare.formula

    found = CheckpointOnDisk(str(d), str(d), 1000 + 24 + 4096, 2, "verified by the test")
    led = build_ledger(config, LedgerInputs(checkpoint=found))
    e = led.entry("weights")
    assert e is not None and e.origin == "estimate"
    offset = payload_offset()
    assert offset is not None and "3.25bpw" in offset[3] and "3.36bpw" in offset[3]
    assert e.requested_bytes == -(-(1000 + 24 + 4096) // 4) + offset[0]
    assert e.formula.startswith(f"safetensors headers of {d}: 5,120 B in 2 files / 4")
    assert e.note == "estimate from the safetensors payload: verified by the test"
    assert any("estimated from the safetensors payload" in n and str(d) in n for n in led.notes)
    assert compute_budget(config, led).w_source == "estimate"

    # a payload of another checkpoint is not this one's
    other = CheckpointOnDisk("/elsewhere/model", "/elsewhere/model", 5120, 2, "verified")
    assert build_ledger(config, LedgerInputs(checkpoint=other)).entry("weights") == bare

    # a checkpoint on disk that is not priced: W as without it, and the reason said
    partial = CheckpointOnDisk(str(d), str(d), None, 0, "a partial fetch (stamped incomplete)")
    led = build_ledger(config, LedgerInputs(checkpoint=partial))
    e = led.entry("weights")
    assert e is not None and e.requested_bytes == bare.requested_bytes and e.origin == "default"
    reason = f"the checkpoint at {d} is ignored (W is not priced from its payload): a partial fetch (stamped"
    assert e.note.endswith(f"; {reason} incomplete)")
    assert f"weights: {reason} incomplete)" in led.notes


def test_weights_precedence_over_the_payload() -> None:
    """An explicit model.weights_per_rank, a calibrated W and a documented W (even one of another release)
    beat the payload."""
    from glmlaunch.ledger.inputs import CheckpointOnDisk

    documented = resolve_config(R12).config
    path = documented.model.path or ""
    found = CheckpointOnDisk(path, "/ckpt", 4 * GIB, 3, "verified")
    plain = build_ledger(documented).entry("weights")
    # the documented table's figure of another release (an estimate built on a real boot of this checkpoint)
    assert plain is not None and plain.origin == "estimate" and "measured on v31" in plain.note
    assert build_ledger(documented, LedgerInputs(checkpoint=found)).entry("weights") == plain

    explicit = resolve_config(R12, ["model.weights_per_rank=70GiB"]).config
    e = build_ledger(explicit, LedgerInputs(checkpoint=found)).entry("weights")
    assert e is not None and e.requested_bytes == 70 * GIB and e.origin == "exact"

    unknown = resolve_config(R12, ["model.path=someorg/GLM-5.2-test"]).config
    found = CheckpointOnDisk("someorg/GLM-5.2-test", "/ckpt", 4 * GIB, 3, "verified")
    calibrated = LedgerInputs(record_id="r", weights_bytes=60 * GIB, checkpoint=found)
    e = build_ledger(unknown, calibrated).entry("weights")
    assert e is not None and e.requested_bytes == 60 * GIB and e.origin == "calibrated"
    e = build_ledger(unknown, LedgerInputs(checkpoint=found)).entry("weights")
    assert e is not None and e.origin == "estimate" and e.formula.startswith("safetensors headers of /ckpt")


# --- §1: footprints -------------------------------------------------------------------------------


def test_cudamalloc_pages() -> None:
    for request, device in (
        (14_205_952, 14 * MIB),
        (7_103_488, 8 * MIB),
        (56_655_872, 56 * MIB),
        (256, 2 * MIB),
    ):
        assert Packer(expandable=False).ipc(request, 1) == device


def test_small_ipc_slabs_share_a_committed_chunk() -> None:
    p = Packer(expandable=False)
    assert [p.ipc(322_560, 1) for _ in range(4)] == [2 * MIB, 0, 0, 0]


def test_torch_default_allocator() -> None:
    assert torch_single(1 * MIB, expandable=False) == 2 * MIB
    assert torch_single(8 * MIB, expandable=False) == 20 * MIB
    assert torch_single(25_166_016, expandable=False) == 26 * MIB
    assert torch_single(557_999_104, expandable=False) == 534 * MIB


def test_torch_expandable_segments() -> None:
    assert torch_single(25_166_016, expandable=True) == 40 * MIB
    assert torch_single(557_999_104, expandable=True) == 540 * MIB


def test_rank_data_segments_eager_plus_three_capture_passes() -> None:
    # measured: eager +20 MiB, then capture passes +0, +20, +0 (two 8 MiB tensors per 20 MiB segment)
    p = Packer(expandable=False)
    assert [p.torch(8 * MIB, 1) for _ in range(4)] == [20 * MIB, 0, 20 * MIB, 0]


def test_capture_passes_pack_per_stream() -> None:
    # measured with the real r12 library on 2x H200: every capture pass runs on a fresh stream, so its
    # 8 MiB rank_data opens a 20 MiB segment of its own and its handle exchange a 2 MiB small segment
    p = Packer(expandable=False, torch_small_free=2 * MIB)
    assert p.torch(8 * MIB, 1) == 20 * MIB  # eager channel, default stream
    assert p.torch(1024, 1) == 0  # the default stream's small pool is open
    assert p.torch(1024, 3, "capture") == 3 * 2 * MIB
    assert p.torch(8 * MIB, 3, "capture") == 3 * 20 * MIB
    assert p.torch(8 * MIB, 1) == 0  # the default stream still has room in its first segment
    assert p.torch(1024, 3, "capture") == 0  # same passes: their small segments are open
    # expandable segments grow per stream too
    q = Packer(expandable=True)
    assert q.torch(8 * MIB, 2, "capture") == 2 * 20 * MIB


def test_dma_stage_and_a2a_channel_footprints() -> None:
    # ag wire: +20 MiB for the 19,464,192 B stage; A2A: 8 MiB per channel, eager + 2 captures = 24 MiB
    assert torch_single(19_464_192, expandable=False) == 20 * MIB
    p = Packer(expandable=False)
    assert sum(p.ipc(7_235_584, 1) for _ in range(3)) == 24 * MIB


def test_transient_peak() -> None:
    vals = 48 * 32 * 2048 * 4  # 12 MiB each: fp32 values and int32 indices
    assert transient_peak((vals, vals, 48 * 4), expandable=False) == 24 * MIB
    assert transient_peak((vals, vals, 48 * 4), expandable=True) == 40 * MIB


@pytest.mark.parametrize("profile", ["gate", "turnkey", "r12-exl3"])
def test_ranks_are_symmetric_and_follow_tp(profile: str) -> None:
    config = resolve_config(profile).config
    led = build_ledger(config)
    assert len(led.ranks) == config.parallel.tp
    assert [r.gpu for r in led.ranks] == config.gpu_list
    assert all(r.entries == led.rank0.entries for r in led.ranks)


def _device(led: Ledger, *entry_names: str) -> int:
    found = [led.entry(n) for n in entry_names]
    assert all(e is not None for e in found), entry_names
    return sum(e.device_bytes for e in found if e is not None)


def test_capture_pass_footprints_follow_the_real_library() -> None:
    # 2x H200, sparkinfer de04125 (bench/preflight/h200x2-gate-sparkinfer-warm.json and -turnkey-):
    # 32 MiB per capture pass = 20 MiB rank_data segment + 2 MiB small segment on the pass's stream
    # + 10 MiB DCP slab (the one-shot slab is sub-allocated in the eager slab's page);
    # the V2 profiling pass leaves 32 - 10 = 22 MiB after its rollback.
    gate = ledger_of("gate", "parallel.tp=2", "parallel.dcp=2")
    passes = (
        "capture_stream.exchange.capture",
        "oneshot.slab.capture",
        "oneshot.rank_data.capture",
        "dcp_a2a.slab.capture",
    )
    assert _device(gate, *passes) == 3 * 32 * MIB
    residue = ("capture_stream.exchange.profiling-residue", "oneshot.rank_data_cached.profiling-residue")
    assert _device(gate, *residue) == 22 * MIB
    assert {gate.entry(n).lifetime for n in residue} == {"profiled"}  # type: ignore[union-attr]
    assert {gate.entry(n).kind for n in residue} == {"torch"}  # type: ignore[union-attr]
    turnkey = ledger_of("turnkey", *SEED_TURNKEY, "parallel.tp=2", "parallel.dcp=2")
    for role in ("leaked-profiling", "capture"):
        names = [f"{n.rsplit('.', 1)[0]}.{role}" for n in passes]
        assert _device(turnkey, *names) == 32 * MIB
