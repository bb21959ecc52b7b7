"""calibrate search: the answer is the largest feasible grid value, and the next step up fails."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import pytest
from conftest import REPO, run_cli

from glmlaunch.calibrate.apply import model_calibration
from glmlaunch.calibrate.learn import learn
from glmlaunch.calibrate.model import TermModel
from glmlaunch.calibrate.records import Calibration
from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import GIB, MIB
from glmlaunch.errors import ConfigError
from glmlaunch.ledger import build_ledger
from glmlaunch.ledger.budget import compute_budget
from glmlaunch.ledger.model import PHASES
from glmlaunch.plan.search import Evaluation, SearchResult, overlay_yaml, search

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "boot-logs"
V3 = "vllm-current210-cap1024-mtp3-v3-server.log"
REFUSED = "vllm-current210-unset-mtp3-v1-server.log"


def validate(doc: object) -> None:
    """The real --json output against docs/schemas/calibrate-search.schema.json; unknown keys fail."""
    schema = json.loads((REPO / "docs" / "schemas" / "calibrate-search.schema.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    assert isinstance(doc, dict) and next(iter(doc)) == "schema_version"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "undescribed": 1}, schema, cls=jsonschema.Draft202012Validator)


def r12(*overrides: str) -> DeploymentConfig:
    return resolve_config("r12-exl3", overrides, environ={}).config


@pytest.fixture(scope="module")
def records() -> list[Calibration]:
    from glmlaunch.calibrate.ingest import ingest_logs

    paths = sorted(REAL.glob("*.log"))
    return [i.record for i in ingest_logs(paths, config=None, profile=None, inventory=None, store=None)]


def boot(name: str, records: list[Calibration]) -> DeploymentConfig:
    """The configuration a real boot ran (its own log's settings over r12-exl3)."""
    from glmlaunch.calibrate.learn import record_config

    cfg = record_config(next(r for r in records if r.boot.source.endswith(name)))
    assert cfg is not None
    return cfg


def at(cfg: DeploymentConfig, **changes: object) -> DeploymentConfig:
    data = cfg.model_dump(mode="python")
    for dotted, value in changes.items():
        node = data
        *parts, last = dotted.split("__")
        for part in parts:
            node = node[part]
        node[last] = value
    return DeploymentConfig.model_validate(data)


@pytest.fixture(scope="module")
def model(records: list[Calibration]) -> TermModel:
    learned = learn(boot(V3, records), records)
    assert learned.model is not None and len(learned.used) == 5
    return learned.model


def independent(config: DeploymentConfig, model: TermModel) -> tuple[int, int, int, bool]:
    """Margin, KV, one request and the start gate, straight from the model + ledger + budget."""
    cal = model_calibration(config, model, version=config.vllm_version)
    b = compute_budget(config, build_ledger(config, cal))
    return b.margin, b.kv, b.request_bytes, b.f0 >= b.gate


def feasible_independently(config: DeploymentConfig, model: TermModel) -> bool:
    margin, kv, need, gate_ok = independent(config, model)
    return (
        gate_ok
        and margin >= config.memory.min_margin
        and kv >= need
        and margin - runtime_demand(config, model) >= config.memory.min_runtime_margin
    )


def runtime_demand(config: DeploymentConfig, model: TermModel) -> int:
    """The runtime demand's peak, summed from the ledger's runtime entries (not the budget's figure)."""
    cal = model_calibration(config, model, version=config.vllm_version)
    demand = build_ledger(config, cal).runtime
    return max(sum(t.entry.device_bytes for t in demand.transients if t.phase == ph) for ph in PHASES)


def run(cfg: DeploymentConfig, objective: str, model: TermModel, **kw: object) -> SearchResult:
    return search(cfg, objective, model=model, version=cfg.vllm_version, calibration_message="m", **kw)  # type: ignore[arg-type]


def test_max_batched_tokens_is_the_largest_feasible_value(
    records: list[Calibration], model: TermModel
) -> None:
    cfg = boot(V3, records)
    result = run(cfg, "max-batched-tokens", model, upper=32768)
    assert result.best is not None and result.next_up is not None
    best = int(result.best.value)
    assert best % 256 == 0 and best > 3072  # the boot's 3072 kept room: KV 1.91 GiB for a 0.98 GiB request
    assert result.next_up.value == best + 256 and not result.next_up.feasible
    for tokens in range(1024, 32768 + 1, 256):  # brute force, without the search's evaluator
        assert feasible_independently(at(cfg, scheduler__max_num_batched_tokens=tokens), model) == (
            tokens <= best
        ), tokens


def test_max_prefill_capacity_lies_between_the_booted_and_the_refused_one(
    records: list[Calibration], model: TermModel
) -> None:
    # The shared boots: capacity 1024 booted, capacity 3072 (unset) was refused at the same GMU.
    cfg = boot(V3, records)
    result = run(cfg, "max-prefill-capacity", model)
    assert result.best is not None and result.next_up is not None
    best = int(result.best.value)
    assert 1024 <= best < 3072
    assert not result.next_up.feasible and any(
        r.startswith("the request fit") for r in result.next_up.reasons
    )
    for cap in range(256, 3072 + 1, 256):
        assert feasible_independently(at(cfg, exl3__prefill_capacity=cap), model) == (cap <= best), cap


def test_min_gmu_is_the_lowest_gmu_vllm_accepts(records: list[Calibration], model: TermModel) -> None:
    refused = boot(REFUSED, records)
    result = run(refused, "min-gmu", model)
    assert result.best is not None and result.next_up is not None
    lowest = float(result.best.value)
    # vLLM refused this configuration at 0.92: the lowest GMU it accepts is above that
    assert lowest > refused.memory.gpu_memory_utilization
    assert result.best.fits_one_request and not result.next_up.fits_one_request
    assert result.next_up.value == pytest.approx(lowest - 0.001)


def test_max_kv_bytes_next_mib_breaks_the_margin(records: list[Calibration], model: TermModel) -> None:
    cfg = boot(V3, records)
    result = run(cfg, "max-kv-bytes", model)
    assert result.best is not None and result.next_up is not None
    best = int(result.best.value)
    assert best % MIB == 0
    assert best == result.best.recommended_kv_cache_memory_bytes  # the budget's own answer agrees

    # the recommended size keeps both the 1 GiB minimum and the runtime demand; one MiB more breaks one
    def keeps(kv: int) -> bool:
        c = at(cfg, memory__kv_cache_memory_bytes=kv)
        margin = independent(c, model)[0]
        return margin >= GIB and margin - runtime_demand(c, model) >= 0

    assert keeps(best) and not keeps(best + MIB)
    assert any("margin" in r for r in result.next_up.reasons)


def test_max_gmu_and_a_stricter_margin(records: list[Calibration], model: TermModel) -> None:
    cfg = boot(V3, records)
    loose = run(cfg, "max-gmu", model)
    strict = run(cfg, "max-gmu", model, min_margin=2 * GIB)
    assert loose.best is not None and strict.best is not None and loose.next_up is not None
    assert strict.best.value < loose.best.value
    assert loose.next_up.value == pytest.approx(float(loose.best.value) + 0.001)
    feasible = [
        t
        for t in range(850, 1001)
        if feasible_independently(at(cfg, memory__gpu_memory_utilization=t / 1000), model)
    ]
    # small GMUs leave too little KV for one request, large ones eat the margin: one interval, ending at best
    assert feasible == list(range(feasible[0], feasible[-1] + 1))
    assert feasible[-1] == round(float(loose.best.value) * 1000)


def test_nothing_feasible_is_reported_with_the_failing_anchor(
    records: list[Calibration], model: TermModel
) -> None:
    result = run(boot(V3, records), "max-gmu", model, min_margin=60 * GIB)
    assert result.best is None and result.lower_bound is not None
    assert any("margin" in r for r in result.lower_bound.reasons)
    # max-gmu's anchor is the lowest GMU where one request fits: labelled as that, not "highest tried"
    assert result.bound_label == "lowest where one request fits"
    assert result.blocked_text().startswith("blocked by the margin: ")


def test_lossless_only() -> None:
    data = r12().model_dump(mode="python")
    data["comm"]["dma_wire_mode"] = "i8"
    compressed = DeploymentConfig.model_validate(data)
    with pytest.raises(ConfigError, match="lossless only"):
        search(compressed, "max-batched-tokens", calibration_message="m")
    data["comm"]["allow_compressed_wire"] = True
    opted_in = DeploymentConfig.model_validate(data)
    result = search(opted_in, "max-batched-tokens", calibration_message="m", upper=8192)
    assert result.best is not None and result.best.config.comm.dma_wire_mode == "i8"
    plain = search(r12(), "max-batched-tokens", calibration_message="m", upper=8192)
    assert plain.best is not None and plain.best.config.comm.dma_wire_mode == "0"


def test_overlay_extends_the_original_and_resolves(
    records: list[Calibration], model: TermModel, tmp_path: Path
) -> None:
    result = run(boot(V3, records), "max-batched-tokens", model, min_margin=2 * GIB, upper=16384)
    assert result.best is not None
    path = tmp_path / "overlay.yaml"
    path.write_text(overlay_yaml(result, extends="r12-exl3", command="glmlaunch calibrate search"))
    resolved = resolve_config(str(path), environ={})
    assert [p.name for p in resolved.profile_chain] == ["r12-exl3", "overlay"]
    assert resolved.config.scheduler.max_num_batched_tokens == result.best.value
    assert resolved.config.memory.min_margin == 2 * GIB
    best: Evaluation = result.best
    # at 11,520 batched tokens a fixed pool keeping exactly 2 GiB is 936 MiB, less than one 131,072-token
    # request (999 MiB): vLLM would refuse it, so the header offers none
    assert best.recommended_kv_cache_memory_bytes is None
    assert "memory.kv_cache_memory_bytes" not in path.read_text()
    assert "next step up" in path.read_text()
    # at 8,192 it holds one (3.2 GB): the header offers it
    result = run(boot(V3, records), "max-batched-tokens", model, min_margin=2 * GIB, upper=8192)
    assert result.best is not None and result.best.recommended_kv_cache_memory_bytes is not None
    text = overlay_yaml(result, extends="r12-exl3", command="glmlaunch calibrate search")
    assert f"memory.kv_cache_memory_bytes: {result.best.recommended_kv_cache_memory_bytes}" in text


def test_cli_search_with_a_stored_calibration(clean_env: dict[str, str], tmp_path: Path) -> None:
    for log in sorted(REAL.glob("*.log")):
        ingest = run_cli("calibrate", "ingest", str(log), env=clean_env)
        assert ingest.returncode == 0, ingest.stderr
    profile = tmp_path / "v3.yaml"
    imported = run_cli("profiles", "import", str(REAL / V3), "-o", str(profile), env=clean_env)
    assert imported.returncode == 0, imported.stderr
    out = tmp_path / "cal.yaml"
    res = run_cli(
        "calibrate",
        "search",
        "-p",
        str(profile),
        "--objective",
        "max-kv-bytes",
        "-o",
        str(out),
        "--json",
        env=clean_env,
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    model = doc["calibration"]["term_model"]
    assert model["origin"] == "calibrated" and len(model["records"]) == 5
    assert "term model fitted on 5 record(s)" in res.stderr
    assert doc["best"]["feasible"] and not doc["next_step"]["feasible"]
    assert doc["next_step"]["value"] == doc["best"]["value"] + MIB and doc["next_step"]["direction"] == "up"
    validate(doc)
    assert doc["kv_cache_memory_bytes"] == doc["best"]["value"]
    # the pinned alternative is data: in the JSON (above), not a message on stderr (issue 22, item 15)
    assert f"--kv-cache-memory-bytes={doc['best']['value']}" not in res.stderr
    assert resolve_config(str(out), environ={}).config.memory.kv_cache_memory_bytes == doc["best"]["value"]

    # A GPU without rig defaults and no applicable record: the ledger's defaults, said on stderr.
    other = ("--set", "hardware.gpu_model=NVIDIA H200")
    none = run_cli(
        "calibrate", "search", "-p", "gate", *other, "--objective", "max-gmu", "--no-write", env=clean_env
    )
    assert "no calibration record applies" in none.stderr and "ledger's defaults" in none.stderr

    impossible = run_cli(
        "calibrate",
        "search",
        "-p",
        str(profile),
        "--objective",
        "max-gmu",
        "--min-margin",
        "60GiB",
        "--no-write",
        env=clean_env,
    )
    assert impossible.returncode == 4, impossible.stderr
    assert "no value of memory.gpu_memory_utilization" in impossible.stderr
    assert "Traceback" not in impossible.stderr
    # nothing fits: nothing to prove and no settings to change, said plainly with the blocker
    assert "proof" not in impossible.stdout and "(none)" not in impossible.stdout
    assert "settings diff" not in impossible.stdout
    assert "fits: blocked by the margin: " in impossible.stderr.strip().splitlines()[-1]


# --- bounded: a search never runs unbounded (issue 13, item 16) -----------------------------------


def test_search_stops_at_the_evaluation_limit_with_the_best_value_so_far() -> None:
    from glmlaunch.plan.search import SearchLimitError

    with pytest.raises(SearchLimitError) as caught:
        search(r12(), "max-batched-tokens", calibration_message="m", upper=8192, max_evaluations=4)
    line = caught.value.one_line()
    assert "MAX_EVALUATIONS=4" in line and "stopped after 4 evaluations" in line
    assert "best feasible value so far: " in line and "not proven" in line
    assert caught.value.exit_code == 2 and caught.value.key == "scheduler.max_num_batched_tokens"


def test_search_stops_at_the_wall_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import glmlaunch.plan.search as search_mod

    readings = iter([0.0] * 6)  # the clock stands still for the first evaluations, then an hour passes

    monkeypatch.setattr(search_mod.time, "monotonic", lambda: next(readings, 3600.0))
    with pytest.raises(search_mod.SearchLimitError) as caught:
        search(r12(), "max-gmu", calibration_message="m", time_limit_s=30.0)
    line = caught.value.one_line()
    assert "stopped after 3600.0 s and " in line and "(wall-time limit TIME_LIMIT_S=30 s)" in line
    assert "so far" in line


def test_search_refuses_up_front_when_slow_evaluations_cannot_finish_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The case: a fuzzed profile whose every evaluation is slow ran past 20 s. Now it stops after
    # the first evaluation, forecasting the bisection's cost, and names the limit.
    import time as real_time

    import glmlaunch.plan.search as search_mod

    original = search_mod.Evaluator._rank_budgets

    def slow(self: search_mod.Evaluator, config: DeploymentConfig) -> object:
        real_time.sleep(0.2)
        return original(self, config)

    monkeypatch.setattr(search_mod.Evaluator, "_rank_budgets", slow)
    started = real_time.monotonic()
    with pytest.raises(search_mod.SearchLimitError, match="over the wall-time limit TIME_LIMIT_S=1 s"):
        search(r12(), "max-kv-bytes", calibration_message="m", time_limit_s=1.0)
    assert real_time.monotonic() - started < 1.0


def test_a_huge_range_stays_within_the_evaluation_limit() -> None:
    from glmlaunch.plan.search import MAX_EVALUATIONS

    result = search(r12(), "max-batched-tokens", calibration_message="m", step=1, upper=2**62)
    assert len(result.steps) <= MAX_EVALUATIONS
    assert result.best is not None and result.next_up is not None and not result.next_up.feasible


@pytest.mark.parametrize("upper", [math.inf, -math.inf, math.nan])
def test_a_non_finite_upper_end_is_a_configuration_error(upper: float) -> None:
    with pytest.raises(ConfigError, match="finite"):
        search(r12(), "max-gmu", calibration_message="m", upper=upper)


def test_step_zero_is_refused_not_silently_replaced() -> None:
    with pytest.raises(ConfigError, match="at least 1"):
        search(r12(), "max-batched-tokens", calibration_message="m", step=0)


@pytest.mark.parametrize(
    ("objective", "upper"),
    [("max-gmu", "inf"), ("max-gmu", "nan"), ("min-gmu", "-inf"), ("max-batched-tokens", "1e9")],
)
def test_cli_bad_upper_end_exits_2_in_one_line(objective: str, upper: str, clean_env: dict[str, str]) -> None:
    res = run_cli(
        "calibrate",
        "search",
        "-p",
        "r12-exl3",
        "--objective",
        objective,
        "--max",
        upper,
        "--no-write",
        env=clean_env,
    )
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "error: --max" in res.stderr


def test_cli_min_gmu_takes_a_fractional_upper_end(clean_env: dict[str, str]) -> None:
    res = run_cli(
        "calibrate",
        "search",
        "-p",
        "r12-exl3",
        "--objective",
        "min-gmu",
        "--max",
        "0.99",
        "--no-write",
        "--json",
        env=clean_env,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["range_end"] == pytest.approx(0.99)


# --- nothing fits, and the labels of what was tried (issue 11) ------------------------------------------


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], str]:
    """An environment whose store holds the five real boots, and the V3 boot's own profile.

    Its verdicts are confirmed (W and the KV bytes per token come from the records), so one request's fit
    decides them, where the shipped profiles' estimates only make it a caution.
    """
    from conftest import _clean_env

    tmp = tmp_path_factory.mktemp("calibrated")
    (tmp / "home").mkdir()
    env = _clean_env(tmp)
    ingest = run_cli("calibrate", "ingest", *map(str, sorted(REAL.glob("*.log"))), env=env)
    assert ingest.returncode == 0, ingest.stderr
    profile = tmp / "v3.yaml"
    imported = run_cli("profiles", "import", str(REAL / V3), "-o", str(profile), env=env)
    assert imported.returncode == 0, imported.stderr
    return env, str(profile)


#: A card on which W + P + N + G_e leave less KV than one request of the V3 boot needs, at any GMU.
SMALL_CARD = ["--set", "hardware.memory_per_gpu=85.7GiB"]


@pytest.mark.parametrize(
    ("profile", "objective", "extra", "label", "value", "blocker"),
    [
        # one (confirmed) request never fits, up to GMU 1.000: the highest GMU tried, not "lowest tried"
        ("boot", "max-gmu", SMALL_CARD, "highest tried", "1.000", "the request fit"),
        ("boot", "min-gmu", SMALL_CARD, "highest tried", "1.000", "the request fit"),
        ("boot", "max-kv-bytes", ["--max", "512MiB"], "highest tried", None, "the request fit"),
        # the margin fails everywhere: the lowest value past the low end, the smallest batch
        ("boot", "max-gmu", ["--min-margin", "20GiB"], "lowest where one request fits", None, "the margin"),
        ("boot", "min-gmu", ["--min-margin", "20GiB"], "lowest where one request fits", None, "the margin"),
        # turnkey's request fit rests on the rig's estimates, which decide: the low end is where one fits
        *(
            ("turnkey", gmu, ["--min-margin", "20GiB"], "lowest where one request fits", None, "the margin")
            for gmu in ("max-gmu", "min-gmu")
        ),
        # the turnkey pins its EXL3 arena at 3,072 (upstream's VLLM_EXL3_PREFILL_CAPACITY): batched tokens
        # cannot go below it; with the arena following the chunk, the search starts at 256
        ("turnkey", "max-batched-tokens", ["--min-margin", "20GiB"], "lowest tried", "3,072", "the margin"),
        (
            "turnkey",
            "max-batched-tokens",
            ["--min-margin", "20GiB", "--set", "exl3.prefill_capacity=null"],
            "lowest tried",
            "256",
            "the margin",
        ),
        ("turnkey", "max-prefill-capacity", ["--min-margin", "20GiB"], "lowest tried", "256", "the margin"),
    ],
)
def test_nothing_fits_says_so_plainly_with_the_blocker(
    clean_env: dict[str, str],
    calibrated: tuple[dict[str, str], str],
    profile: str,
    objective: str,
    extra: list[str],
    label: str,
    value: str | None,
    blocker: str,
) -> None:
    env, name = calibrated if profile == "boot" else (clean_env, profile)
    args = ["calibrate", "search", "-p", name, "--objective", objective, "--no-write", *extra]
    text = run_cli(*args, env=env)
    assert text.returncode == 4, text.stderr
    assert "proof" not in text.stdout and "next step" not in text.stdout
    assert "(none)" not in text.stdout and "settings diff" not in text.stdout
    assert "no value of " in text.stdout and "fits" in text.stdout
    row = next(line for line in text.stdout.splitlines() if line.startswith(f"│ {label} "))
    if value is not None:
        assert f" {value} " in row
    for wrong in ("lowest tried", "highest tried", "bound tried", "lowest where", "lowest that"):
        if not label.startswith(wrong):
            assert f"│ {wrong} " not in text.stdout
    error = text.stderr.strip().splitlines()[-1]
    assert f"fits: blocked by {blocker}" in error, error
    if blocker == "the request fit":
        # the margin is not blamed for what the request fit blocks
        assert "blocked by the margin" not in error
        assert "lower scheduler.max_model_len" in error
    done = run_cli(*args, "--json", env=env)
    assert done.returncode == 4
    doc = json.loads(done.stdout)
    validate(doc)
    assert doc["feasible"] is False and doc["best"] is None and doc["next_step"] is None
    assert doc["changes"] == {} and doc["closest_failed"]["label"] == label
    assert doc["blocked"].startswith(f"blocked by {blocker}")
    if profile == "turnkey" and label != "lowest tried":
        # the rig's estimates decide the request fit: nothing is left to say as a caution
        assert doc["closest_failed"]["cautions"] == []


def test_best_at_the_end_of_the_range_claims_no_step_past_it(clean_env: dict[str, str]) -> None:
    done = run_cli(
        "calibrate",
        "search",
        "-p",
        "turnkey",
        "--objective",
        "max-prefill-capacity",
        "--no-write",
        env=clean_env,
    )
    assert done.returncode == 0, done.stderr
    assert "the next step up does not" not in done.stdout and "proof" not in done.stdout
    assert "is the end of the searched range: there is no step up to try" in done.stdout
    # the profile's value is already the best: no empty settings diff, a note instead
    assert "(none)" not in done.stdout and "settings diff" not in done.stdout
    assert "nothing to change" in done.stderr


def test_min_gmu_whose_lowest_accepted_value_misses_the_margin_is_not_an_answer(
    records: list[Calibration], model: TermModel
) -> None:
    """The lowest GMU the verdict accepts is no answer when the margin fails there (it only shrinks above)."""
    result = run(boot(V3, records), "min-gmu", model, min_margin=60 * GIB)
    assert result.best is None and result.next_up is None and result.lower_bound is not None
    assert result.bound_label == "lowest where one request fits"
    assert result.lower_bound.fits_one_request and not result.lower_bound.feasible
    assert result.blocked_text().startswith("blocked by the margin: ")


def test_the_search_names_its_confidence_and_stops_where_one_request_no_longer_fits(
    clean_env: dict[str, str],
) -> None:
    done = run_cli("calibrate", "search", "-p", "turnkey", "--no-write", "--json", env=clean_env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    validate(doc)
    assert doc["verdict"]["status"] == "ok" and doc["verdict"]["confidence"] == "estimate"
    # the rig's W and KV record size are estimates fitted on its real boots: good enough to decide. The
    # step up is refused where the long prefill's demand (it grows with the chunk) no longer fits the
    # margin, before one max_model_len request stops fitting the pool
    assert doc["best"]["feasible"] and doc["best"]["blockers"] == [] and doc["best"]["fits_one_request"]
    assert [b["id"] for b in doc["next_step"]["blockers"]] == ["runtime"]
    text = run_cli("calibrate", "search", "-p", "turnkey", "--no-write", env=clean_env)
    assert "confidence: estimate" in text.stdout


def test_on_default_figures_the_request_fit_is_a_caution_in_search(clean_env: dict[str, str]) -> None:
    # a checkpoint nothing is known of: W is a built-in default, so one request's fit cannot decide
    done = run_cli(
        "calibrate",
        "search",
        "-p",
        "turnkey",
        "--set",
        "hardware.gpu_model=NVIDIA H200",
        "--set",
        "model.path=/models/unknown",
        "--set",
        "model.revision=null",
        "--set",
        "scheduler.max_model_len=1000000",
        "--no-write",
        "--json",
        # a GMU whose margin holds the runtime demand on the built-in default figures
        "--set",
        "memory.gpu_memory_utilization=0.945",
        env=clean_env,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["best"]["feasible"] and not doc["best"]["fits_one_request"]
    assert doc["best"]["cautions"][0].startswith("the request fit (unconfirmed: ")


# --- one verdict: a value is feasible in search exactly when plan calls it ok (issue 11) --------------


def _plan_ok(env: dict[str, str], profile: str, sets: list[str]) -> bool:
    args = ["plan", "-p", profile, "--json"]
    for s in sets:
        args += ["--set", s]
    done = run_cli(*args, env=env)
    assert done.returncode in (0, 4), done.stderr
    verdict = json.loads(done.stdout)["verdict"]
    assert verdict["ok"] == (done.returncode == 0)
    # a caution (ok at the figures, not at the band's low edge) is not a value the search may pick
    return bool(verdict["ok"]) and verdict["status"] != "caution"


@pytest.mark.parametrize(
    ("profile", "objective", "extra"),
    [
        ("turnkey", "max-batched-tokens", ["--set", "exl3.prefill_capacity=null"]),
        ("turnkey", "min-gmu", []),
        ("turnkey", "max-gmu", []),
        ("gate", "max-kv-bytes", []),
        ("r12-exl3", "max-prefill-capacity", ["--min-margin", "2GiB"]),
        ("gate", "min-gmu", ["--set", "scheduler.max_model_len=131072"]),
        ("boot", "max-batched-tokens", []),
        ("boot", "min-gmu", []),
    ],
)
def test_search_feasibility_is_plans_verdict(
    clean_env: dict[str, str],
    calibrated: tuple[dict[str, str], str],
    profile: str,
    objective: str,
    extra: list[str],
) -> None:
    env, name = calibrated if profile == "boot" else (clean_env, profile)
    done = run_cli(
        "calibrate", "search", "-p", name, "--objective", objective, "--no-write", "--json", *extra, env=env
    )
    assert done.returncode in (0, 4), done.stderr
    doc = json.loads(done.stdout)
    sets = [extra[i + 1] for i, a in enumerate(extra) if a == "--set"]
    if "--min-margin" in extra:
        sets.append(f"memory.min_margin={extra[extra.index('--min-margin') + 1]}")
    tried = {e["value"]: e["feasible"] for e in (doc["best"], doc["next_step"], doc["closest_failed"]) if e}
    steps = [s for s in doc["steps"] if s["value"] not in tried]
    for s in (steps[0], steps[len(steps) // 2]) if steps else ():  # two more of the values it bisected
        tried[s["value"]] = s["feasible"]
    for value, feasible in tried.items():
        assert _plan_ok(env, name, [*sets, f"{doc['knob']}={value}"]) == feasible, (value, doc["blocked"])
    if profile == "turnkey" and objective == "max-batched-tokens":
        # the reviewer's case, with the EXL3 arena following the chunk as the launchers did then: plan and
        # search answer 4,096 alike (the long prefill's demand no longer fits the margin there)
        assert not _plan_ok(env, name, [*sets, "scheduler.max_num_batched_tokens=4096"])
        assert doc["best"]["value"] < 4096 and doc["next_step"]["blockers"][0]["id"] == "runtime"


def test_search_refuses_to_overwrite_an_overlay_without_force(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """Issue 22, item 16: one rule for output files (profiles import's): an existing one only with --force."""
    out = tmp_path / "overlay.yaml"
    out.write_text("mine: keep\n")
    args = ("calibrate", "search", "-p", "r12-exl3", "--objective", "max-gmu", "-o", str(out))
    refused = run_cli(*args, env=clean_env)
    assert refused.returncode == 2 and refused.stdout == ""
    want = f"error: --output: the output file exists; got '{out}'; hint: pass --force to overwrite it\n"
    assert refused.stderr == want
    assert out.read_text() == "mine: keep\n"
    forced = run_cli(*args, "--force", env=clean_env)
    assert forced.returncode == 0, forced.stderr
    assert "extends: r12-exl3" in out.read_text()
    # the default name follows the same rule
    default = tmp_path / "r12-exl3-max-gmu.yaml"
    default.write_text("mine: keep\n")
    again = run_cli(*args[:5], "max-gmu", env=clean_env, cwd=tmp_path)
    assert again.returncode == 2 and default.read_text() == "mine: keep\n"


def test_nothing_to_change_writes_no_overlay_and_says_so(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """Issue 31, item 14: the profile's own value is the best: an overlay would only repeat the profile."""
    tmp_path = tmp_path / "work"
    tmp_path.mkdir()
    search = ("calibrate", "search", "-p", "turnkey", "--objective")
    done = run_cli(*search, "max-prefill-capacity", env=clean_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []
    assert "nothing to change" in done.stderr and "no overlay written" in done.stderr
    assert "wrote the calibrated overlay" not in done.stderr
    doc = json.loads(run_cli(*search, "max-prefill-capacity", "--json", env=clean_env, cwd=tmp_path).stdout)
    assert doc["overlay"] is None and list(tmp_path.iterdir()) == []
    # a search that changes something still writes its overlay
    changed = run_cli(*search, "min-gmu", env=clean_env, cwd=tmp_path)
    assert changed.returncode == 0 and (tmp_path / "turnkey-min-gmu.yaml").is_file(), changed.stderr
