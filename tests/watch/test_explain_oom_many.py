"""``explain-oom`` on a log of many OOMs (issue 31 follow-up: 5,000 distinct OOM lines took ~23 s, each
planned again ~5 times and printed): the OOM proving the largest demand is explained and its fixes planned
once; the others are counted by reading, so the planner runs as often as for a log of that one OOM."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

import glmlaunch.plan.plan as plan_module
import glmlaunch.watch.oom as oom_module
from glmlaunch.watch.commands import run_explain_oom

WATCH = FIXTURES / "watch"
PROFILE = str(WATCH / "h200.yaml")
FIXTURE = (WATCH / "oom.log").read_text()
OOM = next(line for line in FIXTURE.splitlines() if "Tried to allocate 512.00 MiB" in line)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every call of the planner, counted; each still plans."""
    calls = [0]
    real: Callable[..., Any] = plan_module.make_plan

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(plan_module, "make_plan", counted)
    monkeypatch.setattr(oom_module, "make_plan", counted)
    return calls


def _smaller(i: int) -> str:
    # tried less and more free than the fixture's 512 MiB / 67.12 MiB: each proves less demand
    return OOM.replace("512.00 MiB", f"{i + 1}.00 MiB").replace("67.12 MiB", f"{100 + i}.00 MiB")


def _explain(
    log: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *, as_json: bool
) -> tuple[int, str]:
    calls = _counting(monkeypatch)
    run_explain_oom(log, PROFILE, (), as_json=as_json, ingest=False)
    monkeypatch.undo()
    return calls[0], capsys.readouterr().out


@pytest.mark.parametrize("as_json", [True, False])
def test_many_ooms_plan_as_often_as_the_one_that_matters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    one = tmp_path / "one.log"
    one.write_text(FIXTURE)
    many = tmp_path / "many.log"
    # 300 distinct smaller OOMs around the fixture's, and its own reading again from another rank
    extra = [_smaller(i) for i in range(300)]
    rank1 = OOM.replace("Worker_TP0", "Worker_TP1").replace("GPU 0 has", "GPU 1 has")
    many.write_text(FIXTURE.replace(OOM, "\n".join([*extra[:150], OOM, rank1, *extra[150:]])))
    single_calls, single_out = _explain(one, monkeypatch, capsys, as_json=as_json)
    many_calls, many_out = _explain(many, monkeypatch, capsys, as_json=as_json)
    assert single_calls > 1  # the fixes are planned: the count measures them
    assert many_calls == single_calls
    if as_json:
        a, b = json.loads(single_out), json.loads(many_out)
        assert b["ooms"] == a["ooms"]  # the same OOM, explained alike
        assert a["other_ooms"] == {
            "lines": 0,
            "readings": 0,
            "same_lines": 0,
            "largest_tried_bytes": None,
            "least_free_bytes": None,
        }
        assert b["other_ooms"] == {
            "lines": 300,
            "readings": 300,
            "same_lines": 1,
            "largest_tried_bytes": 300 << 20,
            "least_free_bytes": 100 << 20,
        }
    else:
        assert many_out.count("OOM on rank 0") == 1 and "OOM on rank 1" not in many_out
        assert "1 more OOM line(s) read the same" in many_out
        assert "300 other OOM line(s) (300 distinct readings; at most 300.00 MiB tried" in many_out


def test_the_oom_explained_is_the_one_proving_the_largest_demand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    larger = OOM.replace("512.00 MiB", "1.00 GiB").replace("67.12 MiB", "10.00 MiB")
    log = tmp_path / "ooms.log"
    log.write_text(FIXTURE.replace(OOM, "\n".join([_smaller(1), larger, OOM, _smaller(2)])))
    _, out = _explain(log, monkeypatch, capsys, as_json=True)
    doc = json.loads(out)
    (oom,) = doc["ooms"]
    assert (oom["tried_bytes"], oom["free_bytes"]) == (1 << 30, 10 << 20)
    assert doc["other_ooms"]["lines"] == 3 and doc["other_ooms"]["largest_tried_bytes"] == 512 << 20
