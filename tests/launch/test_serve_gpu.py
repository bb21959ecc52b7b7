"""serve's preflight stage and the pre-exec baseline confirmation on real GPUs (skipped without one).

One GPU, the replay backend, the gate profile shrunk to TP1 with 8 GiB of weights so it fits any
large card: the preflight's workers must be gone and the free memory back before vLLM may start; a
co-tenant that grabs memory after the preflight must stop the launch with exit 5.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from glmlaunch.config.environment import compose
from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.units import format_size
from glmlaunch.errors import ExitCode, PreflightError
from glmlaunch.launch.serve import confirm_baseline, preflight_on_gpus


def _nvml_works() -> bool:
    try:
        from glmlaunch.hardware.probe import probe

        return bool(probe().gpus)
    except Exception:
        return False


HAVE_GPU = _nvml_works()


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs an NVIDIA GPU")
def test_preflight_then_baseline_then_cotenant_refusal() -> None:
    pytest.importorskip("torch")
    from glmlaunch.hardware.probe import probe

    total = probe().gpus[0].usable_total
    assert total is not None
    config = resolve_config(
        "gate",
        [
            "parallel.tp=1", "parallel.dcp=1", "comm.pcie_allreduce=false",
            "scheduler.max_model_len=65536", "model.weights_per_rank=8GiB",
            f"hardware.memory_per_gpu={total}",
        ],
        {},
    ).config
    env = dict(compose(config, os.environ).full)
    preflight = preflight_on_gpus(config, "replay")
    assert preflight.error is None and preflight.status == "ok"
    run, report = preflight.data.run, preflight.data.report
    assert run is not None and report is not None
    assert run.outcome.ok and not run.leaks
    # the typed report is what a supervised boot keeps (preflight.json): strict JSON as it is
    assert json.loads(json.dumps(report.to_dict(), allow_nan=False))["verdict"] == "ok"
    assert confirm_baseline(run, env).status == "ok"

    holder = subprocess.Popen(
        [
            sys.executable, "-c",
            "import torch, time; x = torch.empty(2 * 2**30, dtype=torch.uint8, device='cuda'); "
            "torch.cuda.synchronize(); print('held', flush=True); time.sleep(300)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        refused = confirm_baseline(run, env, wait_s=2.0)
        assert refused.status == "error" and isinstance(refused.error, PreflightError)
        assert refused.error.exit_code == ExitCode.PREFLIGHT
        assert "less free than before the preflight" in refused.error.message
        assert f"new holder pid(s) [{holder.pid}]" in refused.error.message
    finally:
        holder.kill()
        holder.wait()
    assert confirm_baseline(run, env).status == "ok", format_size(total)
