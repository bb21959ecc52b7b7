"""Test isolation: no GLMLAUNCH_/VLLM_/NCCL_ variables leak in, HOME and caches point at tmp dirs."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from clirunner import CliResult as CliResult
from clirunner import glmlaunch_exe as glmlaunch_exe
from clirunner import run_cli as run_cli
from clirunner import run_cli_process as run_cli_process

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: The r12-era production turnkey the seed's review priced (docs/memory-model.md §5) and the recorded
#: preflight runs in bench/preflight/ ran: the shipped turnkey (upstream's r28 exl3-tr3) with the r12
#: chain's V1 runner, DCP A2A cap 64, no LMCache (expandable segments on), the DCP policy unset and the
#: capture sizes glmlaunch's turnkey had then (multiples of 6 up to 48).
SEED_TURNKEY = (
    "stack=sparkinfer-r14",
    "runner=v1",
    "comm.dcp_a2a_max_tokens=64",
    "dcp_policy.query_split=null",
    "dcp_policy.topk_owner_merge=null",
    "lmcache=false",
    "memory.allocator.expandable_segments=true",
    "cudagraph.capture_rule.step=6",
    "cudagraph.capture_rule.max=48",
    "cudagraph.max_capture_size=null",
)
#: the DCP policy left unset: vLLM's defaults (query split and owner merge off)
UNSET_DCP_POLICY = ("dcp_policy.query_split=null", "dcp_policy.topk_owner_merge=null")
_PREFIXES = ("GLMLAUNCH_", "VLLM_", "NCCL_", "SPARKINFER_", "B12X_", "CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA")


def _clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_PREFIXES)}
    env.update(
        {
            "NO_COLOR": "1",
            "COLUMNS": "200",
            "HOME": str(tmp / "home"),
            "XDG_CACHE_HOME": str(tmp / "cache"),
            "GLMLAUNCH_CACHE_DIR": str(tmp / "glmlaunch-cache"),
            "PYTHONDONTWRITEBYTECODE": "1",
            # a plan of a checkpoint the weights table does not know asks the hub for its file metadata:
            # no test reaches a hub but its own on 127.0.0.1 (tests/fetch/fetch_hub.py), which unsets this
            "HF_HUB_OFFLINE": "1",
        }
    )
    return env


@pytest.fixture(autouse=True)
def _isolate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith(_PREFIXES):
            monkeypatch.delenv(name, raising=False)
    (tmp_path / "home").mkdir(exist_ok=True)
    for key, value in _clean_env(tmp_path).items():
        if key.startswith(("NO_COLOR", "COLUMNS", "HOME", "XDG_", "GLMLAUNCH_CACHE")):
            monkeypatch.setenv(key, value)
    yield


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """An environment for subprocesses: like the test process's, minus any deployment variables."""
    return _clean_env(tmp_path)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cli-subprocess",
        action="store_true",
        help="run every run_cli call as a new glmlaunch process (what the in-process runner stands for)",
    )


def pytest_configure(config: pytest.Config) -> None:
    from clirunner import use_subprocess

    use_subprocess(bool(config.getoption("--cli-subprocess", default=False)))


@functools.cache
def script_check(script: str) -> subprocess.CompletedProcess[str]:
    """``python scripts/SCRIPT --check`` from the repository root, run once per session: the test of the file
    it generates and the test of its documented usage both assert on this run (a derivation takes seconds)."""
    return subprocess.run(
        [sys.executable, f"scripts/{script}", "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )


def assert_script_current(script: str) -> None:
    """A generated file is what its script derives: ``scripts/SCRIPT --check`` exits 0."""
    done = script_check(script)
    assert done.returncode == 0, done.stderr
