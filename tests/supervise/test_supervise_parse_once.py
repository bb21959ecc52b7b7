"""A supervised boot that never becomes ready is parsed once after vLLM exits (issue 31 follow-up: the
supervisor parsed boot.log for its verdict, then the record's ingest parsed it again). Real processes: the
fake vLLM replays a real refused boot; the glmlaunch process writes down each parse it makes
(count_parses/sitecustomize.py, on its PYTHONPATH)."""

from __future__ import annotations

import os
from pathlib import Path

from test_supervise import (
    REFUSED_LOG,
    _stop_what_was_started,
    env,
    finish,
    outcome,
    profiles,
    start,
    stored_record,
)

__all__ = ["_stop_what_was_started", "env", "profiles"]
HOOK = Path(__file__).resolve().parent / "count_parses"


def test_a_boot_that_never_became_ready_is_parsed_once(
    profiles: dict[str, Path], env: dict[str, str], tmp_path: Path
) -> None:
    parses = tmp_path / "parses"
    env = dict(
        env,
        GLMLAUNCH_RIG_DEFAULTS=str(profiles["optimistic"]),
        COUNT_PARSES_FILE=str(parses),
        PYTHONPATH=os.pathsep.join(p for p in (str(HOOK), env.get("PYTHONPATH", "")) if p),
    )
    code, _, err = finish(start(profiles["refused"], env, log=str(REFUSED_LOG), then="exit:1"))
    assert code == 1, err
    doc = outcome(env)
    assert doc["outcome"] == "refused" and not doc["ready"]
    record = stored_record(env)  # the record is made: from the one parse
    assert record["supervised"]["outcome"] == "refused"
    assert record["boot"]["source"].endswith("boot.log")
    calls = parses.read_text().splitlines()
    of_boot_log = [c for c in calls if c.endswith("boot.log")]
    size = len(REFUSED_LOG.read_text(encoding="utf-8"))
    assert of_boot_log == [f"{size} {record['boot']['source']}"], calls
