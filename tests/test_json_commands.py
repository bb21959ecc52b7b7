"""Every `--json` output of every command: one object, `schema_version` first, valid against its schema.

The commands are walked from the Typer app, so a new command with `--json` fails here until it has a
schema in docs/schemas/ and an invocation below. Each invocation is a real subprocess on this machine (no
GPU): recorded inventories, the shipped profiles, a real boot log, the CPU preflight. The per-command
tests check the content; this one guarantees the convention holds for all of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import typer.main
from conftest import FIXTURES, REPO, run_cli

from glmlaunch.cli import app

INVENTORY = str(FIXTURES / "inventories" / "rtxpro6000x4.json")
BOOT_LOG = str(sorted((FIXTURES / "boot-logs").glob("*.log"))[0])
H200 = str(FIXTURES / "watch" / "h200.yaml")

#: command path -> (schema file, argv). ``{vllm}`` is replaced by a stand-in vllm executable.
INVOCATIONS: dict[str, tuple[str, list[str]]] = {
    "config": ("config.schema.json", ["config", "-p", "turnkey", "--json"]),
    "args": ("args.schema.json", ["args", "-p", "turnkey", "--json"]),
    "hw": ("hw.schema.json", ["hw", "--inventory", INVENTORY, "--json"]),
    "check": ("check.schema.json", ["check", "-p", "turnkey", "--inventory", INVENTORY, "--json"]),
    "preflight": (
        "preflight.schema.json",
        ["preflight", "-p", "gate", "--backend", "replay", "--device", "cpu", "--json"],
    ),
    "serve": (
        "serve-dry-run.schema.json",
        ["serve", "-p", "turnkey", "--dry-run", "--json", "--inventory", INVENTORY, "--skip-preflight",
         "--vllm-bin", "{vllm}"],
    ),
    "plan": ("../plan-schema-v1.json", ["plan", "-p", "turnkey", "--json"]),
    # offline: no test reaches the hub (tests/fetch/ validates the documents of real fetches)
    "fetch": ("fetch.schema.json", ["fetch", "-p", "turnkey", "--dry-run", "--offline", "--json"]),
    "audit": ("audit.schema.json", ["audit", "-p", "gate", "--json"]),
    "diff": ("diff.schema.json", ["diff", "gate", "turnkey", "--json"]),
    "profiles list": ("profiles-list.schema.json", ["profiles", "list", "--json"]),
    "calibrate ingest": ("calibrate-ingest.schema.json", ["calibrate", "ingest", BOOT_LOG, "--json"]),
    "calibrate list": ("calibrate-list.schema.json", ["calibrate", "list", "--json"]),
    "calibrate show": ("calibrate-show.schema.json", ["calibrate", "show", "-p", "r12-exl3", "--json"]),
    "boots": ("boots.schema.json", ["boots", "--json"]),
    # a stream of documents, one per sample: one sample here (tests/watch/ validates every line of replays)
    "watch": (
        "watch.schema.json",
        ["watch", "-p", H200, "--replay", str(FIXTURES / "watch" / "oom.json"), "--json", "--samples", "1"],
    ),
    "explain-oom": (
        "explain-oom.schema.json",
        ["explain-oom", "-p", H200, str(FIXTURES / "watch" / "oom.log"), "--json"],
    ),
    "calibrate search": (
        "calibrate-search.schema.json",
        ["calibrate", "search", "-p", "r12-exl3", "--objective", "max-batched-tokens", "--no-write",
         "--json"],
    ),
}


#: Other documents a command prints under another option, each validated the same way.
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "plan --explain ENTRY": (
        "plan-explain.schema.json",
        ["plan", "-p", "turnkey", "--explain", "dcp_a2a.slab.capture", "--json"],
    ),
    "plan --explain TERM": (
        "plan-explain.schema.json",
        ["plan", "-p", "turnkey", "--explain", "W", "--json"],
    ),
}


def json_commands() -> list[str]:
    """Every command (space-joined path) that declares a `--json` option."""
    found: list[str] = []

    def walk(cmd: Any, path: list[str]) -> None:
        if hasattr(cmd, "list_commands"):
            for name in cmd.list_commands(None):
                walk(cmd.get_command(None, name), [*path, name])
        elif any("--json" in getattr(p, "opts", ()) for p in cmd.params):
            found.append(" ".join(path))

    walk(typer.main.get_command(app), [])
    return found


def test_every_json_command_has_a_schema_and_an_invocation() -> None:
    commands = json_commands()
    assert "plan" in commands and "calibrate search" in commands  # the walk sees groups
    assert sorted(commands) == sorted(INVOCATIONS), "add the command's schema and invocation here"
    for schema_file, _ in INVOCATIONS.values():
        assert (REPO / "docs" / "schemas" / schema_file).resolve().is_file(), schema_file


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A calibration store holding one ingested real boot, so list/show/search have a record."""
    return tmp_path_factory.mktemp("store")


@pytest.mark.parametrize("command", [*INVOCATIONS, *VARIANTS])
def test_json_output_is_one_versioned_object_valid_against_its_schema(
    command: str, clean_env: dict[str, str], store: Path, tmp_path: Path
) -> None:
    schema_file, argv = {**INVOCATIONS, **VARIANTS}[command]
    work = tmp_path / "work"
    work.mkdir()
    vllm = tmp_path / "vllm"
    vllm.write_text("#!/bin/sh\necho vllm \"$@\"\n")
    vllm.chmod(0o755)
    argv = [a.replace("{vllm}", str(vllm)) for a in argv]
    env = dict(clean_env, GLMLAUNCH_CACHE_DIR=str(store))
    if command.startswith("calibrate") and command != "calibrate ingest":
        run_cli("calibrate", "ingest", BOOT_LOG, env=env, timeout=120, cwd=work)
    # in a scratch directory: nothing a command writes may land in the checkout
    proc = run_cli(*argv, env=env, timeout=180, cwd=work)
    assert list(work.iterdir()) == []
    # 0, or 4 (a verdict below the margin, still a document); never a usage error or a crash
    assert proc.returncode in (0, 4), (proc.returncode, proc.stderr[-2000:])
    doc = json.loads(proc.stdout)
    assert isinstance(doc, dict)
    assert next(iter(doc)) == "schema_version" and doc["schema_version"] == 1
    schema = json.loads((REPO / "docs" / "schemas" / schema_file).read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)


def test_env_json_is_the_environment_itself(clean_env: dict[str, str]) -> None:
    # The one exception, by design: `env --shell json` is the exported mapping (jq -r .NAME), so a
    # version key would read as one more variable. Its schema says so; this holds it to the mapping.
    proc = run_cli("env", "-p", "turnkey", "--shell", "json", env=clean_env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert "schema_version" not in doc
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items())
    schema = json.loads((REPO / "docs" / "schemas" / "env.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert doc["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
