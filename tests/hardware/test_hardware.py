"""The NVML edge: CUDA_VISIBLE_DEVICES parsing, the no-driver path on this machine, lazy imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from glmlaunch.errors import ExitCode, NoGpuError
from glmlaunch.hardware.inventory import load_inventory
from glmlaunch.hardware.probe import cuda_version_text, get_inventory, probe, select_visible, sysfs_bus_id

INV = Path(__file__).resolve().parents[1] / "fixtures" / "inventories"
# The UUIDs of the captured 2x H200 host, in PCI bus order.
UUIDS = [g.uuid for g in load_inventory(INV / "h200x2.json").gpus]


def _nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


HAVE_NVML = _nvml_works()


def test_unset_shows_every_gpu_in_pci_order() -> None:
    assert select_visible(None, UUIDS).indices == (0, 1)


def test_indices_keep_the_listed_order() -> None:
    sel = select_visible("1,0", UUIDS)
    assert sel.indices == (1, 0) and sel.problem is None


def test_uuid_and_unique_prefix() -> None:
    assert UUIDS[1] is not None
    assert select_visible(UUIDS[1], UUIDS).indices == (1,)
    assert select_visible(UUIDS[1][:12], UUIDS).indices == (1,)
    assert select_visible(UUIDS[1][4:12], UUIDS).indices == (1,)  # CUDA also accepts it without "GPU-"


def test_ambiguous_prefix_stops_the_list() -> None:
    sel = select_visible("GPU-", UUIDS)
    assert sel.indices == () and "matches 2 GPUs" in (sel.problem or "")


def test_first_invalid_entry_ends_the_list_like_cuda() -> None:
    sel = select_visible("0,7,1", UUIDS)
    assert sel.indices == (0,)
    assert "'7' names no GPU" in (sel.problem or "")


def test_duplicates_empty_and_mig() -> None:
    assert select_visible("0,0", UUIDS).indices == (0,)
    assert select_visible("", UUIDS).indices == ()
    assert select_visible("-1", UUIDS).indices == ()
    mig = select_visible("MIG-1234", UUIDS)
    assert mig.indices == () and "MIG" in (mig.problem or "")


def test_version_and_bus_id_formats() -> None:
    assert cuda_version_text(13020) == "13.2"
    assert cuda_version_text(12090) == "12.9"
    assert sysfs_bus_id("00000000:17:00.0") == "0000:17:00.0"
    assert sysfs_bus_id("0000000A:C1:00.0") == "000a:c1:00.0"


@pytest.mark.skipif(HAVE_NVML, reason="this machine has a working NVIDIA driver")
def test_no_driver_is_no_gpu_error_not_a_crash() -> None:
    # The real path on CI: nvidia-ml-py is installed, libnvidia-ml.so.1 is not.
    with pytest.raises(NoGpuError) as err:
        probe(environ={})
    assert err.value.exit_code == ExitCode.NO_GPU == 8
    line = err.value.one_line()
    assert "no NVIDIA driver" in line and "libnvidia-ml.so.1" in line and "--inventory" in line
    assert "\n" not in line


@pytest.mark.skipif(HAVE_NVML, reason="this machine has a working NVIDIA driver")
def test_get_inventory_probes_unless_a_file_is_named() -> None:
    with pytest.raises(NoGpuError):
        get_inventory(None, environ={})
    inv = get_inventory(None, environ={"GLMLAUNCH_INVENTORY": str(INV / "h200x1.json")})
    assert inv == load_inventory(INV / "h200x1.json")
    assert get_inventory(INV / "h200x2.json", environ={}).host_gpu_count == 2


def test_light_modules_do_not_import_pynvml_or_torch() -> None:
    code = (
        "import sys\n"
        "import glmlaunch.cli, glmlaunch.hardware.checks, glmlaunch.hardware.inventory\n"
        "import glmlaunch.hardware.commands, glmlaunch.hardware.probe\n"
        "from glmlaunch.plan.check import run_checks\n"
        "from glmlaunch.hardware.inventory import load_inventory\n"
        "from glmlaunch.config.resolve import resolve_config\n"
        f"inv = load_inventory({str(INV / 'rtxpro6000x4.json')!r})\n"
        "run_checks(resolve_config('turnkey').config, inv)\n"
        "bad = [m for m in ('pynvml', 'torch') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_only_hardware_py_imports_pynvml() -> None:
    pkg = Path(__file__).resolve().parents[2] / "glmlaunch"
    importers = sorted(
        str(p.relative_to(pkg)) for p in pkg.rglob("*.py") if "import pynvml" in p.read_text(encoding="utf-8")
    )
    assert importers == ["hardware/probe.py"]


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_NVML, reason="needs an NVIDIA driver")
def test_real_probe_reads_every_visible_gpu(tmp_path: Path) -> None:
    inv = probe()
    assert inv.provenance == "captured" and inv.gpus
    for g in inv.gpus:
        assert g.readable, g.errors
        assert g.usable_total is not None and g.memory_free is not None
    assert len(inv.pairs) == len(inv.gpus) * (len(inv.gpus) - 1) // 2


def test_one_failed_query_is_recorded_not_raised() -> None:
    import pynvml

    from glmlaunch.hardware.probe import _Errors

    errs = _Errors()

    def lost() -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    assert errs.read("bar1_total", lost) is None
    assert errs.read("cuda_cores", lambda: 24_064) == 24_064
    assert [(e.field, e.error) for e in errs.items] == [("bar1_total", "GPU is lost")]
