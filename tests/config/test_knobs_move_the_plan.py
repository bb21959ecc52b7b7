"""Issue 29 item 2: every knob that moves memory moves the plan.

For each deployment setting: changing it to another allowed value (alone, or with the companion setting a
rule requires for that value) changes the plan's ledger, budget or verdict on at least one shipped profile,
or the registry declares why it cannot (``registry.PLAN_NEUTRAL``). The candidates come from each field's
own type (its Literal values, booleans, integers around the current value, null where allowed), so a new
setting is covered the day it is added; a value the configuration refuses is skipped.
"""

from __future__ import annotations

import json
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from glmlaunch.calibrate.store import Store
from glmlaunch.config import paths
from glmlaunch.config.profiles import list_profiles
from glmlaunch.config.registry import (
    KNOWN_PASSTHROUGH,
    MANAGED_BY_NAME,
    PLAN_NEUTRAL,
    TOOL_PLAN_EFFECT,
    TOOL_VARS,
    plan_neutral_reason,
)
from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.errors import GlmlaunchError
from glmlaunch.plan.plan import make_plan

PROFILES = tuple(sorted(p.name for p in list_profiles(environ={}) if p.builtin))
#: settings whose other values a rule only accepts together with another setting
COMPANIONS: dict[str, tuple[str, ...]] = {
    "comm.dma_wire_mode": ("comm.allow_compressed_wire=true",),
    "dcp_policy.topk_owner_merge": ("dcp_policy.query_split=false",),
    "comm.oneshot_tp2_remote_push": ("parallel.tp=2", "parallel.dcp=2"),
    "comm.oneshot_tp8_owner_reduce": ("parallel.tp=8", "hardware.gpu_count=8", "parallel.gpus=null"),
}
#: values the field's type cannot suggest (sizes, paths, lists)
EXTRA: dict[str, list[Any]] = {
    "model.path": ["zai-org/GLM-5.2-FP8", "willfalco/GLM-5.2-EXL3-TR3-3.25bpw"],
    "model.weights_per_rank": ["80GiB"],
    "memory.kv_cache_memory_bytes": ["20GiB"],
    "memory.min_margin": ["4GiB"],
    "memory.min_runtime_margin": ["4GiB"],
    "hardware.memory_per_gpu": ["80GiB"],
    "comm.dma_min_bytes": ["off", "32MB"],
    "comm.oneshot_allreduce_max_size": ["256KB"],
    "comm.oneshot_fused_max_size": ["256KB"],
    "comm.nccl.buffsize": ["1MiB", "8MiB"],
    "cudagraph.capture_sizes": [[4, 8, 16, 32, 48, 64]],
    "hardware.gpu_model": ["NVIDIA H200"],
}


def _flat(ann: Any) -> list[Any]:
    origin = typing.get_origin(ann)
    if origin in (typing.Union, types.UnionType):
        return [a for x in typing.get_args(ann) for a in _flat(x)]
    if origin is typing.Annotated:
        return _flat(typing.get_args(ann)[0])
    return [ann]


def _annotation(key: str) -> Any:
    model: type[BaseModel] | None = DeploymentConfig
    ann: Any = None
    for part in key.split("."):
        if model is None or part not in model.model_fields:
            return None
        ann = model.model_fields[part].annotation
        model = next((a for a in _flat(ann) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return ann


def candidates(key: str, value: Any) -> list[Any]:
    out: list[Any] = list(EXTRA.get(key, []))
    for a in _flat(_annotation(key)):
        if typing.get_origin(a) is typing.Literal:
            out += list(typing.get_args(a))
        elif a is bool:
            out += [True, False]
        elif a is int:
            if isinstance(value, int) and not isinstance(value, bool):
                out += [value * 2, value + 1, max(1, value // 2), value - 1]
            out += [0, 1, 2, 4, 8, 16, 64, 512, 1024, 65536, 524288]
        elif a is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out += [round(value - 0.01, 4), round(value + 0.01, 4)]
        elif a is type(None):
            out.append(None)
    seen: set[str] = set()
    unique = []
    for c in out:
        k = json.dumps(c, sort_keys=True)
        if c != value and k not in seen:
            seen.add(k)
            unique.append(c)
    return unique


def _set(key: str, value: Any) -> str:
    return f"{key}={value if isinstance(value, str) else json.dumps(value)}"


@cache
def _store() -> Store:
    import tempfile

    return Store(Path(tempfile.mkdtemp(prefix="glmlaunch-knobs-")))


def signature(cfg: DeploymentConfig) -> tuple[Any, ...]:
    """What the plan of ``cfg`` says about memory: every entry, the latent and runtime ones, the budget
    and the verdict (with the rig defaults, as `plan` gives them on a machine with no records)."""
    plan = make_plan(cfg, store=_store())
    led = plan.ledger
    return (
        tuple((e.name, e.requested_bytes, e.device_bytes, e.count) for e in led.ranks[0].entries),
        len(led.ranks),
        tuple((e.name, e.requested_bytes) for e in led.latent),
        tuple((t.entry.name, t.entry.requested_bytes) for t in led.runtime.transients),
        repr(led.load_time),
        repr(plan.budget),
        (plan.verdict.status, plan.verdict.ok),
    )


@cache
def _resolved(profile: str, sets: tuple[str, ...]) -> DeploymentConfig | None:
    try:
        return resolve_config(profile, list(sets), environ={}).config
    except GlmlaunchError:
        return None


def moves(key: str) -> tuple[str, Any] | None:
    """(profile, value) of the first change of ``key`` that moves a shipped profile's plan, or None."""
    companions = COMPANIONS.get(key, ())
    for profile in PROFILES:
        for extra in ((), companions) if companions else ((),):
            base_cfg = _resolved(profile, extra)
            if base_cfg is None:
                continue
            flat = dict(paths.flatten(base_cfg.model_dump(mode="json")))
            if key not in flat:
                continue
            base = signature(base_cfg)
            for value in candidates(key, flat[key]):
                cfg = _resolved(profile, (*extra, _set(key, value)))
                if cfg is not None and signature(cfg) != base:
                    return profile, value
    return None


def _settings() -> list[str]:
    keys: set[str] = set()
    for profile in PROFILES:
        cfg = _resolved(profile, ())
        assert cfg is not None, profile
        keys |= {k for k, _ in paths.flatten(cfg.model_dump(mode="json"))}
    return sorted(keys)


SETTINGS = _settings()
MOVING = [k for k in SETTINGS if plan_neutral_reason(k) is None]


@pytest.mark.parametrize("key", MOVING)
def test_every_undeclared_setting_moves_the_plan(key: str) -> None:
    assert moves(key) is not None, (
        f"{key}: no allowed value moves the plan of any shipped profile; make a ledger term depend on it "
        "or declare why it cannot in glmlaunch/config/registry.py PLAN_NEUTRAL"
    )


#: declared sections whose members are facts or names, not one knob each (not changed one by one)
_SECTIONS_NOT_CHANGED = ("model.geometry.", "env.")
DECLARED = [
    k for k in SETTINGS if plan_neutral_reason(k) is not None and not k.startswith(_SECTIONS_NOT_CHANGED)
]


@pytest.mark.parametrize("key", DECLARED)
def test_a_declared_setting_does_not_move_the_plan(key: str) -> None:
    moved = moves(key)
    assert moved is None, f"{key} is declared plan-neutral ({plan_neutral_reason(key)}) but moves {moved}"


def test_the_declarations_name_real_settings_with_a_reason() -> None:
    for key, why in PLAN_NEUTRAL.items():
        assert why.strip(), key
        if key.endswith("."):
            assert any(k.startswith(key) for k in SETTINGS), f"{key} covers no setting"
        else:
            assert key in SETTINGS, f"{key} is not a setting of any shipped profile"


def test_every_passthrough_name_of_a_profile_is_declared() -> None:
    for key in SETTINGS:
        if key.startswith("env."):
            name = key.removeprefix("env.")
            assert name in MANAGED_BY_NAME or name in KNOWN_PASSTHROUGH, name


def test_the_knobs_that_used_to_stand_still_move_it() -> None:
    # the misses issue 29 names: the CKV prefetch depth and indexer shards; and the workspace MiB, which
    # is the prefetch ring's budget (a budget below the ring's depth-1 size drops the lookahead)
    for key in (
        "dcp_policy.ckv_prefetch_depth",
        "dcp_policy.indexer_shards",
        "dcp_policy.ckv_prefetch_workspace_mib",
    ):
        assert plan_neutral_reason(key) is None and moves(key) is not None, key


def test_every_tool_variable_says_what_it_does_to_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(TOOL_PLAN_EFFECT) == set(TOOL_VARS)
    # the one that moves it: another rig-defaults file
    from glmlaunch.calibrate.rigdefaults import load_document

    cfg = _resolved("turnkey", ())
    assert cfg is not None
    base = signature(cfg)
    doc = load_document()
    doc["terms"]["p"]["coefficients"]["const"] += 256 * 1024 * 1024
    path = Path(_store().root) / "rig-defaults.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    monkeypatch.setenv("GLMLAUNCH_RIG_DEFAULTS", str(path))
    assert signature(cfg) != base
