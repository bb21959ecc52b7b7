"""The JSON Schemas of check, serve --dry-run, calibrate list/show/search/ingest, preflight and diff.

Each command's own test validates its real output against its schema; this file checks the schemas
themselves: valid draft 2020-12, ``schema_version`` first, a description on every property, closed objects
(a key the schema does not describe fails), and one verdict shape that matches plan --json's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from conftest import REPO

from glmlaunch.plan.planner import VerdictDoc

NAMES = (
    "check",
    "serve-dry-run",
    "calibrate-list",
    "calibrate-show",
    "calibrate-search",
    "calibrate-ingest",
    "preflight",
    "diff",
)
WITH_VERDICT = ("check", "serve-dry-run", "calibrate-search", "diff")


def schema(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((REPO / "docs" / "schemas" / f"{name}.schema.json").read_text())
    return doc


def properties(node: object, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property schema in ``node``, with its path."""
    if isinstance(node, dict):
        for key, sub in (node.get("properties") or {}).items():
            yield f"{path}.{key}", sub
        for key, sub in node.items():
            yield from properties(sub, f"{path}/{key}")
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            yield from properties(sub, f"{path}[{i}]")


@pytest.mark.parametrize("name", NAMES)
def test_schema_is_valid_described_and_closed(name: str) -> None:
    s = schema(name)
    jsonschema.Draft202012Validator.check_schema(s)
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert s["type"] == "object" and s["additionalProperties"] is False
    assert next(iter(s["properties"])) == "schema_version"
    assert s["properties"]["schema_version"]["const"] == 1
    undescribed = [p for p, sub in properties(s) if not sub.get("description")]
    assert not undescribed, undescribed


@pytest.mark.parametrize("name", WITH_VERDICT)
def test_every_verdict_has_the_plan_documents_shape(name: str) -> None:
    verdict = schema(name)["$defs"]["verdict"]
    assert list(verdict["properties"]) == list(VerdictDoc.model_fields)
    assert set(verdict["required"]) == set(VerdictDoc.model_fields)


def test_the_plan_verdict_validates_against_the_shared_shape(clean_env: dict[str, str]) -> None:
    from conftest import run_cli

    done = run_cli("plan", "-p", "turnkey", "--json", env=clean_env)
    assert done.returncode == 0, done.stderr
    s = schema("check")
    sub = {"$defs": s["$defs"], **s["$defs"]["verdict"]}
    jsonschema.validate(json.loads(done.stdout)["verdict"], sub, cls=jsonschema.Draft202012Validator)
