"""Where an event may be stated (issue 31): an OOM or a free-memory reading counts only where vLLM's
logger or a Python traceback opens a message with it, or glmlaunch's own reading line; the same words inside
a message (a prompt vLLM's request logger echoes) are text, never evidence. Real logs, a real store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli

from glmlaunch.vllmlog import events
from glmlaunch.vllmlog.boot import parse_log_text

#: a real boot of the rig (/work/shared/boot-logs, the same file)
BOOT = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log"
READY = "(APIServer pid=141000) INFO:     Application startup complete."
PYTORCH = (
    "CUDA out of memory. Tried to allocate 900.00 GiB. GPU 0 has a total capacity of 94.97 GiB of which "
    "10.00 MiB is free."
)
#: vLLM's request logger (vllm/entrypoints/logger.py) writes the prompt with %r: one line, quoted
PROMPT_ECHO = (
    "(APIServer pid=141000) INFO 07-31 06:00:00 [logger.py:39] Received request chatcmpl-9f: prompt: "
    f"'[gMASK]<sop><|user|>why does my job say {PYTORCH} and GPU 0: 1 MiB free?<|assistant|>', "
    "params: SamplingParams(n=1, temperature=0.6), prompt_token_ids: None, lora_request: None."
)
WORKER_OOM = (
    "(Worker_TP0_DCP0 pid=141281) ERROR 07-31 06:00:00 [multiproc_executor.py:700] torch.OutOfMemoryError: "
    "CUDA out of memory. Tried to allocate 48.00 MiB. GPU 0 has a total capacity of 94.97 GiB of which "
    "10.00 MiB is free."
)


@pytest.mark.parametrize(
    "line",
    [
        PROMPT_ECHO,
        # the same echo with no process tag (an older API server), and glued after a progress bar
        PROMPT_ECHO.split(") ", 1)[1],
        "Loading: 12%|█▏  \r" + PROMPT_ECHO,
        # a reading's words inside a message of a vLLM process, and an OOM inside another exception's text
        "(APIServer pid=1) INFO 07-31 06:00:00 [logger.py:39] Received request: prompt: 'GPU 0: 1 MiB free'",
        f"(APIServer pid=1) ERROR 07-31 06:00:00 [serving.py:9] ValueError: prompt said '{PYTORCH}'",
        f"(Worker_TP0 pid=1) INFO 07-31 06:00:00 [x.py:1] note: {PYTORCH}",
    ],
)
def test_words_inside_a_message_are_no_event(line: str) -> None:
    assert events.runtime_events_of(line, after_ready=True) == []
    assert not events.is_oom_line(line)


@pytest.mark.parametrize(
    "line",
    [
        WORKER_OOM,
        # the parent echoes the worker's traceback without a tag; an older PyTorch names RuntimeError
        WORKER_OOM.split("] ", 1)[1],
        "ERROR 07-31 06:00:00 [core.py:12] RuntimeError: " + PYTORCH,
        "(EngineCore_DP0 pid=1) ERROR torch.OutOfMemoryError: " + PYTORCH,
        "(Worker_TP1 pid=7) ERROR 07-31 06:00:00 [multiproc_executor.py:839] " + PYTORCH,
    ],
)
def test_an_oom_opening_a_logger_or_traceback_line_is_one(line: str) -> None:
    (event,) = events.runtime_events_of(line, after_ready=True)
    assert event.kind == "oom" and event.total_bytes is not None
    assert events.is_oom_line(line)


def test_glmlaunchs_own_reading_is_one_and_a_tagged_one_is_not() -> None:
    own = "2026-12-04T03:50:00+00:00 glmlaunch watch: " + events.free_reading(2, 2593) + " (rank 2, GPU-x)"
    (event,) = events.runtime_events_of(own, after_ready=True)
    assert (event.kind, event.gpu, event.free_bytes) == ("free", 2, 2593 << 20)
    tagged = "(Worker_TP2 pid=3) INFO " + events.free_reading(2, 1)
    assert events.runtime_events_of(tagged, after_ready=True) == []


def test_a_real_boot_log_parses_as_before_and_keeps_its_events() -> None:
    text = BOOT.read_text(encoding="utf-8")
    plain = parse_log_text(text)
    with_echo = parse_log_text(text + READY + "\n" + PROMPT_ECHO + "\n" + WORKER_OOM + "\n")
    assert plain.runtime_events == []
    # the echo is no event; the worker's OOM after it is the one
    assert [(e.kind, e.tried_bytes) for e in with_echo.runtime_events] == [("oom", 48 << 20)]
    assert with_echo.ranks == plain.ranks and with_echo.engine == plain.engine


def test_an_echoed_prompt_is_never_ingested_as_an_oom(clean_env: dict[str, str], tmp_path: Path) -> None:
    """The reproducer: a serve log whose request logger echoed a prompt quoting a 900 GiB OOM; ingested, it
    made every later plan of the configuration demand 908 GiB. Now the record holds no such event."""
    serve = tmp_path / "serve.log"
    serve.write_text(BOOT.read_text(encoding="utf-8") + READY + "\n" + PROMPT_ECHO + "\n", encoding="utf-8")
    profile = tmp_path / "boot.yaml"
    assert run_cli("profiles", "import", str(BOOT), "-o", str(profile), env=clean_env).returncode == 0
    before = json.loads(run_cli("plan", "-p", str(profile), "--json", env=clean_env).stdout)
    done = run_cli("calibrate", "ingest", str(serve), env=clean_env)
    assert done.returncode == 0, done.stderr
    [record] = (Path(clean_env["GLMLAUNCH_CACHE_DIR"]) / "calibration").glob("*.json")
    assert json.loads(record.read_text())["boot"]["runtime_events"] == []
    after = json.loads(run_cli("plan", "-p", str(profile), "--json", env=clean_env).stdout)
    assert after["budget"]["runtime_demand_bytes"] < 2 << 30
    assert after["budget"]["runtime_demand_bytes"] <= before["budget"]["runtime_demand_bytes"] * 2


REFUSAL = (
    "ValueError: To serve at least one request with the model's max seq len (131072), (0.98 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (0.82 GiB). Based on the available memory, "
    "the estimated maximum model length is 110000."
)


def test_an_exception_or_a_refusal_inside_a_message_is_none_and_opening_one_is() -> None:
    echo = PROMPT_ECHO.replace(PYTORCH, REFUSAL)
    assert events.exception_of(echo) is None
    assert (
        events.exception_of("(EngineCore_DP0 pid=1) ERROR 07-31 05:55:42 [core.py:1359] " + REFUSAL)
        == REFUSAL
    )
    assert events.exception_of(REFUSAL) == REFUSAL  # the parent's unprefixed echo of the traceback
    text = BOOT.read_text(encoding="utf-8")
    served = parse_log_text(text + READY + "\n" + echo + "\n")
    # a prompt quoting vLLM's refusal neither refuses the boot nor is its failure
    assert not served.refused and served.failure is None and served.complete
    refused = parse_log_text(
        text + "(EngineCore_DP0 pid=1) ERROR 07-31 05:55:42 [core.py:1359] " + REFUSAL + "\n"
    )
    assert refused.refused
