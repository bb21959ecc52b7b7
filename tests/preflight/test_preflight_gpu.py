"""The preflight on real GPUs (skipped without one): replay, and sparkinfer where its source is importable.

The gate profile is scaled to the machine (TP = DCP = min(2, GPUs)) with 8 GiB of weights so the budget
leaves room for a KV cache on any large card; the full runs with the shipped weights are in
bench/PREFLIGHT.md.
"""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from glmlaunch.config.resolve import resolve_config
from glmlaunch.preflight.api import run_preflight
from glmlaunch.preflight.report import build_report


def _gpus() -> int:
    try:
        from glmlaunch.hardware.probe import probe

        return len(probe().gpus)
    except Exception:
        return 0


GPUS = _gpus()


def _config(n: int) -> object:
    return resolve_config(
        "gate",
        [
            f"parallel.tp={n}",
            f"parallel.dcp={n}",
            "model.weights_per_rank=8GiB",
            "scheduler.max_model_len=65536",
        ],
        {},
    ).config


@pytest.mark.gpu
@pytest.mark.skipif(GPUS == 0, reason="needs an NVIDIA GPU")
@pytest.mark.parametrize(
    "backend",
    [
        "replay",
        pytest.param(
            "sparkinfer",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("sparkinfer") is None or shutil.which("nvcc") is None,
                reason="needs sparkinfer on the import path and nvcc",
            ),
        ),
    ],
)
def test_preflight_measures_and_leaves_nothing_behind(backend: str) -> None:
    pytest.importorskip("torch")
    n = min(2, GPUS)
    run = run_preflight(_config(n), backend=backend, device="cuda")  # type: ignore[arg-type]
    report = build_report(run)
    assert run.outcome.root_cause is None, report.root_cause_detail
    assert run.outcome.ok and not run.leaks
    for rank in report.ranks:
        assert rank.context_bytes is not None and rank.context_bytes > 0
        assert rank.nccl_bytes is not None and rank.nccl_bytes > 0
        assert rank.f0_bytes is not None and rank.f0_bytes < (rank.total_bytes or 0)
    if backend == "replay":
        assert all(c.within is not False for c in report.comparisons), [
            (c.label, c.measured_device, c.predicted_device) for c in report.comparisons
        ]
