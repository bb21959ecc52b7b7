"""The upstream releases a deployment runs, named as the gilded-gnosis v20 line names them (r14, r28, …).

Light on purpose (no pydantic): the boot-log reader and the schema both use it.
"""

from __future__ import annotations

import re
from typing import Literal

StackName = Literal["sparkinfer-r12", "sparkinfer-r28", "b12x"]

_RELEASE_RE = re.compile(r"(?:^|[.+-])(r[0-9]+)$")


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
    """The kernel-library generation a gilded-gnosis v20 release runs: SparkInfer de04125 through r16,
    SparkInfer 272a84bd+PR106+PR117 from r17 to r28, B12X from r29 (the release integration locks)."""
    n = release_number(release)
    if n is None:
        return None
    if n <= 16:
        return "sparkinfer-r12"
    return "sparkinfer-r28" if n <= 28 else "b12x"


