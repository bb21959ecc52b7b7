"""`glmlaunch hw` and `glmlaunch check` as a user runs them: real subprocesses, stdout data, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from conftest import REPO, run_cli
from test_hardware import HAVE_NVML

from glmlaunch.errors import ExitCode
from glmlaunch.hardware.inventory import Inventory, load_inventory

INV = Path(__file__).resolve().parents[1] / "fixtures" / "inventories"
FITS = ["--set", "scheduler.max_model_len=131072"]


@pytest.mark.skipif(HAVE_NVML, reason="this machine has a working NVIDIA driver")
def test_hw_without_a_driver_exits_8_with_one_line(clean_env: dict[str, str]) -> None:
    done = run_cli("hw", env=clean_env)
    assert done.returncode == ExitCode.NO_GPU == 8
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: no NVIDIA driver") and "--inventory" in lines[0]
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(HAVE_NVML, reason="this machine has a working NVIDIA driver")
def test_check_without_a_driver_exits_8(clean_env: dict[str, str]) -> None:
    done = run_cli("check", "-p", "turnkey", env=clean_env)
    assert done.returncode == 8 and done.stdout == ""


def test_hw_json_reproduces_the_saved_inventory(clean_env: dict[str, str], tmp_path: Path) -> None:
    src = INV / "h200x2-cotenant.json"
    out = tmp_path / "copy.json"
    done = run_cli("hw", "--inventory", str(src), "--json", "--save", str(out), env=clean_env)
    assert done.returncode == 0, done.stderr
    assert Inventory.model_validate(json.loads(done.stdout)) == load_inventory(src)
    assert load_inventory(out) == load_inventory(src)
    assert "saved" in done.stderr


def test_hw_table_and_the_inventory_variable(clean_env: dict[str, str]) -> None:
    env = {**clean_env, "GLMLAUNCH_INVENTORY": str(INV / "h200x2-cotenant.json")}
    done = run_cli("hw", env=env)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "captured inventory of vm" in out and "580.159.04" in out
    assert "NVIDIA H200" in out and "Gen5 x16" in out and "132" in out  # SMs from CUDA cores
    assert "PHB rwa NV" in out  # the pair: PCIe host bridge, P2P read/write/atomics, over NVLink
    assert "633 python3" in out


def test_check_ok_is_exit_0_with_a_json_document(clean_env: dict[str, str]) -> None:
    done = run_cli(
        "check",
        "-p",
        "turnkey",
        "--inventory",
        str(INV / "rtxpro6000x4.json"),
        *FITS,
        "--json",
        env=clean_env,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["profile"] == "turnkey" and doc["purpose"] == "serve"
    assert doc["summary"]["exit_code"] == 0 and doc["summary"]["OK"] == len(doc["results"])
    assert next(iter(doc)) == "schema_version"
    validate(doc, "check")


def validate(doc: object, name: str) -> None:
    """The real output against its committed schema; a key the schema does not describe fails."""
    schema = json.loads((REPO / "docs" / "schemas" / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    assert isinstance(doc, dict)
    extra = {**doc, "not_in_the_schema": 1}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(extra, schema, cls=jsonschema.Draft202012Validator)


def test_check_table_on_stdout_messages_on_stderr(clean_env: dict[str, str]) -> None:
    done = run_cli(
        "check", "-p", "turnkey", "--inventory", str(INV / "rtxpro6000x4-gen3-x8.json"), *FITS, env=clean_env
    )
    assert done.returncode == 0, done.stderr
    assert "pcie_link" in done.stdout and "WARN" in done.stdout and "memory_verdict" in done.stdout
    # The WARN's message is data (the table), said once; stderr names the row once, without repeating it.
    both = done.stdout + done.stderr
    assert both.count("GPU 2 runs x8 of x16") == 1, both
    assert done.stderr.count("pcie_link") == 1 and "warning: 1 check(s) warned: pcie_link" in done.stderr
    # which calibration the memory verdict uses is part of the report (its caption), said once
    assert done.stdout.count("calibration: using the rig defaults") == 1
    assert "using the rig defaults" not in done.stderr
    as_json = run_cli(
        "check",
        "-p",
        "turnkey",
        "--inventory",
        str(INV / "rtxpro6000x4-gen3-x8.json"),
        *FITS,
        "--json",
        env=clean_env,
    )
    assert (as_json.stdout + as_json.stderr).count("GPU 2 runs x8 of x16") == 1


def test_warnings_fail_only_with_strict(clean_env: dict[str, str]) -> None:
    args = ["check", "-p", "turnkey", "--inventory", str(INV / "rtxpro6000x4-small-bar1.json"), *FITS]
    assert run_cli(*args, env=clean_env).returncode == 0
    strict = run_cli(*args, "--strict", env=clean_env)
    assert strict.returncode == ExitCode.WARNINGS == 7
    assert (
        strict.stderr.strip()
        .splitlines()[-1]
        .startswith("error: 1 check(s) warned and --strict makes warnings fail: bar1")
    )
    via_env = run_cli(*args, env={**clean_env, "GLMLAUNCH_STRICT": "1"})
    assert via_env.returncode == 7
    # The variable made warnings fail, not a flag nobody gave: the error names the variable.
    assert "--strict" not in via_env.stderr
    assert "error: 1 check(s) warned and GLMLAUNCH_STRICT=1 makes warnings fail: bar1" in via_env.stderr


@pytest.mark.parametrize("profile", sorted(p.stem for p in (REPO / "profiles").glob("*.yaml")))
def test_every_shipped_profile_is_clean_on_the_rig_it_describes(
    clean_env: dict[str, str], profile: str
) -> None:
    """check --strict on the ideal 4x RTX PRO 6000 inventory: no FAIL, no WARN (with the rig defaults).

    The Infernal Invocation profiles' rig has a driver that reports CUDA 13.3 (their image's, which their
    hardware.min_cuda asks): the same inventory with that driver."""
    rig = "rtxpro6000x4-cuda133.json" if profile.startswith("ii-") else "rtxpro6000x4.json"
    done = run_cli(
        "check",
        "-p",
        profile,
        "--inventory",
        str(INV / rig),
        "--strict",
        "--json",
        env=clean_env,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert {r["status"] for r in doc["results"]} <= {"OK", "SKIP"}, doc["results"]
    assert doc["verdict"]["status"] == "ok" and doc["verdict"]["blockers"] == []
    assert doc["verdict"]["confidence"] in ("confirmed", "rig-defaults", "estimate")
    validate(doc, "check")


@pytest.mark.parametrize(
    ("fixture", "extra", "code", "first_words"),
    [
        ("rtxpro6000x4-missing-gpu", [], 3, "error: hardware check failed: gpu_count: tp=4 needs 4 GPUs"),
        ("rtxpro6000x4-old-driver", [], 3, "error: hardware check failed: driver: driver 575.57.08"),
        ("rtxpro6000x4-no-p2p", [], 3, "error: hardware check failed: p2p: the driver reports no P2P"),
        (
            "rtxpro6000x4",
            ["--set", "memory.min_margin=60GiB"],
            4,
            "error: memory_verdict: below-margin: blocked by the margin:",
        ),
    ],
)
def test_failure_exit_codes(
    clean_env: dict[str, str], fixture: str, extra: list[str], code: int, first_words: str
) -> None:
    done = run_cli(
        "check", "-p", "turnkey", "--inventory", str(INV / f"{fixture}.json"), *FITS, *extra, env=clean_env
    )
    assert done.returncode == code, done.stderr
    assert "check" in done.stdout  # the table still comes out
    assert done.stderr.strip().splitlines()[-1].startswith(first_words), done.stderr


def test_h200_preflight_purpose_is_accepted(clean_env: dict[str, str]) -> None:
    args = ["check", "-p", "turnkey", "--inventory", str(INV / "h200x2.json"), *FITS]
    args += ["--set", "parallel.tp=2", "--set", "parallel.dcp=1", "--set", "hardware.min_driver=null"]
    args += ["--set", "hardware.min_cuda=null", "--json"]
    serve = run_cli(*args, env=clean_env)
    assert serve.returncode == 3 and "compute_capability" in serve.stderr
    pre = run_cli(*args, "--purpose", "preflight", env=clean_env)
    doc = json.loads(pre.stdout)
    cc = next(r for r in doc["results"] if r["name"] == "compute_capability")
    assert cc["status"] == "WARN"
    # No hardware check fails any more; whatever the ledger says about memory is exit 4 at most.
    assert all(r["fail_code"] == ExitCode.MARGIN for r in doc["results"] if r["status"] == "FAIL")
    assert pre.returncode == doc["summary"]["exit_code"] in (0, 4), pre.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["check", "-p", "no-such-profile"],
        ["check", "-p", "turnkey", "--purpose", "bench"],
        ["check", "-p", "turnkey", "--set", "parallel.tp=banana"],
    ],
)
def test_configuration_errors_exit_2(clean_env: dict[str, str], args: list[str]) -> None:
    done = run_cli(*args, "--inventory", str(INV / "rtxpro6000x4.json"), env=clean_env)
    assert done.returncode == ExitCode.CONFIG == 2, done.stderr
    assert done.stdout == ""


def test_unreadable_inventory_exits_2(clean_env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    done = run_cli("hw", "--inventory", str(bad), env=clean_env)
    assert done.returncode == 2
    assert "invalid inventory" in done.stderr and str(bad) in done.stderr


def test_check_reports_which_calibration_its_verdict_uses(clean_env: dict[str, str]) -> None:
    # data (stdout, JSON `calibration`), not a note: a shipped profile's check says nothing on stderr
    inventory = str(INV / "rtxpro6000x4.json")
    done = run_cli("check", "-p", "turnkey", "--inventory", inventory, "--json", env=clean_env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["calibration"].startswith("using the rig defaults")
    assert done.stderr == ""


def test_check_json_without_nvml_is_still_one_document(clean_env: dict[str, str]) -> None:
    """Issue 22, item 16: --json promises one JSON document, also when no NVML stops the checks (exit 8)."""
    if HAVE_NVML:
        pytest.skip("NVML is present here")
    res = run_cli("check", "-p", "turnkey", "--json", env=clean_env)
    assert res.returncode == 8, res.stderr
    doc = json.loads(res.stdout)
    schema = json.loads((REPO / "docs" / "schemas" / "check.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert doc["summary"]["exit_code"] == 8 and doc["results"][0]["fail_code"] == 8
    assert doc["results"][0]["status"] == "FAIL" and "NVML" in doc["results"][0]["message"]
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
