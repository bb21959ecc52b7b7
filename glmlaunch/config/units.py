"""Byte sizes with human units.

The deployment's launchers and vLLM read ``84KB`` as 86,016 bytes, so ``KB``/``MB``/``GB`` here are
binary (1024-based), exactly like ``KiB``/``MiB``/``GiB``. pydantic's ``ByteSize`` reads ``KB`` as 1000,
which would silently change every one-shot size, so this small parser stays hand-written.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

KIB = 1024
MIB = 1024**2
GIB = 1024**3

_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": KIB,
    "kb": KIB,
    "kib": KIB,
    "m": MIB,
    "mb": MIB,
    "mib": MIB,
    "g": GIB,
    "gb": GIB,
    "gib": GIB,
    "t": 1024**4,
    "tb": 1024**4,
    "tib": 1024**4,
}

_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")
_MAX_BYTES = 1 << 62


def parse_size(value: object) -> int:
    """Parse ``value`` (an int, or a string such as ``84KB``, ``96GiB``, ``1.5 GiB``) into bytes."""
    if isinstance(value, bool):
        raise ValueError("a size must be a number of bytes or a string such as '84KB' or '96GiB'")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size cannot be negative")
        if value > _MAX_BYTES:
            raise ValueError("size is too large")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or value < 0 or value != int(value):
            raise ValueError("a size in bytes must be a whole, non-negative number")
        return int(value)
    if not isinstance(value, str):
        raise ValueError("a size must be a number of bytes or a string such as '84KB' or '96GiB'")
    match = _SIZE_RE.match(value)
    if not match:
        raise ValueError(f"cannot read {value!r} as a size; write e.g. 86016, '84KB', '512MiB', '96GiB'")
    number, unit = match.groups()
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise ValueError(
            f"unknown size unit {unit!r}; use B, KB/KiB, MB/MiB, GB/GiB or TB/TiB (all 1024-based)"
        )
    result = float(number) * factor
    if result > _MAX_BYTES:
        raise ValueError("size is too large")
    if factor == 1 and result != int(result):
        raise ValueError(f"{value!r} is not a whole number of bytes")
    # Fractions of a larger unit (95.01GiB) round to the nearest byte.
    return round(result)


def format_size(n: float, *, precision: int = 2) -> str:
    """Format bytes with the largest binary unit that keeps the number >= 1."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, factor in (("TiB", 1024**4), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= factor:
            return f"{sign}{n / factor:.{precision}f} {unit}"
    return f"{sign}{int(n)} B"


def mib(n: float) -> float:
    return n / MIB


def gib(n: float) -> float:
    return n / GIB


ByteSize = Annotated[
    int,
    BeforeValidator(parse_size),
    PlainSerializer(lambda v: v, return_type=int),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": r"^\s*[0-9.]+\s*([KkMmGgTt](i?[Bb])?|[Bb])?\s*$"},
            ],
            "description": "bytes, or a string with a 1024-based unit: 84KB, 512MiB, 96GiB",
        }
    ),
]
"""A size in bytes that accepts human units in profiles, env vars and ``--set``."""
