"""Issue 29, item 6: a rule about runtime risk is a warning (or a verdict blocker), never a configuration
error. The Trellis decode window is a throughput risk upstream served through: glmlaunch warns and plans."""

from __future__ import annotations

from conftest import run_cli

from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.rules import RULES

#: the r28 3.42 bpw profile at MTP3 decodes 8 x 4 = 32 rows; a Trellis window of 16 is below it
BELOW = ("exl3_trellis_max_m=16",)


def test_the_trellis_window_is_a_warning_rule() -> None:
    levels = {r.id: r.level for r in RULES}
    assert levels["trellis-window"] == "warning"
    # the capture half of upstream's concurrency-window stays what it was
    assert levels["concurrency-window"] == "error"


def test_a_trellis_window_below_the_decode_batch_plans_with_a_warning(clean_env: dict[str, str]) -> None:
    resolved = resolve_config("exl3-tr3-3.42bpw", list(BELOW), environ={})
    assert resolved.config.exl3_trellis_max_m == 16
    done = run_cli("plan", "-p", "exl3-tr3-3.42bpw", *[f"--set={s}" for s in BELOW], env=clean_env)
    assert done.returncode == 0, done.stderr
    warned = [ln for ln in done.stderr.splitlines() if ln.startswith("warning: ") and "Trellis" in ln]
    assert warned and "16" in warned[0], done.stderr
    # the shipped value does not warn
    shipped = run_cli("plan", "-p", "exl3-tr3-3.42bpw", env=clean_env)
    assert shipped.returncode == 0 and "Trellis decode window" not in shipped.stderr
