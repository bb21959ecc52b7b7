"""JSON Schemas (draft 2020-12) of the configuration commands' machine-readable output.

``docs/schemas/<name>.schema.json`` holds each one; ``python -m glmlaunch.config.docschemas`` writes
them from the functions below (``--check`` only compares), and tests/config/test_json_documents.py
checks the files are current and validates the real output of every command against them.

* ``config``: ``glmlaunch config --json``; its ``config`` member is the serialized
  :class:`~glmlaunch.config.schema.DeploymentConfig`, so the schema follows the model.
* ``args``: ``glmlaunch args --json``.
* ``profiles-list``: ``glmlaunch profiles list --json``.
* ``env``: ``glmlaunch env --shell json``, the environment mapping itself (see its description).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from glmlaunch.config.commands import SCHEMA_VERSION
from glmlaunch.config.schema import DeploymentConfig

DIALECT = "https://json-schema.org/draft/2020-12/schema"
#: the other documents' convention (docs/schemas/check.schema.json): a name, not a place to fetch from
BASE_ID = "https://glmlaunch.invalid/schemas/"

_VERSION = {
    "const": SCHEMA_VERSION,
    "description": (
        "the document's version: 1 (a new key is a compatible change; renaming or removing one, or "
        "changing its meaning, bumps it)"
    ),
}


def _strings(description: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": description}


def _document(name: str, title: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "$schema": DIALECT,
        "$id": f"{BASE_ID}{name}.schema.json",
        "title": title,
        "description": description,
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def config_schema() -> dict[str, Any]:
    model = DeploymentConfig.model_json_schema(mode="serialization", ref_template="#/$defs/{model}")
    defs = model.pop("$defs", {})
    model["description"] = (
        "every setting of the resolved configuration (profile chain, GLMLAUNCH_* variables and --set "
        "applied); sizes are exact byte counts"
    )
    doc = _document(
        "config",
        "glmlaunch config --json",
        "The resolved configuration, what it derives, and where every value came from.",
        {
            "schema_version": _VERSION,
            "profile": {
                "type": "string",
                "description": "name of the profile resolved (the last of the chain)",
            },
            "chain": _strings("profile files of the extends: chain, base first (absolute paths)"),
            "overrides": _strings("the key=value overrides applied: GLMLAUNCH_SET's, then --set's"),
            "config": model,
            "derived": {
                "type": "object",
                "description": "values computed from the settings",
                "properties": {
                    "capture_sizes": {
                        "type": "array",
                        "items": {"type": "integer", "minimum": 1},
                        "description": "the CUDA-graph capture sizes vLLM is given (empty when mode is NONE)",
                    },
                    "gpus": {
                        "type": "array",
                        "items": {"type": "integer", "minimum": 0},
                        "description": "physical GPU indices exported as CUDA_VISIBLE_DEVICES",
                    },
                    "oneshot_eager_bytes": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "bytes of vLLM's eager one-shot all-reduce buffer",
                    },
                    "dcp_total_heads": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "attention heads of the DCP all-to-all staging (local heads x DCP)",
                    },
                },
                "required": ["capture_sizes", "gpus", "oneshot_eager_bytes", "dcp_total_heads"],
                "additionalProperties": False,
            },
            "sources": {
                "type": "object",
                "description": (
                    "dotted setting key -> where its value came from: 'default', 'profile NAME:key', "
                    "'env VARIABLE' or 'cli --set key'"
                ),
                "additionalProperties": {"type": "string"},
            },
            "warnings": _strings("the configuration's warnings, one line each (also printed on stderr)"),
        },
    )
    doc["$defs"] = defs
    return doc


def args_schema() -> dict[str, Any]:
    return _document(
        "args",
        "glmlaunch args --json",
        "The `vllm serve` argument vector of the resolved configuration, exactly as `serve` would exec it "
        "(secret flag values included: it is their carrier).",
        {
            "schema_version": _VERSION,
            "profile": {"type": "string", "description": "name of the profile resolved"},
            "argv": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 2,
                "prefixItems": [
                    {"type": "string", "description": "the vllm executable"},
                    {"const": "serve", "description": "the vllm subcommand"},
                ],
                "description": "one argument per element: vllm, serve, the model, then the flags",
            },
        },
    )


def profiles_list_schema() -> dict[str, Any]:
    profile = {
        "type": "object",
        "description": "one profile file",
        "properties": {
            "name": {"type": "string", "description": "the name -p takes (the file name without suffix)"},
            "extends": {
                "type": ["string", "null"],
                "description": "the profile it extends (name or relative path), null for none",
            },
            "description": {"type": "string", "description": "the profile's description: line"},
            "path": {"type": "string", "description": "absolute path of the file"},
            "builtin": {
                "type": "boolean",
                "description": "shipped with glmlaunch (false: found in GLMLAUNCH_PROFILE_PATH)",
            },
        },
        "required": ["name", "extends", "description", "path", "builtin"],
        "additionalProperties": False,
    }
    return _document(
        "profiles-list",
        "glmlaunch profiles list --json",
        "The profiles -p can name: GLMLAUNCH_PROFILE_PATH's first, then the built-in ones.",
        {
            "schema_version": _VERSION,
            "profiles": {"type": "array", "items": profile, "description": "every profile found"},
        },
    )


def env_schema() -> dict[str, Any]:
    return {
        "$schema": DIALECT,
        "$id": f"{BASE_ID}env.schema.json",
        "title": "glmlaunch env --shell json",
        "description": (
            "The environment the configuration produces, as one flat object NAME -> value, for "
            "`jq -r .NAME` or a JSON-reading tool: the same variables and values the shell formats "
            "export (secrets withheld). It is one of env's output formats, not a --json report, so it "
            "carries no schema_version: a version key would read as one more variable, and a wrapper "
            "object would break every reader that takes the mapping as the environment."
        ),
        "type": "object",
        "propertyNames": {"pattern": "^[^=\\u0000]+$", "description": "a variable name (no '=' or NUL)"},
        "additionalProperties": {"type": "string", "description": "the value, exactly as exported"},
    }


DOCUMENTS: dict[str, Callable[[], dict[str, Any]]] = {
    "config": config_schema,
    "args": args_schema,
    "profiles-list": profiles_list_schema,
    "env": env_schema,
}


def render(name: str) -> str:
    return json.dumps(DOCUMENTS[name](), indent=2, ensure_ascii=False) + "\n"


def default_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "docs" / "schemas"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    out = Path(rest[0]) if rest else default_dir()
    stale: list[str] = []
    for name in DOCUMENTS:
        path = out / f"{name}.schema.json"
        text = render(name)
        if check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
        else:
            out.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for name in stale:
        sys.stderr.write(f"stale: {name} (run python -m glmlaunch.config.docschemas)\n")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
