"""The runtime demand after the KV pool (issue 19): the appliance's recorded outcomes, planned with the
shipped profiles through the real CLI, come out as they happened; the fix is computed; the fitted terms
are what scripts/derive_runtime_facts.py derives from data/upstream."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import REPO, assert_script_current, run_cli

from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger import build_ledger
from glmlaunch.ledger.budget import band_over, compute_budget
from glmlaunch.ledger.demand.facts import term

MIB = 1024 * 1024
OUTCOMES = {r["id"]: r for r in json.loads((REPO / "data/upstream/outcomes.json").read_text())["rows"]}
CASES = json.loads((REPO / "data/upstream/runtime_cases.json").read_text())["cases"]


def plan(env: dict[str, str], profile: str, *sets: str) -> dict[str, Any]:
    args = ["plan", "-p", profile, "--json"]
    for s in sets:
        args += ["--set", s]
    done = run_cli(*args, env=env)
    doc: dict[str, Any] = json.loads(done.stdout)
    assert done.returncode == (0 if doc["verdict"]["ok"] else 4), done.stderr
    return doc


# issue 19's table, each row planned as the issue says: (profile, sets, served?, logged KV tokens)
R9 = ("scheduler.max_model_len=513536", "lmcache=false")
ISSUE_CASES = [
    ("turnkey", (*R9, "memory.gpu_memory_utilization=0.955"), True, 532_224),
    ("turnkey", (*R9, "memory.gpu_memory_utilization=0.96"), True, 575_488),
    ("turnkey", (*R9, "memory.gpu_memory_utilization=0.9675"), False, 623_232),
    ("turnkey", (*R9, "memory.gpu_memory_utilization=0.976"), False, 677_504),
    ("exl3-tr3-3.42bpw", (), True, 520_192),
    ("exl3-tr3-3.42bpw", ("memory.num_gpu_blocks_override=null",), False, 524_800),
    ("exl3-tr3-3.36bpw", (), True, 524_288),
    (
        "exl3-tr3-3.36bpw",
        (
            "release=r20",
            "memory.num_gpu_blocks_override=null",
            "memory.gpu_memory_utilization=0.957",
            # before r26's two-shard indexer policy (TEST_RESULTS.md L1293-1310)
            "dcp_policy.indexer_shards=0",
        ),
        False,
        741_888,
    ),
    ("exl3-tr3-3.25bpw", (), True, 524_288),
]


@pytest.mark.parametrize(("profile", "sets", "served", "kv_logged"), ISSUE_CASES)
def test_the_recorded_outcomes_come_out_as_they_happened(
    clean_env: dict[str, str], profile: str, sets: tuple[str, ...], served: bool, kv_logged: int
) -> None:
    doc = plan(clean_env, profile, *sets)
    b, v = doc["budget"], doc["verdict"]
    assert abs(b["kv_tokens"] - kv_logged) / kv_logged <= 0.02  # KV within 2 % of the logged pool
    assert v["ok"] is served, v["summary"]
    assert (
        v["runtime"]["margin_bytes"]
        == b["runtime_margin_bytes"]
        == b["margin_bytes"] - b["runtime_demand_bytes"]
    )
    if not served:
        # booted (the boot margin holds), then the first long request died: the runtime margin blocks,
        # naming the transient and its phase
        assert v["status"] == "runtime-oom" and v["blocker"] == "runtime"
        assert b["margin_bytes"] >= 0 and b["runtime_margin_bytes"] < 0
        assert v["runtime"]["phase"] == "long-prefill"
        assert v["runtime"]["deciding"] in v["blockers"][0]["message"]
        assert v["runtime"]["deciding"] in doc["runtime_demand"]["phase_of"]


def test_the_natural_pools_name_the_transient_the_records_name(clean_env: dict[str, str]) -> None:
    # the records: "48 MiB mixed-Trellis temporary" (3.42, r28), "48 MiB mixed-K temporary" (3.36, r20)
    for sets in (("memory.num_gpu_blocks_override=null",),):
        doc = plan(clean_env, "exl3-tr3-3.42bpw", *sets)
        assert doc["verdict"]["runtime"]["deciding"] == "demand.online_quant"


def test_the_recommended_pins_are_the_qualified_ones(clean_env: dict[str, str]) -> None:
    # upstream qualified 2,032 blocks (520,192 tokens) for 3.42 and 2,048 (524,288) for 3.36
    for profile, qualified in (("exl3-tr3-3.42bpw", 2032), ("exl3-tr3-3.36bpw", 2048)):
        natural = plan(clean_env, profile, "memory.num_gpu_blocks_override=null")["budget"]
        assert abs(natural["recommended_num_gpu_blocks"] - qualified) / qualified <= 0.02
        assert natural["recommended_context_tokens"] >= 520_192
        pinned = plan(
            clean_env, profile, f"memory.num_gpu_blocks_override={natural['recommended_num_gpu_blocks']}"
        )
        assert pinned["verdict"]["ok"]


def test_the_recommended_gmu_is_the_boundary(clean_env: dict[str, str]) -> None:
    sets = ("memory.num_gpu_blocks_override=null",)
    gmu = plan(clean_env, "exl3-tr3-3.42bpw", *sets)["budget"]["recommended_gpu_memory_utilization"]
    assert 0.9 < gmu < 0.95
    at = plan(clean_env, "exl3-tr3-3.42bpw", *sets, f"memory.gpu_memory_utilization={gmu}")
    above = plan(clean_env, "exl3-tr3-3.42bpw", *sets, f"memory.gpu_memory_utilization={gmu + 0.001:.3f}")
    assert at["budget"]["runtime_margin_bytes"] >= 0 > above["budget"]["runtime_margin_bytes"]
    assert "runtime" not in [b["id"] for b in at["verdict"]["blockers"]]
    assert "runtime" in [b["id"] for b in above["verdict"]["blockers"]]
    # 3.42's natural pool at that GMU no longer holds one 520,192-token request: only the pin fixes it,
    # and the plan says so
    assert at["budget"]["recommended_gmu_kv_tokens"] < 520_192 and at["verdict"]["blocker"] == "request-fit"


def test_a_pool_too_large_for_the_margin_gets_the_largest_that_keeps_it() -> None:
    # a context no pool can hold with the runtime demand: the recommendation is the largest pool, and the
    # context it holds
    config = resolve_config(
        "exl3-tr3-3.42bpw",
        ["scheduler.max_model_len=1048576", "memory.num_gpu_blocks_override=null"],
        environ={},
    ).config
    b = compute_budget(config, build_ledger(config))
    assert b.recommended_num_gpu_blocks is not None
    assert b.recommended_context_tokens < 1_048_576
    assert b.recommended_context_tokens == b.recommended_num_gpu_blocks * 64 * config.parallel.dcp
    # F0 - W - P - N - G_e - X at the band's low edge (no boot covers this shape): what a pin may use
    assert not b.band.covered
    rest = b.margin + b.kv - b.band.term("U_pre").high - band_over(b.band)[1]
    block = 64 * b.kv_bytes_per_token
    assert rest - b.recommended_num_gpu_blocks * block >= b.runtime_demand
    assert rest - (b.recommended_num_gpu_blocks + 1) * block < b.runtime_demand


def _budget(profile: str, *sets: str):  # type: ignore[no-untyped-def]
    config = resolve_config(profile, list(sets), environ={}).config
    ledger = build_ledger(config)
    return config, ledger, compute_budget(config, ledger)


def test_each_source_follows_its_setting() -> None:
    _, base, b0 = _budget("exl3-tr3-3.42bpw")
    names = [t.entry.name for t in base.runtime.transients]
    assert names == [
        "demand.fragmentation",
        "demand.prefill_growth",
        "demand.online_quant",
        "demand.decode_step",
    ]
    assert all(t.entry.lifetime == "runtime" for t in base.runtime.transients)
    # prompt logprobs: two fp32 [rows, vocab] tensors, exactly
    _, with_lp, b1 = _budget("exl3-tr3-3.42bpw", "scheduler.prompt_logprobs=true")
    lp = next(t.entry for t in with_lp.runtime.transients if t.entry.name == "demand.prompt_logprobs")
    assert lp.requested_bytes == 2 * 3072 * 154_880 * 4
    assert b1.runtime_demand == b0.runtime_demand + lp.device_bytes
    # the growth scales with the chunk
    _, half, _ = _budget(
        "exl3-tr3-3.42bpw", "scheduler.max_num_batched_tokens=1536", "exl3.prefill_capacity=1536"
    )
    grow = {t.entry.name: t.entry.requested_bytes for t in half.runtime.transients}
    assert grow["demand.prefill_growth"] == round(term("prefill_growth_bytes_per_token").value * 1536)
    # no online quantization, no K6 temporaries; expandable segments on (no LMCache), no allowance
    _, plain, _ = _budget(
        "exl3-tr3-3.42bpw",
        "model.online_quant=none",
        "lmcache=false",
        "memory.allocator.expandable_segments=true",
    )
    assert [t.entry.name for t in plain.runtime.transients] == ["demand.prefill_growth", "demand.decode_step"]
    assert plain.entry("lmcache.gpu_buffers") is None and base.entry("lmcache.gpu_buffers") is not None
    # a decode step larger than the largest capture size runs eager and grows like a chunk
    # (the concurrency-window rule refuses such a profile, so the configuration is built past it)
    shipped = resolve_config("exl3-tr3-3.42bpw", [], environ={}).config
    wide = shipped.model_copy(update={"scheduler": shipped.scheduler.model_copy(update={"max_num_seqs": 64})})
    eager = build_ledger(wide)
    step = next(t for t in eager.runtime.transients if t.entry.name == "demand.decode_step")
    assert step.phase == "decode" and step.entry.requested_bytes == round(
        term("prefill_growth_bytes_per_token").value * 64 * 4
    )


def test_the_runtime_demand_is_in_the_plan_text_and_explained(clean_env: dict[str, str]) -> None:
    done = run_cli("plan", "-p", "exl3-tr3-3.42bpw", env=clean_env)
    assert done.returncode == 0, done.stderr
    assert "runtime demand per rank" in done.stdout and "demand.online_quant" in done.stdout
    assert "recommended for the runtime margin: memory.num_gpu_blocks_override=2032" in done.stdout
    explained = run_cli("plan", "-p", "exl3-tr3-3.42bpw", "--explain", "demand.online_quant", env=clean_env)
    assert explained.returncode == 0
    assert "fitted" in explained.stdout and "lifetime: runtime" in explained.stdout


def test_search_has_the_pin_as_an_objective(clean_env: dict[str, str]) -> None:
    done = run_cli(
        "calibrate", "search", "-p", "exl3-tr3-3.42bpw", "--set", "memory.num_gpu_blocks_override=null",
        "--objective", "min-pool-blocks", "--no-write", "--json", env=clean_env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["best"]["value"] == 2032 and not doc["next_step"]["feasible"]


def test_the_facts_file_is_what_the_script_derives() -> None:
    assert_script_current("derive_runtime_facts.py")


def test_the_fit_cases_bound_every_term() -> None:
    # every fit case is consistent with the shipped terms (served: fits; OOMed: does not)
    from glmlaunch.ledger.demand.facts import document

    for row in document()["fit"]["cases"]:
        served = OUTCOMES[row["id"]]["outcome"] == "served"
        assert (row["runtime_margin_mib"] >= 0) is served, row
    fit_ids = {c["id"] for c in CASES if c["fit"] and "group" not in c}
    assert {row["id"] for row in document()["fit"]["cases"]} == fit_ids


def test_the_r7_group_is_fitted_apart(clean_env: dict[str, str]) -> None:
    """Mixed-tier EXL3 on the r34 / ii stacks has its own prefill-growth term, fitted on its own cases
    (the README's served R7 shapes): every one of them serves with it, and no other case moved it."""
    from glmlaunch.ledger.demand.facts import term

    group = [c for c in CASES if c.get("group") == "r7"]
    t = term("r7_prefill_growth_bytes_per_token")
    assert set(t.evidence) == {c["id"] for c in group} and t.value > 0
    assert "no OOM documented" in t.how
    for c in group:
        doc = plan(clean_env, c["profile"], *c["set"])
        assert doc["verdict"]["ok"], doc["verdict"]["summary"]
        assert "r7_prefill_growth_bytes_per_token" in doc["runtime_demand"]["transients"][0]["formula"]


def test_a_transient_the_profile_run_executes_is_not_charged_twice() -> None:
    # issue 29 item 5: the ii line's single-request prefill profile (vLLM PR 290) runs one full-budget
    # request with attention on before the KV cache is sized, so the long prefill's growth is in P
    _, ii, _ = _budget("ii-r18-exl3-r7")
    by = {t.entry.name: t.entry for t in ii.runtime.transients}
    assert by["demand.prefill_growth"].requested_bytes == 0
    assert "covered by the profile peak" in by["demand.prefill_growth"].formula
    assert ii.entry("profile.topk_indices") is not None  # what that pass adds is in P instead
    # the same checkpoint and shape on Gilded Gnosis r34 (no PR 290): the growth is charged
    _, gg, _ = _budget("r34-exl3-r7")
    grown = {t.entry.name: t.entry for t in gg.runtime.transients}["demand.prefill_growth"]
    assert grown.requested_bytes == round(term("r7_prefill_growth_bytes_per_token").value * 2048)
    # the remaining terms keep their evidence: the ii plan's other transients are those of its settings
    assert [n for n in by if n != "demand.prefill_growth"] == [
        t.entry.name for t in gg.runtime.transients if t.entry.name != "demand.prefill_growth"
    ]
    # the V1 runner has no single-request profile: charged again
    _, v1, _ = _budget("ii-r18-exl3-r7", "runner=v1")
    v1_growth = {t.entry.name: t.entry for t in v1.runtime.transients}["demand.prefill_growth"]
    assert v1_growth.requested_bytes > 0


def test_the_newer_line_serves_its_documented_shapes_at_gmu_097_098(clean_env: dict[str, str]) -> None:
    # the README's r34 R7 compose on the ii image: MTP3 at GMU 0.98, MTP0 at GMU 0.97 (served upstream)
    for sets in ((), ("speculative.num_speculative_tokens=0", "memory.gpu_memory_utilization=0.97")):
        doc = plan(clean_env, "ii-r18-exl3-r7", *sets)
        assert doc["verdict"]["status"] != "runtime-oom", (sets, doc["verdict"]["summary"])
        assert doc["budget"]["runtime_margin_bytes"] == doc["budget"]["margin_bytes"]
