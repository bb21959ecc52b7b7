"""Every check against the recorded inventories: real H200 captures, the constructed 4x RTX PRO 6000 rig
and its edited failure copies. Configurations come from the shipped profiles through resolve_config."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.errors import ExitCode, HardwareError, MarginError, StrictWarningsError
from glmlaunch.hardware.checks import (
    CheckReport,
    Purpose,
    memory_inputs,
    select_group,
    version_at_least,
)
from glmlaunch.hardware.inventory import Inventory, PcieLink, load_inventory
from glmlaunch.ledger import build_ledger
from glmlaunch.ledger.budget import compute_budget
from glmlaunch.ledger.inputs import UNCALIBRATED
from glmlaunch.ledger.verdict import judge
from glmlaunch.plan import check as plan_check

INV = Path(__file__).resolve().parents[1] / "fixtures" / "inventories"
# A KV budget the 95 GiB card can hold and a GMU whose margin holds the runtime demand on the built-in
# default figures (no calibration here), so that the rig's own checks decide the outcome.
FITS = ("scheduler.max_model_len=131072", "memory.gpu_memory_utilization=0.945")


def inv(name: str) -> Inventory:
    return load_inventory(INV / f"{name}.json")


def config(profile: str = "turnkey", overrides: Sequence[str] = FITS) -> DeploymentConfig:
    return resolve_config(profile, overrides, environ={}).config


def run_checks(c: DeploymentConfig, i: Inventory, **kw: object) -> CheckReport:
    """Every check and the memory verdict of the plan on the built-in default figures (no calibration)."""
    return plan_check.run_checks(c, i, inputs=UNCALIBRATED, **kw)  # type: ignore[arg-type]


def report(
    inventory: str | Inventory,
    overrides: Sequence[str] = FITS,
    purpose: Purpose = "serve",
    profile: str = "turnkey",
) -> CheckReport:
    i = inv(inventory) if isinstance(inventory, str) else inventory
    return run_checks(config(profile, overrides), i, purpose=purpose, profile=profile)


def statuses(r: CheckReport) -> dict[str, str]:
    return {x.name: x.status for x in r.results}


ALL_CHECKS = [
    "gpu_count",
    "gpu_probe",
    "gpu_model",
    "compute_capability",
    "driver",
    "memory_total",
    "free_memory",
    "p2p",
    "topology",
    "pcie_link",
    "bar1",
    "memory_verdict",
]


def test_the_target_rig_passes_every_check() -> None:
    r = report("rtxpro6000x4")
    assert [x.name for x in r.results] == ALL_CHECKS
    assert set(statuses(r).values()) == {"OK"}, [(x.name, x.message) for x in r.results if x.status != "OK"]
    assert r.gpus == (0, 1, 2, 3)
    assert r.exit_code() == ExitCode.OK and r.exit_code(strict=True) == ExitCode.OK
    r.raise_for_status(strict=True)


@pytest.mark.parametrize(
    ("fixture", "check", "status", "words", "code"),
    [
        (
            "rtxpro6000x4-missing-gpu",
            "gpu_count",
            "FAIL",
            ["tp=4 needs 4 GPUs", "3 visible"],
            ExitCode.HARDWARE,
        ),
        ("rtxpro6000x4-gen3-x8", "pcie_link", "WARN", ["GPU 2 runs x8 of x16", "Gen3 of Gen5"], ExitCode.OK),
        (
            "rtxpro6000x4-cotenant-40g",
            "free_memory",
            "FAIL",
            ["pid 48211 python3 40.50 GiB"],
            ExitCode.HARDWARE,
        ),
        ("rtxpro6000x4-no-p2p", "p2p", "FAIL", ["0<->3 topology_not_supported"], ExitCode.HARDWARE),
        (
            "rtxpro6000x4-old-driver",
            "driver",
            "FAIL",
            ["575.57.08 < required 590.48.01", "12.9 < required 13.2"],
            3,
        ),
        ("rtxpro6000x4-small-bar1", "bar1", "WARN", ["BAR1 256.00 MiB", "Resizable BAR"], ExitCode.OK),
        ("rtxpro6000x4-nvml-error", "gpu_probe", "FAIL", ["GPU 3", "GPU is lost"], ExitCode.HARDWARE),
    ],
)
def test_each_failure_copy_trips_its_check(
    fixture: str, check: str, status: str, words: list[str], code: int
) -> None:
    r = report(fixture)
    result = r.by_name(check)
    assert result.status == status, result.message
    for w in words:
        assert w in result.message, (w, result.message)
    assert r.exit_code() == code
    # The copy changes one thing: checks that cannot see it stay OK.
    base = statuses(report("rtxpro6000x4"))
    changed = {k for k, v in statuses(r).items() if v != base[k]}
    assert check in changed
    if status == "WARN":
        assert r.exit_code(strict=True) == ExitCode.WARNINGS
        with pytest.raises(StrictWarningsError) as err:
            r.raise_for_status(strict=True)
        assert check in err.value.one_line()


def test_cotenant_also_fails_the_start_gate_in_the_memory_verdict() -> None:
    r = report("rtxpro6000x4-cotenant-40g")
    verdict = r.by_name("memory_verdict")
    assert verdict.status == "FAIL" and verdict.fail_code == ExitCode.MARGIN
    assert "start gate" in verdict.message and "GPU 1" in verdict.message
    # A hardware failure outranks the margin: exit 3, not 4.
    assert r.exit_code() == ExitCode.HARDWARE
    with pytest.raises(HardwareError) as err:
        r.raise_for_status()
    assert err.value.one_line().startswith("hardware check failed: free_memory: GPU 1 has")


def test_memory_verdict_uses_the_ledger_budget_with_the_real_memory() -> None:
    c = config()
    i = inv("rtxpro6000x4-cotenant-40g")
    inputs = memory_inputs(select_group(c, i))
    assert inputs is not None
    assert inputs.gpu == 1
    assert inputs.total_bytes == i.gpus[1].usable_total
    assert inputs.used_by_others == i.gpus[1].memory_used
    ledger = build_ledger(c)
    expected = compute_budget(c, ledger, total_bytes=inputs.total_bytes, used_by_others=inputs.used_by_others)
    got = run_checks(c, i).by_name("memory_verdict")
    assert got.details["terms"] == expected.terms
    assert got.details["verdict"] == judge(c, ledger, expected).to_json()
    assert got.details["verdict"]["status"] == expected.verdict
    # The start gate of free_memory includes the ledger's pre-snapshot allocations.
    free = run_checks(c, i).by_name("free_memory")
    assert free.details["pre_snapshot_bytes"] == expected.u_pre


def test_insufficient_margin_alone_exits_4() -> None:
    r = report("rtxpro6000x4", [*FITS, "memory.min_margin=60GiB"])
    verdict = r.by_name("memory_verdict")
    assert verdict.status == "FAIL" and "below" in verdict.message
    assert [x.name for x in r.results if x.status == "FAIL"] == ["memory_verdict"]
    assert r.exit_code() == ExitCode.MARGIN
    with pytest.raises(MarginError):
        r.raise_for_status()


def test_h200_capture_cannot_serve_but_may_preflight() -> None:
    serve = report("h200x1", [*FITS, "parallel.tp=1", "parallel.dcp=1"], purpose="serve")
    cc = serve.by_name("compute_capability")
    assert cc.status == "FAIL" and "sm90" in cc.message and "sm120/sm121" in cc.message
    pre = report("h200x1", [*FITS, "parallel.tp=1", "parallel.dcp=1"], purpose="preflight")
    cc = pre.by_name("compute_capability")
    assert cc.status == "WARN" and "cannot prove" in cc.message
    s = statuses(pre)
    assert s["p2p"] == "SKIP" and s["topology"] == "SKIP"
    assert s["gpu_model"] == "WARN" and s["memory_total"] == "WARN"
    # The captured driver (580.159.04, CUDA 13.0) is below the turnkey's minimum.
    assert pre.by_name("driver").status == "FAIL"
    assert s["free_memory"] == "OK" and s["pcie_link"] == "OK" and s["bar1"] == "OK"


def test_h200x2_capture_pair_checks() -> None:
    r = report("h200x2", [*FITS, "parallel.tp=2", "parallel.dcp=1"], purpose="preflight")
    assert r.gpus == (0, 1)
    assert r.by_name("p2p").status == "OK"
    topo = r.by_name("topology")
    assert topo.status == "OK" and topo.details["pairs"] == {"0-1": "PHB"}
    assert r.by_name("gpu_model").details["found_sms"] == [132]


def test_real_cotenant_capture_names_the_holder() -> None:
    r = report("h200x2-cotenant", [*FITS, "parallel.tp=2", "parallel.dcp=1"], purpose="preflight")
    free = r.by_name("free_memory")
    assert free.status == "FAIL"
    assert "GPU 1" in free.message and "python3" in free.message and "pid 633" in free.message
    # GPU 0 is untouched: the tight GPU of the group is GPU 1.
    assert r.by_name("memory_verdict").details["gpu"] == 1


def test_configured_gpu_list_is_honoured() -> None:
    r = report("rtxpro6000x4", [*FITS, "hardware.gpu_count=8", "parallel.tp=4", "parallel.gpus=0,1,2,5"])
    count = r.by_name("gpu_count")
    assert count.status == "FAIL" and "GPU 5" in count.message and "host has 4" in count.message
    r = report("rtxpro6000x4-cotenant-40g", [*FITS, "parallel.tp=2", "parallel.dcp=2", "parallel.gpus=2,3"])
    assert r.gpus == (2, 3)
    assert r.by_name("free_memory").status == "OK"  # the co-tenant is on GPU 1, outside the group


def test_hidden_gpu_names_cuda_visible_devices() -> None:
    base = inv("rtxpro6000x4")
    hidden = base.model_copy(update={"gpus": base.gpus[:2], "cuda_visible_devices": "0,1"})
    r = report(hidden, [*FITS, "parallel.tp=2", "parallel.dcp=2", "parallel.gpus=2,3"])
    count = r.by_name("gpu_count")
    assert count.status == "FAIL" and "CUDA_VISIBLE_DEVICES=0,1" in count.message


def test_explicit_ckv_prefetch_over_sys_fails() -> None:
    r = report("rtxpro6000x4-sys-topology", [*FITS, "dcp_policy.ckv_prefetch_depth=2"])
    topo = r.by_name("topology")
    assert topo.status == "FAIL" and "ckv_prefetch_depth=2" in topo.message


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        (("dcp_policy.ckv_prefetch_depth=null",), "dcp_policy.ckv_prefetch_depth is unset"),
        ((), "dcp_policy.ckv_prefetch_depth is 0"),  # the turnkey's own setting
        (("dcp_policy.ckv_prefetch_depth=0",), "dcp_policy.ckv_prefetch_depth is 0"),
        (("parallel.dcp=1", "dcp_policy.ckv_prefetch_depth=2"), "DCP 1 runs no CKV prefetch"),
    ],
)
def test_sys_topology_with_prefetch_off_is_ok_with_a_note(overrides: tuple[str, ...], why: str) -> None:
    """The advice (keep CKV prefetch off over SYS) is already followed: no warning telling to follow it."""
    r = report("rtxpro6000x4-sys-topology", [*FITS, *overrides])
    topo = r.by_name("topology")
    assert topo.status == "OK", topo.message
    assert "SYS" in topo.message and why in topo.message and "nothing to change" in topo.message
    assert "keep dcp_policy.ckv_prefetch_depth unset or 0" not in topo.message
    assert "topology" not in r.warned()


def test_idle_link_downtraining_is_not_a_warning() -> None:
    base = inv("rtxpro6000x4")
    slow = PcieLink(
        current_generation=1, max_generation=5, gpu_max_generation=5, current_width=16, max_width=16
    )

    def with_gpu0(pstate: int) -> Inventory:
        g0 = base.gpus[0].model_copy(update={"pcie": slow, "performance_state": pstate})
        return base.model_copy(update={"gpus": (g0, *base.gpus[1:])})

    idle = report(with_gpu0(8)).by_name("pcie_link")
    assert idle.status == "OK" and "idle" in idle.message
    busy = report(with_gpu0(0)).by_name("pcie_link")
    assert busy.status == "WARN" and "Gen1 of Gen5" in busy.message


def test_slot_that_cannot_reach_the_profiles_link_warns() -> None:
    base = inv("rtxpro6000x4")
    gen4 = PcieLink(
        current_generation=4, max_generation=4, gpu_max_generation=5, current_width=16, max_width=16
    )
    g3 = base.gpus[3].model_copy(update={"pcie": gen4})
    r = report(base.model_copy(update={"gpus": (*base.gpus[:3], g3)}))
    link = r.by_name("pcie_link")
    assert link.status == "WARN" and "GPU 3 tops out at Gen4 x16" in link.message


def test_driver_minimum_unset_is_skipped() -> None:
    r = report("rtxpro6000x4-old-driver", [*FITS, "hardware.min_driver=null", "hardware.min_cuda=null"])
    assert r.by_name("driver").status == "SKIP"


def test_version_comparison() -> None:
    assert version_at_least("590.48.01", "590.48.01")
    assert version_at_least("590.100.1", "590.48.01")
    assert not version_at_least("580.159.04", "590.48.01")
    assert version_at_least("13.2", "13.2") and not version_at_least("13.0", "13.2")
    assert version_at_least("13.10", "13.2")


def test_report_json_is_data_with_a_summary() -> None:
    r = report("rtxpro6000x4-gen3-x8")
    doc = r.to_json(strict=True)
    assert next(iter(doc)) == "schema_version" and doc["schema_version"] == 1
    assert doc["verdict"] == r.by_name("memory_verdict").details["verdict"]
    assert doc["summary"]["exit_code"] == ExitCode.WARNINGS
    assert doc["summary"]["WARN"] == 1 and doc["summary"]["FAIL"] == 0
    assert [x["name"] for x in doc["results"]] == ALL_CHECKS
    link = next(x for x in doc["results"] if x["name"] == "pcie_link")
    assert link["details"]["links"]["2"]["current_width"] == 8


def test_several_hardware_failures_are_named_in_one_line() -> None:
    r = report("rtxpro6000x4-nvml-error")
    with pytest.raises(HardwareError) as err:
        r.raise_for_status()
    line = err.value.one_line()
    assert line.startswith(
        "2 hardware checks failed (gpu_probe, p2p); first: gpu_probe: NVML cannot read GPU 3"
    )
    assert "\n" not in line
