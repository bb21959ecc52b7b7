"""The term model on the real boots: fit, transfer across knobs, rig defaults; the CLI around it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import REPO, run_cli

from glmlaunch.calibrate.apply import calibration_for, model_calibration
from glmlaunch.calibrate.ingest import ingest_logs
from glmlaunch.calibrate.learn import learn, record_config
from glmlaunch.calibrate.model import fit_model, fit_term
from glmlaunch.calibrate.records import Calibration
from glmlaunch.calibrate.rigdefaults import load_document, rig_prior
from glmlaunch.calibrate.store import Store
from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import GIB, MIB
from glmlaunch.ledger import build_ledger, kv_cache
from glmlaunch.ledger.budget import compute_budget
from glmlaunch.ledger.inputs import UNCALIBRATED

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "boot-logs"
MTP0 = "vllm-current210-cap1024-mtp0-v1-server.log"
V3 = "vllm-current210-cap1024-mtp3-v3-server.log"
BASE = "vllm-r14-field-baseline-mtp3-c8-v2-server.log"
REFUSED = "vllm-current210-unset-mtp3-v1-server.log"
TRUNCATED = "vllm-current210-cap1024-mtp3-v1-server.log"
COMPLETE = (MTP0, V3, BASE)


@pytest.fixture(scope="module")
def records() -> dict[str, Calibration]:
    paths = sorted(REAL.glob("*.log"))
    got = ingest_logs(paths, config=None, profile=None, inventory=None, store=None)
    return {Path(i.record.boot.source).name: i.record for i in got}


def config_of(rec: Calibration) -> DeploymentConfig:
    cfg = record_config(rec)
    assert cfg is not None
    return cfg


def predicted(cfg: DeploymentConfig, recs: list[Calibration]):  # type: ignore[no-untyped-def]
    learned = learn(cfg, recs)
    assert learned.model is not None
    cal = model_calibration(cfg, learned.model, version=cfg.vllm_version)
    return compute_budget(cfg, build_ledger(cfg, cal)), cal


def test_every_shared_log_gives_a_record_or_says_why(records: dict[str, Calibration]) -> None:
    for name in COMPLETE:
        assert records[name].usable, (name, records[name].unusable_reason())
    assert "refused" in (records[REFUSED].unusable_reason() or "")
    assert "0.98 GiB" in (records[REFUSED].unusable_reason() or "")
    assert "truncated" in (records[TRUNCATED].unusable_reason() or "")
    # each record is keyed on what its own log booted, not on a profile
    assert config_of(records[MTP0]).mtp == 0 and config_of(records[V3]).mtp == 3
    assert config_of(records[BASE]).scheduler.max_num_seqs == 8
    assert config_of(records[REFUSED]).exl3.prefill_capacity == 3072
    assert config_of(records[V3]).exl3.prefill_capacity == 1024
    assert len({r.fingerprint_digest for r in records.values()}) == 5


@pytest.mark.parametrize("name", COMPLETE)
def test_a_plan_of_each_boot_from_the_other_boots_matches_its_kv_tokens(
    name: str, records: dict[str, Calibration]
) -> None:
    target = records[name]
    cfg = config_of(target)
    others = [r for n, r in records.items() if n != name]
    budget, _ = predicted(cfg, others)
    logged = target.boot.engine.kv_cache_tokens
    assert logged is not None
    assert abs(budget.kv_tokens - logged) / logged <= 0.02, (budget.kv_tokens, logged)


def test_the_refused_boot_is_predicted_refused_with_vllms_reason(records: dict[str, Calibration]) -> None:
    cfg = config_of(records[REFUSED])
    others = [r for n, r in records.items() if n != REFUSED]
    budget, _ = predicted(cfg, others)
    assert budget.verdict == "refused" and not budget.request_fits
    assert any("131,072-token request" in r for r in budget.reasons)
    # vLLM: 0.98 GiB needed, 0.82 GiB available, estimated maximum model length 110,080
    assert budget.request_bytes == pytest.approx(0.98 * GIB, abs=0.005 * GIB)
    assert budget.kv == pytest.approx(0.82 * GIB, abs=0.03 * GIB)


def test_the_same_boot_is_reproduced_term_by_term(records: dict[str, Calibration]) -> None:
    rec = records[V3]
    cfg = config_of(rec)
    budget, cal = predicted(cfg, list(records.values()))
    w = rec.worst()
    res = 6 * MIB  # two-decimal GiB figures
    assert budget.w == w.weights_bytes
    assert abs(budget.p - (w.activation_peak_bytes or 0)) <= res
    assert abs(budget.n - (w.non_torch_bytes or 0)) <= 2 * res
    assert abs(budget.g_e - (w.graph_estimate_bytes or 0)) <= res
    assert abs(budget.u_pre - (w.pre_snapshot_bytes or 0)) <= res
    assert any("cannot split the CUDA context" in n for n in cal.notes)


def test_a_term_no_record_varies_keeps_its_prior_and_says_so() -> None:
    cfg = resolve_config("r12-exl3", environ={}).config
    rows = [("a", {"const": 1.0, "tokens": 3.0, "mtp": 1.0}, float(GIB))]
    fit = fit_term("p", rows, {"const": 0.0, "tokens": 100 * MIB, "mtp": 0.0}, prior_source="test")
    assert set(fit.unidentified) == {"tokens", "mtp"}
    # one record is reproduced (to the ridge's few bytes), whatever the prior
    ((label, resid),) = fit.residuals
    assert label == "a" and abs(resid) <= 2
    assert fit.residual_bytes(cfg) != 0


def test_w_transfers_across_mtp_and_checkpoints(records: dict[str, Calibration]) -> None:
    model = fit_model([p for p in _points(records) if p.w is not None])
    layer = model.weights.mtp_layer[0][1]
    assert layer == pytest.approx(1.64 * GIB, abs=0.01 * GIB)  # 83.57 - 81.93 GiB, same vLLM build
    # the boots speak for their own checkpoint only: the 3.0 bpw checkpoint nobody booted here is the
    # weights entry's to decide (the documented 3.0 bpw figure), never a cross-checkpoint residual
    shipped = resolve_config("r12-exl3", environ={}).config
    assert model.weights.predict(shipped) is None
    cal = model_calibration(shipped, model)
    w = build_ledger(shipped, cal).entry("weights")
    assert w is not None and w.requested_bytes == round(77.66 * GIB) and "TEST_RESULTS.md" in w.formula
    # a bit rate nobody documented: the nearest documented checkpoint, routed experts rescaled
    other = resolve_config(
        "r12-exl3", ["model.path=/m/GLM-5.2-EXL3-TR3-3.5bpw", "model.revision=null"]
    ).config
    o = build_ledger(other, model_calibration(other, model)).entry("weights")
    assert o is not None and o.origin == "estimate" and "3.5 instead of 3.42 bits" in o.formula
    # the 3.25 checkpoint at MTP 5: the MTP3 boots' W (the MTP layer is in it whatever k is)
    k5 = config_of(records[V3]).model_copy(
        update={
            "speculative": config_of(records[V3]).speculative.model_copy(update={"num_speculative_tokens": 5})
        }
    )
    w5, origin5, why5 = model.weights.predict(k5) or (0, "", "")
    # the mean of this release's MTP-on boots (83.57 GiB three times; the field image's 83.28)
    assert origin5 == "calibrated" and abs(w5 - (records[V3].worst().weights_bytes or 0)) < 0.3 * GIB
    assert "logged by" in why5


def _points(records: dict[str, Calibration]):  # type: ignore[no-untyped-def]
    from glmlaunch.calibrate.learn import points_from

    return points_from(list(records.values()))


def test_rig_defaults_are_the_fit_of_the_shipped_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    # the fit is a maintainer script's (build time), not the package's
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    from derive_rig_defaults import derive_document

    shipped = load_document()
    derived = derive_document([str(p) for p in sorted(REAL.glob("*.log"))], REPO / "data" / "upstream")
    assert json.loads(json.dumps(derived)) == shipped
    for term in ("u_pre", "n", "p", "g_e"):
        assert shipped["terms"][term]["citations"], term  # every default cites its log lines
        assert all(":" in c and c.split(":")[0].endswith(".log") for c in shipped["terms"][term]["citations"])


def test_rig_defaults_apply_to_the_rig_only() -> None:
    rig = resolve_config("turnkey", environ={}).config
    h200 = resolve_config("turnkey", ["hardware.gpu_model=NVIDIA H200"], environ={}).config
    assert rig_prior(rig) is not None and rig_prior(h200) is None


def test_calibration_for_says_what_it_used(tmp_path: Path, records: dict[str, Calibration]) -> None:
    store = Store(tmp_path / "cal")
    r12 = resolve_config("r12-exl3", environ={}).config
    rig_only = calibration_for(r12, store=store)
    assert rig_only.inputs != UNCALIBRATED and rig_only.message.startswith("using the rig defaults")
    h200 = resolve_config("r12-exl3", ["hardware.gpu_model=NVIDIA H200"], environ={}).config
    none = calibration_for(h200, store=store)
    assert none.inputs == UNCALIBRATED and "no calibration records" in none.message
    for rec in records.values():
        store.save(rec)
    use = calibration_for(r12, store=store)
    assert use.inputs != UNCALIBRATED and "term model fitted on 5 record(s)" in use.message
    dcp2 = resolve_config("r12-exl3", ["parallel.dcp=2"], environ={}).config
    other = calibration_for(dcp2, store=store)
    assert "another rig shape" in other.message


def test_kv_tokens_are_whole_blocks_per_rank() -> None:
    # the MTP3 boot: 1.91 GiB of KV, 31,976 B/token/rank -> 1,004 blocks of 64 tokens on each of 4 ranks
    assert kv_cache.tokens_for(2_054_649_856, 31_976, 4) == 257_024
    assert kv_cache.tokens_for(2_054_649_855, 31_976, 4) == 256_768


def validate(text: str, name: str) -> dict[str, Any]:
    """A real --json output against docs/schemas/<name>.schema.json: one object, schema_version first,
    and a key the schema does not describe fails."""
    doc = json.loads(text)
    schema = json.loads((REPO / "docs" / "schemas" / f"{name}.schema.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    assert isinstance(doc, dict) and next(iter(doc)) == "schema_version" and doc["schema_version"] == 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "undescribed": 1}, schema, cls=jsonschema.Draft202012Validator)
    return doc


def test_a_rig_defaults_file_rewritten_in_place_is_read_again(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    """Two runs in one process (as the tests run them) each price the file GLMLAUNCH_RIG_DEFAULTS names as
    it is then, not as an earlier run found it."""
    rig = json.loads((REPO / "glmlaunch" / "calibrate" / "rig_defaults.json").read_text())
    path = tmp_path / "rig-defaults.json"
    env = dict(clean_env, GLMLAUNCH_RIG_DEFAULTS=str(path))
    said = []
    for description in ("first rig defaults", "the rig defaults rewritten"):
        path.write_text(json.dumps({**rig, "description": description}))
        done = run_cli("plan", "-p", "turnkey", "--json", env=env)
        assert done.returncode == 0, done.stderr
        said.append(json.loads(done.stdout)["calibration"])
    assert "(first rig defaults)" in said[0] and "(the rig defaults rewritten)" in said[1], said


def test_calibrate_json_documents_follow_their_schemas_with_an_empty_store(clean_env: dict[str, str]) -> None:
    listed = run_cli("calibrate", "list", "--json", env=clean_env)
    assert listed.returncode == 0, listed.stderr
    assert validate(listed.stdout, "calibrate-list")["records"] == []
    rig = run_cli("calibrate", "show", "-p", "turnkey", "--json", env=clean_env)
    assert rig.returncode == 0, rig.stderr
    doc = validate(rig.stdout, "calibrate-show")
    assert doc["record"] is None and doc["term_model"]["origin"] == "rig-default"
    none = run_cli(
        "calibrate",
        "show",
        "-p",
        "turnkey",
        "--set",
        "hardware.gpu_model=NVIDIA H200",
        "--json",
        env=clean_env,
    )
    assert none.returncode == 0, none.stderr
    doc = validate(none.stdout, "calibrate-show")
    assert doc["record"] is None and doc["term_model"] is None and "no calibration records" in doc["message"]


def test_cli_ingest_list_show(clean_env: dict[str, str], tmp_path: Path) -> None:
    logs = [str(REAL / n) for n in (V3, TRUNCATED, REFUSED)]
    res = run_cli("calibrate", "ingest", *logs, "--json", env=clean_env)
    assert res.returncode == 0, res.stderr
    full, trunc, refused = validate(res.stdout, "calibrate-ingest")["records"]
    assert full["usable"] and not trunc["usable"] and not refused["usable"]
    assert "saved" in res.stderr and "no inventory" in res.stderr
    assert "REFUSED: one 131072-token request needs 0.98 GiB of KV, 0.82 GiB available" in res.stderr
    assert "truncated" in res.stderr

    # a profile given with -p is compared with the boot, setting by setting, and never adopted
    again = run_cli("calibrate", "ingest", logs[0], "-p", "turnkey", "--dry-run", "--json", env=clean_env)
    assert again.returncode == 0, again.stderr
    (dry,) = json.loads(again.stdout)["records"]
    assert dry["fingerprint_digest"] == full["fingerprint_digest"]
    assert "profile turnkey differs from the boot" in again.stderr
    assert "parallel.dcp: profile 2, boot 4" in again.stderr

    listed = run_cli("calibrate", "list", "--json", env=clean_env)
    assert listed.returncode == 0
    ids = {r["record_id"] for r in validate(listed.stdout, "calibrate-list")["records"]}
    assert ids == {full["record_id"], trunc["record_id"], refused["record_id"]}

    shown = run_cli("calibrate", "show", full["record_id"], "--json", env=clean_env)
    assert shown.returncode == 0, shown.stderr
    assert validate(shown.stdout, "calibrate-show")["record"]["record_id"] == full["record_id"]

    # without an id: the term model the profile's plan uses, term by term, with its records and residuals
    profile = tmp_path / "v3.yaml"
    assert run_cli("profiles", "import", logs[0], "-o", str(profile), env=clean_env).returncode == 0
    model = run_cli("calibrate", "show", "-p", str(profile), "--json", env=clean_env)
    assert model.returncode == 0, model.stderr
    doc = validate(model.stdout, "calibrate-show")["term_model"]
    assert doc["origin"] == "calibrated" and len(doc["records"]) == 3
    p = doc["terms"]["p"]
    assert set(p["features"]) == {"const", "tokens", "mtp"} and p["records"]
    assert all(abs(r) <= 16 * MIB for r in p["residuals_bytes"].values())
    assert doc["terms"]["w"]["origin"] == "calibrated"
    assert "P (torch peak" in doc["explain"]["p"]


def test_cli_ingest_errors(clean_env: dict[str, str], tmp_path: Path) -> None:
    missing = run_cli("calibrate", "ingest", str(tmp_path / "nope.log"), env=clean_env)
    assert missing.returncode == 2 and "no such log file" in missing.stderr
    empty = tmp_path / "empty.log"
    empty.write_text("hello\n")
    res = run_cli("calibrate", "ingest", str(empty), env=clean_env)
    assert res.returncode == 2 and "no vLLM worker lines" in res.stderr
    assert "Traceback" not in res.stderr
