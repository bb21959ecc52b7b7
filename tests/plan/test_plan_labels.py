"""The configuration a plan is about is named in its header: the profile and every override, as in `diff`."""

from __future__ import annotations

from tests.conftest import run_cli


def _first_line(text: str) -> str:
    return text.splitlines()[0]


def test_plan_header_names_set_and_environment_overrides(clean_env: dict[str, str]) -> None:
    env = {
        **clean_env,
        "GLMLAUNCH_SCHEDULER__MAX_NUM_SEQS": "4",
        "GLMLAUNCH_SET": "memory.min_margin=2GiB",
    }
    out = run_cli("plan", "-p", "turnkey", "--set", "memory.gpu_memory_utilization=0.93", env=env)
    assert out.returncode in (0, 4), out.stderr
    # lowest layer first: the GLMLAUNCH_<SECTION>__<FIELD> variable, then GLMLAUNCH_SET, then --set
    assert _first_line(out.stdout).startswith(
        "glmlaunch plan -p turnkey + GLMLAUNCH_SCHEDULER__MAX_NUM_SEQS=4 memory.min_margin=2GiB "
        "memory.gpu_memory_utilization=0.93 (profile turnkey: production turnkey"
    )


def test_plan_header_without_overrides_is_the_profile(clean_env: dict[str, str]) -> None:
    out = run_cli("plan", "-p", "gate", env=clean_env)
    assert _first_line(out.stdout).startswith("glmlaunch plan -p gate: release gate")


def test_an_override_replaced_by_a_later_layer_is_not_named(clean_env: dict[str, str]) -> None:
    env = {**clean_env, "GLMLAUNCH_MEMORY__GPU_MEMORY_UTILIZATION": "0.9"}
    out = run_cli("plan", "-p", "turnkey", "--set", "memory.gpu_memory_utilization=0.93", env=env)
    head = _first_line(out.stdout)
    assert "GLMLAUNCH_MEMORY__GPU_MEMORY_UTILIZATION" not in head  # --set won: the variable has no effect
    assert "turnkey + memory.gpu_memory_utilization=0.93 (profile turnkey:" in head


def test_secret_overrides_are_masked_in_the_header(clean_env: dict[str, str]) -> None:
    out = run_cli("plan", "-p", "turnkey", "--set", "env.HF_TOKEN=hf_abcdefgh12345678", env=clean_env)
    assert "hf_abcdefgh12345678" not in out.stdout
    assert "env.HF_TOKEN=****" in _first_line(out.stdout)


def test_audit_and_diff_name_the_overrides_the_same_way(clean_env: dict[str, str]) -> None:
    env = {**clean_env, "GLMLAUNCH_SET": "comm.single_channel=true"}
    audit = run_cli("audit", "-p", "turnkey", env=env)
    assert audit.returncode == 0, audit.stderr
    assert "audit -p turnkey + comm.single_channel=true:" in audit.stdout
    # GLMLAUNCH_SET applies to both sides of a diff, so both are named with it
    diff = run_cli("diff", "gate", "turnkey", env=env)
    assert diff.returncode == 0, diff.stderr
    assert "gate + comm.single_channel=true" in diff.stdout
    assert "turnkey + comm.single_channel=true" in diff.stdout


def test_plan_header_and_svg_name_the_gpu_memory_override(clean_env: dict[str, str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    svg = tmp_path / "map.svg"
    out = run_cli("plan", "-p", "gate", "--gpu-memory", "96GiB", "--svg", str(svg), env=clean_env)
    assert out.returncode in (0, 4), out.stderr
    assert _first_line(out.stdout).startswith(
        "glmlaunch plan -p gate --gpu-memory 96GiB (profile gate: release gate"
    )
    assert "glmlaunch plan -p gate --gpu-memory 96GiB" in svg.read_text()
