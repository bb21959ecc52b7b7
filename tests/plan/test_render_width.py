"""`plan` on a narrow terminal: every line fits, every entry is named; piped output keeps every column.

Real subprocesses of ``glmlaunch`` with stdout on a pseudo-terminal: the width comes from ``COLUMNS``
(what rich reads first) or, without it, from the terminal's own window size.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tests.plan.ptyrun import run_on_tty


def _names(profile: str, env: dict[str, str]) -> list[str]:
    doc = json.loads(run_cli("plan", "-p", profile, "--json", env=env).stdout)
    return [e["name"] for e in doc["ranks"][0]["entries"]] + [e["name"] for e in doc["latent"]]


@pytest.mark.parametrize(
    ("profile", "columns", "how"),
    [
        ("turnkey", 80, "COLUMNS"),
        ("turnkey", 60, "COLUMNS"),
        ("gate", 60, "COLUMNS"),
        ("r12-exl3", 70, "window"),
        ("turnkey", 100, "window"),
    ],
)
def test_plan_fits_the_terminal(profile: str, columns: int, how: str, clean_env: dict[str, str]) -> None:
    env = dict(clean_env)
    env.pop("COLUMNS", None)
    if how == "COLUMNS":
        env["COLUMNS"] = str(columns)
    run = run_on_tty("plan", "-p", profile, env=env, stream="stdout", columns=columns)
    assert run.returncode in (0, 4), run.other
    lines = run.tty_lines
    too_long = [line for line in lines if len(line) > columns]
    assert not too_long, f"{len(too_long)} lines wider than {columns}: {too_long[:3]}"
    text = "\n".join(lines)
    for name in _names(profile, clean_env):
        assert f" {name}" in text or f"{name} " in text, name  # whole, never cut or folded
    assert "budget per rank" in text and "verdict:" in text
    # narrower than the full table: requested bytes and the count column are gone, the device bytes stay
    header = next(line for line in lines if line.lstrip().startswith("entry"))
    assert "requested" not in header and "×" not in header and "device" in header
    if columns >= 80 and "origin" in header:
        assert "kind" in header and "calibrated" in text  # the medium layout where it fits whole
    else:
        # kind and origin folded under the name (issue 31: at 80 columns the medium layout of the turnkey
        # would cut them to "calibrat…", "workspa…")
        assert "torch · calibrated" in text


def test_wide_terminal_keeps_the_full_table(clean_env: dict[str, str]) -> None:
    env = {**clean_env, "COLUMNS": "140"}
    run = run_on_tty("plan", "-p", "turnkey", env=env, stream="stdout", columns=140)
    header = next(line for line in run.tty_lines if "entry" in line and "device" in line)
    for column in ("kind", "requested", "×", "device", "origin"):
        assert column in header


def test_piped_output_keeps_the_full_table_whatever_columns_says(clean_env: dict[str, str]) -> None:
    out = run_cli("plan", "-p", "turnkey", env={**clean_env, "COLUMNS": "60"})
    assert out.returncode in (0, 4), out.stderr
    header = next(line for line in out.stdout.splitlines() if "entry" in line and "device" in line)
    for column in ("kind", "requested", "×", "device", "origin"):
        assert column in header
    assert max(len(line) for line in out.stdout.splitlines()) > 100  # not squeezed to 60
    assert "pre-snapshot (U_pre: before vLLM's init snapshot)" in out.stdout
