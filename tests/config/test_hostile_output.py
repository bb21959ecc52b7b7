"""Issue 13 (security, round trips, strict JSON): hostile values through real processes and real shells.

Every test runs the installed CLI in a subprocess with ``HF_TOKEN`` set, as a user would. Shell tests use
bash always and zsh / fish where installed (skipped only when the shell is missing).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, glmlaunch_exe, run_cli

SECRET = "hf_fuzz_SECRET_9876"
PLANTED = "planted_Value_5150"
DUMP = "import json, os, sys; json.dump({k: os.environ.get(k) for k in sys.argv[1:]}, sys.stdout)"
INVENTORY = FIXTURES / "inventories" / "rtxpro6000x4.json"


@pytest.fixture
def env(clean_env: dict[str, str]) -> dict[str, str]:
    return dict(clean_env, HF_TOKEN=SECRET)


def _profile(tmp_path: Path, body: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text("extends: gate\n" + body, encoding="utf-8")
    return path


def _need(shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")


def _eval_in(shell: str, profile: Path, names: list[str], env: dict[str, str]) -> dict[str, str | None]:
    """Evaluate `glmlaunch env --shell SHELL` in SHELL and return the named variables it ends up with."""
    exe = " ".join(glmlaunch_exe())
    py = sys.executable
    gen = f"{exe} env -p {profile} --shell {shell}"
    if shell == "fish":
        script = f"{gen} | source; and {py} -c '{DUMP}' {' '.join(names)}"
        argv = ["fish", "--no-config", "-c", script]
    else:
        script = f'eval "$({gen})" && exec "{py}" -c \'{DUMP}\' {" ".join(names)}'
        argv = [shell, "-f", "-c", script] if shell == "zsh" else [shell, "-c", script]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    result: dict[str, str | None] = json.loads(out.stdout)
    return result


def _leaks(res: subprocess.CompletedProcess[str], *values: str) -> list[str]:
    return [v for v in values if v in res.stdout or v in res.stderr]


# --- 1. masking never rewrites a quoted value (fish injection) ---------------------------------------


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_masking_cannot_inject_commands(shell: str, tmp_path: Path, env: dict[str, str]) -> None:
    _need(shell)
    marker = tmp_path / "pwned"
    value = f"TOKEN=a' (touch {marker}) TOKEN=b' $(touch {marker}) `touch {marker}`"
    prof = _profile(tmp_path, "env:\n  MY_VAR: " + json.dumps(value) + "\n")
    got = _eval_in(shell, prof, ["MY_VAR"], env)
    assert not marker.exists()
    assert got == {"MY_VAR": value}


def test_fish_source_of_the_issue_reproducer_creates_nothing(tmp_path: Path, env: dict[str, str]) -> None:
    _need("fish")
    marker = tmp_path / "pwned"
    prof = _profile(tmp_path, f'env:\n  MY_VAR: "TOKEN=a\' (touch {marker}) TOKEN=b\'"\n')
    exe = " ".join(glmlaunch_exe())
    res = subprocess.run(
        ["bash", "-c", f"{exe} env -p {prof} --shell fish | fish --no-config -c source"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert not marker.exists()


# --- 2. --shell json is strict JSON whatever the values ----------------------------------------------


def test_json_shell_output_parses_and_keeps_values(tmp_path: Path, env: dict[str, str]) -> None:
    values = {"MY_VAR": 'KEY=a"b', "OTHER": "TOKEN='x' \\ \n\t \u2028 end", "PLAIN": "x"}
    prof = _profile(tmp_path, "env:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in values.items()))
    res = run_cli("env", "-p", str(prof), "--shell", "json", env=env)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert {k: data[k] for k in values} == values


# --- 3. secrets never reach stdout or stderr ----------------------------------------------------------


def test_unknown_secret_passthrough_warning_masks_the_value(env: dict[str, str]) -> None:
    for value in (SECRET, PLANTED):
        res = run_cli("env", "-p", "gate", env=dict(env, GLMLAUNCH_ENV__VLLM_FOO_TOKEN=value))
        assert res.returncode == 0, res.stderr
        assert _leaks(res, SECRET, PLANTED) == []
        # the message itself is intact: only the value is masked
        assert "env.VLLM_FOO_TOKEN: unknown VLLM_* variable" in res.stderr
        assert "VLLM_FOO_TOKEN looks like a secret" in res.stderr


@pytest.mark.parametrize("value", [SECRET, PLANTED])
def test_type_error_of_a_secret_setting_masks_the_value(value: str, env: dict[str, str]) -> None:
    res = run_cli("env", "-p", "gate", "--set", f"env.MY_TOKEN=[{value}]", env=env)
    assert res.returncode == 2
    assert "env.MY_TOKEN" in res.stderr and "Traceback" not in res.stderr
    assert _leaks(res, SECRET, PLANTED) == []


@pytest.mark.parametrize(
    "command", [["config"], ["config", "--json"], ["plan", "--json"], ["plan"], ["audit", "--json"]]
)
def test_secret_vllm_args_are_masked_except_in_args(command: list[str], env: dict[str, str]) -> None:
    args = json.dumps(["--api-key", PLANTED, f"--hf-token={SECRET}"])
    res = run_cli(*command, "-p", "gate", "--set", f"vllm_args={args}", env=env)
    assert res.returncode in (0, 4), res.stderr
    assert _leaks(res, SECRET, PLANTED) == []
    if "--json" in command:
        json.loads(res.stdout)


def test_args_prints_the_argv_itself(env: dict[str, str]) -> None:
    args = json.dumps(["--api-key", PLANTED])
    res = run_cli("args", "-p", "gate", "--set", f"vllm_args={args}", env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-2:] == ["--api-key", PLANTED]
    res = run_cli("args", "-p", "gate", "--json", "--set", f"vllm_args={args}", env=env)
    assert json.loads(res.stdout)["argv"][-2:] == ["--api-key", PLANTED]
    # an error in the same invocation is still masked
    bad = run_cli("args", "-p", "gate", "--set", f"env.API_KEY=[{PLANTED}]", env=env)
    assert bad.returncode == 2 and _leaks(bad, SECRET, PLANTED) == []


def test_a_plain_variable_holding_a_secret_is_withheld(tmp_path: Path, env: dict[str, str]) -> None:
    prof = _profile(tmp_path, f"env:\n  MY_COPY: 'x {SECRET} y'\n  MY_PLAIN: ok\n")
    for shell in ("bash", "fish", "json"):
        res = run_cli("env", "-p", str(prof), "--shell", shell, env=env)
        assert res.returncode == 0, res.stderr
        assert _leaks(res, SECRET) == []
        assert "MY_COPY" not in res.stdout and "MY_PLAIN" in res.stdout
        assert "MY_COPY holds a secret value" in res.stderr


def test_error_values_are_masked_at_the_cli_boundary(env: dict[str, str]) -> None:
    res = run_cli("env", "-p", "gate", "--shell", SECRET, env=env)
    assert res.returncode == 2
    assert res.stderr.startswith("error: --shell: unknown shell")
    assert _leaks(res, SECRET) == []


# --- 4. outputs go to regular files or new paths only --------------------------------------------------


def _char_device() -> Path:
    return Path("/dev/full") if Path("/dev/full").exists() else Path("/dev/null")


WRITERS = {  # the option named in errors: a command line writing to a path
    "--save": lambda p: ["hw", "--inventory", str(INVENTORY), "--save", str(p)],
    "--svg": lambda p: ["plan", "-p", "gate", "--svg", str(p)],
    "--output": lambda p: ["profiles", "schema", "-o", str(p)],
}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """An empty directory (tmp_path also holds the subprocesses' HOME and cache)."""
    path = tmp_path / "work"
    path.mkdir()
    return path


def _one_error_line(res: subprocess.CompletedProcess[str], key: str) -> None:
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {key}: "), res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_device_is_refused_and_left_alone(writer: str, env: dict[str, str]) -> None:
    dev = _char_device()
    res = run_cli(*WRITERS[writer](dev), env=env)
    assert res.returncode == 2, res.stderr
    _one_error_line(res, writer)
    assert "character device" in res.stderr
    assert stat.S_ISCHR(os.lstat(dev).st_mode)


@pytest.mark.parametrize("writer", list(WRITERS))
def test_fifo_directory_and_symlink_are_refused(writer: str, work: Path, env: dict[str, str]) -> None:
    fifo = work / "pipe"
    os.mkfifo(fifo)
    target = work / "target.txt"
    target.write_text("keep me\n", encoding="utf-8")
    link = work / "link"
    link.symlink_to(target)
    dangling = work / "dangling"
    dangling.symlink_to(work / "nowhere")
    cases = ((fifo, "FIFO"), (work, "directory"), (link, "symbolic link"), (dangling, "symbolic link"))
    for path, words in cases:
        res = run_cli(*WRITERS[writer](path), env=env, cwd=work, timeout=60)
        assert res.returncode == 2, (path, res.stderr)
        _one_error_line(res, writer)
        assert words in res.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text(encoding="utf-8") == "keep me\n"
    # nothing created through the dangling link, and no temporary file left behind
    assert sorted(p.name for p in work.iterdir()) == ["dangling", "link", "pipe", "target.txt"]


@pytest.mark.parametrize("writer", list(WRITERS))
def test_unwritable_places_are_clean_errors(writer: str, work: Path, env: dict[str, str]) -> None:
    bad = [Path("."), Path("..")]
    if Path("/proc/self").is_dir():
        bad.append(Path("/proc/x"))
    if writer != "--save":  # --save creates missing directories (as it always has); the others do not
        bad.append(Path("missing-dir/out.file"))
    for path in bad:
        res = run_cli(*WRITERS[writer](path), env=env, cwd=work)
        assert res.returncode == 2, (path, res.stderr)
        _one_error_line(res, writer)
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("writer", list(WRITERS))
def test_regular_file_is_replaced_keeping_its_mode(writer: str, work: Path, env: dict[str, str]) -> None:
    out = work / "out.file"
    out.write_text("old", encoding="utf-8")
    out.chmod(0o640)
    res = run_cli(*WRITERS[writer](out), env=env, cwd=work)
    assert res.returncode == 0, res.stderr
    assert out.read_text(encoding="utf-8") != "old"
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert [p.name for p in work.iterdir()] == ["out.file"]
    new = work / "sub" / "new.file"
    if writer == "--save":
        assert run_cli(*WRITERS[writer](new), env=env, cwd=work).returncode == 0
        assert json.loads(new.read_text(encoding="utf-8"))


def test_profiles_import_refuses_a_fifo_before_parsing(tmp_path: Path, env: dict[str, str]) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    log = next((FIXTURES / "boot-logs").glob("*.log"))
    res = run_cli("profiles", "import", str(log), "-o", str(fifo), "--force", env=env, timeout=60)
    assert res.returncode == 2 and "FIFO" in res.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


# --- 5. zsh (and every POSIX shell) gets values it does not expand -------------------------------------


@pytest.mark.parametrize("shell", ["bash", "sh", "zsh", "fish"])
def test_equals_values_round_trip(shell: str, tmp_path: Path, env: dict[str, str]) -> None:
    _need(shell)
    values = {"A": "=ls", "B": "==", "C": "after", "D": "x:~/y", "E": "~root", "F": "a=b"}
    prof = _profile(tmp_path, "env:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in values.items()))
    assert _eval_in(shell, prof, list(values), env) == values


# --- 6. a NUL byte is refused, never truncated ----------------------------------------------------------


@pytest.mark.parametrize("command", [["env", "--shell", "bash"], ["env", "--shell", "json"], ["config"]])
def test_nul_in_an_env_value_is_refused(command: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    prof = _profile(tmp_path, 'env:\n  MY_VAR: "a\\0b"\n')
    res = run_cli(*command, "-p", str(prof), env=env)
    assert res.returncode == 2
    assert "env.MY_VAR" in res.stderr and "NUL" in res.stderr
    assert res.stdout == ""


# --- 13. every --json output is strict JSON ------------------------------------------------------------


@pytest.mark.parametrize("number", [".nan", ".inf", "-.inf"])
def test_non_finite_numbers_are_refused_in_json(number: str, tmp_path: Path, env: dict[str, str]) -> None:
    prof = _profile(tmp_path, f"server:\n  default_chat_template_kwargs: {{x: {number}}}\n")
    res = run_cli("config", "-p", str(prof), "--json", env=env)
    assert res.returncode == 2, res.stdout
    assert "default_chat_template_kwargs.x" in res.stderr and "NaN" in res.stderr
    assert res.stdout == ""


@pytest.mark.parametrize("what", ["W", "terms", "kv_cache"])
def test_plan_explain_json_is_strict_json(what: str, env: dict[str, str]) -> None:
    res = run_cli("plan", "-p", "gate", "--explain", what, "--json", env=env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert doc["explain"] == what and doc["lines"]
    if doc["kind"] == "entry":
        assert doc["entry"]["name"] == what


def test_unknown_explain_with_json_is_a_clean_error(env: dict[str, str]) -> None:
    res = run_cli("plan", "-p", "gate", "--explain", "no_such_entry", "--json", env=env)
    assert res.returncode == 2 and res.stdout == ""
    _one_error_line(res, "--explain")
    assert "no such ledger entry" in res.stderr


def test_log_name_that_is_not_utf8_prints_as_json(tmp_path: Path, env: dict[str, str]) -> None:
    log = next((FIXTURES / "boot-logs").glob("*.log"))
    name = os.fsencode(tmp_path) + b"/boot-\xff\xfe.log"
    shutil.copyfile(log, name)
    proc = subprocess.run(
        [*(os.fsencode(a) for a in glmlaunch_exe()), b"calibrate", b"ingest", b"--dry-run", b"--json", name],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    doc = json.loads(proc.stdout.decode("utf-8"))  # valid UTF-8, strict JSON
    # the undecodable bytes are shown as visible escapes
    assert doc["records"][0]["log"]["source"].endswith("boot-\\xff\\xfe.log")
    assert b"Traceback" not in proc.stderr


@pytest.mark.parametrize("writer", list(WRITERS))
def test_an_option_taken_as_the_file_name_is_refused(writer: str, work: Path, env: dict[str, str]) -> None:
    res = run_cli(*WRITERS[writer]("--json"), env=env, cwd=work)
    assert res.returncode == 2 and res.stdout == ""
    _one_error_line(res, writer)
    assert "looks like an option" in res.stderr
    assert list(work.iterdir()) == []
