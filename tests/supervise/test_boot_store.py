"""The boot store read back (issue 31, item 6): every field validated, one bad boot never hides the others,
and a later boot's outcome.json never depends on an earlier boot's figures being sane.

The store is a real one: ``serve --supervise`` of the fake vLLM (tests/supervise/fake_vllm.py) replaying a
real boot log; the corrupt boots are copies of it with one field changed, as a disk, a hand edit or
another program would leave them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import FIXTURES, REPO, _clean_env, glmlaunch_exe, run_cli

from glmlaunch.plan.profile_import import build_profile

FAKE = Path(__file__).resolve().parent / "fake_vllm.py"
OK_LOG = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp0-v1-server.log"
INVENTORY = FIXTURES / "inventories" / "rtxpro6000x4.json"
SCHEMA = json.loads((REPO / "docs" / "schemas" / "boots.schema.json").read_text())
OLD, BAD, NEW = "20260101T000000Z-aaaaaa", "20260102T000000Z-bbbbbb", "20260103T000000Z-cccccc"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the supervisor needs Linux")


def _env(tmp: Path) -> dict[str, str]:
    (tmp / "home").mkdir(exist_ok=True)
    (tmp / "fake-record").mkdir(exist_ok=True)
    return dict(
        _clean_env(tmp),
        GLMLAUNCH_VLLM_BIN=str(FAKE),
        GLMLAUNCH_INVENTORY=str(INVENTORY),
        GLMLAUNCH_SKIP_PREFLIGHT="1",
        FAKE_VLLM_RECORD=str(tmp / "fake-record"),
        FAKE_VLLM_LOG=str(OK_LOG),
        FAKE_VLLM_THEN="exit:0",
    )


def _serve(profile: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*glmlaunch_exe(), "serve", "-p", str(profile), "--supervise"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def real_boot(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the profile, the directory of one real supervised boot that served)."""
    tmp = tmp_path_factory.mktemp("real-boot")
    profile = tmp / "ok.yaml"
    profile.write_text(build_profile(OK_LOG, environ={}).text, encoding="utf-8")
    done = _serve(profile, _env(tmp))
    assert done.returncode == 0, done.stderr[-3000:]
    [boot] = list((tmp / "glmlaunch-cache" / "boots").iterdir())
    return profile, boot


def _store(real: Path, env: dict[str, str], *ids: str) -> Path:
    root = Path(env["GLMLAUNCH_CACHE_DIR"]) / "boots"
    for boot_id in ids:
        shutil.copytree(real, root / boot_id)
    return root


def _set(doc: Any, path: tuple[str | int, ...], value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


def _json_edit(name: str, path: tuple[str | int, ...], value: Any) -> Callable[[Path], None]:
    def edit(boot: Path) -> None:
        doc = json.loads((boot / name).read_text())
        _set(doc, path, value)
        (boot / name).write_text(json.dumps(doc))

    return edit


def _raw_edit(name: str, path: tuple[str | int, ...], literal: str) -> Callable[[Path], None]:
    """``value`` written as the literal JSON text (NaN, 1e400, a 500-digit integer: json.dumps writes
    none of them)."""

    def edit(boot: Path) -> None:
        doc = json.loads((boot / name).read_text())
        _set(doc, path, "@@LITERAL@@")
        (boot / name).write_text(json.dumps(doc).replace('"@@LITERAL@@"', literal))

    return edit


def _file(name: str, content: bytes | None) -> Callable[[Path], None]:
    def edit(boot: Path) -> None:
        path = boot / name
        path.unlink()
        if content is None:
            return
        path.write_bytes(content)

    return edit


def _fifo(boot: Path) -> None:
    (boot / "outcome.json").unlink()
    os.mkfifo(boot / "outcome.json")


def _directory(boot: Path) -> None:
    (boot / "outcome.json").unlink()
    (boot / "outcome.json").mkdir()


OUT, LAUNCH = "outcome.json", "launch.json"
#: (what is wrong, the edit, what the warning names)
CORRUPT: list[tuple[str, Callable[[Path], None], str]] = [
    ("exit a string", _json_edit(OUT, ("exit",), "x"), "exit"),
    ("timeline a string", _json_edit(OUT, ("timeline",), "x"), "timeline"),
    ("a phase null", _json_edit(OUT, ("timeline", "phases", 0), None), "timeline.phases.0"),
    ("a phase start null", _json_edit(OUT, ("timeline", "phases", 0, "start_s"), None), "start_s"),
    ("seconds a string", _json_edit(OUT, ("timeline", "phases", 1, "seconds"), "12"), "seconds"),
    ("merged a number", _json_edit(OUT, ("timeline", "phases", 0, "merged"), 7), "merged"),
    ("a phase of 1e308 s", _json_edit(OUT, ("timeline", "phases", 0, "seconds"), 1e308), "seconds"),
    ("negative seconds", _json_edit(OUT, ("timeline", "phases", 2, "end_s"), -1.0), "end_s"),
    ("ready_s NaN", _raw_edit(OUT, ("timeline", "ready_s"), "NaN"), "NaN"),
    ("ready_s 1e400", _raw_edit(OUT, ("timeline", "ready_s"), "1e400"), "1e400"),
    ("ready_s -Infinity", _raw_edit(OUT, ("timeline", "ready_s"), "-Infinity"), "Infinity"),
    ("expected_s a string", _json_edit(OUT, ("timeline", "expected_s"), "x"), "expected_s"),
    ("expected_s.load NaN", _raw_edit(OUT, ("timeline", "expected_s", "load"), "NaN"), "NaN"),
    ("hung a number", _json_edit(OUT, ("timeline", "hung"), 7), "hung"),
    ("record a string", _json_edit(OUT, ("record",), "x"), "record"),
    ("record_id a number", _json_edit(OUT, ("record", "record_id"), 7), "record_id"),
    ("left_behind a string", _json_edit(OUT, ("left_behind",), "x"), "left_behind"),
    (
        "left_behind pid a string",
        _json_edit(OUT, ("left_behind",), [{"pid": "1", "name": "x", "ended": "y"}]),
        "pid",
    ),
    ("gpu_baseline a string", _json_edit(OUT, ("gpu_baseline",), "x"), "gpu_baseline"),
    (
        "gpu_baseline problems numbers",
        _json_edit(OUT, ("gpu_baseline",), {"checked": True, "problems": [1]}),
        "problems",
    ),
    ("an unknown outcome", _json_edit(OUT, ("outcome",), "exploded"), "outcome"),
    ("running a string", _json_edit(OUT, ("running",), "yes"), "running"),
    ("ready a number", _json_edit(OUT, ("ready",), 1), "ready"),
    ("another schema version", _json_edit(OUT, ("schema_version",), 2), "schema_version"),
    ("diagnosis an object", _json_edit(OUT, ("diagnosis",), {"a": 1}), "diagnosis"),
    ("pid of 500 digits", _raw_edit(OUT, ("pid",), "9" * 500), "500 digits"),
    ("pid negative", _json_edit(OUT, ("pid",), -5), "pid"),
    ("outcome.json a list", _file(OUT, b"[]"), "not a JSON object"),
    ("outcome.json cut short", _file(OUT, b'{"schema_version": 1, "outc'), "not JSON"),
    ("outcome.json not UTF-8", _file(OUT, b'{"diagnosis": "\xff\xfe"}'), "UTF-8"),
    ("outcome.json deep", _file(OUT, b"[" * 5000 + b"]" * 5000), "deep"),
    ("outcome.json a FIFO", _fifo, "FIFO"),
    ("outcome.json a directory", _directory, "directory"),
    ("launch.json profile a list", _json_edit(LAUNCH, ("profile",), ["a"]), "launch.json: profile"),
    ("launch.json started_at a number", _json_edit(LAUNCH, ("started_at",), 5), "started_at"),
    ("launch.json command null", _json_edit(LAUNCH, ("command",), None), "command"),
    ("launch.json missing", _file(LAUNCH, None), "no launch.json"),
    ("launch.json NaN", _raw_edit(LAUNCH, ("stop_grace_s",), "NaN"), "NaN"),
]


@pytest.mark.parametrize(("what", "edit", "named"), CORRUPT, ids=[c[0] for c in CORRUPT])
def test_one_corrupt_boot_is_a_warning_and_the_others_are_listed(
    real_boot: tuple[Path, Path], tmp_path: Path, what: str, edit: Callable[[Path], None], named: str
) -> None:
    env = _env(tmp_path)
    root = _store(real_boot[1], env, OLD, BAD, NEW)
    edit(root / BAD)

    listed = run_cli("boots", env=env, timeout=30)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert OLD in listed.stdout and NEW in listed.stdout and BAD not in listed.stdout
    [warning] = [line for line in listed.stderr.splitlines() if line.startswith("warning:")]
    assert f"skipped boot {BAD}" in warning and named in warning, warning

    doc = run_cli("boots", "--json", env=env, timeout=30)
    assert doc.returncode == 0, doc.stderr[-2000:]
    parsed = json.loads(doc.stdout, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    jsonschema.Draft202012Validator(SCHEMA).validate(parsed)
    assert [b["boot_id"] for b in parsed["boots"]] == [NEW, OLD]

    for ref in ("last", OLD):
        one = run_cli("boots", ref, "--json", env=env, timeout=30)
        assert one.returncode == 0, one.stderr[-2000:]
        jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(one.stdout))
        assert run_cli("boots", ref, env=env, timeout=30).returncode == 0

    bad = run_cli("boots", BAD[:12], env=env, timeout=30)
    assert bad.returncode == 2 and "the boot cannot be read" in bad.stderr and named in bad.stderr


def test_a_boot_without_outcome_is_listed_as_unknown(real_boot: tuple[Path, Path], tmp_path: Path) -> None:
    env = _env(tmp_path)
    root = _store(real_boot[1], env, OLD)
    (root / OLD / "outcome.json").unlink()  # glmlaunch itself was killed before writing it
    doc = run_cli("boots", "--json", env=env)
    assert doc.returncode == 0 and json.loads(doc.stdout)["boots"][0]["outcome"] == "unknown"
    text = run_cli("boots", "last", env=env)
    assert text.returncode == 0 and "outcome: unknown" in text.stdout


@pytest.mark.parametrize(
    ("seconds", "expected_from"),
    [
        (1e308, "defaults"),  # refused on read: the boot is skipped, the defaults apply
        (3e9, "3x boot"),  # a century of seconds is a valid figure: the expected time is capped
    ],
)
def test_a_later_boot_keeps_its_outcome_whatever_an_earlier_one_says(
    real_boot: tuple[Path, Path], tmp_path: Path, seconds: float, expected_from: str
) -> None:
    profile, real = real_boot
    env = _env(tmp_path)
    root = _store(real, env, OLD)
    doc = json.loads((root / OLD / "outcome.json").read_text())
    load = doc["timeline"]["phases"][0]
    load["seconds"] = load["end_s"] = seconds
    (root / OLD / "outcome.json").write_text(json.dumps(doc))

    done = _serve(profile, env)
    assert done.returncode == 0, done.stderr[-3000:]
    [new] = [p for p in root.iterdir() if p.name != OLD]
    outcome = json.loads((new / "outcome.json").read_text())  # before the fix: never written (inf)
    jsonschema.Draft202012Validator({**SCHEMA["$defs"]["outcome"], "$defs": SCHEMA["$defs"]}).validate(
        outcome
    )
    timeline = outcome["timeline"]
    assert timeline["expected_from"].startswith(expected_from)
    assert all(0 < v <= 7 * 86400 for v in timeline["expected_s"].values())
