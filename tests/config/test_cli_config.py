"""The configuration commands through a real subprocess: stdout data only, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import FIXTURES, run_cli


def test_config_json_with_sources(clean_env: dict[str, str]) -> None:
    res = run_cli("config", "-p", "turnkey", "--set", "scheduler.max_num_seqs=4", "--json", env=clean_env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["profile"] == "turnkey"
    assert doc["config"]["scheduler"]["max_num_seqs"] == 4
    assert doc["sources"]["scheduler.max_num_seqs"] == "cli --set scheduler.max_num_seqs"
    assert doc["sources"]["parallel.dcp"] == "profile turnkey:parallel.dcp"
    assert doc["sources"]["comm.single_channel"] == "profile turnkey:comm.single_channel"
    assert doc["sources"]["parallel.tp"] == "profile turnkey:parallel.tp"
    assert doc["derived"]["capture_sizes"][-1] == 64
    # 4 sequences x 6: graphs above 24 only cost memory, an audit finding: the configuration says nothing
    assert res.stderr == ""


def test_config_table_on_stdout(clean_env: dict[str, str]) -> None:
    res = run_cli("config", "-p", "gate", env=clean_env)
    assert res.returncode == 0
    line = next(x for x in res.stdout.splitlines() if "memory.kv_cache_dtype" in x)
    assert '"fp8"' in line and "profile gate:memory.kv_cache_dtype" in line


def test_args_lines_and_json(clean_env: dict[str, str]) -> None:
    res = run_cli("args", "-p", "r12-exl3", env=clean_env)
    assert res.stdout.splitlines() == (FIXTURES / "r12-exl3.argv").read_text().splitlines()
    doc = json.loads(run_cli("args", "-p", "r12-exl3", "--json", env=clean_env).stdout)
    assert doc["argv"] == res.stdout.splitlines() and doc["profile"] == "r12-exl3"


def test_error_is_one_line_exit_2_no_traceback(clean_env: dict[str, str]) -> None:
    res = run_cli("config", "-p", "gate", "--set", "parallel.dcp=3", env=clean_env)
    assert res.returncode == 2
    assert res.stdout == ""
    # One line per error found, each naming the key, value, allowed values and source.
    assert res.stderr.strip().splitlines() == [
        "error: parallel.dcp: decode context parallel size must divide tp=4; got 3; allowed: 1, 2, 4; "
        "from cli --set parallel.dcp",
        "error: parallel.dcp: the sparkinfer-r14 DCP all-to-all supports no such world size; got 3; "
        "allowed: 2, 4, 8; from cli --set parallel.dcp",
    ]


def test_env_variable_layer_and_profile_from_env(clean_env: dict[str, str]) -> None:
    env = dict(clean_env, GLMLAUNCH_PROFILE="gate", GLMLAUNCH_MEMORY__MIN_MARGIN="2GiB")
    doc = json.loads(run_cli("config", "--json", env=env).stdout)
    assert doc["profile"] == "gate"
    assert doc["config"]["memory"]["min_margin"] == 2 * 1024**3
    assert doc["sources"]["memory.min_margin"] == "env GLMLAUNCH_MEMORY__MIN_MARGIN"


def test_debug_shows_traceback(clean_env: dict[str, str]) -> None:
    res = run_cli("config", "-p", "nope", env=dict(clean_env, GLMLAUNCH_DEBUG="1"))
    assert res.returncode != 0 and "Traceback" in res.stderr
    res = run_cli("config", "-p", "nope", env=clean_env)
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_secrets_are_masked_in_config_output(clean_env: dict[str, str], tmp_path: Path) -> None:
    prof = tmp_path / "s.yaml"
    prof.write_text("extends: gate\nenv:\n  HF_TOKEN: hf_abcdefghijklmnop\n", encoding="utf-8")
    for args in (
        ["config", "-p", str(prof)],
        ["config", "-p", str(prof), "--json"],
        ["env", "-p", str(prof)],
    ):
        res = run_cli(*args, env=clean_env)
        assert res.returncode == 0, res.stderr
        assert "hf_abcdefghijklmnop" not in res.stdout + res.stderr
    assert "HF_TOKEN looks like a secret" in run_cli("env", "-p", str(prof), env=clean_env).stderr


def test_profiles_list_show_schema(clean_env: dict[str, str], tmp_path: Path) -> None:
    rows = json.loads(run_cli("profiles", "list", "--json", env=clean_env).stdout)["profiles"]
    by_name = {r["name"]: r for r in rows}
    assert {"r12-exl3", "gate", "turnkey"} <= set(by_name)
    assert by_name["gate"]["extends"] == "r12-exl3" and by_name["turnkey"]["builtin"]
    shown = run_cli("profiles", "show", "exl3-tr3-3.42bpw", env=clean_env)
    chain = (
        "turnkey (built-in) -> exl3-tr3-3.25bpw (built-in) -> exl3-tr3-3.36bpw (built-in) -> exl3-tr3-3.42bpw"
    )
    assert "extends: exl3-tr3-3.36bpw" in shown.stdout and chain in shown.stderr
    schema = json.loads(run_cli("profiles", "schema", env=clean_env).stdout)
    assert schema["additionalProperties"] is False and "extends" in schema["properties"]
    assert "comm" in schema["properties"]
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "mine.yaml").write_text("extends: gate\ndescription: mine\n", encoding="utf-8")
    env = dict(clean_env, GLMLAUNCH_PROFILE_PATH=str(tmp_path / "extra"))
    rows = json.loads(run_cli("profiles", "list", "--json", env=env).stdout)["profiles"]
    assert {"name": "mine", "description": "mine"}.items() <= next(
        r for r in rows if r["name"] == "mine"
    ).items()


def test_light_commands_import_neither_torch_nor_pynvml(clean_env: dict[str, str]) -> None:
    import subprocess
    import sys

    code = (
        "import sys, runpy; sys.argv=['glmlaunch','config','-p','gate','--json'];\n"
        "try:\n    runpy.run_module('glmlaunch', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('HEAVY', sorted(m for m in ('torch','pynvml','b12x') if m in sys.modules), file=sys.stderr)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], env=clean_env, capture_output=True, text=True, check=True
    )
    assert "HEAVY []" in res.stderr


def test_version_and_help(clean_env: dict[str, str]) -> None:
    from glmlaunch import __version__

    res = run_cli("--version", env=clean_env)
    assert res.returncode == 0 and res.stdout == f"glmlaunch {__version__}\n"
    help_text = run_cli("--help", env=clean_env).stdout
    for command in ("config", "env", "args", "plan", "audit", "diff", "hw", "check", "preflight", "serve"):
        assert f"  {command} " in help_text


def test_config_table_shows_sizes_as_written(clean_env: dict[str, str]) -> None:
    res = run_cli(
        "config", "-p", "r12-exl3", "--set", "model.weights_per_rank=102016210699", "--set",
        "memory.min_margin=1536MiB", env=clean_env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr

    def row(key: str) -> str:
        return next(x for x in res.stdout.splitlines() if f" {key} " in x)

    assert "97290 MiB" in row("hardware.memory_per_gpu")  # the profile wrote 97290MiB
    assert "102015959040" not in res.stdout
    assert "6 MiB" in row("comm.dma_min_bytes") and "84 KiB" in row("comm.oneshot_fused_max_size")
    assert "64 KiB" in row("comm.oneshot_allreduce_max_size") and "1.5 GiB" in row("memory.min_margin")
    # two decimals that would read as another size keep the exact count next to them
    assert "95.01 GiB (102,016,210,699 B)" in row("model.weights_per_rank")
    # not a size: shown as before
    assert row("scheduler.max_num_batched_tokens").split("│")[2].strip() == "3072"
    # JSON keeps exact integers
    doc = json.loads(run_cli("config", "-p", "r12-exl3", "--json", env=clean_env).stdout)
    assert doc["config"]["hardware"]["memory_per_gpu"] == 97290 * 1024**2
    assert doc["config"]["comm"]["dma_min_bytes"] == 6 * 1024**2
