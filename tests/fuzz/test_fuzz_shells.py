"""Hostile values survive ``eval "$(glmlaunch env …)"`` exactly, in real shells, and run nothing.

The in-process part checks every value through the POSIX (shlex) and JSON renderings; a sample runs real
processes: the installed console script inside bash, zsh, sh and fish (a shell that is not installed is
skipped), with HF_TOKEN in the environment and planted secret-named variables in the profile.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from fuzzkit import (
    PLANTED,
    SECRET_NAMES,
    SECRETS,
    assert_contract,
    base_environ,
    fuzz_settings,
    glmlaunch_exe,
    hostile_text,
    resolve_sentinel,
    run_inprocess,
    run_subprocess,
    seeded,
    write,
)
from hypothesis import given
from hypothesis import strategies as st

NAMES = ("FUZZ_A", "FUZZ_B", "FUZZ_C")
# A value a real environment can hold: no NUL. Everything else is fair game.
_VALUES = hostile_text(0, 6).map(lambda s: s.replace("\x00", ""))


def _profile(root: Path, values: dict[str, str]) -> Path:
    env = {**values, **{name: PLANTED for name in SECRET_NAMES}}
    return write(root / "fuzz.yaml", yaml.safe_dump({"extends": "gate", "env": env}, allow_unicode=True))


def _case() -> tuple[Path, Path, dict[str, str]]:
    root = Path(tempfile.mkdtemp(prefix="glmfuzz-sh-"))
    (root / "home").mkdir()
    sentinel = root / "sentinel"
    sentinel.mkdir()
    return root, sentinel, base_environ(root)


@seeded
@fuzz_settings(500)
@given(values=st.lists(_VALUES, min_size=1, max_size=3))
def test_posix_and_json_renderings_round_trip_in_process(values: list[str]) -> None:
    root, sentinel, env = _case()
    try:
        given_values = {n: resolve_sentinel(v, sentinel) for n, v in zip(NAMES, values, strict=False)}
        prof = _profile(root, given_values)
        posix = run_inprocess(["env", "-p", str(prof), "--shell", "sh"], env, root)
        assert_contract(posix)
        assert posix.code == 0, posix.describe()
        exported: dict[str, str] = {}
        for word in shlex.split(posix.stdout, posix=True):
            if "=" in word and word != "export":
                k, _, v = word.partition("=")
                exported[k] = v
        for name, value in given_values.items():
            assert exported.get(name) == value, f"{name}: {value!r} came back as {exported.get(name)!r}"
        as_json = run_inprocess(["env", "-p", str(prof), "--shell", "json"], env, root)
        assert_contract(as_json)
        doc = json.loads(as_json.stdout)
        for name, value in given_values.items():
            assert doc.get(name) == value, f"{name}: {value!r} came back as {doc.get(name)!r}"
        assert not set(SECRET_NAMES) & set(doc), "a secret-named variable was exported"
    finally:
        shutil.rmtree(root, ignore_errors=True)


SHELLS = {
    "bash": ["bash", "-c"],
    "zsh": ["zsh", "-f", "-c"],
    "sh": ["sh", "-c"],
    "fish": ["fish", "--no-config", "-c"],
}


def _script(shell: str, command: str, names: list[str], out: Path) -> str:
    if shell == "fish":
        body = "; ".join(f"printf '%s\\0' \"${n}\" >> {shlex.quote(str(out))}" for n in names)
        return f"eval ({command} | string collect); or exit 99; {body}"
    body = "; ".join(f"printf '%s\\0' \"${n}\" >> {shlex.quote(str(out))}" for n in names)
    return f'eval "$({command})" || exit 99; {body}'


@pytest.mark.slow
@pytest.mark.parametrize("shell", sorted(SHELLS))
@seeded
@fuzz_settings(12)
@given(values=st.lists(_VALUES, min_size=1, max_size=3))
def test_eval_round_trip_in_real_shells(shell: str, values: list[str]) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    root, sentinel, env = _case()
    try:
        given_values = {n: resolve_sentinel(v, sentinel) for n, v in zip(NAMES, values, strict=False)}
        prof = _profile(root, given_values)
        shell_flag = "sh" if shell in ("sh",) else shell
        command = " ".join(shlex.quote(a) for a in [*glmlaunch_exe(), "env", "-p", str(prof)])
        command += f" --shell {shell_flag}"
        out = root / "seen"
        proc = subprocess.run(
            [*SHELLS[shell], _script(shell, command, list(given_values), out)],
            env=env,
            cwd=root,
            capture_output=True,
            timeout=60,
            check=False,
        )
        stderr = proc.stderr.decode("utf-8", "replace")
        assert proc.returncode == 0, f"{shell} exit {proc.returncode}: {stderr[-2000:]}"
        assert "Traceback" not in stderr
        for secret in SECRETS:
            assert secret.encode() not in proc.stdout + proc.stderr, f"{secret} leaked: {stderr[-2000:]}"
        seen = out.read_bytes().split(b"\0")[:-1]
        expected = [v.encode("utf-8", "surrogateescape") for v in given_values.values()]
        assert seen == expected, f"{shell}: the shell saw {seen!r}, glmlaunch was given {expected!r}"
        assert not any(sentinel.iterdir()), f"{shell}: a value ran a command: {list(sentinel.iterdir())}"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
@seeded
@fuzz_settings(15)
@given(
    key=st.sampled_from(["env.FUZZ_A", "scheduler.max_num_seqs", "memory.min_margin", "server.api_key"]),
    value=_VALUES,
    command=st.sampled_from([("config", "--json"), ("plan",), ("env", "--shell", "bash")]),
)
def test_real_processes_keep_the_contract(key: str, value: str, command: tuple[str, ...]) -> None:
    """The same contract through the console script: exit code, no traceback, no secret, no file made."""
    root, sentinel, env = _case()
    try:
        env["GLMLAUNCH_ENV__DB_PASSWORD"] = PLANTED
        value = resolve_sentinel(value, sentinel)
        o = run_subprocess([command[0], "-p", "turnkey", *command[1:], f"--set={key}={value}"], env, root)
        assert_contract(o, deadline=30)  # a fresh interpreter pays its start-up; the run itself is < 5 s
        assert not any(sentinel.iterdir()), f"a value ran a command: {list(sentinel.iterdir())}"
    finally:
        shutil.rmtree(root, ignore_errors=True)
