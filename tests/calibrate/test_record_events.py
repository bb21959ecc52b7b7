"""A serve log that OOMs thousands of times still makes a record (calibrate/records.py ``compact_events``).

Before, every distinct OOM reading was kept in the record: ~2,500 of them passed the store's key limit and
the boot made no record at all. A record keeps each distinct reading once, and past ``MAX_RECORD_EVENTS``
the most demanding ones; what a plan learns from them (the largest demand) is kept.
"""

from __future__ import annotations

from pathlib import Path

from conftest import FIXTURES

from glmlaunch.calibrate.ingest import ingest_logs
from glmlaunch.calibrate.records import MAX_RECORD_EVENTS, Calibration
from glmlaunch.calibrate.store import Store
from glmlaunch.config.units import MIB

BASELINE = FIXTURES / "boot-logs" / "vllm-r14-field-baseline-mtp3-c8-v2-server.log"
VERSIONS = {"vllm": None, "torch": None, "b12x": None, "sparkinfer": None}
READY = "(APIServer pid=229476) INFO:     Application startup complete.\n"


def _oom(i: int, tried_mib: int, free_mib: float) -> str:
    return (
        f"(Worker_TP0_DCP0 pid=229732) ERROR 07-31 11:{i // 3600 % 60:02d}:{i // 60 % 60:02d} "
        f"[multiproc_executor.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        f"{tried_mib}.00 MiB. GPU 0 has a total capacity of 94.97 GiB of which {free_mib:.2f} MiB is free.\n"
    )


def _ingest(tmp_path: Path, lines: list[str]) -> Calibration:
    log = tmp_path / "serve.log"
    log.write_text(BASELINE.read_text(encoding="utf-8") + READY + "".join(lines), encoding="utf-8")
    [item] = ingest_logs([log], config=None, profile=None, inventory=None, store=None, versions=VERSIONS)
    return item.record


def test_thousands_of_ooms_make_a_record_the_store_keeps(tmp_path: Path) -> None:
    # 3,000 OOMs, each asking for another size, the largest in the middle of the log
    lines = [_oom(i, 16 + (i * 7919) % 3000, 10.0) for i in range(3000)]
    record = _ingest(tmp_path, lines)
    ooms = [e for e in record.boot.runtime_events if e.kind == "oom"]
    assert len(ooms) == MAX_RECORD_EVENTS
    assert max(e.tried_bytes or 0 for e in ooms) == (16 + 2999) * MIB
    store = Store(tmp_path / "calibration")
    store.save(record)  # inside the store's key limit (config/limits.py MAX_KEYS), read back whole
    assert store.get(record.record_id).boot.runtime_events == record.boot.runtime_events


def test_past_the_bound_a_record_keeps_the_most_demanding_readings(tmp_path: Path) -> None:
    lines = [_oom(i, 16 + i, 5.0) for i in range(MAX_RECORD_EVENTS + 200)]
    record = _ingest(tmp_path, lines)
    tried = sorted(e.tried_bytes or 0 for e in record.boot.runtime_events if e.kind == "oom")
    assert len(tried) == MAX_RECORD_EVENTS
    assert tried[-1] == (16 + MAX_RECORD_EVENTS + 199) * MIB  # the largest allocation is kept
    assert tried[0] == (16 + 200) * MIB  # the least demanding ones went
