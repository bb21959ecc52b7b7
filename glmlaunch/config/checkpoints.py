"""What glmlaunch knows of a checkpoint's format from its name: the bit tiers of its routed experts.

Light on purpose (the rules and the ledger both read it). A checkpoint is matched by its directory or hub
name (the last part of ``model.path``, case-insensitive), as the weights table matches it; a checkpoint of
another name states its tiers with ``model.expert_bits``.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class ExpertTiers(NamedTuple):
    bits: tuple[int, ...]
    source: str


#: checkpoint name -> the EXL3 bit tiers its routed experts are stored in
KNOWN_EXPERT_TIERS: dict[str, ExpertTiers] = {
    "glm-5.2-exl3-tr3v4-3.5bpw-mtp78": ExpertTiers(
        (3, 4, 5),
        "the R7 mixed-K3/K4/K5 checkpoint: 'Routed experts execute directly from checkpoint-native "
        "K3/K4/K5 Trellis payloads' (local-inference-lab/blackwell-llm-docker README.md@3dd078a L894-895; "
        "examples/docker-compose-glm52-r7-v20-r34.yml L1-3)",
    ),
}


def checkpoint_name(path: str | None) -> str:
    """The checkpoint's directory or hub name (its last path part), lower case."""
    return (path or "").rstrip("/").rsplit("/", 1)[-1].lower()


def known_tiers(path: str | None) -> ExpertTiers | None:
    return KNOWN_EXPERT_TIERS.get(checkpoint_name(path))


class WeightFormat(NamedTuple):
    """What a checkpoint's name says of how its weights are stored: the routed experts' bits per weight,
    and whether the other linear layers are stored at that width too (an FP8 checkpoint quantizes every
    linear layer; an EXL3 one keeps attention, shared experts and dense layers in BF16)."""

    #: bits per routed-expert weight, scales included
    expert_bits: float
    #: bits per weight of the other linear layers (16: BF16, as the EXL3 checkpoints keep them)
    dense_bits: float
    #: the name part that said so
    label: str


# How the names of the checkpoints of this model family state their storage. Scales are counted in the
# bits: FP8 with one fp32 scale per 128x128 block (DeepSeek-V3 / GLM FP8 releases, ``weight_block_size``
# [128, 128]) is 8.002 bits, and quantizes every linear layer; NVFP4 is 4 bits plus one FP8 scale per 16
# weights (4.5 bits) and MXFP4 one E8M0 scale per 32 (4.25), their dense layers taken as BF16 (the
# pessimistic reading: releases differ). An EXL3 name states its own mean (``3.25bpw``).
_FORMATS: tuple[tuple[re.Pattern[str], float, float, str], ...] = (
    (re.compile(r"(?<![a-z0-9])(?:mx)?fp8(?![0-9])|w8a8|int8", re.IGNORECASE), 8.002, 8.002, "FP8"),
    (re.compile(r"nvfp4", re.IGNORECASE), 4.5, 16.0, "NVFP4"),
    (re.compile(r"mxfp4", re.IGNORECASE), 4.25, 16.0, "MXFP4"),
    (re.compile(r"(?<![a-z0-9])(?:bf16|fp16|float16|bfloat16)(?![0-9])", re.IGNORECASE), 16.0, 16.0, "BF16"),
)
_BPW = re.compile(r"([0-9]+(?:\.[0-9]+)?)bpw", re.IGNORECASE)


def weight_format(path: str | None) -> WeightFormat | None:
    """The storage a checkpoint's name states, or None when the name says nothing of it. An EXL3 bit rate
    (``…-3.25bpw``) wins over a format word; a hybrid naming several formats (``MXFP8-NVFP4-NF3``) is read
    as its narrowest for the experts and its widest for the dense layers."""
    name = checkpoint_name(path)
    m = _BPW.search(name)
    if m:
        return WeightFormat(float(m.group(1)), 16.0, f"{m.group(1)}bpw")
    found = [(expert, dense, label) for pattern, expert, dense, label in _FORMATS if pattern.search(name)]
    if not found:
        return None
    if len(found) == 1:
        return WeightFormat(*found[0])
    return WeightFormat(
        min(f[0] for f in found), max(f[0] for f in found), "+".join(f[2] for f in found) + " hybrid"
    )
