"""Property tests: any YAML document, env value or --set string gives a config or a clean error."""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glmlaunch.config.resolve import resolve_config
from glmlaunch.errors import ConfigError

KEYS = [
    "scheduler.max_num_seqs",
    "parallel.dcp",
    "parallel.tp",
    "parallel.gpus",
    "memory.min_margin",
    "memory.gpu_memory_utilization",
    "comm.dma_wire_mode",
    "comm.dma_min_bytes",
    "cudagraph.capture_sizes",
    "cudagraph.capture_rule",
    "indexer.fold",
    "runner",
    "stack",
    "env",
    "vllm_args",
    "model.geometry",
    "speculative.num_speculative_tokens",
    "memory.kv_cache_dtype",
    "nonsense",
    "scheduler",
    "extends",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["off", "84KB", "i8_ring", "v1", "null", "[1,2]", "{a: 1}", "gate", "1e3", "0x10"]),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.sampled_from([*KEYS, "x"]), children, max_size=4)
    ),
    max_leaves=12,
)
documents = st.dictionaries(st.sampled_from(KEYS), values, max_size=6)


def _check(profile: str, overrides: list[str], environ: dict[str, str]) -> None:
    try:
        resolve_config(profile, overrides, environ=environ)
    except ConfigError as exc:
        line = exc.one_line()
        assert line and "\n" not in line


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=documents)
def test_random_profiles(doc: dict[str, object], tmp_path: Path) -> None:
    path = tmp_path / "random.yaml"
    path.write_text(yaml.safe_dump({"extends": "gate", **doc}, allow_unicode=True), encoding="utf-8")
    _check(str(path), [], {})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200))
def test_random_bytes_as_profile(raw: bytes, tmp_path: Path) -> None:
    path = tmp_path / "bytes.yaml"
    path.write_bytes(raw)
    _check(str(path), [], {})


@settings(max_examples=200, deadline=None)
@given(
    sets=st.lists(
        st.one_of(
            st.text(max_size=40),
            st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), st.text(max_size=20)),
        ),
        max_size=4,
    ),
    env=st.dictionaries(
        st.sampled_from(
            [
                "GLMLAUNCH_SET",
                "GLMLAUNCH_SCHEDULER__MAX_NUM_SEQS",
                "GLMLAUNCH_ENV__X",
                "GLMLAUNCH_COMM__DMA_WIRE_MODE",
                "GLMLAUNCH_PROFILE",
                "GLMLAUNCH_NOPE",
                "GLMLAUNCH_DEBUG",
            ]
        ),
        st.text(max_size=20).filter(lambda s: "\x00" not in s),
        max_size=3,
    ),
)
def test_random_overrides_and_env(sets: list[str], env: dict[str, str]) -> None:
    _check("gate", sets, env)
