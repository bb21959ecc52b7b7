"""Issue 13, input side: hostile profiles, --set values and limits give one line and exit 2, never a crash.

Every CLI reproducer runs in a real subprocess with a timeout, so a regression that hangs fails instead of
blocking the suite. Each named limit in ``glmlaunch.config.limits`` has a test here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from glmlaunch.config import limits
from glmlaunch.config.profiles import load_chain
from glmlaunch.config.resolve import parse_override_value, resolve_config
from glmlaunch.config.safeload import load_json, load_yaml, read_file
from glmlaunch.errors import ConfigError
from tests.conftest import run_cli

TIMEOUT = 15


def _one_line_error(proc_stderr: str) -> None:
    assert "Traceback" not in proc_stderr
    errors = [line for line in proc_stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc_stderr[-2000:]


def _cli_refuses(env: dict[str, str], *args: str, cwd: Path | None = None) -> str:
    proc = run_cli(*args, env=env, cwd=cwd, timeout=TIMEOUT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    _one_line_error(proc.stderr)
    return proc.stderr


def _profile(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


# --- item 10: nesting, recursive aliases ------------------------------------------------------------


def test_deeply_nested_profile_mapping(tmp_path: Path, clean_env: dict[str, str]) -> None:
    body = "".join("  " * i + f"k{i}:\n" for i in range(990)) + "  " * 990 + "x: 1\n"
    path = _profile(tmp_path, "deep.yaml", "extends: turnkey\n" + body)
    err = _cli_refuses(clean_env, "config", "-p", str(path))
    assert "nests deeper than" in err


def test_self_referencing_alias(tmp_path: Path, clean_env: dict[str, str]) -> None:
    path = _profile(tmp_path, "alias.yaml", "zz: &a [*a]\n")
    err = _cli_refuses(clean_env, "config", "-p", str(path))
    assert "refers to a collection that contains it" in err


def test_nested_set_value(clean_env: dict[str, str]) -> None:
    err = _cli_refuses(clean_env, "config", "--set", "description=" + "[" * 100_000)
    assert "--set description" in err
    err = _cli_refuses(clean_env, "config", "--set", "description=" + "[" * 1000)
    assert "nests deeper than" in err


# --- item 11: integer digits ------------------------------------------------------------------------


def test_huge_integer_in_profile(tmp_path: Path, clean_env: dict[str, str]) -> None:
    path = _profile(
        tmp_path, "big.yaml", "extends: turnkey\nscheduler:\n  max_num_seqs: " + "9" * 5000 + "\n"
    )
    err = _cli_refuses(clean_env, "config", "-p", str(path))
    assert "5,000 digits" in err


def test_huge_integer_in_set_and_env(clean_env: dict[str, str]) -> None:
    _cli_refuses(clean_env, "config", "--set", "cudagraph.capture_sizes=[" + "9" * 5000 + "]")
    env = {**clean_env, "GLMLAUNCH_SET": "cudagraph.capture_sizes=[" + "9" * 5000 + "]"}
    err = _cli_refuses(env, "config")
    assert "GLMLAUNCH_SET" in err


# --- item 12: names, tags ---------------------------------------------------------------------------


def test_profile_name_longer_than_name_max(tmp_path: Path, clean_env: dict[str, str]) -> None:
    err = _cli_refuses(clean_env, "config", "-p", "a" * 300)
    assert "NAME_MAX" in err
    path = _profile(tmp_path, "ext.yaml", "extends: " + "b" * 300 + "\n")
    err = _cli_refuses(clean_env, "config", "-p", str(path))
    assert "extends:" in err and "NAME_MAX" in err


def test_profile_root_directory(clean_env: dict[str, str]) -> None:
    err = _cli_refuses(clean_env, "config", "-p", "/")
    assert "profile not found" in err


@pytest.mark.parametrize("tagged", ["!!bool maybe", "!!float x", "!!int x", "!!timestamp x"])
def test_bad_tagged_scalars(tmp_path: Path, clean_env: dict[str, str], tagged: str) -> None:
    path = _profile(tmp_path, "tag.yaml", f"extends: turnkey\ndescription: {tagged}\n")
    err = _cli_refuses(clean_env, "config", "-p", str(path))
    assert "tagged YAML value" in err


def test_profile_that_is_not_utf8_or_a_fifo(tmp_path: Path, clean_env: dict[str, str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"description: \xff\n")
    assert "not UTF-8" in _cli_refuses(clean_env, "config", "-p", str(bad))
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    _cli_refuses(clean_env, "config", "-p", str(fifo))  # not a file: not found, never opened
    env = {**clean_env, "GLMLAUNCH_PROFILE_PATH": str(tmp_path)}
    listed = run_cli("profiles", "list", env=env, timeout=TIMEOUT)  # listing never blocks on it
    assert listed.returncode == 0 and "fifo" in listed.stdout, listed.stderr


# --- item 15: alias bomb through every source -------------------------------------------------------

_BOMB = (
    "["
    + ", ".join(
        ["&a [x,x,x,x,x,x,x,x,x]"]
        + [f"&{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(8)]
    )
    + "]"
)


def test_alias_bomb_in_set_and_glmlaunch_set(clean_env: dict[str, str]) -> None:
    assert "alias bomb" in _cli_refuses(clean_env, "config", "--set", "description=" + _BOMB)
    env = {**clean_env, "GLMLAUNCH_SET": "description=" + _BOMB}
    assert "alias bomb" in _cli_refuses(env, "config")


def test_alias_bomb_in_profile(tmp_path: Path, clean_env: dict[str, str]) -> None:
    path = _profile(tmp_path, "bomb.yaml", "extends: turnkey\ndescription: " + _BOMB + "\n")
    assert "alias bomb" in _cli_refuses(clean_env, "config", "-p", str(path))


# --- item 17: many keys ------------------------------------------------------------------------------


def _env_profile(tmp_path: Path, count: int) -> Path:
    lines = ["extends: turnkey", "env:"] + [f'  MY_VAR_{i}: "v{i}"' for i in range(count)]
    return _profile(tmp_path, f"env{count}.yaml", "\n".join(lines) + "\n")


def test_profile_with_30k_keys_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="keys; the limit is"):
        resolve_config(_env_profile(tmp_path, 30_000), environ={})


def test_profile_with_5k_keys_resolves(tmp_path: Path) -> None:
    resolved = resolve_config(_env_profile(tmp_path, 5_000), environ={})
    assert resolved.config.env["MY_VAR_4999"] == "v4999"
    assert resolved.provenance["env.MY_VAR_4999"].kind == "profile"


# --- one test per named limit -----------------------------------------------------------------------


def test_limit_max_profile_bytes(tmp_path: Path) -> None:
    path = _profile(tmp_path, "huge.yaml", "description: x\n" + "#" * limits.MAX_PROFILE_BYTES + "\n")
    with pytest.raises(ConfigError, match="larger than the limit"):
        load_chain(path, environ={})


def test_limit_max_inventory_and_record_bytes(tmp_path: Path) -> None:
    for limit in (limits.MAX_INVENTORY_BYTES, limits.MAX_RECORD_BYTES):
        path = tmp_path / "x.json"
        path.write_bytes(b" " * (limit + 1))
        with pytest.raises(ConfigError, match="larger than the limit"):
            read_file(path, limit=limit, key="k", what="file")
        path.write_bytes(b" " * limit)
        assert len(read_file(path, limit=limit, key="k", what="file")) == limit


def test_limit_max_boot_log_bytes(tmp_path: Path) -> None:
    from glmlaunch.vllmlog.boot import parse_log_file

    path = tmp_path / "boot.log"
    with path.open("wb") as fh:  # sparse: no disk used
        fh.truncate(limits.MAX_BOOT_LOG_BYTES + 1)
    with pytest.raises(ConfigError, match="larger than the limit"):
        parse_log_file(path)
    assert limits.MAX_BOOT_LOG_BYTES >= 100 * 300 * 1024  # a real log is ~300 KiB


def test_limit_max_override_chars() -> None:
    with pytest.raises(ConfigError, match="characters long"):
        parse_override_value("[" + "1," * limits.MAX_OVERRIDE_CHARS + "]")
    assert parse_override_value("[1, 2]") == [1, 2]


def test_limit_max_nesting_depth() -> None:
    ok = "[" * limits.MAX_NESTING_DEPTH + "]" * limits.MAX_NESTING_DEPTH
    too_deep = "[" + ok + "]"
    assert load_yaml(ok, key="k", value="v", what="value") is not None
    assert load_json(ok, key="k", value="v", what="value") is not None
    for loader in (load_yaml, load_json):
        with pytest.raises(ConfigError, match="nests deeper"):
            loader(too_deep, key="k", value="v", what="value")


def test_limit_max_yaml_aliases() -> None:
    ok = "a: &x 1\nb: [" + ", ".join(["*x"] * limits.MAX_YAML_ALIASES) + "]\n"
    assert len(load_yaml(ok, key="k", value="v", what="value")["b"]) == limits.MAX_YAML_ALIASES
    with pytest.raises(ConfigError, match="aliases"):
        load_yaml(ok.replace("[", "[*x, "), key="k", value="v", what="value")


def test_limit_max_yaml_nodes() -> None:
    # 10 aliases of a list of ~limit/10 scalars: few aliases, far too many nodes once expanded.
    width = limits.MAX_YAML_NODES // 10 + 1
    text = "a: &x [" + ",".join(["1"] * width) + "]\nb: [" + ", ".join(["*x"] * 10) + "]\n"
    with pytest.raises(ConfigError, match="expands to more than"):
        load_yaml(text, key="k", value="v", what="value")


def test_limit_max_keys() -> None:
    ok = "{" + ", ".join(f'"k{i}": 1' for i in range(limits.MAX_KEYS)) + "}"
    assert len(load_json(ok, key="k", value="v", what="value")) == limits.MAX_KEYS
    with pytest.raises(ConfigError, match="keys; the limit is"):
        load_json(ok[:-1] + ', "extra": 1}', key="k", value="v", what="value")


def test_limit_max_int_digits() -> None:
    ok = "9" * limits.MAX_INT_DIGITS
    assert load_yaml(f"[{ok}]", key="k", value="v", what="value") == [int(ok)]
    assert load_json(f"[{ok}]", key="k", value="v", what="value") == [int(ok)]
    for loader in (load_yaml, load_json):
        with pytest.raises(ConfigError, match="digits"):
            loader(f"[{ok}9]", key="k", value="v", what="value")


def test_limit_max_extends_depth(tmp_path: Path) -> None:
    for i in range(limits.MAX_EXTENDS_DEPTH + 2):
        parent = f"extends: p{i + 1}.yaml\n" if i <= limits.MAX_EXTENDS_DEPTH else ""
        (tmp_path / f"p{i}.yaml").write_text(parent, encoding="utf-8")
    with pytest.raises(ConfigError, match="extends chain too deep"):
        load_chain(tmp_path / "p0.yaml", environ={})


def test_limit_name_max(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="NAME_MAX"):
        read_file(tmp_path / ("n" * (limits.NAME_MAX + 1)), limit=10, key="k", what="file")
    with pytest.raises(ConfigError, match="cannot read"):  # at the limit: an ordinary missing file
        read_file(tmp_path / ("n" * limits.NAME_MAX), limit=10, key="k", what="file")


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "Infinity", "1e309", "-1"])
def test_the_stop_grace_is_finite_non_negative_seconds(clean_env: dict[str, str], value: str) -> None:
    # `inf` passed `gt=0`, the dry run printed it, and a supervised launch died writing launch.json (exit 1)
    env = {**clean_env, "GLMLAUNCH_STOP_GRACE": value}
    err = _cli_refuses(env, "serve", "-p", "turnkey", "--dry-run", "--supervise", "--vllm-bin", "/bin/true")
    assert "GLMLAUNCH_STOP_GRACE" in err and value in err


def test_a_stop_grace_of_zero_is_compose_s_zero_seconds(clean_env: dict[str, str]) -> None:
    env = {**clean_env, "GLMLAUNCH_STOP_GRACE": "0"}
    proc = run_cli(
        "serve", "-p", "turnkey", "--dry-run", "--supervise", "--vllm-bin", "/bin/true", "--json",
        env=env, timeout=TIMEOUT,
    )
    import json

    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["mode"]["stop_grace_s"] == 0
