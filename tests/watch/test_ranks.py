"""Ranks map to GPUs by UUID through the deployment's CUDA_VISIBLE_DEVICES, as CUDA reads it (recorded
inventories: the captured 2x H200 and the constructed 4x RTX PRO 6000 rig)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from glmlaunch.errors import ConfigError
from glmlaunch.hardware.inventory import load_inventory
from glmlaunch.hardware.memory import Device
from glmlaunch.watch.ranks import map_ranks


def devices(name: str, *, nvml_order: list[int] | None = None) -> list[Device]:
    """The inventory's GPUs as the NVML source names them, optionally listed in another NVML order."""
    inv = load_inventory(FIXTURES / "inventories" / name)
    out = [
        Device(
            index=g.index,
            nvml_index=g.nvml_index,
            uuid=g.uuid or "",
            pci_bus_id=g.pci_bus_id,
            name=g.name,
            total_bytes=g.memory_total or 0,
            reserved_bytes=g.memory_reserved or 0,
        )
        for g in inv.gpus
    ]
    return [out[i] for i in nvml_order] if nvml_order else out


def test_a_reordered_list_puts_rank_0_on_the_third_gpu_of_the_bus() -> None:
    devs = devices("rtxpro6000x4.json")
    ranks = map_ranks(devs, "2,1,0,3", 4)
    assert [r.device.uuid for r in ranks] == [devs[i].uuid for i in (2, 1, 0, 3)]
    assert [r.device.index for r in ranks] == [2, 1, 0, 3]


def test_the_source_order_does_not_matter_only_the_bus_order() -> None:
    # NVML may list the GPUs in another order than the PCI bus: the integers still mean bus positions
    devs = devices("rtxpro6000x4.json", nvml_order=[3, 1, 2, 0])
    ranks = map_ranks(devs, "2,1,0,3", 4)
    assert [r.device.index for r in ranks] == [2, 1, 0, 3]
    assert [devs[r.position].index for r in ranks] == [2, 1, 0, 3]


def test_uuids_and_unique_prefixes_name_gpus_whatever_their_index() -> None:
    devs = devices("h200x2.json")
    second, first = devs[1].uuid, devs[0].uuid
    assert [r.device.uuid for r in map_ranks(devs, f"{second},{first}", 2)] == [second, first]
    assert [r.device.uuid for r in map_ranks(devs, second[:12], 1)] == [second]


def test_unset_means_every_gpu_in_bus_order_and_tp_takes_the_first() -> None:
    devs = devices("rtxpro6000x4.json")
    assert [r.device.index for r in map_ranks(devs, None, 2)] == [0, 1]


def test_too_few_gpus_for_the_plan_is_a_configuration_error() -> None:
    devs = devices("h200x2.json")
    with pytest.raises(ConfigError) as err:
        map_ranks(devs, "1,7", 2)
    assert "--gpus" in err.value.one_line() and "'7' names no GPU" in err.value.one_line()
