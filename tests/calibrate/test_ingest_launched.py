"""A supervised boot's record (``ingest_launched``): keyed on what glmlaunch launched, measuring exactly
what ``calibrate ingest`` of the same log measures, noting where the log's own configuration differs; one
boot with two records counts once. Real logs, real profiles, a real store on disk."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES

from glmlaunch.calibrate.fingerprint import make_fingerprint, memory_settings
from glmlaunch.calibrate.ingest import ingest_launched, ingest_logs
from glmlaunch.calibrate.learn import record_config
from glmlaunch.calibrate.records import SupervisedBoot
from glmlaunch.calibrate.store import Store
from glmlaunch.config.resolve import resolve_config
from glmlaunch.plan.profile_import import build_profile

LOG = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp0-v1-server.log"
VERSIONS = {"vllm": None, "torch": None, "b12x": None, "sparkinfer": None}


def _imported(tmp_path: Path) -> tuple[str, object]:
    profile = tmp_path / "boot.yaml"
    profile.write_text(build_profile(LOG, environ={}).text, encoding="utf-8")
    resolved = resolve_config(str(profile), (), environ={})
    return resolved.profile_name, resolved.config


MEASURED = ("boot", "ranks", "total_bytes_exact", "kind", "schema_version")


def test_the_record_measures_what_ingest_measures_and_is_keyed_on_the_launch(tmp_path: Path) -> None:
    name, config = _imported(tmp_path)
    launched = ingest_launched(
        LOG,
        launched=config,
        profile=name,
        inventory=None,
        store=None,  # type: ignore[arg-type]
        supervised=SupervisedBoot(boot_id="b1", outcome="running"),
        versions=VERSIONS,
    ).record
    [ingested] = ingest_logs(
        [LOG],
        config=config,
        profile=name,
        inventory=None,
        store=None,
        versions=VERSIONS,  # type: ignore[arg-type]
    )
    mine, theirs = launched.model_dump(mode="json"), ingested.record.model_dump(mode="json")
    assert {k: mine[k] for k in MEASURED} == {k: theirs[k] for k in MEASURED}
    # keyed on the launch (the imported profile also passes the launcher's environment through: env.*)
    assert launched.fingerprint == make_fingerprint(
        config,
        None,
        vllm_version=launched.boot.engine.vllm_version,
        versions=VERSIONS,  # type: ignore[arg-type]
    )
    assert launched.config == config.model_dump(mode="json")  # type: ignore[attr-defined]
    assert launched.profile == name and launched.supervised == SupervisedBoot(boot_id="b1", outcome="running")
    # the log agrees with the launch in every setting it shows: nothing to note
    assert launched.notes == []
    assert launched.boot.sha256 == ingested.record.boot.sha256


def test_a_launch_the_log_disagrees_with_is_kept_and_never_learned_from(tmp_path: Path) -> None:
    """A log showing other memory settings than the launch (a stand-in vLLM printing any log) is no
    evidence of the launch: the record is kept, keyed on the launch, saying why; no plan learns from it."""
    from glmlaunch.calibrate.learn import learn

    name, imported = _imported(tmp_path)
    longer = ("scheduler.max_model_len=262144",)
    config = resolve_config(str(tmp_path / "boot.yaml"), longer, environ={}).config
    store = Store(tmp_path / "calibration")
    record = ingest_launched(
        LOG, launched=config, profile=name, inventory=None, store=store, versions=VERSIONS
    ).record
    assert record.fingerprint == make_fingerprint(
        config, None, vllm_version=record.boot.engine.vllm_version, versions=VERSIONS
    )
    assert record.config == config.model_dump(mode="json")
    own = record_config(record)
    assert own is not None and memory_settings(own) == memory_settings(config)
    assert record.evidence_refused == (
        "the log's scheduler.max_model_len 131072 disagrees with the launched scheduler.max_model_len 262144"
    )
    assert not record.usable and "its log is no evidence: " in (record.unusable_reason() or "")
    # kept on disk as it is, never learned from: not for the launch, not for the boot's own configuration
    [stored] = store.load().records
    assert stored == record
    for cfg in (config, imported):
        learned = learn(cfg, store.load().records)  # type: ignore[arg-type]
        assert learned.used == ()
        assert learned.skipped == (f"{record.record_id}: its log is no evidence: {record.evidence_refused}",)
    # the log's measurements are the log's, whatever the key
    [ingested] = ingest_logs([LOG], config=None, profile=None, inventory=None, store=None, versions=VERSIONS)
    assert record.ranks == ingested.record.ranks


def test_one_boot_with_two_records_counts_once_and_the_supervised_one_stands(tmp_path: Path) -> None:
    from glmlaunch.calibrate.learn import learn

    name, config = _imported(tmp_path)
    store = Store(tmp_path / "calibration")
    supervised = ingest_launched(
        LOG,
        launched=config,
        profile=name,
        inventory=None,
        store=store,  # type: ignore[arg-type]
        supervised=SupervisedBoot(boot_id="b3", outcome="served"),
        versions=VERSIONS,
    ).record
    [plain] = ingest_logs([LOG], config=None, profile=None, inventory=None, store=store, versions=VERSIONS)
    assert plain.record.record_id != supervised.record_id
    learned = learn(config, store.load().records)  # type: ignore[arg-type]
    assert [u[:12] for u in learned.used] == [supervised.record_id[:12]]
    assert any(s.startswith(f"{plain.record.record_id}: the same boot log as") for s in learned.skipped)


@pytest.mark.parametrize("profile", ["turnkey", "gate", "r12-exl3"])
def test_the_record_gives_the_launched_configuration_back(profile: str, tmp_path: Path) -> None:
    # stored whole and read back from disk: no shipped profile or schema default stands in for any of it
    config = resolve_config(profile, (), environ={}).config
    store = Store(tmp_path / "calibration")
    ingest_launched(LOG, launched=config, profile=profile, inventory=None, store=store, versions=VERSIONS)
    [record] = store.load().records
    back = record_config(record)
    assert back is not None and back.model_dump(mode="json") == config.model_dump(mode="json")
