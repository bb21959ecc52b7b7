"""The report on runs recorded on 2x and 1x NVIDIA H200 (bench/preflight/*.json): aggregation and verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SEED_TURNKEY

from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.units import MIB
from glmlaunch.errors import ExitCode
from glmlaunch.ledger.inputs import UNCALIBRATED
from glmlaunch.plan.plan import make_plan
from glmlaunch.preflight.api import BackendDecision, PreflightRun, planned_allocations
from glmlaunch.preflight.backends.sequence import capture_passes, pass_covers
from glmlaunch.preflight.launcher import Failure, LaunchOutcome
from glmlaunch.preflight.report import build_report, render_text
from glmlaunch.preflight.types import RankResult

BENCH = Path(__file__).resolve().parents[2] / "bench" / "preflight"


def _recorded(
    name: str, profile: str, tp: int, *, root: Failure | None = None, current_covers: bool = False
) -> PreflightRun:
    """A recorded run, compared with the current ledger.

    ``current_covers``: the measurements stay as recorded, but which ledger entries each capture step
    realises is what the library backends say today (the ledger has since itemized the per-stream
    segments a capture pass opens, and what the rolled-back profiling pass leaves).
    """
    doc = json.loads((BENCH / name).read_text())
    # the turnkey runs were recorded with the r12-era turnkey (V1 runner, A2A cap 64, no LMCache)
    era = list(SEED_TURNKEY) if profile == "turnkey" else []
    config = resolve_config(profile, [*era, f"parallel.tp={tp}", f"parallel.dcp={tp}"], environ={}).config
    plan = make_plan(config, inputs=UNCALIBRATED)
    ledger = plan.ledger
    results = [RankResult.from_dict(r) for r in doc["results"]]
    if current_covers:
        names = [a.name for a in planned_allocations(ledger)]
        roles = {f"capture.{p.name}": p.role for p in capture_passes(config)}
        for res in results:
            for step in res.steps:
                role = roles.get(step.name.removesuffix(".rollback"))
                if role is not None:
                    step.covers = pass_covers(names, role)
    outcome = LaunchOutcome(
        results=tuple(results),
        failures=(root,) if root else (),
        root_cause=root,
        interrupted=None,
        survivors=(),
        phase_wall=doc["phases"],
        wall_s=doc["wall_s"],
        log_tails=(),
        workdir="",
    )
    return PreflightRun(
        plan=plan,
        backend=BackendDecision(doc["backend"], doc["backend_reason"]),
        device_mode="cuda",
        outcome=outcome,
        before=(),
        after=(),
        driver=doc["machine"]["driver"],
        leaks=(),
    )


def test_sparkinfer_steps_are_compared_as_the_library_made_them() -> None:
    report = build_report(_recorded("h200x2-gate-sparkinfer-warm.json", "gate", 2))
    rows = {c.label: c for c in report.comparisons}
    # Measured on the real r12 pools (sparkinfer de04125, 2x H200): the facts docs/memory-model.md §1 lists.
    assert rows["oneshot.eager_channel"].measured_device == (22 * MIB, 22 * MIB)
    assert rows["dma.slab"].measured_device == (38 * MIB, 38 * MIB)
    assert rows["dcp_a2a.eager_channel"].measured_device == (10 * MIB, 10 * MIB)
    capture = next(c for c in report.comparisons if c.label.startswith("capture.target"))
    assert capture.label == "capture.target + capture.drafter-prefill + capture.drafter-decode"
    assert capture.measured_device == (96 * MIB, 96 * MIB)  # three passes of 32 MiB each
    for c in report.comparisons:
        worst = max(abs(m - c.predicted_device) for m in c.measured_device if m is not None)
        assert c.within is (worst <= c.tolerance)
    measured_only = {m["step"]: m for m in report.measured_only}
    assert measured_only["capture.profiling.rollback"]["device_bytes"] == [-10 * MIB, -10 * MIB]
    expected = ExitCode.PREFLIGHT if any(c.within is False for c in report.comparisons) else None
    if expected is not None:
        assert report.exit_code == expected
        assert "NO" in render_text(report)


@pytest.mark.parametrize(
    ("name", "profile"),
    [("h200x2-gate-sparkinfer-warm.json", "gate"), ("h200x2-gate-sparkinfer-cold.json", "gate"),
     ("h200x2-turnkey-sparkinfer.json", "turnkey")],
)
def test_recorded_sparkinfer_runs_agree_with_the_current_ledger(name: str, profile: str) -> None:
    # The real r12 library on 2x H200 disagreed with the ledger on every capture pass (96 MiB measured
    # against 50 predicted for gate's three): each pass runs on a fresh stream and torch packs per stream.
    # With the ledger's per-stream model the same measurements agree within the report's tolerance.
    report = build_report(_recorded(name, profile, 2, current_covers=True))
    assert [c.label for c in report.comparisons if c.within is not True] == []
    rows = {c.label: c for c in report.comparisons}
    if profile == "gate":
        capture = rows["capture.target + capture.drafter-prefill + capture.drafter-decode"]
        assert capture.predicted_device == capture.measured_device[0] == 96 * MIB
        # the profiling pass (+32 MiB) and its rollback (-10 MiB) against what the ledger says stays
        residue = rows["capture.profiling + capture.profiling.rollback"]
        assert residue.predicted_device == residue.measured_device[0] == 22 * MIB
    else:
        assert rows["capture.profiling"].predicted_device == rows["capture.profiling"].measured_device[0]
        assert rows["capture.target"].predicted_device == rows["capture.target"].measured_device[0]
    # what remains is the margin: GLM-5.2's weights do not fit a 141 GB H200 at TP2
    assert report.verdict == "margin below minimum" and report.exit_code == ExitCode.MARGIN
    assert "NO" not in render_text(report)


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("h200x2-gate-sparkinfer-after-ledger-fix.json", "gate"),
        ("h200x2-turnkey-sparkinfer-after-ledger-fix.json", "turnkey"),
        ("h200x2-gate-replay-per-stream.json", "gate"),
        ("h200x2-turnkey-replay-per-stream.json", "turnkey"),
    ],
)
def test_runs_recorded_after_the_ledger_fix_agree_as_recorded(name: str, profile: str) -> None:
    # Confirmation on 2x H200 with the per-stream ledger and the per-stream replay: steps as recorded.
    report = build_report(_recorded(name, profile, 2))
    assert report.comparisons and all(c.within is True for c in report.comparisons)
    assert report.exit_code == ExitCode.MARGIN
    if "replay" in name:
        # every capture instance on its own stream, measured as vLLM would make it
        rows = {c.label.split("#")[0]: c for c in report.comparisons}
        passes = 3 if profile == "gate" else 1
        assert rows["oneshot.rank_data.capture"].measured_device[0] == passes * 20 * MIB


def test_u_pre_itemizes_the_dcp_communicator() -> None:
    # measured T - F0 on 2x H200 (context 527 + NCCL TP 936 + NCCL DCP 486 + eager channel + DMA slab):
    # the ledger's U_pre may exceed it (the context default is the larger, 651 MiB) but never fall short
    report = build_report(_recorded("h200x2-gate-sparkinfer-warm.json", "gate", 2, current_covers=True))
    measured = report.margin["u_pre_plus_others"]
    predicted = report.margin["budget"]["u_pre"]
    assert measured == 2_108_489_728
    assert 0 <= predicted - measured <= (651 - 527) * MIB + 2 * MIB


@pytest.mark.parametrize(
    ("name", "profile", "tp"),
    [
        ("h200x2-gate-replay.json", "gate", 2),
        ("h200x2-turnkey-replay.json", "turnkey", 2),
        ("h200x1-turnkey-replay.json", "turnkey", 1),
    ],
)
def test_replay_rank_totals_add_up(name: str, profile: str, tp: int) -> None:
    report = build_report(_recorded(name, profile, tp))
    for rank in report.ranks:
        per_group = [c.measured_device[rank.rank] for c in report.comparisons]
        assert rank.measured_steps_bytes == sum(m for m in per_group if m is not None)
        assert rank.context_bytes is not None and 400 * MIB < rank.context_bytes < 800 * MIB
        assert rank.residue_after_close is not None and abs(rank.residue_after_close) <= 2 * MIB
    assert report.margin["f0_bytes"] + report.margin["u_pre_plus_others"] == report.margin["total_bytes"]


def test_world_size_one_says_the_library_builds_nothing() -> None:
    report = build_report(_recorded("h200x1-gate-sparkinfer.json", "gate", 1))
    assert any(n.startswith("world size 1: sparkinfer builds no pools") for n in report.notes)
    assert {c.label for c in report.comparisons} == {"workspace.lane0", "workspace.lane1"}


def test_a_failure_is_the_verdict_whatever_was_measured() -> None:
    root = Failure(1, "allocations", "signal", "Signal 9 (SIGKILL) killed the worker", 0.0)
    report = build_report(_recorded("h200x2-gate-replay.json", "gate", 2, root=root))
    assert report.exit_code == ExitCode.PREFLIGHT
    assert report.root_cause == "rank 1, phase allocations: Signal 9 (SIGKILL) killed the worker"
