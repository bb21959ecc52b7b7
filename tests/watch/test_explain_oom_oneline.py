"""``explain-oom`` on the OOM an operator pastes on its own: the first-request OOM of the qualified 3.42
shape at its natural pool (r28 doc L25-31: a 48 MiB mixed-Trellis temporary with 32.81 MiB free, fixed
upstream by pinning 2,032 blocks), one line, no ready line, no configuration in the log (issue 31 item 8)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from conftest import FIXTURES, run_cli

from glmlaunch.calibrate.apply import _with
from glmlaunch.config.resolve import resolve_config
from glmlaunch.plan.plan import make_plan

LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 48.00 MiB. GPU 0 has a total capacity "
    "of 95.01 GiB of which 32.81 MiB is free."
)
NATURAL = ("-p", "exl3-tr3-3.42bpw", "--set", "memory.num_gpu_blocks_override=null")
KEEPS = ("ok", "below-margin")


def _log(tmp_path: Path, *lines: str) -> Path:
    log = tmp_path / "oom.log"
    log.write_text("\n".join(lines or (LINE,)) + "\n")
    return log


def _json(env: dict[str, str], *args: str) -> dict[str, object]:
    done = run_cli("explain-oom", *args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    doc: dict[str, object] = json.loads(done.stdout)
    return doc


def test_the_canonical_oom_is_the_mixed_trellis_prefill_and_the_pin_keeps_it(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    doc = _json(clean_env, *NATURAL, str(_log(tmp_path)))
    (oom,) = doc["ooms"]  # type: ignore[misc]
    # no ready line: the log does not say when; both phases are read, the runtime one explains it best
    assert oom["when"] == "unknown"
    assert [c["phase"] for c in oom["candidates"]] == ["runtime", "startup"]
    assert oom["phase"] == "runtime" and oom["candidates"][0]["unexplained_bytes"] == 0
    entry = oom["entry"]
    assert entry["name"] == "demand.online_quant" and "mixed-Trellis" in entry["reader"]
    assert entry["phase"] == "long-prefill" and entry["matched_by"] == "position"
    # the fix upstream qualified: 2,032 pinned blocks; each fix is planned and keeps the demand
    fixes = {f["kind"]: f for f in oom["fixes"]}
    assert fixes["pool-pin"]["value"] == 2032
    config = resolve_config("exl3-tr3-3.42bpw", ("memory.num_gpu_blocks_override=null",)).config
    for fix in oom["fixes"]:
        assert fix["verdict"] in KEEPS and fix["runtime_margin_bytes"] >= 0
    pinned = make_plan(_with(config, "memory.num_gpu_blocks_override", 2032))
    assert pinned.verdict.status in KEEPS
    assert pinned.budget.runtime_margin == fixes["pool-pin"]["runtime_margin_bytes"]


def test_a_latent_entry_is_never_the_most_likely(clean_env: dict[str, str], tmp_path: Path) -> None:
    plan = make_plan(resolve_config("exl3-tr3-3.42bpw", ("memory.num_gpu_blocks_override=null",)).config)
    latent = {e.name for e in plan.ledger.latent}
    assert "paged_logits.direct" in latent  # the plan's own "not reached by GLM decode"
    # read both ways, and as a startup OOM for certain (a boot cut before its KV-cache line)
    boot = (FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log").read_text().splitlines()
    cut = next(i for i, ln in enumerate(boot) if "Available KV cache memory" in ln)
    for log in (_log(tmp_path), _log(tmp_path / "..", *boot[:cut], "(Worker_TP0_DCP0 pid=1) ERROR " + LINE)):
        (oom,) = _json(clean_env, *NATURAL, str(log))["ooms"]  # type: ignore[misc]
        for c in oom["candidates"]:
            assert c["entry"] is None or c["entry"]["name"] not in latent, c
        startup = next(c for c in oom["candidates"] if c["phase"] == "startup")
        assert any("paged_logits.direct" in n and "latent" in n for n in startup["notes"])


def test_the_text_says_which_profile_it_assumed(clean_env: dict[str, str], tmp_path: Path) -> None:
    log = _log(tmp_path)
    done = run_cli("explain-oom", str(log), env=clean_env)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert (
        first == f"against profile turnkey (assumed: {log.name} shows no configuration; -p NAME for another)"
    )
    named = run_cli("explain-oom", *NATURAL, str(log), env=clean_env)
    assert named.stdout.splitlines()[0] == "against profile exl3-tr3-3.42bpw"
    assert "most likely: while serving" in named.stdout and "less likely: during startup" in named.stdout
    doc = _json(clean_env, str(log))
    assert doc["profile"] == "turnkey" and doc["profile_assumed"] is True


def _hint(stderr: str) -> list[str]:
    line = next(ln for ln in stderr.splitlines() if "glmlaunch explain-oom" in ln)
    words = shlex.split(line[line.index("glmlaunch explain-oom") :].split(" (or ")[0])
    assert words[0] == "glmlaunch" and words[-1] == "--ingest"
    return words[1:]


def _plan(env: dict[str, str], *args: str) -> dict[str, object]:
    doc: dict[str, object] = json.loads(run_cli("plan", *args, "--json", env=env).stdout)
    return doc


def test_the_printed_hint_works_and_the_next_plan_carries_the_demand(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    log = _log(tmp_path)
    before = _plan(clean_env, "-p", "turnkey")
    done = run_cli("explain-oom", str(log), env=clean_env)
    assert done.returncode == 0, done.stderr
    hint = _hint(done.stderr)
    assert hint[:3] == ["explain-oom", "-p", "turnkey"]  # the profile it assumed, named
    stored = run_cli(*hint, env=clean_env)
    assert stored.returncode == 0, stored.stderr
    assert "the next plan of turnkey: runtime demand" in stored.stderr
    after = _plan(clean_env, "-p", "turnkey")
    assert "the runtime demand is raised by record" in str(after["calibration"])
    d0 = before["budget"]["runtime_demand_bytes"]  # type: ignore[index]
    d1 = after["budget"]["runtime_demand_bytes"]  # type: ignore[index]
    # the demand the OOM proves: the plan's margin - free + tried, read against the same plan
    margin = before["budget"]["margin_bytes"]  # type: ignore[index]
    assert d1 > d0 and d1 >= margin - round(32.81 * 2**20) + 48 * 2**20 - 2**20
    assert after["verdict"]["status"] == "runtime-oom"  # type: ignore[index]


def test_ingest_without_a_profile_names_the_command_that_works(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    log = _log(tmp_path)
    done = run_cli("explain-oom", str(log), "--ingest", env=clean_env)
    assert done.returncode == 2
    last = done.stderr.splitlines()[-1]
    assert "the log shows no configuration" in last
    again = run_cli(*_hint(last), env=clean_env)
    assert again.returncode == 0, again.stderr
    assert "saved" in again.stderr
    doc = _plan(clean_env, "-p", "turnkey")
    assert "the runtime demand is raised by record" in str(doc["calibration"])


def test_a_startup_oom_stores_nothing_and_says_why(clean_env: dict[str, str], tmp_path: Path) -> None:
    boot = (FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log").read_text().splitlines()
    cut = next(i for i, ln in enumerate(boot) if "Available KV cache memory" in ln)
    # the workers' loading lines only: a boot that shows no configuration, stopped before its KV pool
    lines = [ln for ln in boot[:cut] if "Model loading took" in ln]
    log = _log(tmp_path, *lines, "(Worker_TP0_DCP0 pid=1) ERROR " + LINE)
    done = run_cli("explain-oom", "-p", "turnkey", str(log), "--ingest", env=clean_env)
    assert done.returncode == 0, done.stderr
    assert "nothing stored: a startup OOM proves no runtime demand" in done.stderr
    assert "the runtime demand is raised" not in str(_plan(clean_env, "-p", "turnkey")["calibration"])


def test_a_pool_pin_that_holds_less_than_the_context_comes_with_the_context_it_holds(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    """turnkey at its natural pool: the pin that keeps the demand holds fewer tokens than max_model_len, so
    the fix sets both (vLLM refuses the pin alone: one max_model_len request must fit the pool)."""
    args = ("-p", "turnkey", "--set", "memory.num_gpu_blocks_override=null")
    (oom,) = _json(clean_env, *args, str(_log(tmp_path)))["ooms"]  # type: ignore[misc]
    pin = next(f for f in oom["fixes"] if f["kind"] == "pool-pin")
    blocks = pin["value"]
    key, context = pin["sets"][1].split("=")
    assert pin["sets"][0] == pin["set"] == f"memory.num_gpu_blocks_override={blocks}"
    assert key == "scheduler.max_model_len" and int(context) < 524288
    config = resolve_config("turnkey", ("memory.num_gpu_blocks_override=null",)).config
    alone = make_plan(_with(config, "memory.num_gpu_blocks_override", blocks))
    assert not alone.budget.request_fits  # the pin alone: vLLM refuses it
    both = make_plan(_with(_with(config, "memory.num_gpu_blocks_override", blocks), key, int(context)))
    assert both.verdict.status in KEEPS and both.budget.request_fits
    text = run_cli("explain-oom", *args, str(_log(tmp_path)), env=clean_env).stdout
    assert f"memory.num_gpu_blocks_override={blocks} " in text  # the table: one row, both settings
    assert f"scheduler.max_model_len={context}" in text


def test_a_two_key_fix_is_typed_as_two_set_arguments() -> None:
    """The headline watch events carry ("would have kept it: ...") gives each key its own --set."""
    from glmlaunch.watch.oom import Fix

    also = (("scheduler.max_model_len", 518016),)
    fix = Fix("pool-pin", "memory.num_gpu_blocks_override", 4047, "", "ok", 0, also)
    assert fix.set_args == "--set memory.num_gpu_blocks_override=4047 --set scheduler.max_model_len=518016"
    assert fix.to_json()["sets"] == ["memory.num_gpu_blocks_override=4047", "scheduler.max_model_len=518016"]
