"""Secret masking rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

from glmlaunch.output import MASK, is_secret_name, mask_obj, mask_secrets, register_secrets


@pytest.mark.parametrize(
    "name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD"]
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["VLLM_DCP_A2A_MAX_TOKENS", "turnkey", "KEYBOARD", "MONKEY_PATCH", "PATH"])
def test_not_secret_names(name: str) -> None:
    assert not is_secret_name(name)


def test_mask_obj_masks_env_like_secret_keys_only() -> None:
    doc = {
        "key": "x",
        "kv_bytes_per_token_origin": "estimate",
        "env": {"HF_TOKEN": "hf_abc", "VLLM_DCP_A2A_MAX_TOKENS": "64"},
    }
    assert mask_obj(doc) == {
        "key": "x",
        "kv_bytes_per_token_origin": "estimate",
        "env": {"HF_TOKEN": MASK, "VLLM_DCP_A2A_MAX_TOKENS": "64"},
    }


def test_mask_secrets_in_text() -> None:
    register_secrets({"HF_TOKEN": "hf_registered_value"})
    text = "export HF_TOKEN=hf_inline_value; curl -H 'x: hf_registered_value' turnkey:cudagraph"
    masked = mask_secrets(text)
    assert "hf_inline_value" not in masked and "hf_registered_value" not in masked
    assert "turnkey:cudagraph" in masked


def test_message_keys_are_not_mangled_but_values_are_masked() -> None:
    from glmlaunch.config.diagnostics import Diagnostic

    diag = Diagnostic("warning", "env.VLLM_FOO_TOKEN", "unknown VLLM_* variable", "planted-value-1")
    line = mask_secrets(diag.one_line())
    assert line.startswith("env.VLLM_FOO_TOKEN: unknown VLLM_* variable; got ****")
    assert "planted-value-1" not in line
    assert MASK in mask_secrets("GLMLAUNCH_ENV__VLLM_FOO_TOKEN=abcdef") and "abcdef" not in mask_secrets(
        "GLMLAUNCH_ENV__VLLM_FOO_TOKEN=abcdef"
    )


def test_secret_flags_are_masked_in_text_and_lists() -> None:
    text = 'vllm_args=["--api-key","sk-one-1234", "--hf-token=hf_two_5678"] and --api-key sk-three'
    masked = mask_secrets(text)
    assert not any(s in masked for s in ("sk-one-1234", "hf_two_5678", "sk-three"))
    assert "--api-key" in masked and "vllm_args" in masked
    assert mask_obj({"argv": ["--api-key", "sk-x", "--port", "8000"]}) == {
        "argv": ["--api-key", MASK, "--port", "8000"]
    }


def test_non_finite_numbers_are_refused_with_the_key() -> None:
    from glmlaunch.errors import ConfigError
    from glmlaunch.output import json_text

    with pytest.raises(ConfigError) as info:
        json_text({"a": {"b": [1.0, float("nan")]}})
    assert info.value.key == "a.b[1]" and int(info.value.exit_code) == 2
    assert json_text({"x": "boot-\udcff.log"}) == '{\n  "x": "boot-\\\\xff.log"\n}'


# --- --quiet and progress ----------------------------------------------------------------------------


def test_quiet_silences_notes_not_warnings(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from glmlaunch.output import note, set_quiet, warn

    try:
        set_quiet(True)
        note("using the rig defaults")
        warn("capture sizes above the decode window")
    finally:
        set_quiet(False)
    assert capsys.readouterr().err == "warning: capture sizes above the decode window\n"
    monkeypatch.setenv("GLMLAUNCH_QUIET", "1")
    note("still quiet through the environment")
    monkeypatch.setenv("GLMLAUNCH_QUIET", "0")
    note("heard")
    assert capsys.readouterr().err == "heard\n"


_SPIN = """
import sys, time
from glmlaunch.output import progress
with progress("importing b12x", after={after}):
    time.sleep({sleep})
sys.stderr.write("done\\n")
"""


def _stderr_on_a_terminal(code: str, env: dict[str, str]) -> str:
    """Run ``code`` with stderr on a pseudo-terminal (as in an interactive shell); what it wrote there."""
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            stderr=slave,
            stdout=subprocess.DEVNULL,
            env=env,
            timeout=60,
            check=True,
        )
        assert proc.returncode == 0
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the writer side is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(master)


def test_progress_spins_on_a_terminal_only_when_slow(clean_env: dict[str, str]) -> None:
    env = clean_env
    slow = _stderr_on_a_terminal(_SPIN.format(after=0.2, sleep=1.0), env)
    assert "\r| importing b12x" in slow and "\r/ importing b12x" in slow
    assert slow.endswith("\r\x1b[2Kdone\r\n")  # the line is erased before what follows
    fast = _stderr_on_a_terminal(_SPIN.format(after=5, sleep=0.1), env)
    assert fast == "done\r\n"
    quiet = _stderr_on_a_terminal(_SPIN.format(after=0.2, sleep=1.0), dict(env, GLMLAUNCH_QUIET="1"))
    assert quiet == "done\r\n"


def test_progress_writes_nothing_into_a_pipe_or_log(clean_env: dict[str, str]) -> None:
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-c", _SPIN.format(after=0.1, sleep=0.5)],
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert res.stderr == "done\n"


def test_rich_output_prints_emoji_codes_as_written(clean_env: dict[str, str], tmp_path: Path) -> None:
    # Data is printed as it is: rich's emoji codes would turn a description like ":x:" into a symbol.
    profile = tmp_path / "mine.yaml"
    profile.write_text("extends: turnkey\ndescription: 'rack :x: slot :smile:'\n")
    res = run_cli("plan", "-p", str(profile), env=clean_env)
    assert res.returncode == 0, res.stderr
    assert "rack :x: slot :smile:" in res.stdout.splitlines()[0]


@pytest.mark.parametrize(
    "name", ["VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD", "MY_TOKEN_LIMIT", "KEY_SIZE", "TOKEN_BUDGET"]
)
def test_a_marker_followed_by_a_quantity_is_not_a_secret(name: str) -> None:
    assert not is_secret_name(name)
    assert is_secret_name(name.rsplit("_", 1)[0] + "_FILE")  # the marker alone still makes a secret


def test_a_number_is_never_masked_by_value(clean_env: dict[str, str], tmp_path: Path) -> None:
    # A secret-named variable whose value is a count must not turn every equal figure into ****.
    profile = tmp_path / "p.yaml"
    profile.write_text("extends: turnkey\nenv:\n  MY_API_KEY: '3072'\n")
    res = run_cli("config", "-p", str(profile), env=clean_env)
    assert res.returncode == 0, res.stderr
    row = next(line for line in res.stdout.splitlines() if "scheduler.max_num_batched_tokens" in line)
    assert "3072" in row and "****" not in row
    env = run_cli("env", "-p", str(profile), "--shell", "bash", env=clean_env)
    assert "VLLM_DCP_A2A_MAX_TOKENS" in env.stdout and "MY_API_KEY" not in env.stdout
    assert "holds a secret value" not in env.stderr


def test_imported_boot_profile_is_not_masked_by_its_token_threshold(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    log = Path(__file__).parent / "fixtures" / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log"
    out = tmp_path / "boot.yaml"
    assert run_cli("profiles", "import", str(log), "-o", str(out), env=clean_env).returncode == 0
    plan = run_cli("plan", "-p", str(out), "--json", env=clean_env)
    assert "****" not in plan.stdout
    env = run_cli("env", "-p", str(out), "--shell", "bash", env=clean_env)
    assert "VLLM_EXL3_PREFILL_CAPACITY" in env.stdout and "not printed" not in env.stderr


# --- issue 22: one escaping rule for what a terminal shows and what a generated header holds -------------

UNSAFE = ["\x1b[31m", "\x07", "\x00", "\n", "\r", "\t", "\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\u202e"]


@pytest.mark.parametrize("ch", UNSAFE)
def test_escape_leaves_no_unsafe_character(ch: str) -> None:
    from glmlaunch.output import escape, is_safe

    shown = escape(f"a{ch}b")
    assert is_safe(shown) and shown.startswith("a\\") and shown.endswith("b")
    assert shown.splitlines() == [shown]  # one line, whatever str.splitlines counts as a break


def test_escape_keeps_plain_text_and_shows_a_non_utf8_byte() -> None:
    from glmlaunch.output import escape, escape_data

    assert escape("turnkey é ✓ [bold]x[/]") == "turnkey é ✓ [bold]x[/]"
    assert escape(b"bad\xff".decode("utf-8", "surrogateescape")) == "bad\\xff"
    assert escape_data("a\n\tb\x1b") == "a\n\tb\\x1b"


def test_header_text_masks_then_escapes() -> None:
    from glmlaunch.output import header_text

    line = header_text("glmlaunch --set env.OPENAI_API_KEY=sk-abcdef\nvllm_args: [x]\u2028y")
    assert "sk-abcdef" not in line and "OPENAI_API_KEY=****" in line
    assert "\n" not in line and "\u2028" not in line


@pytest.mark.parametrize(
    "arg", ["plain", "", "a b", "it's", "$(touch x)", "a\nb", "\x1b[31m", "x\u2028y", "n\x85", "\\'\\", "é"]
)
def test_shell_quote_reads_back_as_the_same_argument_in_bash(arg: str, tmp_path: Path) -> None:
    import subprocess

    from glmlaunch.output import is_safe, shell_quote

    quoted = shell_quote(arg)
    assert is_safe(quoted)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        ["bash", "-c", f"printf '%s' {quoted} > out"],
        cwd=work,
        env={"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert done.returncode == 0
    assert (work / "out").read_bytes() == arg.encode()
    assert list(work.iterdir()) == [work / "out"]


def test_table_cells_are_escaped_and_never_markup(clean_env: dict[str, str], tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "mine.yaml").write_text('extends: gate\ndescription: "[/x] \\e]0;title\\a done"\n')
    env = dict(clean_env, GLMLAUNCH_PROFILE_PATH=str(profiles))
    res = run_cli("profiles", "list", env=env)
    assert res.returncode == 0, res.stderr
    assert "[/x] \\x1b]0;title\\x07 done" in res.stdout and "\x1b" not in res.stdout


def test_each_run_lays_its_output_out_for_its_own_stdout(clean_env: dict[str, str]) -> None:
    """rich reads FORCE_COLOR (like COLUMNS and NO_COLOR) when a console is made: a run after one that forced
    colour prints plain text, as a new process would (main() may run many times in one process)."""
    forced = run_cli("config", "-p", "turnkey", env=dict(clean_env, FORCE_COLOR="1", NO_COLOR=""))
    assert forced.returncode == 0 and "\x1b[" in forced.stdout, forced.stderr
    plain = run_cli("config", "-p", "turnkey", env=clean_env)
    assert plain.returncode == 0 and "\x1b[" not in plain.stdout, plain.stdout[:300]


def test_a_url_userinfo_without_a_password_is_masked_whole() -> None:
    # https://TOKEN@host is how tokens ride in URLs (GitHub, registries): the one userinfo field is the secret
    from glmlaunch.output import mask_secrets

    assert mask_secrets("GET https://ghp_abc123XYZ@example.org:8000/metrics?x=1") == (
        "GET https://****@example.org:8000/metrics?x=1"
    )
    assert mask_secrets("http://operator:hunter2@h/metrics") == "http://operator:****@h/metrics"
    assert mask_secrets("http://127.0.0.1:8000/metrics") == "http://127.0.0.1:8000/metrics"
