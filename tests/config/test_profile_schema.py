"""`glmlaunch profiles schema` accepts what the tool accepts, and describes every key.

The schema is what editors check profiles against: a value the tool takes must not be flagged (the
quoted "off" for comm.dma_min_bytes was), and a value the tool refuses should be. Each spelling below is
checked both ways: the tool (the model, or a real `glmlaunch config` run) and the schema from a real
`glmlaunch profiles schema` run, validated with jsonschema.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, run_cli
from jsonschema import Draft202012Validator
from pydantic import TypeAdapter, ValidationError
from test_json_documents import undescribed

from glmlaunch.config.schema import (
    LAX_BOOL_PATTERN,
    LAX_FLOAT_PATTERN,
    LAX_INT_PATTERN,
    DeploymentConfig,
)


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path_factory.mktemp("home")), "NO_COLOR": "1"}
    res = run_cli("profiles", "schema", env=env)
    assert res.returncode == 0, res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    Draft202012Validator.check_schema(doc)
    return doc


def _nest(dotted: str, value: object) -> dict[str, Any]:
    out: dict[str, Any] = {}
    node = out
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def _tool_accepts(data: dict[str, Any]) -> bool:
    try:
        DeploymentConfig.model_validate(data)
    except ValidationError:
        return False
    return True


def _schema_accepts(schema: dict[str, Any], data: dict[str, Any]) -> bool:
    return bool(Draft202012Validator(schema).is_valid(data))


# (key, value) pairs the tool accepts, each in a spelling people write.
ACCEPTED: list[tuple[str, object]] = [
    ("comm.dma_min_bytes", "off"),  # the quoted off the old schema refused
    ("comm.dma_min_bytes", False),  # YAML's bare off
    ("comm.dma_min_bytes", None),
    ("comm.dma_min_bytes", " OFF "),
    ("comm.dma_min_bytes", "none"),
    ("comm.dma_min_bytes", "null"),
    ("comm.dma_min_bytes", "6MB"),
    ("comm.dma_min_bytes", 6291456),
    ("comm.oneshot_fused_max_size", "84KB"),
    ("comm.oneshot_fused_max_size", "84 KiB"),
    ("comm.oneshot_fused_max_size", "84kib"),
    ("comm.oneshot_fused_max_size", "84KIB"),
    ("comm.oneshot_fused_max_size", "84k"),
    ("comm.oneshot_fused_max_size", "86016 B"),
    ("comm.oneshot_fused_max_size", "86016"),
    ("comm.oneshot_fused_max_size", 86016.0),
    ("hardware.memory_per_gpu", "95.01GiB"),
    ("hardware.memory_per_gpu", ".5 TiB"),
    ("hardware.memory_per_gpu", "96g"),
    ("memory.min_margin", "1.5GB"),
    ("comm.dma_wire_mode", "0"),
    ("comm.dma_wire_mode", 0),
    ("comm.dma_wire_mode", False),
    ("comm.dma_wire_mode", "bf16"),
    ("comm.dma_wire_mode", "BF16"),
    ("comm.dma_wire_mode", "off"),
    ("comm.dma_wire_mode", "false"),
    ("comm.dma_wire_mode", ""),
    ("comm.dma_wire_mode", "ring"),
    ("indexer.fold", "auto"),
    ("indexer.fold", "1"),
    ("indexer.fold", True),
    ("indexer.fold", 0),
    ("indexer.fold", "force"),
    ("indexer.fold", " Off "),
    ("parallel.gpus", [0, 1, 2, 3]),
    ("parallel.gpus", "0,1,2,3"),
    ("parallel.gpus", "4, 5, 6, 7"),
    ("parallel.gpus", 2),
    ("parallel.gpus", ["0", "1"]),
    ("cudagraph.capture_sizes", [4, 8, 12]),
    ("cudagraph.capture_sizes", "4,8,12"),
    ("cudagraph.capture_sizes", "[4, 8, 12]"),
    ("cudagraph.capture_rule", {"max": 48}),
    ("cudagraph.capture_rule", {"step": 6, "max": 48}),
    # numbers and booleans as text, as --set and GLMLAUNCH_* variables give them
    ("scheduler.max_num_seqs", "8"),
    ("scheduler.max_num_seqs", " 8 "),
    ("scheduler.max_num_batched_tokens", "3_072"),
    ("scheduler.max_num_seqs", 8.0),
    ("memory.gpu_memory_utilization", "0.95"),
    ("memory.gpu_memory_utilization", 1),
    ("scheduler.enable_prefix_caching", "yes"),
    ("scheduler.enable_prefix_caching", "off"),
    ("scheduler.enable_prefix_caching", "True"),
    ("scheduler.enable_prefix_caching", 1),
    ("dcp_policy.query_split", None),
    ("dcp_policy.query_split", "on"),
    ("env", {"MY_FLAG": True, "MY_COUNT": 3, "MY_RATIO": 0.5, "MY_TEXT": "x"}),
    ("server.default_chat_template_kwargs", {"reasoning_effort": "high", "n": 2}),
    ("hardware.min_cuda", "13.2"),
    ("hardware.compute_capability", "12.0"),
    ("memory.kv_scale_mode", "dynamic-token"),
    ("vllm_args", ["--enable-lora"]),
]

# Spellings the tool refuses: the schema must refuse them too.
REFUSED: list[tuple[str, object]] = [
    ("comm.dma_min_bytes", True),
    ("comm.dma_min_bytes", "1.5"),  # a fraction of a byte
    ("comm.dma_min_bytes", "6XB"),
    ("comm.dma_min_bytes", "1.2.3MB"),
    ("comm.dma_min_bytes", -1),
    ("comm.dma_min_bytes", "offf"),
    ("comm.dma_wire_mode", "fp8"),
    ("comm.dma_wire_mode", 1),
    ("indexer.fold", 2),
    ("indexer.fold", "AUTO"),
    ("parallel.gpus", "0;1"),
    ("parallel.gpus", True),
    ("cudagraph.capture_sizes", "4 8"),
    ("cudagraph.capture_rule", {"step": 6}),
    ("scheduler.max_num_seqs", "8.5"),
    ("scheduler.max_num_seqs", "eight"),
    ("scheduler.max_num_seqs", 0),
    ("scheduler.enable_prefix_caching", "maybe"),
    ("scheduler.enable_prefix_caching", 2),
    ("memory.gpu_memory_utilization", "most"),
    ("memory.kv_cache_dtype", "fp9"),
    ("hardware.min_cuda", 13.2),  # unquoted YAML: a float, and a version is text
    ("env", {"MY_VAR": None}),
    ("comm.surprise", 1),
    ("surprise", 1),
]


def test_shipped_profiles_validate(schema: dict[str, Any]) -> None:
    files = sorted((REPO / "profiles").glob("*.yaml"))
    assert {f.stem for f in files} >= {"r12-exl3", "gate", "turnkey"}
    for path in files:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        errors = [e.message for e in Draft202012Validator(schema).iter_errors(data)]
        assert errors == [], path.name


@pytest.mark.parametrize(("key", "value"), ACCEPTED, ids=[f"{k}={v!r}" for k, v in ACCEPTED])
def test_schema_accepts_what_the_tool_accepts(schema: dict[str, Any], key: str, value: object) -> None:
    data = _nest(key, value)
    assert _tool_accepts(data)
    assert _schema_accepts(schema, data)


@pytest.mark.parametrize(("key", "value"), REFUSED, ids=[f"{k}={v!r}" for k, v in REFUSED])
def test_schema_refuses_what_the_tool_refuses(schema: dict[str, Any], key: str, value: object) -> None:
    data = _nest(key, value)
    assert not _tool_accepts(data)
    assert not _schema_accepts(schema, data)


def test_quoted_and_bare_off_through_the_cli(schema: dict[str, Any], tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NO_COLOR": "1"}
    for text in ('"off"', "off", "'OFF'"):
        prof = tmp_path / "p.yaml"
        prof.write_text(f"extends: gate\ncomm:\n  dma_min_bytes: {text}\n", encoding="utf-8")
        res = run_cli("config", "-p", str(prof), "--json", env=env)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["config"]["comm"]["dma_min_bytes"] is None
        assert _schema_accepts(schema, yaml.safe_load(prof.read_text(encoding="utf-8")))


def test_every_key_is_described(schema: dict[str, Any]) -> None:
    assert undescribed(schema) == []
    assert schema["properties"]["comm"]["description"]
    assert schema["$defs"]["CommSection"]["properties"]["dma_min_bytes"]["description"]


@pytest.mark.parametrize(
    ("pattern", "kind", "samples"),
    [
        (
            LAX_BOOL_PATTERN,
            bool,
            [
                "0",
                "1",
                "on",
                "off",
                "t",
                "true",
                "f",
                "false",
                "y",
                "yes",
                "n",
                "no",
                "ON",
                "TRUE",
                "2",
                "",
                " 1",
            ],
        ),
        (
            LAX_INT_PATTERN,
            int,
            ["8", " 8 ", "+8", "-8", "8.0", "8.00", "1_000", "8.", "8.5", "1e3", "0x10", "1__0", "_1", ""],
        ),
        (
            LAX_FLOAT_PATTERN,
            float,
            ["0.9", ".9", "9.", "1e-3", "1E3", "+1.5", " 0.9 ", "1_0.5", "1e", "e3", ".", ""],
        ),
    ],
)
def test_text_number_patterns_match_pydantic(pattern: str, kind: type, samples: list[str]) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(kind)
    for text in samples:
        try:
            adapter.validate_python(text)
            pydantic_reads = True
        except ValidationError:
            pydantic_reads = False
        assert bool(re.search(pattern, text)) == pydantic_reads, repr(text)
