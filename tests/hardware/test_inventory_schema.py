"""`hw --json` / `hw --save` documents against docs/schemas/hw.schema.json.

The inventories under tests/fixtures/inventories were written by `glmlaunch hw --save` on real hosts (or
edited copies of such captures): each must validate, the schema file must be what the model produces, and
every property must say what it means.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from glmlaunch.hardware.inventory import inventory_schema

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "docs" / "schemas" / "hw.schema.json"
FIXTURES = sorted(
    p for p in (ROOT / "tests" / "fixtures" / "inventories").rglob("*.json") if "record" not in p.parts
)


def _schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return data


def test_schema_file_is_current() -> None:
    assert _schema() == json.loads(json.dumps(inventory_schema())), (
        "regenerate: python -m glmlaunch.hardware.inventory > docs/schemas/hw.schema.json"
    )


def test_module_entry_point_prints_the_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "glmlaunch.hardware.inventory"], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == _schema()


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_recorded_inventories_validate(path: Path) -> None:
    doc = json.loads(path.read_text())
    assert next(iter(doc)) == "schema_version"
    jsonschema.Draft202012Validator(_schema()).validate(doc)


def test_unknown_key_is_rejected() -> None:
    doc = json.loads(FIXTURES[0].read_text())
    doc["surprise"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(_schema()).validate(doc)


def test_every_property_is_described() -> None:
    missing: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for name, prop in node.get("properties", {}).items():
                if "description" not in prop:
                    missing.append(f"{path}.{name}")
            for key, value in node.items():
                walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for value in node:
                walk(value, path)

    walk(_schema(), "")
    assert missing == []
