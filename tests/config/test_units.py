from __future__ import annotations

import pytest

from glmlaunch.config.units import GIB, KIB, MIB, format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("84KB", 84 * KIB),
        ("64KB", 65536),
        ("84KiB", 86016),
        ("6MB", 6 * MIB),
        ("512 MiB", 512 * MIB),
        ("96GiB", 96 * GIB),
        ("1.5GiB", 3 * GIB // 2),
        ("95.01GiB", round(95.01 * GIB)),
        ("123", 123),
        (4096, 4096),
        ("2T", 2 * 1024**4),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "abc", "12XB", "-1", "1.5", True, None, [1], "1e5", float("nan"), -3])
def test_parse_size_rejects(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_size(bad)


def test_format_size() -> None:
    assert format_size(14_205_952) == "13.55 MiB"
    assert format_size(512) == "512 B"
    assert format_size(3 * GIB) == "3.00 GiB"
    assert format_size(-2 * MIB) == "-2.00 MiB"


def test_display_size_reads_as_written() -> None:
    from glmlaunch.config.units import display_size

    assert display_size(0) == "0 B" and display_size(1000) == "1000 B"
    assert display_size(84 * KIB) == "84 KiB" and display_size(6 * MIB) == "6 MiB"
    assert display_size(parse_size("95.01GiB")) == "95.01 GiB"
    assert display_size(parse_size("1.5GiB")) == "1.5 GiB"
    assert display_size(1537 * KIB) == "1537 KiB"  # 1.50 MiB would read as another size
    assert display_size(parse_size("95.01GiB") + 1) == "95.01 GiB (102,016,210,699 B)"
    for n in (1, 1023, 1024, 1536, 10**9, 2**40 + 7, parse_size("95.01GiB")):
        shown = display_size(n)
        if "(" in shown:  # the exact count is given
            assert shown.endswith(f"({n:,} B)")
        else:  # the text reads back as the same size
            assert parse_size(shown.replace(" ", "")) == n
