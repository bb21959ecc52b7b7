"""`glmlaunch serve`: real subprocesses exec a real fake `vllm` that records its argv and environment.

The fake is a small Python script written by each test; `glmlaunch serve` reaches it through
os.execvpe, so the recorded pid is the pid of the `glmlaunch` process the test started. The check stage
reads the constructed 4x RTX PRO 6000 inventory (there is no GPU here) and the preflight is skipped,
which serve states on stderr. The shipped profiles keep max_model_len 524288, which the budget refuses
on that inventory (exit 4, tested below); the exec tests override it to 262144.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from conftest import FIXTURES, REPO, glmlaunch_exe

from glmlaunch.config.environment import compose
from glmlaunch.config.render_args import full_argv
from glmlaunch.config.resolve import resolve_config
from glmlaunch.hardware.baseline import GpuMemory, baseline_problems, gpu_memory_of
from glmlaunch.hardware.inventory import load_inventory
from glmlaunch.launch.handoff import locate_vllm, mask_argv

INVENTORY = FIXTURES / "inventories" / "rtxpro6000x4.json"
FITS = "scheduler.max_model_len=262144"

HF = "hf_TESTtokenVALUE0123456789"
API = "sk-TESTapikeyVALUE9876543210"
ARG_KEY = "argKEYvalue-5555-secret"
SECRETS = (HF, API, ARG_KEY)

Fake = tuple[Path, Path, dict[str, str]]


def write_fake_vllm(directory: Path, name: str = "vllm") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(
            """
            import json, os, sys
            with open(os.environ["FAKE_VLLM_RECORD"], "w") as fh:
                json.dump({"argv": sys.argv, "env": dict(os.environ), "pid": os.getpid()}, fh)
            """
        )
    )
    path.chmod(0o755)
    return path


@pytest.fixture
def fake(tmp_path: Path, clean_env: dict[str, str]) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """(fake vllm path, record file, environment with the fake first on PATH).

    The turnkey runs LMCache: these tests are about exec, which a managed server rules out (it would make the
    launch supervised; tests/lmcache covers that), so its server is an external one, a listener of this
    fixture's on a free port (``lmcache_config.server=external`` checks that it answers).
    """
    bindir = tmp_path / "fakebin"
    exe = write_fake_vllm(bindir)
    record = tmp_path / "record.json"
    env = dict(clean_env)
    env["PATH"] = os.pathsep.join([str(bindir), str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    env["FAKE_VLLM_RECORD"] = str(record)
    with socket.create_server(("127.0.0.1", 0)) as lmcache:
        env["GLMLAUNCH_LMCACHE_CONFIG__SERVER"] = "external"
        env["GLMLAUNCH_LMCACHE_CONFIG__PORT"] = str(lmcache.getsockname()[1])
        yield exe, record, env


def start(*args: str, env: dict[str, str], cmd: list[str] | None = None) -> tuple[int, int, str, str]:
    proc = subprocess.Popen(
        cmd if cmd is not None else [*glmlaunch_exe(), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    out, err = proc.communicate(timeout=120)
    return proc.returncode, proc.pid, out, err


def validate(doc: object) -> None:
    """A dry run's real document against docs/schemas/serve-dry-run.schema.json; unknown keys fail."""
    schema = json.loads((REPO / "docs" / "schemas" / "serve-dry-run.schema.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    assert isinstance(doc, dict) and next(iter(doc)) == "schema_version"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "undescribed": 1}, schema, cls=jsonschema.Draft202012Validator)


def expected_argv(
    exe: Path, profile: str | None, overrides: list[str], env: dict[str, str], extra: list[str]
) -> list[str]:
    config = resolve_config(profile, overrides, env).config
    return full_argv(config, extra, vllm_bin=str(exe))


@pytest.mark.parametrize("profile", ["gate", "turnkey"])
def test_exec_reaches_vllm_with_exact_argv_and_env(
    profile: str, fake: Fake
) -> None:
    exe, record, env = fake
    env["VLLM_USE_V2_MODEL_RUNNER"] = "7"  # a caller value for a managed name: replaced, and said so
    extra = ["--enable-lora", "--uvicorn-log-level", "debug", "--chat-template", "a b 'c' $HOME"]
    rc, pid, out, err = start(
        "serve", "-p", profile, "--set", FITS, "--inventory", str(INVENTORY), "--skip-preflight",
        "--", *extra,
        env=env,
    )
    assert rc == 0, err
    got = json.loads(record.read_text())
    assert got["pid"] == pid, "vllm must replace the glmlaunch process (exec), not run as its child"
    assert got["argv"] == expected_argv(exe, profile, [FITS], env, extra)
    assert got["argv"][-len(extra):] == extra
    launch = compose(resolve_config(profile, [FITS], env).config, env)
    for name, value in launch.exported().items():
        assert got["env"][name] == value
    assert got["env"]["FAKE_VLLM_RECORD"] == str(record)  # the inherited environment is passed on
    assert got["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"  # every shipped profile runs the V2 runner
    assert "VLLM_USE_V2_MODEL_RUNNER='7' from your environment is replaced" in err
    assert "preflight skipped: --skip-preflight" in err
    assert "check ok:" in err and "plan ok:" in err
    assert "exec: " + shlex.join([str(exe), "serve"]) in err
    assert out == ""  # a real launch prints no data of its own


def test_dry_run_shows_exactly_what_exec_runs(fake: Fake) -> None:
    _, record, env = fake
    base = ["serve", "-p", "turnkey", "--set", FITS, "--inventory", str(INVENTORY), "--skip-preflight"]
    extra = ["--", "--enable-lora", "--max-loras", "2"]
    rc, _, out, err = start(*base, "--dry-run", "--json", *extra, env=env)
    assert rc == 0, err
    doc = json.loads(out)
    assert not record.exists(), "a dry run starts nothing"
    assert doc["dry_run"] is True and doc["started"] is False
    assert {s["stage"]: s["status"] for s in doc["stages"]} == {
        "resolve": "ok", "lmcache": "ok", "check": "ok", "plan": "ok", "preflight": "skipped",
        "baseline": "skipped",
    }
    validate(doc)
    rc, _, text, err = start(*base, "--dry-run", *extra, env=env)
    assert rc == 0, err
    command = text.strip().splitlines()[-1]
    rc, _, _, err = start(*base, *extra, env=env)
    assert rc == 0, err
    ran = json.loads(record.read_text())["argv"]
    assert doc["argv"] == ran
    assert shlex.split(command) == ran
    changes = {c["name"]: c for c in doc["env_changes"]}
    assert changes["CUDA_VISIBLE_DEVICES"]["value"] == "0,1,2,3"
    assert changes["VLLM_DCP_A2A_MAX_TOKENS"]["value"] == "16"  # a count, not a secret
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in text


def test_cli_options_before_the_separator_are_not_passed_through(fake: Fake) -> None:
    _, record, env = fake
    rc, _, _, err = start("serve", "-p", "gate", "--no-such-option", env=env)
    assert rc == 2 and "--no-such-option" in err
    assert not record.exists()


def test_managed_flags_after_separator_name_the_set_key(fake: Fake) -> None:
    _, record, env = fake
    rc, _, _, err = start(
        "serve", "-p", "gate", "--set", FITS, "--inventory", str(INVENTORY), "--skip-preflight", "--",
        "--enable-lora", "--max-num-seqs", "4", "--gpu-memory-utilization=0.9",
        "--max_num_batched_tokens", "8192",
        "--speculative-config", "{}",
        env=env,
    )
    assert rc == 2
    assert not record.exists()
    assert "Traceback" not in err
    assert "--max-num-seqs: is managed by glmlaunch" in err and "--set scheduler.max_num_seqs=" in err
    assert "--set memory.gpu_memory_utilization=" in err
    assert "--max_num_batched_tokens" in err and "--set scheduler.max_num_batched_tokens=" in err
    assert "--set speculative.*=" in err


def test_missing_or_unusable_binary_exit_6(fake: Fake, tmp_path: Path) -> None:
    _, record, env = fake
    common = ["serve", "-p", "gate", "--set", FITS, "--inventory", str(INVENTORY), "--skip-preflight"]

    rc, _, _, err = start(*common, "--vllm-bin", str(tmp_path / "nope" / "vllm"), env=env)
    assert rc == 6 and "does not exist" in err and len(err.strip().splitlines()) >= 1
    assert err.strip().splitlines()[-1].startswith("error: --vllm-bin: cannot start vLLM")

    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    rc, _, _, err = start(*common, env={**env, "GLMLAUNCH_VLLM_BIN": str(plain)})
    assert rc == 6 and "GLMLAUNCH_VLLM_BIN" in err and "not executable" in err

    no_vllm = {**env, "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])}
    rc, _, _, err = start(*common, env=no_vllm)
    assert rc == 6 and "no executable 'vllm' on PATH" in err

    broken = tmp_path / "broken" / "vllm"
    broken.parent.mkdir()
    broken.write_text("not a program\n")
    broken.chmod(0o755)
    rc, _, _, err = start(*common, "--vllm-bin", str(broken), env=env)
    assert rc == 6 and "cannot execute" in err and "Traceback" not in err

    # A dry run needs no vLLM (a planning machine): it shows the command, notes that a real launch would
    # stop with exit 6, and exits 0; its document keeps the launch's exit code.
    rc, _, out, err = start(*common, "--dry-run", env=no_vllm)
    assert rc == 0, err
    assert "# a launch would stop at the resolve stage, exit 6\n" in out
    assert out.count("no executable 'vllm' on PATH") == 1  # the stage's line says it; the summary does not
    assert out.strip().splitlines()[-1].startswith("vllm serve ")
    assert "error:" not in err
    assert err.strip().splitlines()[-1].startswith(
        "a launch would stop at the resolve stage with exit 6: PATH: cannot start vLLM: no executable 'vllm'"
    )
    rc, _, out, err = start(*common, "--dry-run", "--json", env=no_vllm)
    assert rc == 0, err
    doc = json.loads(out)
    validate(doc)
    assert (doc["would_start"], doc["exit_code"], doc["dry_run_exit_code"]) == (False, 6, 0)
    assert doc["blocking"] == [{"stage": "resolve", "exit_code": 6, "error": doc["error"]}]
    assert doc["error"].startswith("PATH: cannot start vLLM: no executable 'vllm' on PATH")
    assert doc["vllm"]["path"] is None and doc["argv"][:2] == ["vllm", "serve"]
    assert [s["stage"] for s in doc["stages"] if s["exit_code"] is not None] == ["resolve"]
    # the same for an executable named explicitly that this machine does not have
    rc, _, out, _ = start(*common, "--vllm-bin", "/opt/vllm/bin/vllm", "--dry-run", "--json", env=no_vllm)
    assert rc == 0 and json.loads(out)["exit_code"] == 6 and json.loads(out)["vllm"]["source"] == "--vllm-bin"
    assert not record.exists()


def test_vllm_bin_option_and_variable(fake: Fake, tmp_path: Path) -> None:
    _, record, env = fake
    elsewhere = write_fake_vllm(tmp_path / "opt" / "bin", "vllm-nightly")
    common = ["serve", "-p", "gate", "--set", FITS, "--inventory", str(INVENTORY), "--skip-preflight"]
    rc, _, _, err = start(*common, "--vllm-bin", str(elsewhere), env=env)
    assert rc == 0, err
    assert json.loads(record.read_text())["argv"][0] == str(elsewhere)
    record.unlink()
    rc, _, _, err = start(*common, env={**env, "GLMLAUNCH_VLLM_BIN": str(elsewhere)})
    assert rc == 0, err
    assert json.loads(record.read_text())["argv"][0] == str(elsewhere)


def test_container_entrypoint_from_environment_only(fake: Fake) -> None:
    exe, record, env = fake
    env.update(
        {
            "GLMLAUNCH_PROFILE": "gate",
            "GLMLAUNCH_SET": "scheduler.max_model_len=262144; server.port=9000",
            "GLMLAUNCH_SERVER__PORT": "8001",  # GLMLAUNCH_SET is applied after the field variables
            "GLMLAUNCH_SCHEDULER__MAX_NUM_BATCHED_TOKENS": "2048",
            "GLMLAUNCH_SKIP_PREFLIGHT": "1",
            "GLMLAUNCH_INVENTORY": str(INVENTORY),
            "GLMLAUNCH_VLLM_BIN": str(exe),
        }
    )
    # exactly what `ENTRYPOINT ["glmlaunch", "serve"]` runs
    rc, pid, _, err = start("serve", env=env)
    assert rc == 0, err
    got = json.loads(record.read_text())
    assert got["pid"] == pid
    argv: list[str] = got["argv"]
    assert argv == expected_argv(exe, None, [], env, [])

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert value("--kv-cache-dtype") == "fp8" and value("--max-num-seqs") == "1"  # the gate profile
    assert value("--port") == "9000"
    assert value("--max-model-len") == "262144"
    assert value("--max-num-batched-tokens") == "2048"
    assert "preflight skipped: GLMLAUNCH_SKIP_PREFLIGHT=1" in err


def test_budget_refusal_stops_before_exec(fake: Fake) -> None:
    _, record, env = fake
    rc, _, _, err = start(
        "serve", "-p", "gate", "--set", FITS, "--set", "memory.gpu_memory_utilization=0.5",
        "--inventory", str(INVENTORY), "--skip-preflight", env=env,
    )
    assert rc == 4 and "memory_verdict" in err
    assert not record.exists()


def test_dry_run_of_a_refused_launch_still_shows_the_command(fake: Fake) -> None:
    _, record, env = fake
    base = ["serve", "-p", "gate", "--set", "memory.gpu_memory_utilization=0.5"]
    base += ["--inventory", str(INVENTORY)]
    rc, _, out, err = start(*base, "--dry-run", "--json", env=env)
    assert rc == 4, err
    doc = json.loads(out)
    assert doc["would_start"] is False and doc["exit_code"] == 4 and "memory_verdict" in doc["error"]
    assert {s["stage"]: s["status"] for s in doc["stages"]}["check"] == "failed"
    assert doc["argv"][1:3] == ["serve", "brandonmusic/GLM-5.2-EXL3-TR3-3.0bpw"]
    rc, _, text, err = start(*base, "--dry-run", env=env)
    assert rc == 4 and "# a launch would stop at the check stage, exit 4" in text
    assert shlex.split(text.strip().splitlines()[-1]) == doc["argv"]
    assert err.strip().splitlines()[-1].startswith("error: memory_verdict")
    assert not record.exists()


def test_hardware_failure_stops_before_exec(fake: Fake) -> None:
    _, record, env = fake
    rc, _, _, err = start(
        "serve", "-p", "turnkey", "--set", FITS, "--skip-preflight",
        "--inventory", str(FIXTURES / "inventories" / "rtxpro6000x4-old-driver.json"), env=env,
    )
    assert rc == 3 and "driver" in err
    assert not record.exists()


def test_json_needs_dry_run(fake: Fake) -> None:
    _, record, env = fake
    rc, _, _, err = start("serve", "-p", "gate", "--json", env=env)
    assert rc == 2 and "--dry-run" in err and not record.exists()


# --- secrets ---------------------------------------------------------------------------------------


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


def secret_env(env: dict[str, str]) -> dict[str, str]:
    return {
        **env,
        "HF_TOKEN": HF,
        "GLMLAUNCH_ENV__OPENAI_API_KEY": API,  # passed through the profile's env: section
    }


def test_secrets_reach_vllm_but_never_a_printout(fake: Fake) -> None:
    _, record, env = fake
    env = secret_env(env)
    common = ["serve", "-p", "gate", "--set", FITS, "--inventory", str(INVENTORY)]
    extra = ["--", "--api-key", ARG_KEY, f"--hf-token={HF}"]

    rc, _, text, err = start(*common, "--dry-run", "--skip-preflight", *extra, env=env)
    assert rc == 0, err
    assert_no_secret(text, err)
    assert "OPENAI_API_KEY='****'" in text or "OPENAI_API_KEY=****" in text
    assert "VLLM_DCP_A2A_MAX_TOKENS=64" in text

    rc, _, out, err = start(*common, "--dry-run", "--json", "--skip-preflight", *extra, env=env)
    assert rc == 0, err
    assert_no_secret(out, err)
    doc = json.loads(out)
    assert {c["name"]: c["value"] for c in doc["env_changes"]}["OPENAI_API_KEY"] == "****"
    assert doc["argv"][-3:] == ["--api-key", "****", "--hf-token=****"]

    rc, _, out, err = start(*common, "--skip-preflight", *extra, env=env)
    assert rc == 0, err
    assert_no_secret(out, err)
    assert "exec: " in err
    got = json.loads(record.read_text())
    assert got["env"]["HF_TOKEN"] == HF and got["env"]["OPENAI_API_KEY"] == API
    assert got["argv"][-3:] == ["--api-key", ARG_KEY, f"--hf-token={HF}"]


def test_secrets_are_masked_in_errors(fake: Fake, tmp_path: Path) -> None:
    _, record, env = fake
    env = secret_env(env)
    # an unknown GLMLAUNCH_ variable: its value is quoted by the error
    rc, _, out, err = start("serve", "-p", "gate", env={**env, "GLMLAUNCH_SERVER__API_KEY": API})
    assert rc == 2 and "GLMLAUNCH_SERVER__API_KEY" in err
    assert_no_secret(out, err)
    # a managed flag next to a secret argument
    rc, _, out, err = start(
        "serve", "-p", "gate", "--", "--api-key", ARG_KEY, "--max-num-seqs", "2", env=env
    )
    assert rc == 2
    assert_no_secret(out, err)
    # an override whose value is a known secret
    rc, _, out, err = start("serve", "-p", "gate", "--set", f"scheduler.max_num_seqs={HF}", env=env)
    assert rc == 2 and "max_num_seqs" in err
    assert_no_secret(out, err)
    assert not record.exists()


# --- the drop-in wrapper ---------------------------------------------------------------------------

WRAPPER = REPO / "scripts" / "serve-glm52.sh"


def run_wrapper(env: dict[str, str], *args: str) -> tuple[int, int, str, str]:
    return start(env=env, cmd=["bash", str(WRAPPER), *args])


def test_wrapper_maps_the_old_variables(fake: Fake) -> None:
    exe, record, env = fake
    env.update(
        {
            "MODEL_FAMILY": "glm52",
            "TP": "4",
            "DCP": "2",
            "GPUS": "0,1,2,3",
            "MTP": "5",
            "GRAPH": "48",
            "MAX_NUM_SEQS": "8",
            "MAX_BATCHED_TOKENS": "3072",
            "MAX_MODEL_LEN": "131072",
            "GPU_MEMORY_UTILIZATION": "0.95",
            "KV_CACHE_DTYPE": "nvfp4_ds_mla",
            "F8_DMA": "0",
            "DCP_A2A_MAX_TOKENS": "16",
            "DCP_QUERY_SPLIT": "auto",
            "DCP_CKV_GATHER": "1",
            "PORT": "8123",
            "GLMLAUNCH_INVENTORY": str(INVENTORY),
            "GLMLAUNCH_SKIP_PREFLIGHT": "1",
        }
    )
    rc, pid, _, err = run_wrapper(env, "--", "--enable-lora")
    assert rc == 0, err
    got = json.loads(record.read_text())
    assert got["pid"] == pid, "bash execs glmlaunch, which execs vllm: one process throughout"
    argv: list[str] = got["argv"]

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert value("--tensor-parallel-size") == "4" and value("--decode-context-parallel-size") == "2"
    assert value("--port") == "8123" and value("--max-model-len") == "131072"
    assert value("--max-num-seqs") == "8" and value("--max-num-batched-tokens") == "3072"
    assert value("--kv-cache-dtype") == "nvfp4_ds_mla" and value("--gpu-memory-utilization") == "0.95"
    assert json.loads(value("--speculative-config"))["num_speculative_tokens"] == 5
    sizes = json.loads(value("--compilation-config"))["cudagraph_capture_sizes"]
    assert sizes == [6, 12, 18, 24, 30, 36, 42, 48]
    assert argv[-1] == "--enable-lora"
    assert got["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert got["env"]["VLLM_DCP_A2A_MAX_TOKENS"] == "16"
    assert got["env"]["VLLM_PCIE_DMA_FP8"] == "0"
    assert got["env"]["VLLM_B12X_MLA_CKV_GATHER"] == "1"
    expected = expected_argv(
        exe,
        None,  # the wrapper has no profile of its own: glmlaunch's default (turnkey)
        [
            "parallel.tp=4", "parallel.dcp=2", "parallel.gpus=[0,1,2,3]",
            "speculative.num_speculative_tokens=5", "cudagraph.capture_sizes=null",
            "cudagraph.capture_rule={step: null, max: 48}", "cudagraph.max_capture_size=null",
            "scheduler.max_num_seqs=8",
            "scheduler.max_num_batched_tokens=3072", "scheduler.max_model_len=131072",
            "memory.gpu_memory_utilization=0.95", "memory.kv_cache_dtype=nvfp4_ds_mla",
            "comm.dma_wire_mode=0", "comm.dcp_a2a_max_tokens=16", "dcp_policy.ckv_gather=true",
            "server.port=8123",
        ],
        env,
        ["--enable-lora"],
    )
    assert argv == expected


def test_wrapper_dry_run_and_profile_variable(fake: Fake) -> None:
    _, record, env = fake
    env.update(
        {
            "GLMLAUNCH_PROFILE": "turnkey",
            "MAX_MODEL_LEN": "262144",
            "DRY_RUN": "1",
            "GLMLAUNCH_INVENTORY": str(INVENTORY),
            "GLMLAUNCH_SKIP_PREFLIGHT": "1",  # no GPU here for the preflight a real launch would run
        }
    )
    rc, _, out, err = run_wrapper(env)
    assert rc == 0, err
    assert not record.exists()
    argv = shlex.split(out.strip().splitlines()[-1])
    assert argv[argv.index("--decode-context-parallel-size") + 1] == "2"  # turnkey, not r12-exl3
    assert argv[argv.index("--max-model-len") + 1] == "262144"


def test_wrapper_refuses_removed_variables_and_other_families(fake: Fake) -> None:
    _, record, env = fake
    rc, _, _, err = run_wrapper({**env, "PCIE_CALIBRATION": "force", "ONLINE_QUANT": "fp8", "TP": "4"})
    assert rc == 2
    assert "PCIE_CALIBRATION=force: calibration is no longer" in err and "ONLINE_QUANT=fp8:" in err
    assert "2 old variable(s)" in err
    rc, _, _, err = run_wrapper({**env, "MODEL_FAMILY": "ds4"})
    assert rc == 2 and "MODEL_FAMILY=ds4" in err
    rc, _, _, err = run_wrapper({**env, "DCP_QUERY_SPLIT": "maybe"})
    assert rc == 2 and "DCP_QUERY_SPLIT must be auto, 0 or 1" in err
    assert not record.exists()


def test_wrapper_errors_come_from_glmlaunch_validation(fake: Fake) -> None:
    _, record, env = fake
    rc, _, _, err = run_wrapper({**env, "KV_CACHE_DTYPE": "fp9", "GLMLAUNCH_INVENTORY": str(INVENTORY)})
    assert rc == 2 and "memory.kv_cache_dtype" in err and "fp8" in err
    rc, _, _, err = run_wrapper({**env, "F8_DMA": "ring", "GLMLAUNCH_INVENTORY": str(INVENTORY)})
    assert rc == 2 and "allow_compressed_wire" in err
    assert not record.exists()


# --- pieces ---------------------------------------------------------------------------------------


def test_mask_argv() -> None:
    argv = ["vllm", "serve", "m", "--api-key", "abcd1234", "--hf-token=xyz98765"]
    argv += ["--max-num-batched-tokens", "8"]
    assert mask_argv(argv) == [
        "vllm", "serve", "m", "--api-key", "****", "--hf-token=****", "--max-num-batched-tokens", "8",
    ]


def test_locate_vllm_order(tmp_path: Path) -> None:
    a = write_fake_vllm(tmp_path / "a")
    b = write_fake_vllm(tmp_path / "b", "other")
    env = {"PATH": str(tmp_path / "a")}
    assert locate_vllm(None, env).path == str(a)
    assert locate_vllm(None, {**env, "GLMLAUNCH_VLLM_BIN": str(b)}).source == "GLMLAUNCH_VLLM_BIN"
    chosen = locate_vllm(str(b), {**env, "GLMLAUNCH_VLLM_BIN": str(a)})
    assert (chosen.path, chosen.source) == (str(b), "--vllm-bin")
    assert locate_vllm("other", {"PATH": str(tmp_path / "b")}).path == str(b)
    assert locate_vllm(None, {"PATH": str(tmp_path / "b")}).path is None


def test_baseline_problems_from_recorded_inventories() -> None:
    before = gpu_memory_of(load_inventory(INVENTORY))
    after = gpu_memory_of(load_inventory(FIXTURES / "inventories" / "rtxpro6000x4-cotenant-40g.json"))
    assert baseline_problems(before, before, [4242], [], 2 * 2**20) == []
    problems = baseline_problems(before, after, [4242], [], 2 * 2**20)
    assert problems and all("less free than before the preflight" in p for p in problems)
    lost = ((before[1].free_bytes or 0) - (after[1].free_bytes or 0)) / 2**20
    assert lost > 40 * 1024
    expected = f"GPU 1: {lost:.0f} MiB less free than before the preflight (new holder pid(s) [48211])"
    assert problems == [expected]
    holders = {pid for g in after for pid in g.pids}
    held = baseline_problems(before, after, sorted(holders), [], 2 * 2**20)
    assert any("still hold memory" in p for p in held)
    alive = baseline_problems(before, before, [99], [99], 0)
    assert alive == ["preflight worker process group 99 is still alive"]
    gone = baseline_problems(before, [GpuMemory(0, before[0].free_bytes, ())], [], [], 0)
    assert "GPU 1 is no longer visible" in gone


# --- container files ---------------------------------------------------------------------------------


def test_compose_and_dockerfile_make_serve_the_entrypoint(fake: Fake) -> None:
    import yaml

    exe, record, env = fake
    service = yaml.safe_load((REPO / "scripts" / "compose.yaml").read_text())["services"]["glm52"]
    assert service["entrypoint"] == ["glmlaunch", "serve", "--fetch"]  # under compose's init (tini)
    assert service["ipc"] == "host" and service["init"] is True and service["network_mode"] == "host"
    assert service["shm_size"] == "32gb" and service["ulimits"]["memlock"] == -1
    assert any(v.endswith(":/cache") for v in service["volumes"])
    assert service["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    dockerfile = (REPO / "scripts" / "Dockerfile.glmlaunch").read_text()
    assert 'ENTRYPOINT ["tini", "--", "glmlaunch", "serve", "--fetch"]' in dockerfile

    # The compose environment alone (with ${VAR:-default} expanded) drives a real launch.
    compose_env = {
        k: str(v).replace("${HF_TOKEN:-}", HF) for k, v in service["environment"].items()
    }
    env.update(compose_env)
    env.update(
        {
            "GLMLAUNCH_SET": FITS,
            "GLMLAUNCH_INVENTORY": str(INVENTORY),
            "GLMLAUNCH_SKIP_PREFLIGHT": "1",
            "GLMLAUNCH_CACHE_DIR": env["HOME"],
        }
    )
    # supervised by default in the image and the compose file (README "Supervised launch")
    assert service["environment"]["GLMLAUNCH_SUPERVISE"] == "1"
    assert "GLMLAUNCH_SUPERVISE=1" in dockerfile
    assert service["environment"]["GLMLAUNCH_STOP_GRACE"] == "120" and service["stop_grace_period"] == "2m"
    rc, pid, out, err = start(*service["entrypoint"][1:], *service["command"], env=env)
    assert rc == 0, err
    got = json.loads(record.read_text())
    # vLLM ran as glmlaunch's child: another pid, the same argv and environment as exec would give it
    assert got["pid"] != pid and got["env"]["HF_TOKEN"] == HF
    assert got["argv"] == expected_argv(exe, "turnkey", [FITS], env, [])
    [boot] = (Path(env["HOME"]) / "boots").iterdir()
    outcome = json.loads((boot / "outcome.json").read_text())
    assert outcome["pid"] == got["pid"] and outcome["exit"]["status"] == "exit 0"
    assert err.rstrip().splitlines()[-1] == "vllm exited 0"
    assert_no_secret(out, err)
    for path in boot.iterdir():
        assert HF not in path.read_text(errors="replace"), path


def test_without_a_gpu_dry_run_states_the_skip_and_a_launch_exits_8(fake: Fake) -> None:
    pytest.importorskip("glmlaunch.hardware.probe")
    from glmlaunch.errors import NoGpuError
    from glmlaunch.hardware.probe import probe

    try:
        probe()
    except NoGpuError:
        pass
    else:
        pytest.skip("this machine has an NVIDIA driver")
    _, record, env = fake
    rc, _, out, err = start("serve", "-p", "gate", "--set", FITS, "--dry-run", env=env)
    assert rc == 0, err  # a planning machine: no GPU is a note for the dry run
    assert "# check skipped: no GPU to check here; a real launch stops here with exit 8" in out
    assert "from the profile's hardware.memory_per_gpu" in out
    assert out.strip().splitlines()[-1].split()[1] == "serve"
    rc, _, _, err = start("serve", "-p", "gate", "--set", FITS, "--skip-preflight", env=env)
    assert rc == 8 and not record.exists()


# --- what the dry run says the real run would do --------------------------------------------------------


def _no_nvml() -> bool:
    from glmlaunch.errors import NoGpuError
    from glmlaunch.hardware.probe import probe

    try:
        probe()
    except NoGpuError:
        return True
    return False


@pytest.mark.parametrize(
    ("with_vllm", "extra", "code", "stage", "dry_code"),
    [
        # the first blocking stage wins: resolve (6) before check (8); the dry run notes both (a planning
        # machine has neither vLLM nor a GPU)
        (False, [], 6, "resolve", 0),
        (True, [], 8, "check", 0),  # no NVML here: nothing to check
        # the inventory stands in for the check; the preflight stage's first step, the weights check,
        # stops the real launch (the checkpoint is not on disk here, --fetch not given): a note for the
        # dry run, as is the GPU its preflight would need
        (False, ["--inventory", str(INVENTORY)], 6, "resolve", 0),
        (True, ["--inventory", str(INVENTORY)], 10, "preflight", 0),
        (True, ["--inventory", str(INVENTORY), "--skip-preflight"], 0, None, 0),
        # a planning machine without vLLM: the dry run exits 0, the real launch 6
        (False, ["--inventory", str(INVENTORY), "--skip-preflight"], 6, "resolve", 0),
    ],
)
def test_dry_run_tells_what_the_real_run_would_do(
    fake: Fake, with_vllm: bool, extra: list[str], code: int, stage: str | None, dry_code: int
) -> None:
    if not _no_nvml():
        pytest.skip("this machine has an NVIDIA driver")
    _, record, env = fake
    if not with_vllm:
        env = {**env, "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])}
    args = ["serve", "-p", "turnkey", "--set", FITS, *extra]
    rc, _, out, err = start(*args, "--dry-run", "--json", env=env)
    doc = json.loads(out)
    validate(doc)
    assert rc == doc["dry_run_exit_code"] == dry_code, err
    assert doc["exit_code"] == code
    assert doc["would_start"] is (code == 0)
    assert ("a launch would stop at the resolve stage with exit 6: PATH:" in err) is (not with_vllm)
    assert err.strip().splitlines()[-1].startswith("error: ") is (dry_code != 0)
    assert (doc["blocking"][0]["stage"] if doc["blocking"] else None) == stage
    stopped = {s["stage"]: s["exit_code"] for s in doc["stages"] if s["exit_code"] is not None}
    assert (min(stopped, key=list(stopped).index) if stopped else None) == stage
    rc_text, _, text, _ = start(*args, "--dry-run", env=env)
    assert rc_text == dry_code
    assert (f"# a launch would stop at the {stage} stage, exit {code}\n" in text) is (stage is not None)
    assert not record.exists(), "a dry run starts nothing"
    # the real run does what the dry run said
    rc_real, _, _, err_real = start(*args, env=env)
    assert rc_real == code, err_real
    assert record.exists() is (code == 0)


def test_strict_from_the_environment_names_the_variable(fake: Fake) -> None:
    _, record, env = fake
    args = ["serve", "-p", "turnkey", "--set", FITS, "--skip-preflight"]
    args += ["--inventory", str(FIXTURES / "inventories" / "rtxpro6000x4-small-bar1.json")]
    rc, _, _, err = start(*args, env={**env, "GLMLAUNCH_STRICT": "1"})
    assert rc == 7 and not record.exists()
    assert "--strict" not in err  # serve has no such flag
    assert err.strip().splitlines()[-1] == (
        "error: 1 check(s) warned and GLMLAUNCH_STRICT=1 makes warnings fail: bar1"
    )


def test_each_message_once_data_on_stdout(fake: Fake) -> None:
    """A dry run's stages are data (stdout); messages (calibration, the blocker, warning) are said once."""
    _, _, env = fake
    # on the rig's estimates one 1,000,000-token request does not fit: the plan stage says so (stdout),
    # and the one error line on stderr names it as the reason the launch stops
    blocked = "blocked by the request fit: one 1,000,000-token request"
    for extra in (["--inventory", str(FIXTURES / "inventories" / "rtxpro6000x4-small-bar1.json")], []):
        args = ["serve", "-p", "turnkey", "--set", "scheduler.max_model_len=1000000", *extra]
        args.append("--skip-preflight")
        for json_flag in ([], ["--json"]):
            _, _, out, err = start(*args, "--dry-run", *json_flag, env=env)
            # the JSON document holds the blocker as data (verdict, stages); the text in its plan stage
            said = err if json_flag else out + err
            assert err.count("using the rig defaults") == 1, err
            assert err.count(blocked) <= 1, err
            if not json_flag:
                assert out.count(blocked) == 1, out
            for stage in ("resolve", "check", "plan", "preflight", "baseline"):
                assert not any(line.startswith(f"{stage} ") for line in err.splitlines()), err
            if extra:
                assert said.count("BAR1 256.00 MiB") == 1, said
    # a real launch reports its stages as progress on stderr, once each, and prints no data
    _, _, out, err = start(
        "serve", "-p", "turnkey", "--set", FITS, "--inventory", str(INVENTORY), "--skip-preflight", env=env
    )
    assert out == ""
    for stage in ("resolve ok", "check ok", "plan ok", "preflight skipped"):
        said = [line for line in err.splitlines() if line.removeprefix("warning: ").startswith(stage)]
        assert len(said) == 1, err
    assert err.count("using the rig defaults") == 1
