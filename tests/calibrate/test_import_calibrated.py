"""A profile imported from a log is calibrated by that log (issue 31 item 13): it has the rig shape the log's
record is keyed on, even where the log names no release (a `dev` build: the field review's r14 baseline,
which used to inherit the closest base's sparkinfer-r28 while its record was keyed sparkinfer-r14, so "no
record applies: another rig shape"). Real logs, real profiles, a real store, the CLI end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli

from glmlaunch.calibrate.ingest import ingest_logs
from glmlaunch.calibrate.learn import group_key, learn, record_config
from glmlaunch.calibrate.store import Store
from glmlaunch.config.resolve import resolve_config
from glmlaunch.plan.profile_import import build_profile

BOOTS = FIXTURES / "boot-logs"
BASELINE = BOOTS / "vllm-r14-field-baseline-mtp3-c8-v2-server.log"
VERSIONS = {"vllm": None, "torch": None, "b12x": None, "sparkinfer": None}


@pytest.mark.parametrize("log", sorted(BOOTS.glob("*.log")), ids=lambda p: p.name)
def test_every_imported_profile_has_its_records_rig_shape(log: Path, tmp_path: Path) -> None:
    profile = tmp_path / "boot.yaml"
    profile.write_text(build_profile(log, environ={}).text, encoding="utf-8")
    config = resolve_config(str(profile), (), environ={}).config
    store = Store(tmp_path / "calibration")
    [item] = ingest_logs([log], config=None, profile=None, inventory=None, store=store, versions=VERSIONS)
    keyed = record_config(item.record)
    assert keyed is not None and group_key(config) == group_key(keyed)
    learned = learn(config, store.load().records)
    if item.record.usable or item.record.boot.refused:
        assert [u[:12] for u in learned.used] == [item.record.record_id[:12]], learned.skipped
    assert not any("another rig shape" in s for s in learned.skipped)


def test_the_field_baseline_names_no_release_and_its_profile_states_the_records_stack(tmp_path: Path) -> None:
    imported = build_profile(BASELINE, environ={})
    assert imported.version == "dev"
    assert imported.settings["stack"] == "sparkinfer-r14"
    config = resolve_config(_write(tmp_path, imported.text), (), environ={}).config
    assert config.stack == "sparkinfer-r14" and config.release_effective is None


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "boot.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_the_imported_profile_is_planned_with_its_own_log_end_to_end(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    profile = tmp_path / "boot.yaml"
    assert run_cli("profiles", "import", str(BASELINE), "-o", str(profile), env=clean_env).returncode == 0
    before = json.loads(run_cli("plan", "-p", str(profile), "--json", env=clean_env).stdout)
    assert before["verdict"]["confidence"] != "confirmed"
    done = run_cli("calibrate", "ingest", str(BASELINE), env=clean_env)
    assert done.returncode == 0, done.stderr
    plan = run_cli("plan", "-p", str(profile), "--json", env=clean_env)
    doc = json.loads(plan.stdout)
    assert doc["calibration"].startswith("using the term model fitted on 1 record(s) (")
    assert "no record applies" not in plan.stderr + doc["calibration"]
    assert doc["verdict"]["confidence"] == "confirmed"
    weights = next(e for e in doc["ranks"][0]["entries"] if e["name"] == "weights")
    assert weights["origin"] == "calibrated"
