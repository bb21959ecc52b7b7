"""Issue 22, item 11: every command shows the same configuration warnings, each names where the values it
read came from, and each `--set` hint clears its own warning.

The rule set is whatever glmlaunch/config/validate.py holds today: these tests build their cases from the
warnings it actually gives, not from a copy of its rules.
"""

from __future__ import annotations

import itertools
import re
import shlex

import pytest
from conftest import FIXTURES, run_cli

from glmlaunch.config.resolve import resolve_config

INVENTORY = str(FIXTURES / "inventories" / "rtxpro6000x4.json")
PROFILES = ("turnkey", "gate", "r12-exl3")
#: Overrides that make the current rules speak (capture sizes, MTP, windows, caps, the a2a cap).
PERTURBATIONS: tuple[tuple[str, ...], ...] = (
    ("cudagraph.capture_rule.step=4",),
    ("cudagraph.capture_rule.step=5", "scheduler.max_num_seqs=3"),
    ("scheduler.max_num_seqs=4",),
    ("scheduler.max_num_seqs=1",),
    ("speculative.num_speculative_tokens=1",),
    ("cudagraph.capture_rule=null",),
    ("cudagraph.capture_sizes=[1,2,3,4,5,6]",),
    ("cudagraph.capture_rule.max=64",),
    ("comm.dcp_a2a_max_tokens=0",),
    ("exl3.prefill_capacity=999999",),
    ("exl3_trellis_max_m=1",),
    ("cudagraph.max_capture_size=128",),
    ("lmcache=true",),
    ("memory.allocator.expandable_segments=true",),
)


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning: ")]


COMMANDS: tuple[tuple[str, ...], ...] = (
    ("env", "--shell", "bash"),
    ("args",),
    ("plan",),
    ("plan", "--json"),
    ("audit",),
    ("check", "--inventory", INVENTORY),
    ("calibrate", "search", "--no-write"),
    ("calibrate", "show"),
    ("serve", "--dry-run", "--vllm-bin", "/bin/true", "--inventory", INVENTORY),
)


@pytest.mark.parametrize(
    ("profile", "sets"),
    # (capture sizes off the decode step are an opinion now, in audit; a window below the decode batch
    # is an error: these are warnings the current rules give)
    [("turnkey", ("comm.dcp_a2a_max_tokens=0",)), ("r12-exl3", ("cudagraph.max_capture_size=128",))],
)
def test_every_command_shows_the_configuration_warnings(
    profile: str, sets: tuple[str, ...], clean_env: dict[str, str]
) -> None:
    flags = [f"--set={s}" for s in sets]
    want = _warnings(run_cli("config", "-p", profile, *flags, env=clean_env).stderr)
    assert want, "the case must make the current rules warn"
    for command in COMMANDS:
        res = run_cli(command[0], *command[1:], "-p", profile, *flags, env=clean_env)
        got = _warnings(res.stderr)
        assert [w for w in got if w in want] == want, (command, res.stderr)
    # diff resolves twice; a warning both sides share is said once
    diff = run_cli("diff", profile, *flags, env=clean_env)
    assert _warnings(diff.stderr) == want, diff.stderr


@pytest.mark.parametrize(
    ("profile", "sets", "source"),
    [
        # the --set is what made the value wrong: named, not 'default' or only the profile's value
        ("turnkey", ("comm.dcp_a2a_max_tokens=0",), "from cli --set comm.dcp_a2a_max_tokens;"),
        ("r12-exl3", ("lmcache=true",), "from cli --set lmcache and profile"),
        ("gate", ("cudagraph.max_capture_size=128",), "from cli --set cudagraph.max_capture_size;"),
        ("turnkey", ("memory.allocator.expandable_segments=true",), "from cli --set memory.allocator."),
    ],
)
def test_a_warning_names_the_set_that_caused_it(
    profile: str, sets: tuple[str, ...], source: str, clean_env: dict[str, str]
) -> None:
    stderr = run_cli("config", "-p", profile, *[f"--set={s}" for s in sets], env=clean_env).stderr
    warnings = _warnings(stderr)
    assert warnings and all(source in w for w in warnings), stderr
    assert not any("from default" in w for w in warnings)


def _hinted_sets(hint: str) -> list[str]:
    words = shlex.split(hint.split(" (", 1)[0])
    return [w for flag, w in itertools.pairwise(words) if flag == "--set"]


def _kind(message: str) -> str:
    return re.sub(r"[0-9]+", "N", message.split("(", 1)[0])


CASES = [(p, s) for p in PROFILES for s in PERTURBATIONS]


@pytest.mark.parametrize(("profile", "sets"), CASES, ids=[f"{p}-{'+'.join(s)}" for p, s in CASES])
def test_following_a_hint_clears_its_warning(profile: str, sets: tuple[str, ...]) -> None:
    try:
        resolved = resolve_config(profile, sets, environ={})
    except Exception:  # this perturbation is an error on this profile: nothing to warn about
        return
    for warning in resolved.warnings:
        if not warning.hint or "--set " not in warning.hint:
            continue
        fixes = _hinted_sets(warning.hint)
        assert fixes, warning.hint
        fixed = resolve_config(profile, (*sets, *fixes), environ={})  # and no error either
        kind = (warning.key, _kind(warning.message))
        again = [w for w in fixed.warnings if (w.key, _kind(w.message)) == kind]
        assert not again, f"{warning.one_line()}\n-> after {fixes}: {[w.one_line() for w in again]}"
