"""The upstream releases a deployment runs, as ``(line, number)``, and the kernel-library generation
(``stack``) each release runs.

local-inference-lab/blackwell-llm-docker has two release lines whose numbers overlap:

* **Gilded Gnosis** (``gg``, the gilded-gnosis v20 line: r11 ... r34, ``release(gg):`` commits): vLLM
  builds named ``…+gilded.gnosis.v20.…​.20260730.r14``. Its releases keep their bare names: ``r28`` (the
  spelling every record and profile before the second line used) and ``gg-r28`` are the same release.
* **Infernal Invocation** (``ii``: r2 ... r18, ``release(ii):`` commits): vLLM ``dev/infernal-invocation``
  and B12X ``master`` builds named ``…+infernal.invocation.cu133.r18.vllm<tree7>.b12x<tree7>``;
  spelled ``ii-r18``.

The older ``vNN`` image line (``v31``) names images before the v20 releases: it stays a release label of
its own (documented boots use it) with no library generation behind it.

Light on purpose (no pydantic): the boot-log reader and the schema both use it.

One stack per library generation, each read from its own tree (glmlaunch/ledger/constants.py holds the
trees and commits; docs/memory-model.md §10 what changed between them):

========================  ===========  ==================================================================
stack                     releases     library tree
========================  ===========  ==================================================================
``sparkinfer-r14``        r12-r16      SparkInfer de04125 (r12 result tree 35aebc6d; r13-r16 byte-identical)
``sparkinfer-r28``        r17-r28      SparkInfer tree 200c1db7 = 272a84bd + PR 106 + PR 117
``b12x-r29``              r29-r31      B12X tree 6bc35fdb = 680d8195 + PR 125 (= PyPI b12x 1.2.1)
``b12x-r32``              r32-r34      B12X tree cd3ce190 = 7cecbb2c + PR 125/133/144 (= PyPI b12x 1.2.4)
``b12x-ii``               ii-r16-r18   B12X master tree 75787c7a = c25cdba2 + PR 145/221/223/227-230 (1.2.3)
``b12x-1.5``              none         PyPI b12x 1.5.x, the package the test extra installs (a lab row)
========================  ===========  ==================================================================

Two GG B12X stacks because their one-shot layouts differ: from r32 the eager slot is sharded per source
rank by default at TP8 (``B12X_PCIE_TP8_OWNER_REDUCE``) and on opt-in at TP2/TP4, names r29 never reads.
``b12x-ii``'s pool code is byte-identical to ``b12x-r32``'s for TP4; it reads five names more and two
fewer (glmlaunch/config/library_env.json).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, NamedTuple, get_args

StackName = Literal["sparkinfer-r14", "sparkinfer-r28", "b12x-r29", "b12x-r32", "b12x-ii", "b12x-1.5"]
STACKS: tuple[StackName, ...] = get_args(StackName)

#: Names earlier versions of glmlaunch wrote, still accepted wherever a stack is read (profiles, records):
#: ``sparkinfer-r12`` was the r12-r16 generation's name; ``b12x`` named the PyPI 1.5.x constants.
STACK_ALIASES: dict[str, StackName] = {"sparkinfer-r12": "sparkinfer-r14", "b12x": "b12x-1.5"}

#: The stacks whose library is SparkInfer (``SPARKINFER_*`` names) and B12X (``B12X_*`` names).
SPARKINFER_STACKS: frozenset[StackName] = frozenset({"sparkinfer-r14", "sparkinfer-r28"})
B12X_STACKS: frozenset[StackName] = frozenset({"b12x-r29", "b12x-r32", "b12x-ii", "b12x-1.5"})

ReleaseLine = Literal["gg", "ii"]
RELEASE_LINES: dict[ReleaseLine, str] = {
    "gg": "Gilded Gnosis (gilded-gnosis v20)",
    "ii": "Infernal Invocation (vLLM dev/infernal-invocation, B12X master)",
}


class ReleaseBand(NamedTuple):
    """The releases one generation covers: a line and its first and last number."""

    line: ReleaseLine
    first: int
    last: int

    def labels(self) -> list[str]:
        return [Release(self.line, n).label for n in range(self.first, self.last + 1)]

    def text(self) -> str:
        """``r17-r28`` on the Gilded Gnosis line, ``ii-r16-r18`` on Infernal Invocation."""
        prefix = "" if self.line == "gg" else f"{self.line}-"
        return f"{prefix}r{self.first}-r{self.last}"


#: The releases each generation covers (release integration locks of
#: local-inference-lab/blackwell-llm-docker@3dd078a: patches/releases/gilded-gnosis-v20-r*/ and
#: patches/releases/infernal-invocation-r*/; ii r16 and r17 build B12X from the same base as r18, trees
#: a4a0bc8a and c0a44a16, whose pool code equals r18's).
RELEASE_BANDS: dict[StackName, ReleaseBand] = {
    "sparkinfer-r14": ReleaseBand("gg", 12, 16),
    "sparkinfer-r28": ReleaseBand("gg", 17, 28),
    "b12x-r29": ReleaseBand("gg", 29, 31),
    "b12x-r32": ReleaseBand("gg", 32, 34),
    "b12x-ii": ReleaseBand("ii", 16, 18),
}
#: ``RELEASE_BANDS`` as (first, last) per stack, for callers that predate the second line (every band of
#: the Gilded Gnosis line is numbered as before)
RELEASE_RANGES: dict[StackName, tuple[int, int]] = {s: (b.first, b.last) for s, b in RELEASE_BANDS.items()}

#: The Gilded Gnosis release whose memory code an Infernal Invocation release shares: ii r16-r18 run the
#: r34 pool, DCP and indexer code (B12X byte-identical for TP4) plus their own vLLM changes. Releases of
#: the two lines are compared through it (a figure of another line is always an estimate).
II_MEMORY_PEER = 34
#: how far apart two releases of different lines count, beyond their peers' distance
CROSS_LINE_DISTANCE = 1000


@dataclass(frozen=True, slots=True)
class Release:
    """One release: its line and number (``gg``/28, ``ii``/18), or an image of the older ``v`` line."""

    line: ReleaseLine | Literal["v"]
    number: int

    @property
    def label(self) -> str:
        """The canonical spelling: ``r28`` (Gilded Gnosis keeps the bare name), ``ii-r18``, ``v31``."""
        if self.line == "gg":
            return f"r{self.number}"
        if self.line == "v":
            return f"v{self.number}"
        return f"{self.line}-r{self.number}"

    @property
    def line_name(self) -> str:
        if self.line == "v":
            return "the older vNN image line (before the v20 releases)"
        return RELEASE_LINES[self.line]

    def peer_number(self) -> int | None:
        """The Gilded Gnosis release number this release is compared at (itself on that line)."""
        if self.line == "gg":
            return self.number
        if self.line == "ii":
            return II_MEMORY_PEER
        return None


#: how a release may be written: ``r28``, ``gg-r28``, ``ii-r18`` (any case), ``v31``
RELEASE_PATTERN = r"^(?:(?:[gG][gG]|[iI][iI])-)?[rR][0-9]+$|^[vV][0-9]+$"
_RELEASE_TEXT = re.compile(r"^(?:(gg|ii)-)?r([0-9]+)$|^v([0-9]+)$")
_GG_BUILD = re.compile(r"(?:^|[.+-])r([0-9]+)$")
_II_BUILD = re.compile(r"infernal[.-]invocation\.(?:[a-z0-9]+\.)*?r([0-9]+)(?:\.|$)")


def parse_release(text: str | None) -> Release | None:
    """``r28`` / ``gg-r28`` -> Gilded Gnosis 28; ``ii-r18`` -> Infernal Invocation 18; ``v31`` -> the
    image line; anything else None."""
    if not text:
        return None
    m = _RELEASE_TEXT.match(text.strip().lower())
    if m is None:
        return None
    if m.group(3) is not None:
        return Release("v", int(m.group(3)))
    line: ReleaseLine = "ii" if m.group(1) == "ii" else "gg"
    return Release(line, int(m.group(2)))


def canonical_release(text: str) -> str:
    """The canonical spelling of a release (``gg-r28`` -> ``r28``, ``II-R18`` -> ``ii-r18``); any other
    text unchanged (validation judges it)."""
    rel = parse_release(text)
    return rel.label if rel is not None else text


def canonical_stack(name: str) -> str:
    """The stack an accepted alias stands for; any other name unchanged (validation judges it)."""
    return STACK_ALIASES.get(name, name)


def release_of(version: str | None) -> str | None:
    """The release a vLLM build string names, canonically spelled: a gilded-gnosis build ends with it
    (``0.11.2.dev280+….20260730.r14`` -> ``r14``); an Infernal Invocation build names it after the
    CUDA tag (``0.26.1rc0+infernal.invocation.cu133.r18.vllmf0fa1ce.b12x75787c7`` -> ``ii-r18``)."""
    if not version:
        return None
    text = version.strip()
    low = text.lower()
    m = _II_BUILD.search(low)
    if m is not None:
        return Release("ii", int(m.group(1))).label
    m = _GG_BUILD.search(low)
    return Release("gg", int(m.group(1))).label if m else None


def release_line(release: str | None) -> ReleaseLine | None:
    rel = parse_release(release)
    return rel.line if rel is not None and rel.line != "v" else None


def release_number(release: str | None) -> int | None:
    """14 for the Gilded Gnosis r14; None for anything else (an Infernal Invocation release, whose numbers
    are its own line's, an unknown release, or an image of the v line such as v31)."""
    rel = parse_release(release)
    return rel.number if rel is not None and rel.line == "gg" else None


def release_distance(a: str | None, b: str | None) -> int | None:
    """How far apart two releases are: their number difference on one line; across the lines the
    distance of their Gilded Gnosis peers plus :data:`CROSS_LINE_DISTANCE`; None when either is unknown
    or of the v image line (which is only ever equal to itself)."""
    ra, rb = parse_release(a), parse_release(b)
    if ra is None or rb is None:
        return None
    if ra.line == rb.line:
        return abs(ra.number - rb.number)
    pa, pb = ra.peer_number(), rb.peer_number()
    if pa is None or pb is None:
        return None
    return CROSS_LINE_DISTANCE + abs(pa - pb)


def stack_of_release(release: str | None) -> StackName | None:
    """The kernel-library generation a release runs (the release integration locks).

    A Gilded Gnosis release before r12 is given the oldest generation read (as before issue 23), one after
    r34 the newest, b12x-r32, until its own tree is read; every Infernal Invocation release is given
    b12x-ii (only r16-r18 were read: :func:`stack_is_read` says which). The v image line has none.
    """
    rel = parse_release(release)
    if rel is None or rel.line == "v":
        return None
    if rel.line == "ii":
        return "b12x-ii"
    for stack, band in RELEASE_BANDS.items():
        if band.line == "gg" and rel.number <= band.last:
            return stack
    return "b12x-r32"


def stack_is_read(release: str | None) -> bool:
    """Whether :func:`stack_of_release` is evidence for ``release`` (its band's tree was read), not a
    guess: Gilded Gnosis r12-r34 and before, Infernal Invocation r16-r18."""
    rel = parse_release(release)
    stack = stack_of_release(release)
    if rel is None or stack is None:
        return False
    band = RELEASE_BANDS[stack]
    if rel.line == "gg":
        return rel.number <= band.last
    return band.first <= rel.number <= band.last


def releases_text(stack: str) -> str:
    """``r17-r28`` for a release generation, ``ii-r16-r18`` on the Infernal Invocation line; ``no
    release`` for the lab row."""
    band = RELEASE_BANDS.get(stack)  # type: ignore[call-overload]
    return band.text() if band else "no release"
