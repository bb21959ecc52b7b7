"""The upstream releases a deployment runs, named as the gilded-gnosis v20 line names them (r14, r28, …),
and the kernel-library generation (``stack``) each release runs.

Light on purpose (no pydantic): the boot-log reader and the schema both use it.

One stack per library generation, each read from its own tree (glmlaunch/ledger/constants.py holds the
trees and commits; docs/memory-model.md §10 what changed between them):

========================  =========  ====================================================================
stack                     releases   library tree
========================  =========  ====================================================================
``sparkinfer-r14``        r12-r16    SparkInfer de04125 (r12 result tree 35aebc6d; r13-r16 byte-identical)
``sparkinfer-r28``        r17-r28    SparkInfer tree 200c1db7 = 272a84bd + PR 106 + PR 117
``b12x-r29``              r29-r31    B12X tree 6bc35fdb = 680d8195 + PR 125 (= PyPI b12x 1.2.1)
``b12x-r32``              r32-r34    B12X tree cd3ce190 = 7cecbb2c + PR 125/133/144 (= PyPI b12x 1.2.4)
``b12x-1.5``              none       PyPI b12x 1.5.x, the package the test extra installs (a lab row)
========================  =========  ====================================================================

Two B12X stacks because their one-shot layouts differ: from r32 the eager slot is sharded per source
rank by default at TP8 (``B12X_PCIE_TP8_OWNER_REDUCE``) and on opt-in at TP2/TP4, names r29 never reads.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

StackName = Literal["sparkinfer-r14", "sparkinfer-r28", "b12x-r29", "b12x-r32", "b12x-1.5"]
STACKS: tuple[StackName, ...] = get_args(StackName)

#: Names earlier versions of glmlaunch wrote, still accepted wherever a stack is read (profiles, records):
#: ``sparkinfer-r12`` was the r12-r16 generation's name; ``b12x`` named the PyPI 1.5.x constants.
STACK_ALIASES: dict[str, StackName] = {"sparkinfer-r12": "sparkinfer-r14", "b12x": "b12x-1.5"}

#: The stacks whose library is SparkInfer (``SPARKINFER_*`` names) and B12X (``B12X_*`` names).
SPARKINFER_STACKS: frozenset[StackName] = frozenset({"sparkinfer-r14", "sparkinfer-r28"})
B12X_STACKS: frozenset[StackName] = frozenset({"b12x-r29", "b12x-r32", "b12x-1.5"})

#: The releases each generation covers, first and last (release integration locks of
#: local-inference-lab/blackwell-llm-docker@3dd078a, patches/releases/gilded-gnosis-v20-r*/).
RELEASE_RANGES: dict[StackName, tuple[int, int]] = {
    "sparkinfer-r14": (12, 16),
    "sparkinfer-r28": (17, 28),
    "b12x-r29": (29, 31),
    "b12x-r32": (32, 34),
}

_RELEASE_RE = re.compile(r"(?:^|[.+-])(r[0-9]+)$")


def canonical_stack(name: str) -> str:
    """The stack an accepted alias stands for; any other name unchanged (validation judges it)."""
    return STACK_ALIASES.get(name, name)


def release_of(version: str | None) -> str | None:
    """The release a gilded-gnosis vLLM build string ends with (``0.11.2.dev280+….20260730.r14`` -> r14)."""
    if not version:
        return None
    m = _RELEASE_RE.search(version.strip())
    return m.group(1) if m else None


def release_number(release: str | None) -> int | None:
    """14 for r14; None for anything else (an unknown release, or another line's label such as v31)."""
    if release and release.startswith("r") and release[1:].isdigit():
        return int(release[1:])
    return None


def stack_of_release(release: str | None) -> StackName | None:
    """The kernel-library generation a gilded-gnosis v20 release runs (the release integration locks).

    A release before r12 is given the oldest generation read (as before issue 23), one after r34 the newest,
    b12x-r32, until its own tree is read.
    """
    n = release_number(release)
    if n is None:
        return None
    for stack, (_first, last) in RELEASE_RANGES.items():
        if n <= last:
            return stack
    return "b12x-r32"


def releases_text(stack: str) -> str:
    """``r17-r28`` for a release generation; ``no release`` for the lab row."""
    span = RELEASE_RANGES.get(stack)  # type: ignore[call-overload]
    return f"r{span[0]}-r{span[1]}" if span else "no release"
