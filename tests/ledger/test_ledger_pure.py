"""The ledger is a pure function of its configuration and inputs: building another one in between changes
nothing, and the inputs are part of what it reads.

Nothing is memoized across builds (the hand-written memo keys are gone); module state that leaked from one
build into the next (a cache keyed on too little, an id() reused) would show as a second build of the same
configuration that differs from the first. Random pairs of configurations catch that.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from glmlaunch.config.releases import STACKS
from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger import build_ledger, itemize
from glmlaunch.ledger.budget import compute_budget
from glmlaunch.ledger.inputs import LedgerInputs

BASES = {name: resolve_config(name).config for name in ("gate", "turnkey", "r12-exl3")}

KNOBS: dict[tuple[str, str], st.SearchStrategy[Any]] = {
    ("memory", "gpu_memory_utilization"): st.sampled_from([0.9, 0.95, 0.957]),
    ("memory", "kv_cache_dtype"): st.sampled_from(["fp8", "nvfp4_ds_mla", "auto"]),
    ("memory", "estimate_cudagraphs"): st.booleans(),
    ("memory", "kv_cache_memory_bytes"): st.sampled_from([None, 3 << 30]),
    ("scheduler", "max_num_batched_tokens"): st.sampled_from([1024, 3072, 8192]),
    ("scheduler", "max_num_seqs"): st.sampled_from([1, 8, 16]),
    ("scheduler", "max_model_len"): st.sampled_from([16384, 131072, 524288]),
    ("comm", "dcp_a2a_max_tokens"): st.sampled_from([0, 16, 64]),
    ("comm", "single_channel"): st.booleans(),
    ("comm", "dma_min_bytes"): st.sampled_from([None, 6 << 20, 64 << 20]),
    ("comm", "oneshot_push"): st.booleans(),
    ("comm", "dma_wire_mode"): st.sampled_from(["0", "ag", "ring"]),
    ("speculative", "num_speculative_tokens"): st.sampled_from([0, 1, 3, 5]),
    ("indexer", "fold"): st.sampled_from(["auto", "0", "1"]),
    ("indexer", "fold_max_mib"): st.sampled_from([64, 256]),
    ("indexer", "supertile_k"): st.sampled_from([8192, 32768]),
    ("dcp_policy", "query_split"): st.sampled_from([None, True, False]),
    # below 128 / 72 SMs the r17+ pools fail their residency check (no DCP A2A, then no one-shot/DMA)
    ("hardware", "num_sms"): st.sampled_from([188, 170, 100, 64]),
    ("cudagraph", "mode"): st.sampled_from(["FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"]),
    ("memory.allocator", "expandable_segments"): st.booleans(),
}


@st.composite
def configs(draw: st.DrawFn) -> DeploymentConfig:
    config = BASES[draw(st.sampled_from(sorted(BASES)))]
    chosen = draw(st.lists(st.sampled_from(sorted(KNOBS)), max_size=6, unique=True))
    for section, field in chosen:
        value = draw(KNOBS[(section, field)])
        if section == "memory.allocator":
            alloc = config.memory.allocator.model_copy(update={field: value})
            config = config.model_copy(
                update={"memory": config.memory.model_copy(update={"allocator": alloc})}
            )
            continue
        if section == "speculative":
            config = config.model_copy(
                update={
                    "speculative": config.speculative.model_copy(update={field: value}),
                    "cudagraph": config.cudagraph.model_copy(
                        update={"capture_sizes": [4, 8, 16, 32], "capture_rule": None}
                    ),
                }
            )
            continue
        sub = getattr(config, section).model_copy(update={field: value})
        config = config.model_copy(update={section: sub})
    if draw(st.booleans()):
        config = config.model_copy(update={"runner": draw(st.sampled_from(["v1", "v2"]))})
    if draw(st.booleans()):
        # the library generation changes constants, channel model, residency and shard rule
        config = config.model_copy(update={"stack": draw(st.sampled_from(list(STACKS)))})
    if draw(st.booleans()):
        config = config.model_copy(
            update={"parallel": config.parallel.model_copy(update={"dcp": draw(st.sampled_from([1, 2, 4]))})}
        )
    return config


def snapshot(config: DeploymentConfig) -> tuple[object, ...]:
    ledger = build_ledger(config)
    return ledger.rank0.entries, ledger.latent, ledger.notes, compute_budget(config, ledger)


@settings(max_examples=150, deadline=None)
@given(configs(), configs())
def test_a_build_does_not_depend_on_the_one_before(first: DeploymentConfig, second: DeploymentConfig) -> None:
    alone = snapshot(second)
    snapshot(first)  # another configuration's build in between
    again = snapshot(second)
    assert again == alone
    # the term model's itemization is the ledger's own, whatever inputs the ledger was built with
    assert itemize(second) == build_ledger(second).itemized()


def test_the_inputs_are_read() -> None:
    config = BASES["turnkey"]
    plain = build_ledger(config)
    calibrated = build_ledger(config, LedgerInputs(activation_bytes=1 << 30, kv_bytes_per_token=30_000))
    assert plain.entry("activations") != calibrated.entry("activations")
    assert plain.entry("kv_cache") != calibrated.entry("kv_cache")
    # calibration replaces the residual entries only: the itemized rest is the same
    assert calibrated.itemized() == plain.itemized() == itemize(config)
