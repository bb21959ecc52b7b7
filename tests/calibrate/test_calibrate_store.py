"""Calibration records: derivation, round trips, corruption, fingerprint mismatch, concurrent writers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

from glmlaunch.calibrate.fingerprint import compare, make_fingerprint
from glmlaunch.calibrate.records import build_calibration
from glmlaunch.calibrate.store import Store, cache_dir, lookup_calibration, read_record
from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import GIB, MIB
from glmlaunch.hardware.inventory import Gpu, Inventory
from glmlaunch.vllmlog.boot import parse_log_file

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
NO_VLLM = {"vllm": None, "torch": None, "b12x": None, "sparkinfer": None}
SERVING = {"vllm": "0.11.2.dev0+r14", "torch": "2.11.0", "b12x": "1.5.1", "sparkinfer": None}


def r12(*overrides: str) -> DeploymentConfig:
    return resolve_config("r12-exl3", overrides, environ={}).config


def inventory(*, driver: str = "590.48.01", uuid_tail: str = "a") -> Inventory:
    gpus = tuple(
        Gpu(
            index=i,
            nvml_index=i,
            name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            uuid=f"GPU-0000000{i}-{uuid_tail}",
            pci_bus_id=f"00000000:{0x41 + i:02X}:00.0",
            memory_total=97_887 * MIB,
            compute_capability="12.0",
        )
        for i in range(4)
    )
    return Inventory(
        provenance="constructed",
        captured_at=datetime(2026, 11, 28, tzinfo=UTC),
        host="rig",
        source="test",
        driver_version=driver,
        cuda_driver_version="13.2",
        host_gpu_count=4,
        gpus=gpus,
    )


def record_for(log: str, config: DeploymentConfig | None = None, **kw: object):  # type: ignore[no-untyped-def]
    cfg = config or r12()
    boot = parse_log_file(LOGS / log)
    fp = make_fingerprint(
        cfg, kw.pop("inventory", None), vllm_version=boot.engine.vllm_version, versions=NO_VLLM
    )  # type: ignore[arg-type]
    return build_calibration(boot, fp, profile="r12-exl3", total_bytes=cfg.hardware.memory_per_gpu)


def test_terms_from_the_reference_line_are_exact() -> None:
    rec = record_for("tp4_dcp4_boot.log")
    assert rec.usable and rec.total_bytes_exact
    t0 = rec.for_rank(0)
    total = r12().hardware.memory_per_gpu
    requested = int(total * 0.92)
    # T - F0 = T - (R + (kv_to_gpu - kv_to_requested)), to the byte
    assert t0.pre_snapshot_bytes == total - requested - (8907990528 - 2226076283)
    assert 1.37 * GIB < t0.pre_snapshot_bytes < 1.39 * GIB
    assert t0.weights_bytes == round(83.28 * GIB)
    assert t0.activation_peak_bytes == round(1.32 * GIB)
    assert t0.non_torch_bytes == round(0.45 * GIB)
    assert t0.graph_estimate_bytes == round(0.49 * GIB)
    assert t0.graph_actual_bytes == round(0.14 * GIB)
    assert t0.kv_cache_bytes == round(1.87 * GIB)
    worst = rec.worst()
    assert worst.non_torch_bytes == max(t.non_torch_bytes or 0 for t in rec.ranks)
    assert worst.kv_cache_bytes == min(t.kv_cache_bytes or 0 for t in rec.ranks)


def test_graph_estimate_derived_when_the_estimate_line_is_missing() -> None:
    text = (LOGS / "tp4_dcp4_boot.log").read_text(encoding="utf-8")
    kept = "".join(line for line in text.splitlines(keepends=True) if "Estimated MRV2" not in line)
    from glmlaunch.vllmlog.boot import parse_log_text

    boot = parse_log_text(kept)
    fp = make_fingerprint(r12(), versions=NO_VLLM)
    rec = build_calibration(boot, fp, profile=None, total_bytes=r12().hardware.memory_per_gpu)
    # R - W - P - N - KV with two-decimal inputs: 0.49 GiB within the log's rounding
    assert abs(rec.for_rank(0).graph_estimate_bytes - 0.49 * GIB) < 0.03 * GIB  # type: ignore[operator]


def test_round_trip_and_dedupe(tmp_path: Path) -> None:
    store = Store(tmp_path / "cal")
    rec = record_for("tp4_dcp4_boot.log")
    first = store.save(rec)
    again = store.save(rec)
    assert not first.replaced and again.replaced and first.path == again.path
    loaded = store.load()
    assert loaded.warnings == ()
    assert loaded.records == (rec,)
    assert store.get(rec.record_id[:10]) == rec
    assert not list((tmp_path / "cal").glob("*.tmp"))


def test_corrupt_and_foreign_records_are_skipped_with_a_warning(tmp_path: Path) -> None:
    store = Store(tmp_path / "cal")
    good = store.save(record_for("tp4_dcp4_boot.log")).path
    (store.root / "truncated.json").write_text(good.read_text()[:500])
    (store.root / "foreign.json").write_text(json.dumps({"kind": "something-else"}))
    future = json.loads(good.read_text())
    future["schema_version"] = 99
    (store.root / "future.json").write_text(json.dumps(future))
    edited = json.loads(good.read_text())
    edited["fingerprint"]["settings"]["scheduler.max_num_batched_tokens"] = 8192
    (store.root / f"{edited['record_id']}x.json").write_text(json.dumps(edited))
    invalid = json.loads(good.read_text())
    invalid["ranks"] = "nope"
    (store.root / "invalid.json").write_text(json.dumps(invalid))
    loaded = store.load()
    assert len(loaded.records) == 1
    reasons = "\n".join(loaded.warnings)
    assert len(loaded.warnings) == 5
    assert "truncated.json: not valid JSON" in reasons
    assert "foreign.json: not a glmlaunch calibration record" in reasons
    assert "future.json: schema version 99" in reasons
    assert "digest does not match" in reasons
    assert "invalid.json: invalid record (ranks" in reasons
    # nothing was deleted
    assert len(list(store.root.glob("*.json"))) == 6


def test_lookup_uses_a_match_and_says_so(tmp_path: Path) -> None:
    store = Store(tmp_path / "cal")
    rec = record_for("tp4_dcp4_boot.log")
    store.save(rec)
    found = lookup_calibration(r12(), store=store, versions=NO_VLLM)
    assert found.calibration == rec
    msg = found.message()
    assert msg.startswith(f"using calibration {rec.record_id}")
    assert "not checked: hardware.cuda_driver_version (unknown to both)" in msg
    assert "software.vllm (unknown to this run)" in msg


def test_a_different_fingerprint_is_never_used_and_the_fields_are_named(tmp_path: Path) -> None:
    store = Store(tmp_path / "cal")
    store.save(record_for("tp4_dcp4_boot.log"))
    found = lookup_calibration(
        r12("scheduler.max_num_batched_tokens=4096", "memory.kv_cache_dtype=fp8"),
        store=store,
        versions=NO_VLLM,
    )
    assert found.calibration is None
    (rej,) = found.rejected
    assert 'settings.memory.kv_cache_dtype: recorded "nvfp4_ds_mla", here "fp8"' in rej.reason
    assert "settings.scheduler.max_num_batched_tokens: recorded 3072, here 4096" in rej.reason
    assert found.message().startswith("no matching calibration; using defaults.")
    # relaxing one key is explicit, and the other still blocks
    relaxed = lookup_calibration(
        r12("scheduler.max_num_batched_tokens=4096"),
        store=store,
        versions=NO_VLLM,
        relax=["settings.scheduler.max_num_batched_tokens"],
    )
    assert relaxed.calibration is not None and relaxed.comparison is not None
    assert "allowed to differ: settings.scheduler.max_num_batched_tokens" in relaxed.comparison.explain()


def test_gpu_memory_utilization_does_not_change_the_fingerprint() -> None:
    a = make_fingerprint(r12(), versions=NO_VLLM)
    b = make_fingerprint(
        r12("memory.gpu_memory_utilization=0.9", "memory.kv_cache_memory_bytes=2GiB"), versions=NO_VLLM
    )
    c = make_fingerprint(
        r12("cudagraph.capture_rule=null", "cudagraph.capture_sizes=[4,8,12,16,20,24,28,32]"),
        versions=NO_VLLM,
    )
    assert a.digest == b.digest == c.digest
    assert make_fingerprint(r12("comm.dcp_a2a_max_tokens=16"), versions=NO_VLLM).digest != a.digest


def test_hardware_and_software_identity(tmp_path: Path) -> None:
    inv = inventory()
    rec_fp = make_fingerprint(r12(), inv, versions=SERVING)
    same = compare(rec_fp, make_fingerprint(r12(), inv, versions=SERVING))
    assert same.matches and same.unchecked == ("software.sparkinfer (unknown to both)",)
    other_driver = compare(rec_fp, make_fingerprint(r12(), inventory(driver="580.159"), versions=SERVING))
    assert [d.key for d in other_driver.differences] == ["hardware.driver_version"]
    swapped = compare(rec_fp, make_fingerprint(r12(), inventory(uuid_tail="b"), versions=SERVING))
    assert [d.key for d in swapped.differences] == ["hardware.gpu_uuids"]
    newer = compare(rec_fp, make_fingerprint(r12(), inv, versions={**SERVING, "vllm": "0.12.0"}))
    assert [d.key for d in newer.differences] == ["software.vllm"]
    # a planning machine (no inventory, no vLLM) matches, and says what it could not check
    laptop = compare(rec_fp, make_fingerprint(r12(), None, versions=NO_VLLM))
    assert laptop.matches
    assert "hardware.gpu_uuids (unknown to this run)" in laptop.unchecked
    assert "software.torch (unknown to this run)" in laptop.unchecked


def test_refused_and_truncated_boots_are_kept_but_not_used(tmp_path: Path) -> None:
    store = Store(tmp_path / "cal")
    refused = record_for("tp4_dcp4_kv_refusal.log")
    truncated = record_for("tp4_dcp4_truncated.log")
    store.save(refused)
    store.save(truncated)
    refused_why = (
        "vLLM refused to start in this boot: one 524288-token request needs 3.90 GiB of KV cache, 0.01 GiB "
        "available (vLLM's estimated maximum model length 1792); its W, G_e and P + N still calibrate the "
        "term model"
    )
    assert refused.unusable_reason() == refused_why
    truncated_why = (
        "missing activation_peak_bytes, non_torch_bytes "
        "(truncated: the boot did not reach the KV-cache size line)"
    )
    assert truncated.unusable_reason() == truncated_why
    found = lookup_calibration(r12(), store=store, versions=NO_VLLM)
    assert found.calibration is None
    assert {r.reason for r in found.rejected} == {
        f"matches but is not usable: {refused_why}",
        f"matches but is not usable: {truncated_why}",
    }


def test_cache_dir_is_configurable(tmp_path: Path) -> None:
    assert cache_dir({"GLMLAUNCH_CACHE_DIR": str(tmp_path / "x")}) == tmp_path / "x"
    assert cache_dir({}).name == "glmlaunch"


_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from glmlaunch.calibrate.fingerprint import make_fingerprint
    from glmlaunch.vllmlog.boot import parse_log_file
    from glmlaunch.calibrate.records import build_calibration
    from glmlaunch.calibrate.store import Store
    from glmlaunch.config.resolve import resolve_config

    root, log, tokens, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    config = resolve_config("r12-exl3", [f"scheduler.max_num_batched_tokens={tokens}"], environ={}).config
    boot = parse_log_file(log)
    store = Store(Path(root))
    for _ in range(rounds):
        fp = make_fingerprint(config, versions={})
        total = config.hardware.memory_per_gpu
        store.save(build_calibration(boot, fp, profile="r12-exl3", total_bytes=total))
        store.load()
    """
)


def test_concurrent_writers_in_real_processes(tmp_path: Path) -> None:
    root = tmp_path / "cal"
    log = str(LOGS / "tp4_dcp4_boot.log")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    # six processes: three write the same boot under the same fingerprint, three under different ones
    tokens = ["3072", "3072", "3072", "2048", "4096", "8192"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(root), log, t, "15"], env=env, stderr=subprocess.PIPE
        )
        for t in tokens
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    loaded = Store(root).load()
    assert loaded.warnings == ()
    assert len(loaded.records) == 4
    assert sorted(r.fingerprint.settings["scheduler.max_num_batched_tokens"] for r in loaded.records) == [  # type: ignore[type-var]
        2048,
        3072,
        4096,
        8192,
    ]
    for path in root.glob("*.json"):
        record, problem = read_record(path)
        assert problem is None and record is not None
    assert not list(root.glob(".*.tmp"))
