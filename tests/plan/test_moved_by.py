"""``plan`` names the calibration records that moved it, and by how much (issue 31): each record's share is
the plan with it less the plan without it, term by term and in the margin, the runtime margin and the KV
tokens, with the verdict it would have had; text and ``--json``. Real logs, a real store, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import FIXTURES, run_cli

BOOT = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log"
#: a first-request OOM of that boot after its ready line (the rig's total; issue 19's evidence)
OOM = (
    "(Worker_TP0_DCP0 pid=141281) ERROR 07-31 06:00:00 [multiproc_executor.py:700] torch.OutOfMemoryError: "
    "CUDA out of memory. Tried to allocate 48.00 MiB. GPU 0 has a total capacity of 94.97 GiB of which "
    "10.00 MiB is free. Including non-PyTorch memory, this process has 94.95 GiB memory in use."
)
READY = "(APIServer pid=141000) INFO:     Application startup complete."


def _plan(env: dict[str, str], profile: Path, *args: str) -> tuple[dict[str, object], str]:
    done = run_cli("plan", "-p", str(profile), *args, "--json", env=env)
    text = run_cli("plan", "-p", str(profile), *args, env=env).stdout
    doc: dict[str, object] = json.loads(done.stdout)
    return doc, text


def test_a_plan_names_the_serve_log_that_moved_its_verdict(clean_env: dict[str, str], tmp_path: Path) -> None:
    profile = tmp_path / "boot.yaml"
    assert run_cli("profiles", "import", str(BOOT), "-o", str(profile), env=clean_env).returncode == 0
    uncalibrated, text = _plan(clean_env, profile)
    assert uncalibrated["moved_by"] == [] and "moved by" not in text
    serve = tmp_path / "serve.log"
    serve.write_text(BOOT.read_text(encoding="utf-8") + READY + "\n" + OOM + "\n", encoding="utf-8")
    assert run_cli("calibrate", "ingest", str(serve), env=clean_env).returncode == 0
    after, text = _plan(clean_env, profile)
    [moved] = after["moved_by"]  # type: ignore[misc]
    record = next((Path(clean_env["GLMLAUNCH_CACHE_DIR"]) / "calibration").glob("*.json"))
    assert moved["record_id"] == record.stem and moved["source"].endswith("serve.log")
    # one record: its share is the whole difference from the plan without records
    b, u = after["budget"], uncalibrated["budget"]
    assert moved["margin_bytes"] == b["margin_bytes"] - u["margin_bytes"]  # type: ignore[index]
    assert moved["runtime_margin_bytes"] == b["runtime_margin_bytes"] - u["runtime_margin_bytes"]  # type: ignore[index]
    assert moved["kv_tokens"] == b["kv_tokens"] - u["kv_tokens"]  # type: ignore[index]
    assert moved["terms"]["runtime"] == b["runtime_demand_bytes"] - u["runtime_demand_bytes"] > 0  # type: ignore[index]
    # the OOM after ready turned the verdict: without the record it is what it was
    assert after["verdict"]["status"] == "runtime-oom"  # type: ignore[index]
    assert moved["status_without"] == uncalibrated["verdict"]["status"] == "ok"  # type: ignore[index]
    assert moved["confidence_without"] == uncalibrated["verdict"]["confidence"]  # type: ignore[index]
    [line] = [ln for ln in text.splitlines() if ln.startswith("moved by ")]
    assert line.startswith(f"moved by {record.stem[:12]} (serve.log): ")
    assert "runtime demand +" in line and "; without it: ok (" in line


def test_two_records_each_get_their_own_share(clean_env: dict[str, str], tmp_path: Path) -> None:
    profile = tmp_path / "boot.yaml"
    assert run_cli("profiles", "import", str(BOOT), "-o", str(profile), env=clean_env).returncode == 0
    serve = tmp_path / "serve.log"
    serve.write_text(BOOT.read_text(encoding="utf-8") + READY + "\n" + OOM + "\n", encoding="utf-8")
    assert run_cli("calibrate", "ingest", str(BOOT), str(serve), env=clean_env).returncode == 0
    doc, _ = _plan(clean_env, profile)
    moved = doc["moved_by"]
    # the serve log's OOM moved the runtime demand; the plain boot log of the same boot did not
    by_source = {Path(m["source"]).name: m for m in moved}  # type: ignore[union-attr, index]
    assert "serve.log" in by_source
    assert by_source["serve.log"]["terms"]["runtime"] > 0
    assert all("runtime" not in m["terms"] for name, m in by_source.items() if name != "serve.log")
