"""Schema-1 records (boot settings over the shipped r12-exl3) read as what they meant when written.

The records are real: each written by the glmlaunch commit its fixture directory names
(tests/fixtures/records/README.md), with ``meant.json`` holding what that commit's reader made of each.
They are read through a real store on disk, as ``plan`` reads them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from glmlaunch.calibrate.ingest import ingest_logs
from glmlaunch.calibrate.learn import learn, record_config
from glmlaunch.calibrate.migrate import schema1_bases
from glmlaunch.calibrate.records import Calibration
from glmlaunch.calibrate.store import Store
from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig

SCHEMA1 = FIXTURES / "records" / "schema1"
MEANT: dict[str, Any] = json.loads((SCHEMA1 / "meant.json").read_text())["meant"]
AMBIGUOUS = "inv-1f446ab/c08f5445692619e9-c130a72f6062"
RECOVERABLE = sorted(k for k in MEANT if k != AMBIGUOUS)
MTP0_LOG = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp0-v1-server.log"
B4E824E_MTP0 = "b4e824e/54a6a1e800c434b5-c130a72f6062"
NO_VLLM = {"vllm": None, "torch": None, "b12x": None, "sparkinfer": None}


def _store(tmp_path: Path, *docs: dict[str, Any]) -> Store:
    store = Store(tmp_path / "calibration")
    store.root.mkdir(parents=True)
    for doc in docs:
        (store.root / f"{doc['record_id']}.json").write_text(json.dumps(doc, indent=2))
    return store


def _old(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((SCHEMA1 / f"{name}.json").read_text())
    assert doc["schema_version"] == 1
    return doc


def _read(tmp_path: Path, doc: dict[str, Any]) -> tuple[list[Calibration], list[str]]:
    loaded = _store(tmp_path, doc).load()
    return list(loaded.records), list(loaded.warnings)


@pytest.mark.parametrize("name", RECOVERABLE)
def test_an_old_record_means_what_it_meant_to_the_glmlaunch_that_wrote_it(name: str, tmp_path: Path) -> None:
    old = _old(name)
    [record], warnings = _read(tmp_path, old)
    assert warnings == []
    assert record.schema_version == 2
    meant = MEANT[name]
    cfg = record_config(record)
    if meant is None:  # it kept no configuration, and keeps none: every reader then falls back alike
        assert record.config is None and cfg is None and record.notes == old["notes"]
    else:
        assert cfg is not None
        assert cfg.model_dump(mode="json") == DeploymentConfig.model_validate(meant).model_dump(mode="json")
        [*kept, said] = record.notes
        assert kept == old["notes"]
        assert said.startswith(f"migrated from schema 1: its {len(old['boot_settings'])} boot setting(s) ")
    # nothing else changes: every other field reads as this glmlaunch's models read it
    rest = {k: v for k, v in old.items() if k not in ("boot_settings", "base_profile", "schema_version")}
    plain = Calibration.model_validate({**rest, "schema_version": 2}).model_dump(mode="json")
    mine = record.model_dump(mode="json")
    assert {k: v for k, v in mine.items() if k not in ("config", "notes")} == {
        k: v for k, v in plain.items() if k not in ("config", "notes")
    }


def test_the_base_is_the_one_the_record_proves() -> None:
    # 5518314 and 1f446ab resolved r12-exl3 differently only in hardware.memory_per_gpu: the record of one
    # log by each says which by its ranks' exact device totals, each meant its own
    a, b = MEANT["5518314/9151a887f43b1cfb-c130a72f6062"], MEANT["1f446ab/9151a887f43b1cfb-c130a72f6062"]
    assert a["hardware"]["memory_per_gpu"] != b["hardware"]["memory_per_gpu"]
    assert {k: v for k, v in a.items() if k != "hardware"} == {k: v for k, v in b.items() if k != "hardware"}
    assert len(schema1_bases()) == 5
    # the newest base is the b4e824e era's: a record of it means what a fresh ingest of its log means
    assert "b4e824e" in schema1_bases()[-1].commits


def test_a_record_whose_base_cannot_be_told_is_refused_with_what_differs(tmp_path: Path) -> None:
    # with an inventory the device total came from the inventory: nothing in the record says whether
    # r12-exl3's memory_per_gpu was 5518314's or 1f446ab's, and the two configurations differ there
    records, [warning] = _read(tmp_path, _old(AMBIGUOUS))
    assert records == []
    assert "a schema-1 record whose configuration cannot be recovered" in warning
    assert "differ in hardware.memory_per_gpu" in warning and "which one it meant is not known" in warning
    assert "ingest its boot log again" in warning


def test_an_edited_record_is_refused(tmp_path: Path) -> None:
    old = _old(B4E824E_MTP0)
    old["boot_settings"]["scheduler.max_num_batched_tokens"] = 4096
    records, [warning] = _read(tmp_path, old)
    assert records == [] and "do not reproduce its fingerprint" in warning


def test_a_record_over_another_base_profile_is_refused(tmp_path: Path) -> None:
    old = _old(B4E824E_MTP0)
    old["base_profile"] = "turnkey"
    records, [warning] = _read(tmp_path, old)
    assert records == [] and "over profile 'turnkey'" in warning


def test_a_record_this_schema_rejects_is_refused_with_the_key(tmp_path: Path) -> None:
    # settings and fingerprint agree (the base is proven), but the value is one this glmlaunch refuses
    old = _old(B4E824E_MTP0)
    old["boot_settings"]["scheduler.max_num_batched_tokens"] = -1
    old["fingerprint"]["settings"]["scheduler.max_num_batched_tokens"] = -1
    records, [warning] = _read(tmp_path, old)
    assert records == [] and "is not valid here: scheduler.max_num_batched_tokens" in warning


def test_a_migrated_record_and_a_fresh_ingest_of_its_log_are_one_record(tmp_path: Path) -> None:
    old = _old(B4E824E_MTP0)
    store = _store(tmp_path, old)
    [migrated] = store.load().records
    [fresh] = ingest_logs(
        [MTP0_LOG], config=None, profile=None, inventory=None, store=store, versions=NO_VLLM
    )
    assert fresh.saved is not None and fresh.saved.replaced  # the same id: ingest replaces the old file
    assert json.loads(fresh.saved.path.read_text())["schema_version"] == 2
    assert fresh.record.fingerprint == migrated.fingerprint
    # One setting differs in spelling only: the LMCache port was a fixed 5555 when the old record was
    # written (it means what it meant) and is null now (derived from the API port); this boot ran no LMCache.
    assert migrated.config is not None and fresh.record.config is not None
    assert migrated.config["lmcache_config"].pop("port") == 5555 and not migrated.config["lmcache"]
    assert fresh.record.config["lmcache_config"].pop("port") is None
    assert fresh.record.config == migrated.config
    # and the term model learns the same from either
    config = resolve_config("r12-exl3", (), environ={}).config
    a, b = learn(config, [migrated]), learn(config, [fresh.record])
    assert a.model is not None and b.model is not None and a.used and a.used == b.used
    assert a.model.predict(config, None) == b.model.predict(config, None)


@pytest.mark.parametrize("name", [k for k in RECOVERABLE if MEANT[k] is not None])
def test_the_base_found_is_the_one_its_writer_shipped(name: str, tmp_path: Path) -> None:
    writer = name.split("/")[0].rsplit("-", 1)[-1]  # the fixture directory names the commit
    [base] = [b for b in schema1_bases() if writer in b.commits]
    [record], _ = _read(tmp_path, _old(name))
    assert record.notes[-1].endswith(f"over r12-exl3 as glmlaunch {base.label()} shipped it")
