"""Backend call sequences: b12x's real pool classes on CPU, the capture-pass order, backend choice."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from conftest import SEED_TURNKEY

from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger import build_ledger
from glmlaunch.preflight.api import choose_backend, planned_allocations, run_preflight
from glmlaunch.preflight.backends.sequence import capture_passes, covers, dcp_batch, workspace_arenas
from glmlaunch.preflight.backends.sparkinfer import SparkinferBackend
from glmlaunch.preflight.report import build_report
from glmlaunch.preflight.runtime import Runtime
from glmlaunch.preflight.types import PlannedAllocation, RankResult, WorkerSpec

SCALE = ["parallel.tp=2", "parallel.dcp=2"]


def _config(profile: str, *extra: str) -> DeploymentConfig:
    return resolve_config(profile, [*SCALE, *extra], environ={}).config


def test_capture_passes_follow_the_runner() -> None:
    gate = capture_passes(_config("gate"))
    assert [(p.name, p.rollback) for p in gate] == [
        ("profiling", True), ("target", False), ("drafter-prefill", False), ("drafter-decode", False)
    ]
    mtp0 = capture_passes(_config("gate", "speculative.num_speculative_tokens=0"))
    assert [p.name for p in mtp0] == ["profiling", "target"]
    # the r12-era turnkey's V1 runner: one capture pass, its profiling channel leaked
    turnkey = capture_passes(_config("turnkey", *SEED_TURNKEY))
    assert [(p.name, p.rollback, p.role) for p in turnkey] == [
        ("profiling", False, "leaked-profiling"), ("target", False, "capture")
    ]
    assert capture_passes(_config("gate", "cudagraph.mode=NONE")) == ()


def test_workspace_is_one_arena_per_lane() -> None:
    entries = [
        PlannedAllocation("indexer.decode.lane0", "workspace", "profiled", 15 << 20, 1, 16 << 20),
        PlannedAllocation("indexer.prefill.lane0", "workspace", "profiled", 532 << 20, 1, 532 << 20),
        PlannedAllocation("indexer.prefill.lane1", "workspace", "profiled", 532 << 20, 1, 532 << 20),
        PlannedAllocation("dma.slab", "ipc", "pre-snapshot", 1, 1, 1),
    ]
    arenas = workspace_arenas(entries)
    assert [(a[0], a[1], a[2]) for a in arenas] == [
        ("workspace.lane0", ["indexer.decode.lane0", "indexer.prefill.lane0"], 532 << 20),
        ("workspace.lane1", ["indexer.prefill.lane1"], 532 << 20),
    ]


def test_covers_selects_by_subsystem_and_role() -> None:
    names = ["oneshot.slab.eager", "oneshot.rank_data.eager", "oneshot.slab.capture", "dcp_a2a.slab.eager"]
    assert covers(names, "oneshot", "eager") == ["oneshot.slab.eager", "oneshot.rank_data.eager"]
    assert covers(names, "dcp_a2a") == ["dcp_a2a.slab.eager"]
    assert dcp_batch(_config("gate")) == 64


def test_backend_choice_says_why() -> None:
    gate = _config("gate")
    assert choose_backend("auto", gate, "cpu", None).name == "replay"
    b12x = _config("gate", "stack=b12x")
    hopper = choose_backend("auto", b12x, "cuda", "9.0")
    assert hopper.name == "replay" and "sm120" in hopper.reason
    assert choose_backend("auto", b12x, "cuda", "12.0").name == "b12x"
    # the installed b12x (1.5.1, the b12x-1.5 row) is not a release generation's library
    r32 = choose_backend("auto", _config("gate", "stack=b12x-r32", "release=r34"), "cuda", "12.0")
    assert r32.name == "replay" and "b12x-r32 is b12x==1.2.4, but the installed b12x is 1.5.1" in r32.reason
    assert choose_backend("replay", gate, "cuda", "9.0").reason == "chosen with --backend"


@pytest.mark.parametrize(
    ("profile", "sets", "channels", "rollback"),
    # b12x's pools are the r17+ generation's: the profile phase is rolled back on V1 too, and V1's drafter
    # gets a production channel of its own (turnkey: MTP 5, FULL_AND_PIECEWISE)
    [("gate", (), 4, True), ("turnkey", (), 4, True), ("turnkey", SEED_TURNKEY, 3, True)],
)
def test_b12x_call_sequence_on_its_real_pool_classes(
    profile: str, sets: tuple[str, ...], channels: int, rollback: bool
) -> None:
    """b12x 1.5.1's own pools mint, roll back and keep channels as vLLM's runner sequence makes them."""
    pytest.importorskip("b12x.comm.pcie")
    run = run_preflight(_config(profile, *sets, "stack=b12x"), backend="b12x", device="cpu")
    report = build_report(run)
    assert report.exit_code == 0, report.root_cause
    # The arenas the workers allocate are sized by b12x's own planner, through the ledger's bridge.
    assert run.ledger.library == "b12x"
    assert run.ledger.rank0.get("indexer.prefill.lane0").origin == "library"  # type: ignore[union-attr]
    for res in run.outcome.results:
        assert res is not None and res.status == "ok"
        assert f"oneshot pool holds {channels} channel(s) after the capture passes" in res.notes
        assert f"dcp_a2a pool holds {channels} channel(s) after the capture passes" in res.notes
        steps = [s.name for s in res.steps]
        assert steps[:2] == ["oneshot.eager_channel", "dcp_a2a.eager_channel"]
        assert ("capture.target-profile.rollback" in steps) is rollback
        # Every channel the ledger counts was realised by a step of the sequence.
        realised = {n for s in res.steps for n in s.covers}
        ledger_channels = {
            e.name for e in run.ledger.rank0.entries
            if e.subsystem in ("oneshot", "dcp_a2a") and e.count > 0 and e.kind != "driver"
        }
        assert ledger_channels <= realised


def _bind(fn: Any, *args: Any, **kwargs: Any) -> None:
    inspect.signature(fn).bind(*args, **kwargs)


def test_b12x_calls_bind_to_the_installed_signatures() -> None:
    pcie = pytest.importorskip("b12x.comm.pcie")
    pool, dcp, dma = pcie.OneshotAllReducePool, pcie.DcpAllToAllPool, pcie.DmaAllReduce
    _bind(pool.from_exchange_group, exchange_group=None, device="cuda:0", eager_buffer_bytes=86016,
          max_size=86016, single_channel=False)
    _bind(dcp.from_exchange_group, exchange_group=None, device="cuda:0", max_batch_size=64, total_heads=64,
          head_dim=512, query_head_dim=576, single_channel=False)
    _bind(dma.__init__, None, exchange_group=None, device="cuda:0", max_bytes=37748736, fp8="0")
    for cls in (pool, dcp):
        _bind(cls.prepare_channels, None, ("eager",))
        _bind(cls.for_stream, None, channel_id="eager")
        _bind(cls.capture, None, None, channel_id="capture.target")
        _bind(cls.rollback_channels, None, (0, {}, {}, set()))
        _bind(cls.checkpoint_channels, None)
        _bind(cls.close, None)


@pytest.mark.parametrize("profile", ["r12-exl3", "turnkey"])
def test_sparkinfer_backend_builds_the_pools_the_ledger_prices(profile: str) -> None:
    """For every world size, the sparkinfer backend builds a one-shot / DCP A2A pool exactly where the
    ledger prices one: both read the one declaration of the library's world sizes."""
    base = resolve_config(profile, [], environ={}).config
    assert base.stack.startswith("sparkinfer")
    seen: set[tuple[str, bool]] = set()
    for tp in range(1, 17):
        for dcp in (d for d in (1, 2, 4, 8, 16) if d <= tp):
            config = base.model_copy(
                update={"parallel": base.parallel.model_copy(update={"tp": tp, "dcp": dcp})}
            )
            ledger = build_ledger(config)
            priced = {e.subsystem for e in ledger.rank0.entries}
            spec = WorkerSpec(
                rank=0, world_size=tp, local_device=0, device_mode="cpu", backend="sparkinfer",
                init_file="", result_path="", config=config.model_dump(mode="json"),
                allocations=planned_allocations(ledger), env={},
            )
            rt = Runtime(spec=spec, result=RankResult(rank=0, pid=0), torch=None, dist=None,
                         config=config, device=None, cuda=False)
            backend = SparkinferBackend(rt)
            where = f"{profile} tp={tp} dcp={dcp}"
            assert bool(backend.use_oneshot) == ("oneshot" in priced), where
            assert bool(backend.use_dcp) == ("dcp_a2a" in priced), where
            seen |= {("oneshot", bool(backend.use_oneshot)), ("dcp_a2a", bool(backend.use_dcp))}
    # each pool is built at some world sizes and not at others: the agreement is not vacuous
    assert seen == {(p, on) for p in ("oneshot", "dcp_a2a") for on in (True, False)}
