"""The grammar of vLLM's log (glmlaunch.vllmlog), on the lines of the real boot logs.

The lines are read from tests/fixtures/boot-logs/ (five real boots of the target rig, README there) and
tests/fixtures/watch/oom.log (the recorded H200 run whose last line is PyTorch's own OOM message), found by
their content, so every assertion is about a line a real vLLM wrote. The few made-up lines say why a
pattern has two variants.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from glmlaunch.config.units import GIB, MIB
from glmlaunch.vllmlog import events, lines
from glmlaunch.vllmlog.boot import EXL3_ARENA_RE, parse_log_text
from glmlaunch.vllmlog.bootconfig import CROSSOVERS_RE, EXL3_CAPACITIES_RE, parse_boot_config, version_of
from glmlaunch.vllmlog.numbers import count, gib, to_bytes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BOOTS = FIXTURES / "boot-logs"
BASELINE = BOOTS / "vllm-r14-field-baseline-mtp3-c8-v2-server.log"
REFUSED = BOOTS / "vllm-current210-unset-mtp3-v1-server.log"
OOM_LOG = FIXTURES / "watch" / "oom.log"
ALL_LOGS = (*sorted(BOOTS.glob("*.log")), OOM_LOG)


@cache
def raw(path: Path) -> str:
    # the bytes as vLLM wrote them: read_text would turn every \r into \n
    return path.read_bytes().decode("utf-8", "backslashreplace")


def first_line(path: Path, *words: str) -> str:
    """The first physical line (split at ``\\n`` only) holding every word."""
    for line in raw(path).split("\n"):
        if all(w in line for w in words):
            return line
    raise AssertionError(f"no line with {words} in {path.name}")


# --- lines ----------------------------------------------------------------------------------------


def test_lines_strip_colour_and_split_progress_bars() -> None:
    text = raw(BASELINE)
    assert "\x1b" in text and "\r" in text
    got = lines.lines(text)
    assert not any("\x1b" in line or "\r" in line or "\n" in line for line in got)
    assert all(line.strip() for line in got)
    # LMCache colours its level on a terminal: the text itself is kept
    assert "[2026-07-31 11:01:00,405] LMCache INFO: torch_dev=<module 'torch.cuda'" in "\n".join(got)
    # a tqdm bar redrawn 8 times with \r is 8 lines
    bars = [line for line in got if line.startswith("Profiling CUDA graph memory (FULL):")]
    assert len(bars) >= 8


def test_a_prefix_glued_onto_a_progress_bar_starts_a_message_of_its_own() -> None:
    glued = first_line(BASELINE, "Profiling CUDA graph memory (FULL):  88%", "(Worker_TP3_DCP3 pid=229870)")
    msgs = list(lines.iter_messages(glued))
    assert msgs[-1] == lines.Message("Worker_TP3_DCP3", 229870, "Capturing model for speculator...")
    assert msgs[-2].process is None and msgs[-2].text.startswith("Profiling CUDA graph memory (FULL):  88%")


def test_the_prefix_is_consumed_up_to_what_the_process_said() -> None:
    line = first_line(BASELINE, "(Worker_TP1_DCP1 pid=229770)", "Model loading took")
    m = lines.PREFIX_RE.search(line)
    assert m is not None
    assert m.group("proc", "pid", "level", "date", "time", "src", "lineno") == (
        "Worker_TP1_DCP1",
        "229770",
        "INFO",
        "07-31",
        "11:03:53",
        "model_runner.py",
        "394",
    )
    (msg,) = lines.iter_messages(line)
    assert msg == lines.Message(
        "Worker_TP1_DCP1", 229770, "Model loading took 83.28 GiB and 33.346408 seconds"
    )
    # uvicorn's lines under the API server's tag keep their own `INFO:` (not vLLM's logger)
    (ready,) = lines.iter_messages(first_line(BASELINE, "Application startup complete"))
    assert ready == lines.Message("APIServer", 229476, "INFO:     Application startup complete.")


def test_the_process_tag_alone_leaves_the_level_and_source_in_the_text() -> None:
    line = first_line(REFUSED, "RuntimeError: Engine core initialization failed")
    process, rest = lines.process_of(line)
    assert process == "APIServer"
    assert (
        rest
        == " RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
    )
    process, rest = lines.process_of(
        first_line(BASELINE, "(Worker_TP0_DCP0 pid=229732)", "Model loading took")
    )
    assert (process, rest.split("]")[0]) == ("Worker_TP0_DCP0", " INFO 07-31 11:03:53 [model_runner.py:394")
    assert lines.process_of("no tag here") == (None, "no tag here")
    # The two prefix patterns differ on a name no vLLM writes: the tag takes any word, the boot parser
    # only vLLM's names (a word, then rank parts)
    assert lines.process_of("(api_server pid=1) x")[0] == "api_server"
    assert lines.PREFIX_RE.search("(api_server pid=1) x") is None


def test_every_process_of_the_real_logs_is_a_worker_an_engine_or_the_api_server() -> None:
    names = {m.process for path in ALL_LOGS for m in lines.iter_messages(raw(path)) if m.process}
    assert names == {
        "APIServer",
        "EngineCore",
        "Worker",
        "Worker_TP0",
        "Worker_TP0_DCP0",
        "Worker_TP1_DCP1",
        "Worker_TP2_DCP2",
        "Worker_TP3_DCP3",
    }
    assert {n for n in names if lines.is_worker(n)} == {n for n in names if n.startswith("Worker")}
    assert {n for n in names if lines.is_engine(n)} == {"EngineCore"}
    assert {n for n in names if lines.is_ranked(n)} == {n for n in names if n.startswith("Worker_")}


def test_rank_indices_come_from_the_worker_name() -> None:
    assert lines.rank_indices("Worker_TP2_DCP2") == {"tp_rank": 2, "dcp_rank": 2}
    assert lines.rank_indices("Worker_TP0") == {"tp_rank": 0}
    assert lines.rank_indices("EngineCore_DP0") == {"dp_rank": 0}
    assert lines.rank_indices("Worker") == {}
    assert lines.rank_indices("Worker_TP" + "9" * 19) == {}  # a corrupt name is not a rank
    assert lines.tp_index("Worker_TP3_DCP3") == 3
    assert lines.tp_index("Worker_DCP1") is None
    assert lines.tp_index("EngineCore_DP0") is None


# --- numbers --------------------------------------------------------------------------------------


def test_figures_as_vllm_prints_them() -> None:
    assert gib("83.28") == round(83.28 * GIB)
    assert to_bytes("294.6", "MiB") == round(294.6 * MIB)
    assert to_bytes("512.00", "MiB") == 512 * MIB
    assert count("252,416") == 252416


# --- events ---------------------------------------------------------------------------------------


def test_the_ready_lines() -> None:
    assert events.is_ready_line(first_line(BASELINE, "Application startup complete"))
    assert events.is_ready_line(first_line(OOM_LOG, "Starting vLLM API server"))
    assert not events.is_ready_line(first_line(BASELINE, "Model loading took"))
    assert not events.is_ready_line(first_line(BASELINE, "GPU KV cache size:"))


def test_the_milestones_come_in_the_order_the_timeline_expects() -> None:
    order = [events.WEIGHTS_LOADED, events.KV_CACHE_SIZED, events.GRAPHS_CAPTURED, events.STARTUP_COMPLETE]
    for path in sorted(BOOTS.glob("*.log")):
        text = raw(path)
        seen = [text.find(marker) for marker in order]
        found = [i for i in seen if i >= 0]
        assert found == sorted(found), path.name
        assert seen[0] >= 0, path.name  # every boot loaded its weights
    # the complete boot passes all four
    assert all(raw(BASELINE).find(m) >= 0 for m in order)
    assert list(events.MILESTONES) == order
    # each milestone line is read as its milestone (the timeline's phases), other lines as none
    assert [events.milestone_of(first_line(BASELINE, m)) for m in order] == order
    assert events.milestone_of(first_line(BASELINE, "Available KV cache memory")) is None


def test_pytorchs_oom_message_is_one_runtime_event() -> None:
    line = first_line(OOM_LOG, "CUDA out of memory")
    assert events.may_hold_runtime_event(line) and events.is_oom_line(line)
    (event,) = events.runtime_events_of(line, after_ready=True)
    assert event.kind == "oom" and event.after_ready
    assert (event.process, event.gpu) == ("Worker_TP0", 0)
    assert event.tried_bytes == 512 * MIB
    assert event.total_bytes == round(139.80 * GIB)
    assert event.free_bytes == round(67.12 * MIB)
    assert event.line.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB.")
    assert len(event.line) <= 240
    assert events.tried_unit(event.line) == "MiB"
    # the supervisor's diagnosis quotes the figures as printed
    tried = events.TRIED_AS_PRINTED_RE.search(line)
    capacity = events.CAPACITY_AS_PRINTED_RE.search(line)
    assert tried is not None and tried.group(1) == "512.00 MiB"
    assert capacity is not None and capacity.groups() == ("0", "139.80 GiB", "67.12 MiB")
    assert events.exception_of(line) is not None
    assert events.exception_of(line).startswith("torch.OutOfMemoryError: CUDA out of memory.")  # type: ignore[union-attr]


def test_the_oom_variants_differ_where_a_message_is_cut_short() -> None:
    # The figures in bytes need the whole message; the diagnosis quotes what is there.
    cut = first_line(OOM_LOG, "CUDA out of memory").split(". GPU 0")[0]
    assert events.runtime_events_of(cut, after_ready=False) == []
    tried = events.TRIED_AS_PRINTED_RE.search(cut)
    assert tried is not None and tried.group(1) == "512.00 MiB"


def test_no_boot_log_line_is_a_runtime_event_and_the_watch_readings_are() -> None:
    for path in sorted(BOOTS.glob("*.log")):
        assert events.runtime_events_of(raw(path), after_ready=True) == [], path.name
    reading = "2026-12-02T02:10:07+00:00 glmlaunch watch: " + events.free_reading(1, 1234)
    (event,) = events.runtime_events_of(reading, after_ready=True)
    assert (event.kind, event.gpu, event.free_bytes, event.tried_bytes) == ("free", 1, 1234 * MIB, None)


def test_exceptions_and_engine_deaths_of_the_refused_boot() -> None:
    refusal = first_line(REFUSED, "(EngineCore pid=145829) ValueError: To serve at least one request")
    stated = events.exception_of(refusal)
    assert stated is not None and stated.startswith(
        "ValueError: To serve at least one request with the model's max seq len (131072), (0.98 GiB KV cache"
    )
    dead = first_line(REFUSED, "RuntimeError: Engine core initialization failed")
    assert events.is_engine_fatal(dead)
    assert events.exception_of(dead) == (
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
    )
    assert events.exception_of(first_line(REFUSED, "Traceback (most recent call last):")) is None


def test_the_failure_lead_never_hides_a_failure() -> None:
    # one scan rules the common line out before the patterns run: it must pass every line they take
    taken = 0
    for path in ALL_LOGS:
        for line in lines.lines(raw(path)):
            if events.exception_of(line) or events.is_oom_line(line) or events.is_engine_fatal(line):
                taken += 1
                assert events.FAILURE_LEAD_RE.search(line), line
                assert (
                    events.may_state_exception(line)
                    or events.is_oom_line(line)
                    or events.is_engine_fatal(line)
                )
    assert taken > 10


# --- boot lines and the booted configuration -------------------------------------------------------


def test_one_crossover_pattern_for_both_readers() -> None:
    line = first_line(BASELINE, "Configured b12x PCIe crossovers")
    m = CROSSOVERS_RE.search(line)
    assert m is not None and m.groups() == ("65536", "86016", "25165824")
    booted = parse_boot_config(line)
    assert (booted.oneshot_max_bytes, booted.fused_max_bytes, booted.dma_min_bytes) == (
        65536,
        86016,
        25165824,
    )
    (rank,) = parse_log_text(line).ranks
    assert rank.rank == "Worker pid=229732"
    assert rank.crossovers is not None
    assert rank.crossovers.model_dump() == {
        "oneshot_max_bytes": 65536,
        "fused_max_bytes": 86016,
        "dma_min_bytes": 25165824,
    }


def test_the_exl3_plan_line_read_both_ways() -> None:
    line = first_line(BASELINE, "(Worker_TP0_DCP0", "EXL3 mixed Trellis runtime planned")
    arena = EXL3_ARENA_RE.search(line)
    caps = EXL3_CAPACITIES_RE.search(line)
    assert arena is not None and caps is not None
    assert arena.group("tiers") == "((3, 192), (4, 64))"
    assert (
        (arena.group("dec"), arena.group("pre"), arena.group("sch"))
        == caps.groups()[:3]
        == ("32", "1024", "2048")
    )
    assert (arena.group(5), arena.group(6)) == caps.groups()[3:] == ("294.6", "MiB")
    # Without its buffers the line still says what the configuration was, not the arena's size: the
    # booted configuration reads it, the per-rank observation says it could not
    short = line.replace(" buffers=294.6 MiB", "")
    assert parse_boot_config(short).exl3_prefill_capacity == 1024
    (rank,) = parse_log_text(short).ranks
    assert rank.exl3 is None
    assert len(rank.unparsed) == 1
    assert rank.unparsed[0].startswith(
        "exl3_plan: EXL3 mixed Trellis runtime planned: tiers=((3, 192), (4, 64))"
    )


def test_the_memory_lines_of_rank_0() -> None:
    text = (
        "\n".join(
            first_line(BASELINE, "(Worker_TP0_DCP0", words)
            for words in (
                "Model loading took",
                "Available KV cache memory",
                "Estimated MRV2 CUDA graph memory",
                "Free memory on device",
                "Graph capturing finished",
            )
        )
        + "\n"
        + first_line(BASELINE, "GPU KV cache size:")
        + "\n"
        + first_line(BASELINE, "Maximum concurrency for")
    )
    boot = parse_log_text(text)
    (rank,) = boot.ranks
    assert rank.rank == "Worker_TP0_DCP0" and (rank.tp_rank, rank.dcp_rank) == (0, 0)
    assert rank.weights_bytes == gib("83.28") and rank.load_seconds == 33.27287
    assert rank.kv_available_bytes == gib("1.88")
    assert (rank.graph_estimate_bytes, rank.graph_estimate_retained_bytes) == (gib("0.49"), gib("0.42"))
    assert (rank.free_at_start_bytes, rank.total_bytes) == (gib("93.63"), gib("95.01"))
    assert (rank.gpu_memory_utilization, rank.requested_bytes) == (0.92, gib("87.41"))
    assert (rank.peak_activation_bytes, rank.non_torch_bytes, rank.cudagraph_bytes) == (
        gib("1.32"),
        gib("0.45"),
        gib("0.14"),
    )
    assert (rank.kv_bytes_to_requested, rank.kv_bytes_to_gpu) == (2232367739, 8914281984)
    assert rank.start_headroom_bytes == 8914281984 - 2232367739
    assert (rank.graph_capture_seconds, rank.graph_capture_bytes) == (31.0, gib("0.14"))
    assert rank.unparsed == [] and "graph_pool" in rank.missing
    assert (boot.engine.kv_cache_tokens, boot.engine.max_concurrency_tokens) == (252416, 131072)
    assert boot.engine.max_concurrency == 1.93


def test_the_version_as_each_line_states_it() -> None:
    version = "0.11.2.dev280+gilded.gnosis.v20.vllm749050e.si8110e3e.fi801d57a.cu132.20260730.r14"
    mtp0 = BOOTS / "vllm-current210-cap1024-mtp0-v1-server.log"
    # the start-up banner: box-drawing art, then the version (its line ends in \r)
    (banner,) = [line for line in lines.lines(raw(mtp0)) if "version 0.11.2.dev280" in line]
    assert version_of(banner) == version
    assert parse_boot_config(raw(mtp0)).vllm_version == version
    # a dev build says `version dev` in its banner and `(vdev)` when the engine starts
    assert version_of(first_line(BASELINE, "\u2588  version dev")) == "dev"
    assert version_of(first_line(BASELINE, "Initializing a V1 LLM engine (vdev)")) == "dev"
    assert version_of(first_line(BASELINE, "Model loading took")) is None


def test_every_real_log_parses_to_the_same_boot_message_by_message_as_whole() -> None:
    # the watch reads a live log a line at a time, ingest reads the file: the same events either way
    for path in ALL_LOGS:
        text = raw(path)
        whole = [e for e in parse_log_text(text).runtime_events]
        ready = False
        one_by_one: list[events.RuntimeEvent] = []
        for line in text.split("\n"):
            for e in events.runtime_events_of(line, after_ready=ready):
                if e.model_dump(exclude={"process"}) not in [
                    x.model_dump(exclude={"process"}) for x in one_by_one
                ]:
                    one_by_one.append(e)
            ready = ready or events.is_ready_line(line)
        assert one_by_one == whole, path.name
    assert [e.kind for e in parse_log_text(raw(OOM_LOG)).runtime_events] == ["oom"]
