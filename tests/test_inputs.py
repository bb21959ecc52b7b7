"""Issue 22, items 10 and 12: units, empty variables, duplicate keys and `-q` after the command, through the
installed console script."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

INVENTORY = Path(__file__).resolve().parent / "fixtures" / "inventories" / "rtxpro6000x4.json"


def _one_error(res: object, code: int = 2) -> str:
    stderr: str = res.stderr  # type: ignore[attr-defined]
    assert res.returncode == code, stderr  # type: ignore[attr-defined]
    assert stderr.startswith("error: ") and stderr.count("\n") == 1, stderr
    assert "internal error" not in stderr
    return stderr


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "-p", "turnkey", "--gpu-memory", "0GiB"),
        ("plan", "-p", "turnkey", "--set", "hardware.memory_per_gpu=0"),
        ("check", "-p", "turnkey", "--set", "hardware.memory_per_gpu=0", "--inventory", str(INVENTORY)),
        ("diff", "gate", "turnkey", "--gpu-memory", "0B"),
    ],
)
def test_a_device_of_no_memory_is_one_error(args: tuple[str, ...], clean_env: dict[str, str]) -> None:
    stderr = _one_error(run_cli(*args, env=clean_env))
    assert "memory_per_gpu" in stderr or "--gpu-memory" in stderr


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (("plan", "-p", "turnkey", "--gpu-memory", "96"), "--gpu-memory"),
        (("calibrate", "search", "-p", "turnkey", "--no-write", "--min-margin", "1"), "--min-margin"),
        (("calibrate", "search", "-p", "turnkey", "--objective", "max-kv-bytes", "--max", "12"), "--max"),
    ],
)
def test_a_size_on_the_command_line_needs_its_unit(
    args: tuple[str, ...], key: str, clean_env: dict[str, str]
) -> None:
    stderr = _one_error(run_cli(*args, env=clean_env))
    assert stderr.startswith(f"error: {key}: ") and "needs a unit" in stderr and "GiB" in stderr


def test_a_margin_with_its_unit_is_used_as_given(clean_env: dict[str, str]) -> None:
    res = run_cli(
        "calibrate", "search", "-p", "turnkey", "--no-write", "--json", "--min-margin", "1GiB", env=clean_env
    )
    assert res.returncode == 0, res.stderr
    assert '"required_margin": 1073741824' in res.stdout
    zero = run_cli("calibrate", "search", "-p", "turnkey", "--no-write", "--min-margin", "0", env=clean_env)
    assert zero.returncode == 0, zero.stderr  # 0 is 0 in any unit


@pytest.mark.parametrize(
    "name",
    [
        "GLMLAUNCH_SKIP_PREFLIGHT",
        "GLMLAUNCH_STRICT",
        "GLMLAUNCH_QUIET",
        "GLMLAUNCH_DEBUG",
        "GLMLAUNCH_BACKEND",
        "GLMLAUNCH_PROFILE",
        "GLMLAUNCH_SET",
        "GLMLAUNCH_INVENTORY",
        "GLMLAUNCH_VLLM_BIN",
        "GLMLAUNCH_RIG_DEFAULTS",
        "GLMLAUNCH_PROFILE_PATH",
        "GLMLAUNCH_CACHE_DIR",
        "GLMLAUNCH_SCHEDULER__MAX_NUM_SEQS",
    ],
)
@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_variable_means_unset(name: str, empty: str, clean_env: dict[str, str]) -> None:
    """compose's ${VAR:-} sets a variable to the empty string: that is what leaving it out means."""
    unset = {k: v for k, v in clean_env.items() if k != name}
    for args in (("plan", "-p", "gate", "--json"), ("check", "-p", "gate", "--inventory", str(INVENTORY))):
        want = run_cli(*args, env=unset)
        got = run_cli(*args, env=dict(unset, **{name: empty}))
        assert (got.returncode, got.stdout) == (want.returncode, want.stdout), (name, got.stderr)


def test_a_duplicate_key_in_a_profile_is_refused_naming_both_lines(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    prof = tmp_path / "dup.yaml"
    prof.write_text(
        "extends: gate\nscheduler:\n  max_num_seqs: 1\n  max_model_len: 4096\n  max_num_seqs: 8\n"
    )
    stderr = _one_error(run_cli("plan", "-p", str(prof), env=clean_env))
    assert "'max_num_seqs' appears twice, at line 3 and line 5" in stderr
    # a YAML merge key is not a duplicate
    merged = tmp_path / "merge.yaml"
    merged.write_text("extends: gate\nscheduler: {<<: {max_num_seqs: 1}, max_num_seqs: 1}\n")
    assert run_cli("config", "-p", str(merged), env=clean_env).returncode == 0


@pytest.mark.parametrize(
    "args",
    [
        ("profiles", "show", "gate", "-q"),
        ("profiles", "show", "-q", "gate"),
        ("profiles", "-q", "show", "gate"),
        ("calibrate", "show", "-p", "r12-exl3", "--quiet"),
        ("calibrate", "search", "-p", "r12-exl3", "--no-write", "-q"),
        ("calibrate", "-q", "search", "-p", "r12-exl3", "--no-write"),
    ],
)
def test_quiet_after_the_command_is_quiet(args: tuple[str, ...], clean_env: dict[str, str]) -> None:
    loud = run_cli(*[a for a in args if a not in ("-q", "--quiet")], env=clean_env)
    quiet = run_cli(*args, env=clean_env)
    assert quiet.returncode == loud.returncode == 0, quiet.stderr
    assert quiet.stdout == loud.stdout
    assert loud.stderr and quiet.stderr == ""


def test_quiet_is_not_taken_from_an_option_value_or_after_the_double_dash(clean_env: dict[str, str]) -> None:
    res = run_cli("config", "-p", "gate", "--set", "-q", env=clean_env)
    assert res.returncode == 2 and "--set" in res.stderr  # "-q" was the value of --set
    dry = run_cli(
        "serve", "-p", "gate", "--dry-run", "--inventory", str(INVENTORY), "--vllm-bin", "/bin/true",
        "--", "-q", "exl3", env=clean_env,
    )
    # after --, -q is vLLM's --quantization, which glmlaunch manages: refused as that, not taken as quiet
    assert dry.returncode == 2 and "error: -q: is managed by glmlaunch" in dry.stderr, dry.stderr
