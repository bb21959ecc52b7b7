"""The MTP layer's share of W and the online-quantization saving against every documented pair of boots
that differs only there (issue 29, item 4), the band W carries, and the checkpoints glmlaunch does not
know (a warning with the estimate, never a silent figure).

The pairs: the weights table (``weights_facts.json``, derived from data/upstream/weights.json and the
shared boot logs) pairs two figures of one checkpoint, online quantization, TP and *build* (release key,
vLLM tree, overlay: the r14 field review's baseline image and its ``current210`` overlay are two builds of
r14); the README's pair of R7 boots logs pools, not W, and bounds the share from above
(``mtp_bounds``, scripts/derive_weights_facts.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO

from glmlaunch.config.checkpoints import weight_format
from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.inputs import UNCALIBRATED
from glmlaunch.ledger.weights import (
    _mtp_share,
    _pick,
    _quant_savings,
    decide_for,
    facts,
    mtp_bounds,
    mtp_pairs,
    quant_pairs,
)

GIB = 1024**3
#: two figures the appliance rounds to two decimals differ from their bytes by 0.01 GiB at most
TOLERANCE = round(0.011 * GIB)
#: a saving transferred to another checkpoint of the same quantization (3.36 and 3.42 bpw K6 agree)
TRANSFER_TOLERANCE = round(0.1 * GIB)
PROFILES = sorted(p.stem for p in (REPO / "profiles").glob("*.yaml"))


def config_of(checkpoint: str, *sets: str) -> DeploymentConfig:
    return resolve_config("turnkey", [f"model.path={checkpoint}", "model.revision=null", *sets]).config


def test_every_pair_that_differs_only_in_mtp_is_the_ledgers_share() -> None:
    pairs = mtp_pairs()
    # the shared logs vllm-current210-cap1024-mtp0-v1 / -mtp3-v1 / -mtp3-v3 / current210-unset-mtp3: one build
    assert len(pairs) >= 3
    for on, off in pairs:
        assert on.build == off.build and on.checkpoint == off.checkpoint and on.tp == off.tp
        share = _mtp_share(config_of(on.checkpoint), on.online_quant)
        assert share is not None
        assert abs(share.value - (on.bytes - off.bytes)) <= TOLERANCE, (on.source, off.source, share.how)
        assert share.low <= on.bytes - off.bytes <= share.high


def test_a_difference_across_builds_is_not_the_share() -> None:
    # 3.25 bpw at r14: the offload build's MTP5 82.81 and the field build's MTP0 81.93 are 0.88 GiB apart;
    # the one build that logs both says 1.64 (83.57 - 81.93). The old table took the 0.88.
    share = _mtp_share(config_of("willfalco/GLM-5.2-EXL3-TR3-3.25bpw"), "none")
    assert share is not None and abs(share.value - round(1.64 * GIB)) <= TOLERANCE
    builds = {f.build for f in facts() if f.checkpoint.endswith("3.25bpw") and f.release == "r14"}
    assert len(builds) == 3  # the offload overlay, the field baseline, the field +#210 overlay


def test_the_readme_pair_bounds_the_r7_share() -> None:
    (bound,) = [b for b in mtp_bounds() if b[0].endswith("3.5bpw-MTP78")]
    _checkpoint, release, quant, gib, low, high, how = bound
    assert release == "r34" and quant == "exl3-b6" and "r34-r7-mtp3-gmu098" in how
    # the pair's non-KV difference (dR - dKV) is W share + dP + dN + dG_e: the share cannot exceed it
    assert 0 < low < gib < high < 1.3
    r7 = resolve_config("r34-exl3-r7", ["speculative.num_speculative_tokens=0"]).config
    share = _mtp_share(r7, "exl3-b6")
    assert share is not None and share.value == round(gib * GIB) and share.high == round(high * GIB)
    # the R7 at MTP0: its MTP3 figure (86.61 GiB, ii-r17) less that share, not less the 2.24 GiB the
    # 3.36 bpw K6 figures of two releases differ by (more than the pair's whole difference allows)
    w0 = decide_for(r7, UNCALIBRATED)
    assert abs(w0.value - round((86.61 - gib) * GIB)) <= TOLERANCE, w0.formula
    lo, hi = w0.range
    assert lo <= round((86.61 - high) * GIB) + TOLERANCE and hi >= round((86.61 - low) * GIB) - TOLERANCE


def test_every_pair_that_differs_only_in_the_online_quantization_is_the_ledgers_saving() -> None:
    pairs = quant_pairs()
    assert {(n.checkpoint.rsplit("-", 1)[-1], f.online_quant) for n, f in pairs} == {
        ("3.36bpw", "exl3-b6"),
        ("3.36bpw", "mxfp8"),
        ("3.42bpw", "exl3-b6"),
    }
    savings = _quant_savings()
    for native, quant in pairs:
        cfg = config_of(quant.checkpoint, f"model.online_quant={quant.online_quant}")
        saving = _pick(savings, cfg, quant.online_quant)
        assert saving is not None
        assert abs(saving.value - (native.bytes - quant.bytes)) <= TOLERANCE, saving.how
        # transferred from the other checkpoints that measured it (where there are any): within 0.1 GiB
        others = [s for s in savings if s.quant == quant.online_quant and s.checkpoint != quant.checkpoint]
        for other in others:
            assert abs(other.value - (native.bytes - quant.bytes)) <= TRANSFER_TOLERANCE, other.how


@pytest.mark.parametrize("profile", PROFILES)
def test_a_shipped_profile_knows_its_checkpoint_and_carries_a_band(profile: str) -> None:
    config = resolve_config(profile, []).config
    fig = decide_for(config, UNCALIBRATED)
    assert fig.warning is None, fig.warning
    lo, hi = fig.range
    assert lo <= fig.value <= hi and hi - lo < 6 * GIB


def test_a_documented_figure_of_this_release_has_a_rounding_wide_band() -> None:
    config = resolve_config("exl3-tr3-3.25bpw", ["release=r17"]).config
    fig = decide_for(config, UNCALIBRATED)
    assert fig.source == "documented"
    lo, hi = fig.range
    assert hi - lo <= round(0.011 * GIB)
    explicit = decide_for(config.model_copy(update={"model": config.model.model_copy(update={
        "weights_per_rank": 80 * GIB})}), UNCALIBRATED)  # fmt: skip
    assert explicit.range == (80 * GIB, 80 * GIB)


def test_names_state_their_storage() -> None:
    assert weight_format("zai-org/GLM-5.2-FP8") is not None
    fp8 = weight_format("zai-org/GLM-5.2-FP8")
    assert fp8 is not None and fp8.expert_bits > 8 and fp8.dense_bits > 8 and fp8.label == "FP8"
    bpw = weight_format("willfalco/GLM-5.2-EXL3-TR3-3.25bpw")
    assert bpw is not None and bpw.expert_bits == 3.25 and bpw.dense_bits == 16
    assert weight_format("zai-org/GLM-5.2") is None
    hybrid = weight_format("madeby561/GLM-5.2-MXFP8-NVFP4-NF3-Hybrid")
    assert hybrid is not None and hybrid.expert_bits == 4.5 and hybrid.dense_bits > 8


def test_fp8_is_recognized_offline_warned_and_does_not_fit() -> None:
    # the case: W = 77.66 GiB (the 3.0 bpw figure) and a silent `ok`
    config = config_of("zai-org/GLM-5.2-FP8")
    fig = decide_for(config, UNCALIBRATED)
    assert fig.source == "estimate" and fig.warning is not None
    # the FP8 checkpoint is ~750 GB: ~175 GiB per rank at TP4, far beyond a 96 GB card
    lo, hi = fig.range
    assert 165 * GIB < lo < fig.value < hi < 200 * GIB
    assert "zai-org/GLM-5.2-FP8 is not a checkpoint glmlaunch knows" in fig.warning
    assert f"W {fig.value / GIB:.2f} GiB per rank [{lo / GIB:.2f}, {hi / GIB:.2f}]" in fig.warning


def test_a_name_that_says_nothing_is_a_default_with_the_widest_band() -> None:
    fig = decide_for(config_of("someone/GLM-5.2-custom"), UNCALIBRATED)
    assert fig.source == "default" and fig.warning is not None
    lo, hi = fig.range
    bf16 = decide_for(config_of("someone/GLM-5.2-BF16"), UNCALIBRATED)
    assert lo <= min(f.bytes for f in facts()) and hi >= bf16.value > 300 * GIB


def test_the_facts_carry_their_builds() -> None:
    doc = json.loads(Path(REPO / "glmlaunch" / "ledger" / "weights_facts.json").read_text())
    assert doc["columns"][-1] == "build" and all(len(r) == len(doc["columns"]) for r in doc["facts"])


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("model.embed_tokens.weight", "split"),  # VocabParallelEmbedding
        ("lm_head.weight", "split"),  # ParallelLMHead
        ("model.layers.0.self_attn.q_a_proj.weight", "replicated"),  # fused q_a / kv_a, disable_tp
        ("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", "replicated"),
        ("model.layers.0.self_attn.q_b_proj.weight", "split"),  # ColumnParallelLinear
        ("model.layers.0.self_attn.o_proj.weight", "split"),  # RowParallelLinear
        ("model.layers.0.self_attn.indexer.wq_b.weight", "replicated"),  # ReplicatedLinear
        ("model.layers.0.self_attn.indexer.wk.weight", "replicated"),  # disable_tp
        ("model.layers.0.self_attn.indexer.k_norm.bias", "replicated"),
        ("model.layers.0.input_layernorm.weight", "replicated"),
        ("model.norm.weight", "replicated"),
        ("model.layers.3.mlp.gate.weight", "replicated"),  # GateLinear(ReplicatedLinear)
        ("model.layers.3.mlp.gate.e_score_correction_bias", "replicated"),
        ("model.layers.3.mlp.experts.7.down_proj.weight", "split"),  # FusedMoE
        ("model.layers.3.mlp.shared_experts.gate_proj.weight", "split"),  # merged column parallel
        ("model.layers.78.eh_proj.weight", "mtp-replicated"),  # nn.Linear
        ("model.layers.78.enorm.weight", "mtp-replicated"),
        ("model.layers.78.shared_head.head.weight", "mtp"),  # ParallelLMHead
        ("model.layers.78.mlp.experts.0.up_proj.weight", "mtp"),
        ("model.layers.78.embed_tokens.weight", "shared"),  # the target's embedding is kept
    ],
)
def test_tensors_are_placed_as_vllms_loader_places_them(name: str, role: str) -> None:
    from glmlaunch.config.schema import ModelGeometry
    from glmlaunch.ledger.weights import tensor_role

    assert tensor_role(name, ModelGeometry()) == role
