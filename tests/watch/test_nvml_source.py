"""Live NVML behind the watch's source interface (hardware.probe.NvmlMemorySource): on a GPU machine it
reads every GPU; without a driver it is the documented "no GPU" error (exit 8), with a watch-specific hint."""

from __future__ import annotations

import pytest
from conftest import run_cli

from glmlaunch.errors import ExitCode, NoGpuError
from glmlaunch.hardware.probe import NvmlMemorySource


def _have_nvml() -> bool:
    try:
        NvmlMemorySource().close()
    except NoGpuError:
        return False
    return True


HAVE_NVML = _have_nvml()


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_NVML, reason="needs an NVIDIA driver")
def test_live_samples_are_nvml_memory_in_bus_order() -> None:
    source = NvmlMemorySource()
    try:
        devices = source.devices
        assert devices and [d.index for d in devices] == list(range(len(devices)))
        first, second = source.read(), source.read()
        assert second.t >= first.t
        for d, m in zip(devices, second.devices, strict=True):
            assert d.uuid.startswith("GPU-")
            assert m.used_bytes + m.free_bytes == d.usable_bytes
    finally:
        source.close()


@pytest.mark.skipif(HAVE_NVML, reason="this machine has a working NVIDIA driver")
def test_no_driver_is_exit_8_with_the_replay_as_the_way_out(clean_env: dict[str, str]) -> None:
    done = run_cli("watch", "-p", "turnkey", "--samples", "1", env=clean_env)
    assert done.returncode == ExitCode.NO_GPU == 8
    line = done.stderr.splitlines()[-1]
    assert line.startswith("error: no NVIDIA driver") and "--replay" in line and "--inventory" not in line
