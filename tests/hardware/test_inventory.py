"""The inventory files: real captures, the constructed rig and its edited copies; save/load; errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import assert_script_current

from glmlaunch.errors import ConfigError, ExitCode
from glmlaunch.hardware.inventory import Inventory, cpu_list, load_inventory, parse_inventory, save_inventory

INV = Path(__file__).resolve().parents[1] / "fixtures" / "inventories"
REPO = Path(__file__).resolve().parents[2]
CAPTURED = ["h200x1.json", "h200x1-cotenant.json", "h200x2.json", "h200x2-cotenant.json"]
EDITED = sorted(p.name for p in INV.glob("rtxpro6000x4-*.json"))


def test_every_fixture_loads_and_says_where_it_came_from() -> None:
    for name in CAPTURED:
        inv = load_inventory(INV / name)
        assert inv.provenance == "captured", name
        assert inv.derived_from is None
        assert inv.source.startswith("glmlaunch ")
    base = load_inventory(INV / "rtxpro6000x4.json")
    assert base.provenance == "constructed"
    assert "not captured" in base.notes
    assert len(EDITED) >= 5
    for name in EDITED:
        inv = load_inventory(INV / name)
        assert inv.provenance == "edited", name
        assert inv.derived_from == "rtxpro6000x4.json"
        assert inv.notes


def test_captured_h200_memory_total_matches_what_cuda_reported_on_the_same_machine() -> None:
    # The capture run also printed torch.cuda.mem_get_info(); NVML total - reserved must equal CUDA's total,
    # which is what vLLM's budget (and hardware.memory_per_gpu) means by T.
    for name in ("h200x1", "h200x2"):
        log = (INV / "record" / f"{name}-run.log").read_text()
        cuda_totals = [int(m) for m in re.findall(r"^cuda:\d+ .* total=(\d+) ", log, re.M)]
        inv = load_inventory(INV / f"{name}.json")
        assert len(cuda_totals) == len(inv.gpus)
        assert [g.usable_total for g in inv.gpus] == cuda_totals
        sms = [int(m) for m in re.findall(r"^cuda:\d+ .* sms=(\d+) ", log, re.M)]
        assert [g.sm_count for g in inv.gpus] == sms
        assert all(g.multiprocessor_count is None for g in inv.gpus)  # NVML: "Not Supported" on whole GPUs


def test_captured_cotenant_names_the_process_and_its_bytes() -> None:
    inv = load_inventory(INV / "h200x2-cotenant.json")
    holder = inv.gpus[1].processes
    assert len(holder) == 1 and holder[0].name == "python3"
    assert holder[0].used_bytes is not None and holder[0].used_bytes >= 40 * 2**30
    assert inv.gpus[0].processes == ()


def test_constructed_rig_matches_the_public_facts() -> None:
    inv = load_inventory(INV / "rtxpro6000x4.json")
    assert len(inv.gpus) == 4 and inv.host_gpu_count == 4
    for g in inv.gpus:
        assert g.compute_capability == "12.0"
        assert g.sm_count == 188
        assert g.pcie.max_generation == 5 and g.pcie.max_width == 16
        assert g.usable_total is not None and abs(g.usable_total / 2**30 - 95.01) < 0.01
    assert len(inv.pairs) == 6


def test_generated_fixtures_are_up_to_date() -> None:
    assert_script_current("make_inventory_fixtures.py")


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    for name in [*CAPTURED, "rtxpro6000x4.json", *EDITED]:
        inv = load_inventory(INV / name)
        out = save_inventory(inv, tmp_path / "sub" / name)
        assert load_inventory(out) == inv
    assert not list((tmp_path / "sub").glob(".*.tmp"))  # the atomic write leaves no temp file


def test_pair_lookup_is_order_free() -> None:
    inv = load_inventory(INV / "h200x2.json")
    assert inv.pair(1, 0) is inv.pair(0, 1)
    assert inv.pair(0, 1) is not None and inv.pair(0, 1).topology_label == "PHB"  # type: ignore[union-attr]
    assert inv.pair(0, 2) is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{not json", "not a JSON inventory"),
        (json.dumps({"schema_version": 99}), "schema version 99"),
        (json.dumps({"schema_version": 1, "provenance": "guessed"}), "provenance"),
    ],
)
def test_bad_inventory_is_a_config_error(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_inventory(text, source="x.json")
    assert err.value.exit_code == ExitCode.CONFIG
    assert needle in err.value.one_line()
    assert "x.json" in err.value.one_line()


def test_missing_inventory_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_inventory(tmp_path / "absent.json")
    assert "cannot read the inventory file" in err.value.one_line()


def test_inventory_is_immutable() -> None:
    inv = load_inventory(INV / "h200x1.json")
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error type is an implementation detail
        inv.gpus[0].memory_free = 0  # type: ignore[misc]
    assert isinstance(inv, Inventory)


def test_cpu_list() -> None:
    assert cpu_list([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert cpu_list([]) == ""
    assert cpu_list([5]) == "5"
