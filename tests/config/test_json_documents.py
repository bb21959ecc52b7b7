"""The configuration commands' JSON output against docs/schemas/: the real output of real subprocesses.

Each document is one object whose first key is ``schema_version`` (``env --shell json`` excepted: it is
the environment mapping itself, see docs/schemas/env.schema.json), and each validates against its
schema file, which describes every property and refuses keys it does not describe.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from conftest import REPO, run_cli
from jsonschema import Draft202012Validator

from glmlaunch.config import docschemas

SCHEMAS = REPO / "docs" / "schemas"
PROFILES = ("r12-exl3", "gate", "turnkey")


def _schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return schema


def _errors(schema: dict[str, Any], doc: object) -> list[str]:
    return [e.message for e in Draft202012Validator(schema).iter_errors(doc)]


def _run_json(*args: str, env: dict[str, str]) -> Any:
    res = run_cli(*args, env=env)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def undescribed(node: object, path: str = "$") -> list[str]:
    """Every property, at any depth, that has no description."""
    found: list[str] = []
    if isinstance(node, dict):
        props = node.get("properties")
        if isinstance(props, dict):
            found += [
                f"{path}.{k}" for k, v in props.items() if not (isinstance(v, dict) and v.get("description"))
            ]
        for key, value in node.items():
            found += undescribed(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += undescribed(value, f"{path}[{i}]")
    return found


def test_schema_files_are_current() -> None:
    for name in docschemas.DOCUMENTS:
        path = SCHEMAS / f"{name}.schema.json"
        assert path.read_text(encoding="utf-8") == docschemas.render(name), (
            f"{path} is stale: run .venv/bin/python -m glmlaunch.config.docschemas"
        )


@pytest.mark.parametrize("name", list(docschemas.DOCUMENTS))
def test_every_property_is_described(name: str) -> None:
    assert undescribed(_schema(name)) == []


@pytest.mark.parametrize("profile", PROFILES)
def test_config_json_matches_its_schema(profile: str, clean_env: dict[str, str]) -> None:
    doc = _run_json("config", "-p", profile, "--set", "memory.min_margin=2GiB", "--json", env=clean_env)
    assert next(iter(doc)) == "schema_version" and doc["schema_version"] == 1
    schema = _schema("config")
    assert _errors(schema, doc) == []
    # a key the schema does not describe is refused, at the top and inside a section
    assert _errors(schema, {**doc, "surprise": 1})
    inner = copy.deepcopy(doc)
    inner["config"]["comm"]["surprise"] = 1
    assert _errors(schema, inner)
    # sizes are exact integers in JSON (the table shows them in units)
    assert doc["config"]["hardware"]["memory_per_gpu"] == 97290 * 1024**2


def test_args_json_is_an_object_with_the_argv(clean_env: dict[str, str]) -> None:
    doc = _run_json("args", "-p", "gate", "--json", env=clean_env)
    assert list(doc) == ["schema_version", "profile", "argv"]
    lines = run_cli("args", "-p", "gate", env=clean_env).stdout.splitlines()
    assert doc["argv"] == lines and doc["argv"][:2] == ["vllm", "serve"]
    schema = _schema("args")
    assert _errors(schema, doc) == []
    assert _errors(schema, {**doc, "surprise": 1})
    assert _errors(schema, doc["argv"])  # the bare array it used to be is not the document


def test_profiles_list_json_is_an_object(clean_env: dict[str, str]) -> None:
    doc = _run_json("profiles", "list", "--json", env=clean_env)
    assert next(iter(doc)) == "schema_version"
    assert {p["name"] for p in doc["profiles"]} >= set(PROFILES)
    schema = _schema("profiles-list")
    assert _errors(schema, doc) == []
    extra = copy.deepcopy(doc)
    extra["profiles"][0]["surprise"] = 1
    assert _errors(schema, extra)


@pytest.mark.parametrize("profile", PROFILES)
def test_env_json_is_the_flat_mapping(profile: str, clean_env: dict[str, str]) -> None:
    doc = _run_json("env", "-p", profile, "--shell", "json", env=clean_env)
    assert "schema_version" not in doc  # every key is a variable: `jq -r .CUDA_VISIBLE_DEVICES` works
    assert doc["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    schema = _schema("env")
    assert _errors(schema, doc) == []
    assert _errors(schema, {**doc, "X": 1})  # values are the exported strings
