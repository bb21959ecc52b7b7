"""The band (issue 29 item 3): every term's uncertainty by how it was obtained, the ranges of KV tokens,
margin and runtime margin, the caution where no boot covered the shape, and the search at the low edge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO, assert_script_current, run_cli

from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger.band import facts, shape_key
from glmlaunch.plan.planner import plan_profile

SHIPPED = sorted(p.stem for p in (REPO / "profiles").glob("*.yaml"))
#: the shipped profiles a documented boot of the same release and shape covers (band_facts.json)
COVERED = ("exl3-tr3-3.36bpw", "exl3-tr3-3.42bpw", "r34-exl3-r7")
#: 3.42 bpw's shape at a release no allowed boot documents: the transfer band, and its margins fail there
UNCOVERED_THIN = ["release=r27"]


def plan_json(env: dict[str, str], profile: str, *sets: str, strict: bool = False) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    args = ["plan", "-p", profile, "--json"]
    for s in sets:
        args += ["--set", s]
    if strict:
        args.append("--strict")
    done = run_cli(*args, env=env)
    return done.returncode, json.loads(done.stdout), done.stderr


@pytest.mark.parametrize("profile", SHIPPED)
def test_every_shipped_profile_has_an_ordered_band_and_plans_ok_without_a_caution(
    clean_env: dict[str, str], profile: str
) -> None:
    code, doc, err = plan_json(clean_env, profile)
    b = doc["budget"]
    for key, point in (
        ("kv_tokens_range", "kv_tokens"),
        ("margin_bytes_range", "margin_bytes"),
        ("runtime_margin_bytes_range", "runtime_margin_bytes"),
    ):
        low, high = b[key]
        assert low <= b[point] <= high, (key, b[key], b[point])
    assert set(b["band"]["terms"]) == {"W", "P+N+G_e", "U_pre"}
    assert doc["verdict"]["status"] == "ok" and doc["verdict"]["ok"], doc["verdict"]["summary"]
    assert code == 0 and "caution" not in err
    # the old keys stay what they were
    assert isinstance(b["kv_tokens"], int) and isinstance(doc["verdict"]["confidence"], str)


@pytest.mark.parametrize("profile", COVERED)
def test_a_covered_shape_has_a_kv_band_at_most_two_percent_wide(profile: str) -> None:
    b = plan_profile(profile).budget
    assert b.band.covered, b.band.shape
    low, high = b.kv_tokens_range
    # a pinned pool holds its blocks whatever the terms: the width is the natural pool's then
    width = (high - low) / b.kv_tokens
    assert width <= 0.02, (profile, low, high, b.kv_tokens)
    assert b.band.term("P+N+G_e").kind == "calibrated"


def test_the_covered_natural_pool_of_an_upstream_boot_is_within_the_two_percent() -> None:
    b = plan_profile("exl3-tr3-3.42bpw", ["memory.num_gpu_blocks_override=null"]).budget
    assert b.band.covered and "r28-3.42-k6-natural-pool" in b.band.covered_by
    low, high = b.kv_tokens_range
    assert low < b.kv_tokens < high and (high - low) / b.kv_tokens <= 0.02


def test_an_uncovered_shape_with_a_thin_margin_is_a_caution_and_exit_7_under_strict(
    clean_env: dict[str, str],
) -> None:
    code, doc, err = plan_json(clean_env, "exl3-tr3-3.42bpw", *UNCOVERED_THIN)
    v, b = doc["verdict"], doc["budget"]
    assert code == 0 and v["status"] == "caution" and v["ok"] is True
    assert not b["band"]["covered"] and v["covered_by"] == []
    assert b["runtime_margin_bytes"] >= b["min_runtime_margin_bytes"] > b["runtime_margin_bytes_range"][0]
    assert v["band_cautions"] and "warning: caution: the runtime margin" in err
    # the confidence line names the terms that widen the band and the boot that narrows it
    assert "P+N+G_e" in v["band"] and "serve --supervise" in v["band"] and "r27" in v["band"]
    strict, doc2, err2 = plan_json(clean_env, "exl3-tr3-3.42bpw", *UNCOVERED_THIN, strict=True)
    assert strict == 7 and doc2 == doc
    assert err2.strip().splitlines()[-1].startswith("error: plan verdict is a caution")
    text = run_cli("plan", "-p", "exl3-tr3-3.42bpw", "--set", UNCOVERED_THIN[0], env=clean_env)
    assert text.returncode == 0 and "verdict: caution" in text.stdout and "band [" in text.stdout


def test_check_shows_the_caution_as_a_warning_and_strict_fails_it(clean_env: dict[str, str]) -> None:
    inv = FIXTURES / "inventories" / "rtxpro6000x4.json"
    args = ["check", "-p", "exl3-tr3-3.42bpw", "--set", UNCOVERED_THIN[0], "--inventory", str(inv), "--json"]
    done = run_cli(*args, env=clean_env)
    assert done.returncode == 0, done.stderr
    row = next(r for r in json.loads(done.stdout)["results"] if r["name"] == "memory_verdict")
    assert row["status"] == "WARN" and row["details"]["verdict"]["status"] == "caution"
    assert run_cli(*args, "--strict", env=clean_env).returncode == 7


def test_a_covered_shape_is_never_a_caution_even_where_its_low_edge_is_thin() -> None:
    # upstream served the 3.42 bpw pin at r28 (r28-3.42-k6-pin2032): 14.66 MiB of runtime margin at the
    # figures, rather less at the low edge of U_pre, which no r28 boot states
    b = plan_profile("exl3-tr3-3.42bpw").budget
    assert b.band.covered and b.verdict == "ok" and not b.caution
    assert b.runtime_margin_range[0] < b.runtime_margin


def test_the_caution_disappears_when_the_thin_margin_is_covered() -> None:
    covered = resolve_config("exl3-tr3-3.42bpw", [], environ={}).config
    other = resolve_config("exl3-tr3-3.42bpw", UNCOVERED_THIN, environ={}).config
    assert shape_key(covered) != shape_key(other)
    ids = {b["id"] for b in facts()["boots"] if b["shape"][0] == "r28"}
    assert "r28-3.42-k6-natural-pool" in ids


def test_search_uses_the_low_edge(clean_env: dict[str, str]) -> None:
    done = run_cli(
        "calibrate", "search", "-p", "exl3-tr3-3.42bpw", "--set", UNCOVERED_THIN[0],
        "--objective", "max-gmu", "--no-write", "--json", env=clean_env,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    doc = json.loads(done.stdout)
    failed = doc["closest_failed"]
    assert not failed["feasible"] and [x["id"] for x in failed["blockers"]] == ["band"]
    # the same value plans ok at its figures: only the low edge refuses it
    code, plan, _ = plan_json(
        clean_env, "exl3-tr3-3.42bpw", *UNCOVERED_THIN, f"memory.gpu_memory_utilization={failed['value']}"
    )
    assert code == 0 and plan["verdict"]["status"] == "caution"


def test_recommendations_keep_the_margins_at_the_low_edge() -> None:
    # half the turnkey's context: the recommended fixed pool holds one request (at 524,288 tokens it does
    # not, and the plan drops it: tests/plan/test_advice.py)
    shorter = "scheduler.max_model_len=262144"
    b = plan_profile("turnkey", [shorter]).budget
    assert not b.band.covered
    pinned = plan_profile(
        "turnkey", [shorter, f"memory.kv_cache_memory_bytes={b.recommended_kv_cache_memory_bytes}"]
    ).budget
    assert pinned.verdict == "ok"
    keep = max(pinned.min_margin, pinned.runtime_demand + pinned.min_runtime_margin)
    assert pinned.margin_range[0] >= keep > pinned.margin_range[0] - 2**20


def test_an_ingested_boot_of_the_shape_covers_it(tmp_path: Path, clean_env: dict[str, str]) -> None:
    log = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log"
    env = {**clean_env, "GLMLAUNCH_CACHE_DIR": str(tmp_path / "cache")}
    assert run_cli("calibrate", "ingest", str(log), env=env).returncode == 0
    base = tmp_path / "base.yaml"
    assert run_cli("profiles", "import", str(log), "-o", str(base), env=env).returncode == 0
    _, doc, err = plan_json(env, str(base))
    band = doc["budget"]["band"]
    assert band["covered"] and band["terms"]["P+N+G_e"]["kind"] == "calibrated", err
    assert "a boot of this shape is on record" in band["terms"]["P+N+G_e"]["why"]
    low, high = doc["budget"]["kv_tokens_range"]
    assert (high - low) / doc["budget"]["kv_tokens"] <= 0.02


def test_the_band_facts_are_what_the_script_derives() -> None:
    assert_script_current("derive_band.py")
    t = facts()["transfer"]
    for kind in ("shape", "release", "u_pre", "w_release", "w_estimate"):
        assert t[kind]["cases"], kind
        assert t[kind]["half_width_bytes"] == max(
            abs(c[1] if isinstance(c, list) else int(c["error_bytes"])) for c in t[kind]["cases"]
        )


#: variants that reach every verdict: an empty pool (refused), negative margins, thin runtime margins
VARIANTS = (
    ("memory.gpu_memory_utilization=0.9",),
    ("memory.gpu_memory_utilization=0.95",),
    ("memory.gpu_memory_utilization=0.95", "speculative.num_speculative_tokens=3"),
    ("memory.gpu_memory_utilization=0.98", "memory.num_gpu_blocks_override=null"),
    ("memory.gpu_memory_utilization=0.99",),
    ("model.weights_per_rank=95GiB",),
)


@pytest.mark.parametrize("profile", SHIPPED)
def test_every_range_holds_its_figure_whatever_the_verdict(profile: str) -> None:
    # a refused plan too: where no pool is left, the point and both edges price the pool the same way
    # (none), so the edges never both lie on one side of the figure
    for sets in VARIANTS:
        b = plan_profile(profile, sets).budget
        for rng, point in (
            (b.kv_tokens_range, b.kv_tokens),
            (b.margin_range, b.margin),
            (b.runtime_margin_range, b.runtime_margin),
        ):
            assert rng[0] <= point <= rng[1], (profile, sets, b.verdict, rng, point)
