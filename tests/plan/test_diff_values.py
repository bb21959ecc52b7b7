"""`diff` (issue 31, item 14): a value reads as `config` shows it (`null`, `true`, `24 MiB`, never Python's
`None`, `True` or raw bytes), and the refusal to diff a profile with itself names its remedy whole."""

from __future__ import annotations

import json
import re

import pytest

from glmlaunch.config.commands import setting_text
from tests.conftest import run_cli


def _cells(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines() if line.startswith("│")]


@pytest.mark.parametrize("pair", [("gate", "turnkey"), ("turnkey", "exl3-tr3-3.42bpw")])
def test_diff_shows_each_value_as_config_does(pair: tuple[str, str], clean_env: dict[str, str]) -> None:
    text = run_cli("diff", *pair, env=clean_env).stdout
    doc = json.loads(run_cli("diff", *pair, "--json", env=clean_env).stdout)
    rows = {row[0]: row[1:] for row in _cells(text.split("ledger per rank", 1)[0]) if row and row[0]}
    kinds = {type(s["left"]) for s in doc["settings"]} | {type(s["right"]) for s in doc["settings"]}
    assert {type(None), bool, int} <= kinds  # the pair exercises nulls, flags and sizes
    for s in doc["settings"]:
        assert rows[s["setting"]] == [
            setting_text(s["setting"], s["left"]),
            setting_text(s["setting"], s["right"]),
        ]
    shown = " ".join(" ".join(cells) for cells in rows.values())
    assert not re.search(r"\b(None|True|False)\b", shown), shown
    if pair == ("gate", "turnkey"):
        assert rows["comm.dma_min_bytes"] == ["6 MiB", "24 MiB"]  # as `config` shows sizes
        assert rows["comm.single_channel"] == ["null", "false"]


def test_diff_with_nothing_to_compare_names_the_way_out_whole(clean_env: dict[str, str]) -> None:
    done = run_cli("diff", "turnkey", env=clean_env)
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "****" not in line and line.count("(") == line.count(")"), line
    assert "glmlaunch diff turnkey --set comm.single_channel=true" in line
    assert run_cli("diff", "turnkey", "--set", "comm.single_channel=true", env=clean_env).returncode in (0, 4)
