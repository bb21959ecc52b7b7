"""profiles import and calibrate ingest know the r28 appliance's lines and knobs (issue 18): a pinned pool
(num_gpu_blocks_override), the online K6 quantization (quantization_config + VLLM_EXL3_ONLINE_TRELLIS_BITS)
and the dynamic-token KV scales. The log is a real shared boot log with those lines written into it as the
r28 launchers print them."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from conftest import FIXTURES, run_cli

LOG = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log"
K6 = (
    "'quantization_config': {'linear': {'weight': 'mxfp8'}, "
    "'ignore': ['re:.*\\\\.q_a_proj$', 're:.*kv_a_proj_with_mqa', 'lm_head']}"
)


def _r28_style_log(tmp_path: Path) -> Path:
    text = LOG.read_text(encoding="utf-8")
    text = text.replace(
        "'max_num_seqs': 1,", "'max_num_seqs': 1, 'num_gpu_blocks_override': 2048, " + K6 + ",", 1
    )
    line = ">>> profile runtime: VLLM_EXL3_TRELLIS_BLOCK_M=8\n"
    text = text.replace(line, line + ">>> profile runtime: VLLM_EXL3_ONLINE_TRELLIS_BITS=6\n", 1)
    out = tmp_path / "r28-style.log"
    out.write_text(text, encoding="utf-8")
    return out


def test_import_reproduces_the_pin_and_the_online_k6(clean_env: dict[str, str], tmp_path: Path) -> None:
    log = _r28_style_log(tmp_path)
    profile = tmp_path / "boot.yaml"
    done = run_cli("profiles", "import", str(log), "-o", str(profile), env=clean_env)
    assert done.returncode == 0, done.stderr
    doc = yaml.safe_load(profile.read_text())
    assert doc["memory"]["num_gpu_blocks_override"] == 2048
    assert doc["model"]["online_quant"] == "exl3-b6"
    plan = json.loads(run_cli("plan", "-p", str(profile), "--json", env=clean_env).stdout)
    assert plan["budget"]["num_gpu_blocks_override"] == 2048
    assert plan["budget"]["kv_tokens"] == 2048 * 64 * 4
    # the launch renders what the log ran
    args = run_cli("args", "-p", str(profile), env=clean_env).stdout.splitlines()
    assert args[args.index("--num-gpu-blocks-override") + 1] == "2048"
    assert "--quantization-config" in args
    env = run_cli("env", "-p", str(profile), "--shell", "bash", env=clean_env).stdout
    assert "VLLM_EXL3_ONLINE_TRELLIS_BITS" in env


def test_ingest_keys_the_record_on_the_pin_and_the_quantization(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    log = _r28_style_log(tmp_path)
    done = run_cli("calibrate", "ingest", str(log), "--json", env=clean_env)
    assert done.returncode == 0, done.stderr
    [rec] = json.loads(run_cli("calibrate", "list", "--json", env=clean_env).stdout)["records"]
    stored = json.loads(
        (Path(clean_env["GLMLAUNCH_CACHE_DIR"]) / "calibration" / f"{rec['record_id']}.json").read_text()
    )
    boot, keyed = stored["config"], stored["fingerprint"]["settings"]
    assert boot["memory"]["num_gpu_blocks_override"] == keyed["memory.num_gpu_blocks_override"] == 2048
    assert boot["model"]["online_quant"] == keyed["model.online_quant"] == "exl3-b6"
    assert boot["memory"]["kv_scale_mode"] == keyed["memory.kv_scale_mode"] == "dynamic-token"
