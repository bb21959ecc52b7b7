"""The figures in vLLM's lines: sizes with a unit, token counts with thousands separators.

Values printed in GiB with two decimals carry that rounding (±5 MiB) once converted to bytes.
"""

from __future__ import annotations

from glmlaunch.config.units import GIB, KIB, MIB

#: a decimal figure as vLLM prints it (``12``, ``12.34``): one group
NUM = r"([0-9]+(?:\.[0-9]+)?)"
#: a count, possibly with thousands separators (``1,234,567``): one group
INT = r"([0-9][0-9,]*)"

UNIT_BYTES = {"B": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB, "KB": KIB, "MB": MIB, "GB": GIB, "TiB": 1024**4}

#: Largest magnitude a number read from a log may have (a signed 64-bit value): anything larger is a
#: corrupt or hostile line, reported as unparsed and never stored in a record.
MAX_LOG_NUMBER = 2**63


def named(name: str) -> str:
    """:data:`NUM` as a named group."""
    return rf"(?P<{name}>[0-9]+(?:\.[0-9]+)?)"


def to_bytes(number: str, unit: str) -> int:
    return round(float(number) * UNIT_BYTES[unit])


def gib(number: str) -> int:
    return to_bytes(number, "GiB")


def count(text: str) -> int:
    """A count as printed, thousands separators and all."""
    return int(text.replace(",", ""))
