"""`glmlaunch profiles import LOG`: a profile that gives back the boot's vLLM flags, on the five real logs."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from glmlaunch.calibrate.bootconfig import boot_env, boot_settings
from glmlaunch.plan.profile_import import has_setting, lookup
from glmlaunch.vllmlog.bootconfig import parse_boot_config

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "boot-logs"
ALL_LOGS = sorted(p.name for p in LOGS.glob("*.log"))


def glmlaunch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GLMLAUNCH_")}
    return subprocess.run(
        [sys.executable, "-m", "glmlaunch", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def glmlaunch_config(profile: Path) -> dict[str, Any]:
    done = glmlaunch("config", "-p", str(profile), "--json", cwd=profile.parent)
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = json.loads(done.stdout)["config"]
    return config


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def args_of(log: Path) -> dict[str, Any]:
    bc = parse_boot_config(log.read_text(encoding="utf-8"))
    assert bc.vllm_args is not None
    return bc.vllm_args


@pytest.mark.parametrize("name", ALL_LOGS)
def test_import_gives_back_the_boots_flags(name: str, tmp_path: Path) -> None:
    log = LOGS / name
    done = glmlaunch("profiles", "import", str(log), "-o", "p.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # -o: data in the file, messages on stderr
    text = (tmp_path / "p.yaml").read_text(encoding="utf-8")
    assert f"# log: {name}\n" in text
    assert f"# sha256: {hashlib.sha256(log.read_bytes()).hexdigest()}\n" in text
    assert f"# vLLM version: {parse_boot_config(log.read_text(encoding='utf-8')).vllm_version}\n" in text
    shipped = {p.stem for p in (Path(__file__).resolve().parents[2] / "profiles").glob("*.yaml")}
    assert yaml.safe_load(text)["extends"] in shipped
    # a build that names its release (….r14) ran that release's SparkInfer generation: the profile says
    # so whatever it extends; a bare dev build names none, and the base profile's stands
    version = parse_boot_config(log.read_text(encoding="utf-8")).vllm_version or ""
    if version.endswith(".r14"):
        config = glmlaunch_config(tmp_path / "p.yaml")
        assert config["stack"] == "sparkinfer-r14" and config["release"] == "r14"

    done = glmlaunch("args", "-p", "p.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    argv = done.stdout.splitlines()
    vargs = args_of(log)
    assert flag(argv, "--tensor-parallel-size") == str(vargs["tensor_parallel_size"])
    assert flag(argv, "--decode-context-parallel-size") == str(vargs["decode_context_parallel_size"])
    assert flag(argv, "--max-num-batched-tokens") == str(vargs["max_num_batched_tokens"])
    assert flag(argv, "--max-num-seqs") == str(vargs["max_num_seqs"])
    assert flag(argv, "--max-model-len") == str(vargs["max_model_len"])
    assert flag(argv, "--kv-cache-dtype") == vargs["kv_cache_dtype"]
    # vLLM's args carry the GMU when it is not vLLM's default; otherwise the launcher's table said 0.92
    assert flag(argv, "--gpu-memory-utilization") == str(vargs.get("gpu_memory_utilization", 0.92))
    assert flag(argv, "--revision") is None  # the boot served a local directory, no revision
    spec = vargs.get("speculative_config")
    if spec is None:
        assert "--speculative-config" not in argv
    else:
        got = json.loads(flag(argv, "--speculative-config") or "{}")
        assert got["num_speculative_tokens"] == spec["num_speculative_tokens"]
        assert got["draft_sample_method"] == spec["draft_sample_method"]
    comp = json.loads(flag(argv, "--compilation-config") or "{}")
    assert comp["cudagraph_capture_sizes"] == vargs["compilation_config"]["cudagraph_capture_sizes"]
    assert comp["cudagraph_mode"] == "FULL_AND_PIECEWISE"

    done = glmlaunch("config", "-p", "p.yaml", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)["config"]
    settings = boot_settings(parse_boot_config(log.read_text(encoding="utf-8")))
    shown = {k: lookup(config, k) for k in settings if has_setting(k)}
    assert shown == {k: v for k, v in settings.items() if has_setting(k)}
    env = boot_env(parse_boot_config(log.read_text(encoding="utf-8")))
    assert yaml.safe_load(text)["env"] == env


def test_stdout_without_output_and_no_overwrite_without_force(tmp_path: Path) -> None:
    log = LOGS / "vllm-current210-cap1024-mtp0-v1-server.log"
    done = glmlaunch("profiles", "import", str(log), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# Imported by `glmlaunch profiles import`")
    data = yaml.safe_load(done.stdout)
    assert data["speculative"]["num_speculative_tokens"] == 0
    assert data["memory"]["gpu_memory_utilization"] == 0.9
    (tmp_path / "p.yaml").write_text("keep me\n", encoding="utf-8")
    done = glmlaunch("profiles", "import", str(log), "-o", "p.yaml", cwd=tmp_path)
    assert done.returncode == 2
    assert "--output: the output file exists" in done.stderr and "--force" in done.stderr
    assert (tmp_path / "p.yaml").read_text(encoding="utf-8") == "keep me\n"
    done = glmlaunch("profiles", "import", str(log), "-o", "p.yaml", "--force", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load((tmp_path / "p.yaml").read_text(encoding="utf-8")) == data


def test_base_is_forced_and_errors_are_config_errors(tmp_path: Path) -> None:
    log = LOGS / "vllm-r14-field-baseline-mtp3-c8-v2-server.log"
    done = glmlaunch("profiles", "import", str(log), "--base", "turnkey", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = yaml.safe_load(done.stdout)
    assert data["extends"] == "turnkey"
    # turnkey runs V2 as the boot did; the boot's DCP 4 and no LMCache are written (a dev build names no
    # release, so its release is written unknown)
    assert "runner" not in data and data["parallel"] == {"dcp": 4}
    assert data["lmcache"] is False and data["release"] is None
    (tmp_path / "t.yaml").write_text(done.stdout, encoding="utf-8")
    done = glmlaunch("args", "-p", "t.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "--max-num-seqs\n8\n" in done.stdout
    (tmp_path / "empty.log").write_text("nothing here\n", encoding="utf-8")
    done = glmlaunch("profiles", "import", "empty.log", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: LOG: the log has no vLLM")
    done = glmlaunch("profiles", "import", "missing.log", cwd=tmp_path)
    assert done.returncode == 2 and "cannot read the log" in done.stderr


@pytest.mark.parametrize(
    "kwargs",
    ["{'enable_thinking': False}", "{}", "{'reasoning_effort': 'low', 'enable_thinking': True}"],
)
def test_import_reproduces_chat_template_kwargs_without_reasoning_effort(kwargs: str, tmp_path: Path) -> None:
    """Issue 22, item 8: the base's reasoning_effort must not survive into a boot that did not set it."""
    text = (LOGS / ALL_LOGS[0]).read_text(encoding="utf-8")
    original = "'default_chat_template_kwargs': {'reasoning_effort': 'high'}"
    assert original in text
    log = tmp_path / "boot.log"
    log.write_text(text.replace(original, f"'default_chat_template_kwargs': {kwargs}"), encoding="utf-8")
    done = glmlaunch("profiles", "import", str(log), "-o", "p.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    argv = glmlaunch("args", "-p", "p.yaml", "--json", cwd=tmp_path)
    assert argv.returncode == 0, argv.stderr
    got = flag(json.loads(argv.stdout)["argv"], "--default-chat-template-kwargs")
    want = args_of(log)["default_chat_template_kwargs"]
    assert (json.loads(got) if got is not None else {}) == want
