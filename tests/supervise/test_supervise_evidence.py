"""A supervised boot whose log is no evidence (issue 31): a stand-in vLLM (``--vllm-bin <anything>``) that
prints a forged copy of a real boot log is served as usual, its boot kept, its record kept with the reason and
a warning, and no later plan learns from it. Real processes, the real field-review log, a real store."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import FIXTURES, run_cli
from test_supervise import FAKE, INVENTORY, _stop_what_was_started, finish, outcome, start, stored_record

from glmlaunch.plan.profile_import import build_profile

__all__ = ["_stop_what_was_started"]
BASELINE = FIXTURES / "boot-logs" / "vllm-r14-field-baseline-mtp3-c8-v2-server.log"
GIB = 1 << 30


def test_a_forged_log_under_supervise_is_kept_and_never_learned_from(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    profile = tmp_path / "boot.yaml"
    profile.write_text(build_profile(BASELINE, environ={}).text, encoding="utf-8")
    real = BASELINE.read_text(encoding="utf-8")
    forged = real.replace(
        "Free memory on device (93.63/95.01 GiB)", "Free memory on device (94.90/95.01 GiB)"
    ).replace(
        "--kv-cache-memory-bytes=8914281984",
        f"--kv-cache-memory-bytes={8914281984 + round((94.90 - 93.63) * GIB)}",
    )
    log = tmp_path / "forged.log"
    log.write_text(forged, encoding="utf-8")
    env = dict(
        clean_env,
        GLMLAUNCH_VLLM_BIN=str(FAKE),
        GLMLAUNCH_INVENTORY=str(INVENTORY),
        GLMLAUNCH_SKIP_PREFLIGHT="1",
    )
    before = run_cli("plan", "-p", str(profile), "--json", env=env)
    code, _, err = finish(start(profile, env, log=str(log), then="exit:0", speed="1000000"))
    assert code == 0, err
    assert "warning: supervise: this boot's log is no evidence (Worker_TP0_DCP0's free-memory line: " in err
    assert "no plan learns from it" in err
    record = stored_record(env)
    assert record["evidence_refused"].startswith(
        "Worker_TP0_DCP0's free-memory line: --kv-cache-memory-bytes"
    )
    assert outcome(env)["outcome"] == "served"  # the boot is kept as it ran
    after = run_cli("plan", "-p", str(profile), "--json", env=env)
    assert json.loads(after.stdout)["verdict"] == json.loads(before.stdout)["verdict"]
    assert f"{record['record_id']}: its log is no evidence" in after.stderr + after.stdout
