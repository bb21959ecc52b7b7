"""Byte sizes with human units.

The deployment's launchers and vLLM read ``84KB`` as 86,016 bytes, so ``KB``/``MB``/``GB`` here are
binary (1024-based), exactly like ``KiB``/``MiB``/``GiB``. pydantic's ``ByteSize`` reads ``KB`` as 1000,
which would silently change every one-shot size, so this small parser stays hand-written.
"""

from __future__ import annotations

import math
import re

from glmlaunch.errors import ConfigError

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


_DISPLAY_UNITS: tuple[tuple[str, int], ...] = (("TiB", 1024**4), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB))


def display_size(n: int) -> str:
    """A byte count as people write it in a profile: ``6 MiB``, ``84 KiB``, ``95.01 GiB``, ``1.5 GiB``.

    The largest unit the count reaches, with at most two decimals; when two decimals do not give the
    exact count back (the text would read as another size), a whole number of a smaller unit, and failing
    that the exact bytes in brackets: ``95.01 GiB (102,016,210,699 B)``. Exact integers stay in JSON.
    """
    if n < KIB:
        return f"{n} B"
    units = [(unit, factor) for unit, factor in _DISPLAY_UNITS if n >= factor]
    unit, factor = units[0]
    text = f"{n / factor:.2f}".rstrip("0").rstrip(".")
    if parse_size(f"{text}{unit}") == n:
        return f"{text} {unit}"
    for smaller, small_factor in units[1:]:
        if n % small_factor == 0:
            return f"{n // small_factor} {smaller}"
    return f"{text} {unit} ({n:,} B)"


def parse_size_option(value: str, *, key: str, what: str, minimum: int = 0) -> int:
    """A size given on the command line (``--gpu-memory``, ``--min-margin``): it needs its unit.

    ``--gpu-memory 96`` and ``--min-margin 1`` meant GiB, never bytes: a bare number is refused with the
    spelling that was probably meant, as is anything below ``minimum`` bytes.
    """
    text = value.strip()
    if text.replace(".", "", 1).isdigit() and (float(text) != 0 or minimum > 0):  # 0 is 0 in any unit
        raise ConfigError(f"{what} needs a unit", key=key, value=value, hint=f"e.g. {text}GiB or {text}MiB")
    try:
        size = parse_size(value)
    except ValueError as exc:
        raise ConfigError(str(exc), key=key, value=value, hint="e.g. 96GiB, 512MiB or 1.5GiB") from None
    if size < minimum:
        least = "more than 0 bytes" if minimum == 1 else f"at least {format_size(minimum)}"
        raise ConfigError(f"{what} must be {least}", key=key, value=value, hint="e.g. 96GiB")
    return size
