"""One KV figure per plan: the ledger's kv_cache entry is the budget's KV, with and without calibration.

The budget sizes vLLM's KV cache from the term model's whole terms when a calibration (the rig defaults,
or ingested boot logs) supplies them; the ledger's entry used to subtract its own itemized sums instead,
so `plan` printed 8.76 GiB in the ledger and 9.28 GiB on the budget line for turnkey.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO, run_cli

from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.units import format_size
from glmlaunch.ledger import build_ledger
from glmlaunch.ledger.budget import compute_budget
from glmlaunch.ledger.inputs import LedgerInputs

PROFILES = sorted(p.stem for p in (REPO / "profiles").glob("*.yaml"))
LOGS = sorted(str(p) for p in (FIXTURES / "boot-logs").glob("*.log"))


def _ingest(env: dict[str, str]) -> None:
    res = run_cli("calibrate", "ingest", *LOGS, env=env, timeout=180)
    assert res.returncode == 0, res.stderr


def _assert_one_figure(profile: str, env: dict[str, str]) -> str:
    """Assert the plan shows one KV figure; return which calibration it says it used."""
    res = run_cli("plan", "-p", profile, "--json", env=env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    b = doc["budget"]
    kv, tokens, dcp = b["kv_cache_bytes"], b["kv_tokens"], doc["settings"]["dcp"]
    for rank in doc["ranks"]:
        entry = next(e for e in rank["entries"] if e["name"] == "kv_cache")
        assert entry["device_bytes"] == entry["requested_bytes"] == kv, profile
        # the formula names the P (and W, N, G_e) the budget used, and the tokens are the budget's
        terms = [b["weights_bytes"], b["profiled_torch_bytes"], b["profiled_non_torch_bytes"]]
        terms.append(b["graph_estimate_bytes"])
        # a pinned pool (--num-gpu-blocks-override) also names the pool vLLM sized from memory
        sized = b["kv_cache_natural_bytes"] if b["num_gpu_blocks_override"] else kv
        assert " - ".join(f"{t:,}" for t in terms) + f" = {sized:,}" in entry["formula"], profile
        assert f"{kv:,}" in entry["formula"], profile
        assert f"= {tokens:,} with DCP {dcp}" in entry["note"], profile

    text = run_cli("plan", "-p", profile, env=env).stdout
    shown = format_size(kv)
    row = next(line for line in text.splitlines() if re.search(r"│\s+kv_cache\s", line))
    assert set(re.findall(r"\d+\.\d\d [GM]iB", row)) == {shown}, (profile, row)
    budget_row = next(line for line in text.splitlines() if re.match(r"│ KV\s", line))
    assert f"{kv:,}" in budget_row and f"({shown})" in budget_row
    assert f"KV {shown} holds {tokens:,} tokens" in text

    explain = run_cli("plan", "-p", profile, "--explain", "kv_cache", env=env).stdout
    assert f"= {kv:,}" in explain and f"= {tokens:,} with DCP {dcp}" in explain
    assert f"{b['profiled_torch_bytes']:,}" in explain
    return str(doc["calibration"])


@pytest.mark.parametrize("records", [False, True], ids=["rig-defaults", "ingested-records"])
def test_every_shipped_profile_shows_the_budgets_kv_in_its_ledger(
    records: bool, clean_env: dict[str, str]
) -> None:
    if records:
        _ingest(clean_env)
    used = [_assert_one_figure(profile, clean_env) for profile in PROFILES]
    # the calibration really is in play: the rig defaults, or the term model fitted on the records
    assert all("rig defaults" in u or "fitted on" in u for u in used), used
    assert any("fitted on 5 record(s)" in u for u in used) == records, used


def test_a_plan_without_calibration_shows_one_figure_too(clean_env: dict[str, str]) -> None:
    # another GPU model: no rig defaults and no record apply, so every term is the entries' sum
    over = ("--set", "hardware.gpu_model=NVIDIA H200")
    doc = json.loads(run_cli("plan", "-p", "turnkey", *over, "--json", env=clean_env).stdout)
    entry = next(e for e in doc["ranks"][0]["entries"] if e["name"] == "kv_cache")
    assert entry["device_bytes"] == doc["budget"]["kv_cache_bytes"]
    assert "W, P, N, G_e: sums of their entries" in entry["formula"]


def test_diff_repeats_the_budgets_kv(clean_env: dict[str, str]) -> None:
    _ingest(clean_env)
    kv = {}
    for p in ("gate", "turnkey"):
        doc = json.loads(run_cli("plan", "-p", p, "--json", env=clean_env).stdout)
        kv[p] = doc["budget"]["kv_cache_bytes"]
    out = run_cli("diff", "gate", "turnkey", env=clean_env).stdout
    row = next(line for line in out.splitlines() if re.search(r"│\s+kv_cache\s", line))
    assert format_size(kv["gate"]) in row and format_size(kv["turnkey"]) in row, row


def test_the_ledger_and_the_budget_share_a_partial_calibration() -> None:
    # A calibration that models only P: the entry names P's source and sums the rest, like the budget.
    config = resolve_config("turnkey", [], environ={}).config
    plain = build_ledger(config)
    p_entries = plain.base_terms.p if plain.base_terms else 0
    cal = LedgerInputs(record_id="test", term_bytes=(("p", p_entries - 512 * 2**20),))
    ledger = build_ledger(config, cal)
    budget = compute_budget(config, ledger)
    entry = ledger.entry("kv_cache")
    assert entry is not None and entry.device_bytes == budget.kv
    assert budget.kv == compute_budget(config, plain).kv + 512 * 2**20
    assert "P: whole terms of calibration test" in entry.formula
    assert f"(P {p_entries:,})" in entry.formula and "W, N, G_e: sums of their entries" in entry.formula
    # the budget given the ledger's own calibration does not apply it twice
    assert budget.p == p_entries - 512 * 2**20


def test_pinned_kv_is_one_figure(tmp_path: Path) -> None:
    config = resolve_config("turnkey", ["memory.kv_cache_memory_bytes=3GiB"], environ={}).config
    cal = LedgerInputs(record_id="test", term_bytes=(("p", 1), ("w", 2)))
    ledger = build_ledger(config, cal)
    entry = ledger.entry("kv_cache")
    assert entry is not None and entry.device_bytes == compute_budget(config, ledger).kv
    assert entry.device_bytes == 3 * 2**30
