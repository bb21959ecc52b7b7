"""Each library generation's constants and layouts, proven equal to that generation's own code.

``tests/fixtures/generations/<stack>.json`` is what ``scripts/record_generation.py`` recorded by running
the generation's tree (rebuilt by ``scripts/fetch_generations.py``: git archive of the base plus the
release's integration patch, its ``git write-tree`` equal to the lock's tree): its constants with file:line,
its own layout functions over fixed grids (DCP A2A staging, top-k exchange, one-shot slab under every
shard policy, DMA slab/counters/stage, indexer scratch plans, the fused-route rule, the two-level fold),
the environment names it reads, and what the release's vLLM patch says about channels. Every test here
replays those grids through the ledger's formulas with the generation's row of
``glmlaunch/ledger/constants.py``: a formula or constant that drifts from the tree fails.

When a tree (or the PyPI wheel of a B12X generation) is present under ``third_party/generations/`` (or
``$GLMLAUNCH_GENERATIONS_DIR``), ``test_fixture_is_what_the_tree_says`` re-records it in a subprocess and
requires the committed fixture to be exactly that; CI without the trees still checks every formula.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from glmlaunch.config.registry import library_reads
from glmlaunch.config.releases import RELEASE_BANDS, STACKS, stack_of_release
from glmlaunch.ledger import dcp_a2a, dma, fold, indexer, oneshot, r7, topk_exchange
from glmlaunch.ledger.constants import TABLE, StackConstants, for_stack

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "generations"
RECORDER = REPO / "scripts" / "record_generation.py"
RELEASE_STACKS = tuple(RELEASE_BANDS)


@cache
def recorded(stack: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{stack}.json").read_text())
    return data


def layout(stack: str, name: str) -> list[list[Any]]:
    rows: list[list[Any]] = recorded(stack)["layouts"][name]
    assert rows, f"{stack}: no {name} rows recorded"
    return rows


def _flag(value: str | None) -> bool | None:
    return None if value is None else value not in ("", "0")


def test_every_stack_has_a_row_and_a_recording() -> None:
    assert set(TABLE) == set(STACKS)
    assert {p.stem for p in FIXTURES.glob("*.json")} == set(STACKS)
    assert for_stack("sparkinfer-r12") is TABLE["sparkinfer-r14"]  # the earlier name still resolves
    assert for_stack("b12x") is TABLE["b12x-1.5"]


@pytest.mark.parametrize("stack", RELEASE_STACKS)
def test_row_cites_the_tree_it_was_recorded_from(stack: str) -> None:
    k, doc = for_stack(stack), recorded(stack)
    assert doc["tree"]["git_tree"] == k.tree.tree
    assert doc["package"] == k.library
    assert k.env_prefix == doc["package"].upper() + "_"
    band = RELEASE_BANDS[stack]  # type: ignore[index]
    assert k.releases == band.text()
    assert {stack_of_release(label) for label in band.labels()} == {stack}
    if k.tree.patch is not None:
        assert k.tree.patch_sha256 and len(k.tree.patch_sha256) == 64


@pytest.mark.parametrize("stack", RELEASE_STACKS)
def test_constants_equal_the_tree(stack: str) -> None:
    k, c = for_stack(stack), recorded(stack)["constants"]
    sources = recorded(stack)["sources"]
    mine = {
        "oneshot_world_sizes": list(k.oneshot_world_sizes),
        "oneshot_rank_data_bytes": k.oneshot_rank_data_bytes,
        "ipc_align": k.ipc_align,
        "oneshot_required_sms": k.oneshot_required_sms or None,
        "dma_flag_slots": k.dma_flag_slots,
        "dma_flag_stride": k.dma_flag_stride,
        "dma_scratch_align": k.dma_scratch_align,
        "dma_fp8_quant_block": k.dma_fp8_quant_block,
        "dma_world_sizes": list(k.dma_world_sizes) if k.dma_world_sizes else None,
        "dcp_a2a_world_sizes": list(k.dcp_a2a_world_sizes),
        "dcp_a2a_required_sms": k.dcp_a2a_required_sms or None,
        "dcp_topk_world_sizes": list(k.dcp_topk_world_sizes),
        "indexer_supertile_default": k.indexer_supertile_default,
        "indexer_tile_block_q": k.indexer_tile_block_q,
        "indexer_tile_block_k": k.indexer_tile_block_k,
        "indexer_fused_max_rows": k.indexer_fused_max_rows,
        "indexer_fused_max_rows_glm32": k.indexer_fused_max_rows_glm32,
        "indexer_fused_merge_state_words": k.indexer_fused_merge_state_bytes_per_row // 4,
        "fold_slice_tokens": k.fold_slice_tokens,
        "fold_max_slices": k.fold_max_slices,
        "fold_budget_mib_default": k.fold_budget_mib_default,
        "oneshot_signal_bytes": k.oneshot_signal_bytes,
        "dcp_a2a_signal_bytes": k.dcp_a2a_signal_bytes,
        "dcp_topk_signal_bytes": k.dcp_topk_signal_bytes,
    }
    assert mine == c
    # every constant the tree defines is cited with its file:line
    assert all(sources[name] for name, value in c.items() if value is not None)


@pytest.mark.parametrize("stack", RELEASE_STACKS)
def test_vllm_channel_model_equals_the_release_patch(stack: str) -> None:
    k, v = for_stack(stack), recorded(stack)["vllm"]
    assert k.semantic_channels == v["semantic_channels"]
    assert k.max_concurrent_channels == v["max_concurrent_channels"]
    cited = {key for key, line in v["lines"].items() if "context_of" in line}
    if cited:
        # the release's base holds the channel code and its own patch does not show it: the facts are
        # cited from the context of another patch of the same vLLM branch (named, with its sha256), and
        # the release patch's own context names the base's per-pass rollback test
        assert cited == set(v["lines"]) == {"eager_allreduce_id", "eager_dcp_id", "max_concurrent_channels"}
        assert v["context_patch"] and len(v["context_patch_sha256"]) == 64
        assert "profile_channel_rollback_test" in v["hunk_context"]
        return
    if k.semantic_channels:
        # the named passes the ledger's channel plan and the preflight enter
        assert {
            "eager_allreduce_id",
            "eager_dcp_id",
            "target_profile_id",
            "target_production_id",
            "v1_draft_profile_id",
            "v1_draft_production_id",
            "v2_draft_prefill_id",
            "v2_draft_decode_id",
            "graph_channel_checkpoint",
        } <= set(v["lines"])


@pytest.mark.parametrize("stack", RELEASE_STACKS)
def test_dcp_a2a_layout(stack: str) -> None:
    k = for_stack(stack)
    for w, b, h, d, dq, slot, slab in layout(stack, "dcp_a2a"):
        assert w in k.dcp_a2a_world_sizes
        assert dcp_a2a.slot_bytes(batch=b, heads=h, head_dim=d, query_head_dim=dq) == slot
        mine = dcp_a2a.slab_bytes(
            signal_bytes=k.dcp_a2a_signal_bytes, batch=b, heads=h, head_dim=d, query_head_dim=dq
        )
        assert mine == slab, (w, b, h, d, dq)


@pytest.mark.parametrize("stack", RELEASE_STACKS)
def test_dcp_topk_layout(stack: str) -> None:
    k = for_stack(stack)
    for _w, rows, topk, slab in layout(stack, "dcp_topk"):
        assert topk_exchange.slab_bytes(signal_bytes=k.dcp_topk_signal_bytes, rows=rows, topk=topk) == slab


@pytest.mark.parametrize("stack", RELEASE_STACKS)
def test_oneshot_slab_under_every_shard_policy(stack: str) -> None:
    k = for_stack(stack)
    sharded_at = set()
    for w, push, tp2, tp4, tp8, e, slab in layout(stack, "oneshot"):
        shards = oneshot.eager_shards(
            k,
            w,
            bool(_flag(push)),
            tp2_remote_push=_flag(tp2),
            tp4_remote_push=_flag(tp4),
            tp8_owner_reduce=_flag(tp8),
        )
        mine = oneshot.slab_bytes(
            signal_bytes=k.oneshot_signal_bytes, eager_bytes=e, shards=shards, ipc_align=k.ipc_align
        )
        assert mine == slab, (w, push, tp2, tp4, tp8, e)
        if shards > 1 and push == "0":
            sharded_at.add(w)
    # r32+ shards the eager slot at TP8 by default (and TP2/TP4 on opt-in); earlier only in push mode
    assert sharded_at == ({2, 4, 8} if k.oneshot_shard_rule == "push+topology" else set())


@pytest.mark.parametrize("stack", RELEASE_STACKS)
def test_dma_slab_counters_and_stage(stack: str) -> None:
    k = for_stack(stack)
    for w, mb, wire, slab, counters, stage in layout(stack, "dma"):
        assert dma.slab_bytes(k, mb, w) == slab
        assert dma.counters_bytes(k) == counters
        assert (dma.stage_bytes(k, mb, w) if wire != "0" else 0) == stage


@pytest.mark.parametrize("stack", RELEASE_STACKS)
def test_indexer_plans(stack: str) -> None:
    k = for_stack(stack)
    routes = set()
    for rows, width, heads, topk, mode, shared, st, nbytes, route, supertile, chunks in layout(
        stack, "indexer"
    ):
        # the CPU planner counts one SM and no compute capability
        mine = indexer.plan_layout(
            k,
            rows=rows,
            width_pages=width,
            topk=topk,
            heads=heads,
            mode=mode,
            shared_page_table=shared,
            supertile_k=st,
            num_sms=1,
            cc=None,
        )
        assert (mine.nbytes, mine.route, mine.supertile, mine.max_chunks) == (
            nbytes,
            route,
            supertile,
            chunks,
        ), (rows, width, heads, topk, mode, shared, st)
        routes.add(route)
    assert routes == {"packed_contiguous", "paged_fused", "paged_tiled"}


@pytest.mark.parametrize("stack", RELEASE_STACKS)
def test_fused_route_rule(stack: str) -> None:
    k = for_stack(stack)
    for topk, rows, heads, cc, fused in layout(stack, "fused_route"):
        capability = None if cc == "none" else tuple(int(x) for x in cc.split("."))
        mine = indexer.fused_allowed(
            k, rows=rows, heads=heads, topk=topk, width_tokens=8192 * 64, cc=capability
        )  # type: ignore[arg-type]
        assert mine == fused, (topk, rows, heads, cc)
    # every release tree keeps the top-k-512 rule for 64 heads only (b12x 1.5 widened it to 32)
    assert k.indexer_fused_c4_heads == (64,)


@pytest.mark.parametrize("stack", RELEASE_STACKS)
def test_two_level_fold(stack: str) -> None:
    k = for_stack(stack)
    for rows, width, stp, physical, mode, budget, reason, slices, nbytes in layout(stack, "fold"):
        mine = fold.plan(
            k,
            rows=rows,
            topk=2048,
            width_pages=width,
            supertile_pages=stp,
            output_physical_slots=physical,
            mode=mode,
            budget_mib=budget,
        )
        assert mine.reason == reason
        assert mine.used == (slices > 0)
        if mine.used:
            assert (mine.total_slices, mine.candidate_nbytes) == (slices, nbytes)
        elif nbytes:
            assert mine.candidate_nbytes == nbytes


@pytest.mark.parametrize("stack", ["b12x-r32", "b12x-ii"])
def test_mixed_trellis_arenas(stack: str) -> None:
    """The r34 / ii vLLM sizes one worst-case arena per owner and geometry with the tree's
    make_mixed_trellis3_buffers: the ledger's formula is that function's bytes over the whole grid."""
    rows = layout(stack, "mixed_trellis")
    for size_m, block, sms, inter, nbytes in rows:
        mine = r7.arena(size_m, block, topk=8, hidden=6144, inter=inter, experts=256, sms=sms)
        assert mine.bytes == nbytes, (size_m, block, sms, inter)
    # the patch's own figure: "approximately 574 MiB" per arena at the GLM-5.2 prefill capacity, block 64
    big = {(r[0], r[1], r[2], r[3]): r[4] for r in rows}
    assert round(big[(2048, 64, 188, 512)] / 2**20, 1) == 574.1
    assert round(big[(2048, 32, 188, 512)] / 2**20, 1) == 527.1


@pytest.mark.parametrize("stack", STACKS)
def test_registry_knows_what_each_generation_reads(stack: str) -> None:
    reads = library_reads(stack)
    assert reads == recorded(stack)["env_reads"]
    k: StackConstants = for_stack(stack)
    own = [n for n in reads if n.startswith(k.env_prefix)]
    assert len(own) > 100
    if stack.startswith("b12x"):
        assert not [n for n in reads if n.startswith("SPARKINFER_")]
    # the r32 topology transports are read from r32 on only
    topo = {"B12X_PCIE_TP2_REMOTE_PUSH", "B12X_PCIE_TP4_REMOTE_PUSH", "B12X_PCIE_TP8_OWNER_REDUCE"}
    if stack in ("b12x-r32", "b12x-ii", "b12x-1.5"):
        assert topo <= set(reads)
    else:
        assert not topo & set(reads)


def test_the_generations_differ_where_the_trees_do() -> None:
    r14, r28, r29, r32, ii = (for_stack(s) for s in RELEASE_STACKS)
    assert (r14.oneshot_signal_bytes, r28.oneshot_signal_bytes, r29.oneshot_signal_bytes) == (
        150_528,
        150_656,
        150_528,
    )
    assert (r14.dcp_a2a_signal_bytes, r28.dcp_a2a_signal_bytes, r29.dcp_a2a_signal_bytes) == (
        133_120,
        133_248,
        266_240,
    )
    assert (r28.dcp_topk_signal_bytes, r29.dcp_topk_signal_bytes) == (266_240, 532_480)
    assert not r14.semantic_channels and r28.semantic_channels and r29.semantic_channels
    assert (r29.oneshot_shard_rule, r32.oneshot_shard_rule) == ("push", "push+topology")
    # the one difference between the two B12X rows, and between their recordings
    assert {f for f in r29.__dataclass_fields__ if getattr(r29, f) != getattr(r32, f)} == {
        "stack",
        "version",
        "source",
        "tree",
        "releases",
        "dcp_a2a_signal_origin",
        "oneshot_shard_rule",
    }
    a, b = recorded("b12x-r29")["layouts"], recorded("b12x-r32")["layouts"]
    assert [n for n in a if a[n] != b[n]] == ["oneshot"]
    # Infernal Invocation's B12X master computes every constant and layout r32 does
    assert recorded("b12x-ii")["layouts"] == b
    assert recorded("b12x-ii")["constants"] == recorded("b12x-r32")["constants"]
    assert {f for f in ii.__dataclass_fields__ if getattr(ii, f) != getattr(r32, f)} == {
        "stack",
        "version",
        "source",
        "tree",
        "releases",
        "dcp_a2a_signal_origin",
    }
    # what B12X master reads and no longer reads against r32 (glmlaunch/config/library_env.json)
    mine, theirs = set(recorded("b12x-ii")["env_reads"]), set(recorded("b12x-r32")["env_reads"])
    assert mine - theirs == {
        "B12X_DISABLE_STANDALONE_K6",
        "B12X_PCIE_ALLREDUCE_ALGORITHM",
        "B12X_PCIE_ISLAND_RS_NANOSLEEP_CYCLES",
        "B12X_PCIE_ISLAND_RS_THREADS",
        "B12X_PCIE_VOCAB_ARGMAX_NANOSLEEP_CYCLES",
    }
    assert theirs - mine == {"B12X_JIT_VERBOSE", "B12X_TRELLIS_BUILD_DIR"}


# --- the fixtures are what the trees say ---------------------------------------------------------------

GENERATIONS_DIR = Path(os.environ.get("GLMLAUNCH_GENERATIONS_DIR") or REPO / "third_party" / "generations")


def _record(stack: str, tree: Path, patch: Path | None) -> dict[str, Any]:
    cmd = [sys.executable, str(RECORDER), "--stack", stack, "--tree", str(tree)]
    if patch is not None:
        cmd += ["--vllm-patch", str(patch)]
        context = patch.with_name(f"{stack}.vllm-context.patch")
        if context.exists():
            cmd += ["--vllm-context-patch", str(context)]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


@pytest.mark.slow
@pytest.mark.parametrize("stack", RELEASE_STACKS)
def test_fixture_is_what_the_tree_says(stack: str) -> None:
    tree = GENERATIONS_DIR / stack
    if not (tree / ".git").exists():
        pytest.skip(f"no {stack} tree under {GENERATIONS_DIR} (scripts/fetch_generations.py builds it)")
    if shutil.which("g++") is None and stack.startswith("sparkinfer"):
        pytest.skip("g++ is needed to size the SparkInfer Signal structs")
    patch = GENERATIONS_DIR / f"{stack}.vllm.patch"
    doc = _record(stack, tree, patch if patch.exists() else None)
    committed = dict(recorded(stack))
    committed.pop("recorded_with")
    doc.pop("recorded_with")
    if not patch.exists():
        committed.pop("vllm")
    assert doc == committed


@pytest.mark.slow
@pytest.mark.parametrize("stack", ["b12x-r29", "b12x-r32"])
def test_pypi_release_equals_the_generation(stack: str) -> None:
    """b12x 1.2.1 / 1.2.4 (PyPI) compute the same constants and layouts as the r29 / r32 trees."""
    wheel = GENERATIONS_DIR / f"{stack}-wheel"
    if not wheel.is_dir():
        pytest.skip(f"no {wheel} (scripts/fetch_generations.py --wheels downloads it)")
    assert f"b12x=={wheel.glob('b12x-*.dist-info').__next__().name.split('-')[1].removesuffix('.dist')}" == (
        for_stack(stack).tree.pypi
    )
    doc = _record(stack, wheel, None)
    assert doc["constants"] == recorded(stack)["constants"]
    assert doc["layouts"] == recorded(stack)["layouts"]
