"""What glmlaunch knows of a checkpoint's format from its name: the bit tiers of its routed experts.

Light on purpose (the rules and the ledger both read it). A checkpoint is matched by its directory or hub
name (the last part of ``model.path``, case-insensitive), as the weights table matches it; a checkpoint of
another name states its tiers with ``model.expert_bits``.
"""

from __future__ import annotations

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
