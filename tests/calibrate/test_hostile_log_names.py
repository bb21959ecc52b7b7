"""Issue 22, items 2, 3, 6, 9 and 10: what a boot log's name and contents can do to the files glmlaunch writes
(an imported profile, a calibrated overlay, a calibration record) and to the terminal that shows them.

Real files with hostile names, the installed console script in subprocesses, and every file re-read: a
generated header is comments only, a written YAML document loads back to exactly what was meant, a record
holds no credential and is readable by its owner only.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import yaml

from glmlaunch.config import limits
from tests.conftest import FIXTURES, run_cli

BOOT = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log"
#: Every kind of line break: a newline, U+2028 / U+2029 and NEL (U+0085), and a carriage return.
BREAKS = ("\n", "\u2028", "\u2029", "\u0085", "\r")
INJECTED = "vllm_args: [--chat-template, evil.jinja]"


def _log_named(directory: Path, name: str, text: str | None = None) -> Path:
    path = directory / name
    if text is None:
        shutil.copyfile(BOOT, path)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _assert_only_comments_above_the_data(text: str) -> None:
    """Every line of the header starts with '#': YAML sees a comment, whatever the names held."""
    header, _, _ = text.partition("\ndescription:")
    for line in header.splitlines():  # splitlines breaks at U+2028, U+0085 and friends too
        assert line.startswith("#"), f"a header line is live YAML: {line!r}"
    for ch in BREAKS[1:]:
        assert ch not in header, f"a raw {ch!r} in the header"


@pytest.mark.parametrize("brk", BREAKS)
def test_a_log_name_cannot_inject_yaml_into_an_imported_profile(
    brk: str, tmp_path: Path, clean_env: dict[str, str]
) -> None:
    log = _log_named(tmp_path, f"boot{brk}{INJECTED}{brk}#.log")
    out = tmp_path / "imported.yaml"
    done = run_cli("profiles", "import", str(log), "-o", str(out), env=clean_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = out.read_text(encoding="utf-8")
    _assert_only_comments_above_the_data(text)
    assert "vllm_args" not in yaml.safe_load(text)
    argv = run_cli("args", "-p", str(out), "--json", env=clean_env, cwd=tmp_path)
    assert argv.returncode == 0, argv.stderr
    assert "--chat-template" not in json.loads(argv.stdout)["argv"]
    # the name is still there, escaped, for a reader
    assert "boot\\" in text.splitlines()[1]


def test_a_base_path_cannot_inject_yaml_either(tmp_path: Path, clean_env: dict[str, str]) -> None:
    base_dir = tmp_path / f"base\n{INJECTED}\n"
    base_dir.mkdir()
    base = base_dir / "mine.yaml"
    base.write_text("extends: r12-exl3\n")
    done = run_cli("profiles", "import", str(BOOT), "--base", str(base), env=clean_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    _assert_only_comments_above_the_data(done.stdout)
    doc = yaml.safe_load(done.stdout)
    assert doc["extends"] == str(base) and "vllm_args" not in doc


def _overlay(tmp_path: Path, env: dict[str, str], *extra: str) -> str:
    out = tmp_path / "overlay.yaml"
    done = run_cli(
        "calibrate", "search", "-p", "r12-exl3", "--objective", "max-gmu", "-o", str(out), "--force", *extra,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return out.read_text(encoding="utf-8")


@pytest.mark.parametrize("brk", BREAKS)
def test_a_set_value_cannot_inject_yaml_into_a_search_overlay(
    brk: str, tmp_path: Path, clean_env: dict[str, str]
) -> None:
    text = _overlay(tmp_path, clean_env, f"--set=env.NOTE=x{brk}{INJECTED}{brk}")
    _assert_only_comments_above_the_data(text)
    doc = yaml.safe_load(text)
    assert set(doc) == {"description", "extends", "memory"}, doc


def test_a_stored_log_name_cannot_inject_yaml_into_a_search_overlay(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    # the overlay's header names the record its figures come from, by the log's stored name
    for brk in BREAKS:
        log = _log_named(tmp_path, f"b{BREAKS.index(brk)}{brk}{INJECTED}{brk}.log")
        assert run_cli("calibrate", "ingest", str(log), env=clean_env).returncode == 0
        text = _overlay(tmp_path, clean_env)
        assert "record" in text.splitlines()[1], text.splitlines()[1]
        _assert_only_comments_above_the_data(text)
        assert set(yaml.safe_load(text)) == {"description", "extends", "memory"}


def test_a_secret_on_the_command_line_is_masked_in_the_overlay(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    secret = "sk-live-overlay-4242"
    text = _overlay(tmp_path, clean_env, f"--set=env.OPENAI_API_KEY={secret}")
    assert secret not in text
    assert "env.OPENAI_API_KEY=****" in text.splitlines()[0]


def test_a_record_keeps_no_credential_and_only_its_owner_reads_it(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    text = BOOT.read_text(encoding="utf-8")
    at = text.index(">>> profile runtime")
    secrets = {"HF_TOKEN": "hf_recordSECRET1234", "OPENAI_API_KEY": "sk-recordSECRET5678"}
    planted = "".join(f">>> profile runtime: {k}={v}\n" for k, v in secrets.items())
    args = "'load_format': 'safetensors'"
    text = text[:at] + planted + text[at:]
    text = text.replace(args, f"{args}, 'api_key': 'sk-argSECRET9012'", 1)
    log = _log_named(tmp_path, "secret.log", text)
    done = run_cli("calibrate", "ingest", str(log), env=clean_env)
    assert done.returncode == 0, done.stderr
    directory = Path(clean_env["GLMLAUNCH_CACHE_DIR"]) / "calibration"
    (record,) = directory.glob("*.json")
    stored = record.read_text(encoding="utf-8")
    for value in [*secrets.values(), "sk-argSECRET9012"]:
        assert value not in stored
    boot_config = json.loads(stored)["boot"]["boot_config"]
    assert boot_config["runtime_env"]["HF_TOKEN"] == "****"
    assert boot_config["vllm_args"]["api_key"] == "****"
    # a count under a secret-looking name is a count, and stays
    assert boot_config["vllm_args"]["max_num_batched_tokens"] == 3072
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    # the record still does its job: plan uses it
    assert run_cli("calibrate", "list", env=clean_env).returncode == 0


TERMINAL_ATTACK = "esc\x1b]0;PWNED\x07\x1b[2J\x9b31m\u202eevil"


def test_terminal_escapes_in_a_log_name_are_shown_escaped_everywhere(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    log = _log_named(tmp_path, f"{TERMINAL_ATTACK}\nerror: forged.log")
    runs = [
        run_cli("calibrate", "ingest", str(log), env=clean_env),
        run_cli("calibrate", "ingest", str(log), "--dry-run", "--json", env=clean_env),
        run_cli("calibrate", "list", env=clean_env),
        run_cli("calibrate", "list", "--json", env=clean_env),
        run_cli("calibrate", "show", "-p", "r12-exl3", env=clean_env),
        run_cli("plan", "-p", "r12-exl3", env=clean_env),
        run_cli("plan", "-p", "r12-exl3", "--json", env=clean_env),
    ]
    record_id = json.loads(runs[3].stdout)["records"][0]["record_id"]
    runs.append(run_cli("calibrate", "show", record_id, env=clean_env))
    for done in runs:
        assert done.returncode == 0, done.stderr
        for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
            assert raw not in done.stdout + done.stderr, (done.args, raw)
        assert not any(line.startswith("error: forged") for line in done.stderr.splitlines())
    shown = runs[2].stdout + runs[5].stdout + runs[0].stderr
    assert "esc\\x1b]0;PWNED\\x07" in shown
    assert "\\nerror: forged.log" in shown


def test_a_name_that_is_not_utf8_is_ingested_and_imported(tmp_path: Path, clean_env: dict[str, str]) -> None:
    raw = os.fsencode(tmp_path) + b"/bad\xff\xfe.log"
    shutil.copyfile(BOOT, raw)
    name = os.fsdecode(raw)
    for args in (("calibrate", "ingest", name), ("profiles", "import", name)):
        done = run_cli(*args, env=clean_env)
        assert done.returncode == 0, done.stderr
        assert "internal error" not in done.stderr
    listed = run_cli("calibrate", "list", "--json", env=clean_env)
    assert json.loads(listed.stdout)["records"][0]["log"]["source"].endswith("bad\\xff\\xfe.log")


def test_a_record_the_reader_would_refuse_is_refused_at_ingest(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    text = BOOT.read_text(encoding="utf-8")
    at = text.index(">>> profile runtime")
    many = "".join(f">>> profile runtime: VLLM_FILLER_{i}=1\n" for i in range(limits.MAX_KEYS + 1000))
    huge = "'load_format': 'safetensors'"
    cases = {
        "keys": text[:at] + many + text[at:],
        "bytes": text.replace(huge, f"{huge}, 'chat_template': '{'x' * (limits.MAX_RECORD_BYTES + 1)}'", 1),
    }
    for what, body in cases.items():
        log = _log_named(tmp_path, f"{what}.log", body)
        dry = run_cli("calibrate", "ingest", str(log), "--dry-run", env=clean_env, timeout=120)
        assert dry.returncode == 2 and "not saved" in dry.stderr, dry.stderr  # the dry run says so too
        done = run_cli("calibrate", "ingest", str(log), env=clean_env, timeout=120)
        assert done.returncode == 2, (what, done.stderr)
        assert done.stderr.count("\n") == 1 and "not saved" in done.stderr
        limit = f"{limits.MAX_KEYS:,}" if what == "keys" else f"{limits.MAX_RECORD_BYTES:,}"
        assert limit in done.stderr, done.stderr
        assert "saved" not in done.stderr.replace("not saved", "")
    assert not list((Path(clean_env["GLMLAUNCH_CACHE_DIR"])).rglob("*.json"))


def test_a_huge_figure_on_a_worker_line_is_reported_not_a_crash(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    text = BOOT.read_text(encoding="utf-8")
    text = text.replace("decode_capacity=", "decode_capacity=1" + "0" * 400, 1)
    text = text.replace("GPU KV cache size: ", "GPU KV cache size: " + "9" * 400 + " ", 1)
    log = _log_named(tmp_path, "huge-figure.log", text)
    done = run_cli("calibrate", "ingest", str(log), "--dry-run", "--json", env=clean_env)
    assert done.returncode == 0, done.stderr
    unparsed = [u for r in json.loads(done.stdout)["records"][0]["ranks"] for u in r["unparsed"]]
    assert any("out of range" in u for u in unparsed), unparsed
    # and the record a real ingest saves is one its reader reads (item 9)
    assert run_cli("calibrate", "ingest", str(log), env=clean_env).returncode == 0
    listed = run_cli("calibrate", "list", "--json", env=clean_env)
    assert len(json.loads(listed.stdout)["records"]) == 1 and "skipped" not in listed.stderr


def test_a_lock_file_that_is_a_symlink_loop_is_one_error(tmp_path: Path, clean_env: dict[str, str]) -> None:
    directory = Path(clean_env["GLMLAUNCH_CACHE_DIR"]) / "calibration"
    directory.mkdir(parents=True)
    (directory / ".lock").symlink_to(".lock")
    done = run_cli("calibrate", "ingest", str(BOOT), env=clean_env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: GLMLAUNCH_CACHE_DIR: cannot take the calibration lock")
    assert done.stderr.count("\n") == 1
