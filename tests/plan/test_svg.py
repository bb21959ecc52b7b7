"""`plan --svg FILE`: the map parsed as XML: numbers on the bars, the overrun, the verdict, rank groups."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from glmlaunch.config.profiles import list_profiles
from glmlaunch.config.units import format_size
from glmlaunch.plan import memmap
from glmlaunch.plan.planner import plan_profile
from tests.conftest import run_cli

NS = "{http://www.w3.org/2000/svg}"


def _svg(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()  # valid XML, or this raises
    assert root.tag == f"{NS}svg"
    return root


def _texts(root: ET.Element, cls: str | None = None) -> list[ET.Element]:
    return [t for t in root.iter(f"{NS}text") if cls is None or t.get("class") == cls]


def _rects(root: ET.Element, cls: str, bar: str = "whole") -> list[ET.Element]:
    return [r for r in root.iter(f"{NS}rect") if r.get("class") == cls and r.get("data-bar") == bar]


def test_map_has_numbers_on_the_bars_and_one_group_for_identical_ranks(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    svg = tmp_path / "turnkey.svg"
    out = run_cli("plan", "-p", "turnkey", "--svg", str(svg), env=clean_env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(run_cli("plan", "-p", "turnkey", "--json", env=clean_env).stdout)
    root = _svg(svg)
    # four identical ranks: drawn once, labelled as a group
    assert [t.text for t in _texts(root, "group")] == ["ranks 0\u20133, GPUs 0\u20133"]
    assert not any((t.text or "").startswith("GPU ") for t in _texts(root))
    # the bytes of the wide segments are written on the bars, the narrow ones in the bar's own legend line
    labels = [t.text or "" for t in _texts(root, "bar-label")]
    budget = doc["budget"]
    assert f"weights {format_size(budget['weights_bytes'])}" in labels
    assert any(format_size(budget["kv_cache_bytes"]) in label for label in labels)
    assert any(format_size(budget["margin_bytes"]) in label for label in labels)
    legend = " ".join(t.text or "" for t in _texts(root, "bar-legend"))
    assert legend.startswith("not on the bars:") and "comm pools" in legend
    # the map adds up to the verdict's budget: its margin segment is the budget's margin
    assert f"margin: {format_size(budget['margin_bytes'])} " in " ".join(t.text or "" for t in _texts(root))
    # no overrun when the margin is positive
    assert not _rects(root, "overrun") and not _rects(root, "overrun", "zoom")


def test_verdict_is_title_sized_and_coloured_by_status(tmp_path: Path, clean_env: dict[str, str]) -> None:
    svg = tmp_path / "ok.svg"
    assert run_cli("plan", "-p", "turnkey", "--svg", str(svg), env=clean_env).returncode == 0
    root = _svg(svg)
    (verdict,) = _texts(root, "verdict")
    (title,) = [t for t in _texts(root, "title") if t.get("font-size")][:1]
    assert float(verdict.get("font-size") or 0) >= float(title.get("font-size") or 0)
    assert verdict.get("font-weight") == "bold" and (verdict.text or "").startswith("verdict: ok")
    assert verdict.get("fill") == memmap.STATUS_COLOURS["ok"]


def test_negative_margin_is_drawn_past_the_end_of_the_bar(tmp_path: Path, clean_env: dict[str, str]) -> None:
    svg = tmp_path / "overrun.svg"
    args = ("plan", "-p", "turnkey", "--set", "memory.gpu_memory_utilization=0.99", "--svg", str(svg))
    out = run_cli(*args, env=clean_env)
    assert out.returncode == 4  # the plan fails, and the map it wrote shows why
    root = _svg(svg)
    for bar in ("whole", "zoom"):
        (device,) = _rects(root, "device", bar)
        (overrun,) = _rects(root, "overrun", bar)
        end = float(device.get("x") or 0) + float(device.get("width") or 0)
        assert float(overrun.get("x") or 0) >= end - 0.1 and float(overrun.get("width") or 0) > 0
    # the picture is wide enough for the overrun and its label
    width = float(root.get("width") or 0)
    for t in _texts(root, "overrun-label"):
        assert float(t.get("x") or 0) < width and (t.text or "").startswith("overrun ")
    (verdict,) = _texts(root, "verdict")
    status = verdict.get("data-status") or ""
    assert status in ("oom-risk", "refused") and verdict.get("fill") == memmap.STATUS_COLOURS[status]
    assert "margin -" in (verdict.text or "")


def test_header_names_the_overrides(tmp_path: Path, clean_env: dict[str, str]) -> None:
    svg = tmp_path / "set.svg"
    env = {**clean_env, "GLMLAUNCH_SET": "memory.min_margin=2GiB"}
    args = ("plan", "-p", "turnkey", "--set", "memory.gpu_memory_utilization=0.93", "--svg", str(svg))
    assert run_cli(*args, env=env).returncode in (0, 4)
    title = " ".join(t.text or "" for t in _texts(_svg(svg), "title"))
    assert "turnkey + memory.min_margin=2GiB memory.gpu_memory_utilization=0.93" in title


def test_ranks_that_differ_are_drawn_apart() -> None:
    result = plan_profile("gate")
    ranks = result.ledger.ranks
    odd = replace(ranks[3], entries=ranks[3].entries[:-1])  # rank 3 lost an entry
    text = memmap.svg((*ranks[:3], odd), result.budget, title="t: d")
    root = ET.fromstring(text)
    groups = [t.text for t in _texts(root, "group")]
    assert groups == ["ranks 0\u20132, GPUs 0\u20132", "GPU 3 (rank 3)"]


def _number(value: str | None) -> float:
    n = float(value or 0)
    assert n == n and abs(n) < 1e6, value  # finite and on the page
    return n


def _check_sane(root: ET.Element) -> None:
    """What every renderer needs: a bounded page, and every shape and text on it."""
    width, height = _number(root.get("width")), _number(root.get("height"))
    assert width == memmap.WIDTH and 0 < height < 10_000
    assert root.get("viewBox") == f"0 0 {width:.0f} {height:.0f}"
    for rect in root.iter(f"{NS}rect"):
        if rect.get("class") in ("segment", "device", "overrun", "runtime-overrun", "runtime-demand"):
            x, w = _number(rect.get("x")), _number(rect.get("width"))
            assert x >= 0 and w >= 0 and x + w <= width + 0.5, ET.tostring(rect)[:200]
    for text in root.iter(f"{NS}text"):
        assert 0 <= _number(text.get("x")) < width
    titles = " ".join(t.text or "" for t in _texts(root, "title") + _texts(root, "subtitle"))
    assert not titles.rstrip().endswith("))"), titles
    # the runtime margin, the deciding figure of a runtime-oom, is written under the bars
    (line, *_) = _texts(root, "runtime-margin")
    assert (line.text or "").startswith("runtime margin ")


_PROFILES = sorted(p.name for p in list_profiles())


@pytest.mark.parametrize("profile", _PROFILES)
def test_every_shipped_profile_draws_a_sane_map(
    profile: str, tmp_path: Path, clean_env: dict[str, str]
) -> None:
    svg = tmp_path / f"{profile}.svg"
    out = run_cli("plan", "-p", profile, "--svg", str(svg), env=clean_env)
    assert out.returncode in (0, 4), out.stderr
    root = _svg(svg)
    _check_sane(root)
    doc = json.loads(run_cli("plan", "-p", profile, "--json", env=clean_env).stdout)
    line = " ".join(t.text or "" for t in _texts(root, "runtime-margin"))
    assert format_size(doc["budget"]["runtime_margin_bytes"]) in line


@pytest.mark.parametrize(
    "sets",
    [
        # TP2 on 48 GiB GPUs: the weights alone are three times the device
        ("parallel.tp=2", "parallel.dcp=1", "hardware.memory_per_gpu=48GiB"),
        ("hardware.memory_per_gpu=24GiB",),
        ("hardware.memory_per_gpu=85GiB",),  # the fixed terms fit, not with X and the demand
        ("memory.gpu_memory_utilization=0.99",),  # a start-gate refusal
    ],
)
def test_refused_plans_draw_a_sane_map_with_the_overrun(
    sets: tuple[str, ...], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    svg = tmp_path / "refused.svg"
    args = [a for s in sets for a in ("--set", s)]
    out = run_cli("plan", "-p", "turnkey", *args, "--svg", str(svg), env=clean_env)
    assert out.returncode == 4
    root = _svg(svg)
    _check_sane(root)
    (verdict, *_) = _texts(root, "verdict")
    assert verdict.get("data-status") in ("refused", "oom-risk")
    # the overrun is drawn inside the page, after the device's end, and said in words
    for bar in ("whole", "zoom"):
        (device,) = _rects(root, "device", bar)
        for over in _rects(root, "overrun", bar):
            end = float(device.get("x") or 0) + float(device.get("width") or 0)
            assert float(over.get("x") or 0) >= end - 0.1
    assert any((t.text or "").startswith("overrun ") for t in _texts(root, "overrun-label"))
    # no zero advice on the map either
    details = " ".join(t.text or "" for t in _texts(root, "detail"))
    assert "=0 (0 B)" not in details and "holds 0 tokens)" not in details


def test_the_description_is_not_closed_twice(tmp_path: Path, clean_env: dict[str, str]) -> None:
    svg = tmp_path / "342.svg"
    args = ("plan", "-p", "exl3-tr3-3.42bpw", "--set", "memory.num_gpu_blocks_override=null")
    assert run_cli(*args, "--svg", str(svg), env=clean_env).returncode == 4
    root = _svg(svg)
    (title,) = _texts(root, "title")
    assert title.text == "glmlaunch plan -p exl3-tr3-3.42bpw + memory.num_gpu_blocks_override=null"
    sub = " ".join(t.text or "" for t in _texts(root, "subtitle"))
    assert sub.startswith("profile exl3-tr3-3.42bpw: upstream") and sub.endswith("pinned blocks)")
    # a runtime-oom: the runtime margin is on the headline, negative
    assert "runtime margin -" in " ".join(t.text or "" for t in _texts(root, "verdict"))
