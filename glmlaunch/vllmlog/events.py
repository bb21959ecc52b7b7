"""What a running vLLM says that matters at once: OOMs, free memory, ready, exceptions, milestones.

* A CUDA out-of-memory, PyTorch's ``CUDA out of memory. Tried to allocate X. GPU N has a total capacity
  of T of which Y is free``, and a free-memory reading ``GPU N: X MiB free`` (as ``glmlaunch`` writes it)
  are :class:`RuntimeEvent` s, with whether they came after the ready line (the runtime, not the boot);
  each counts only where vLLM's logger or a traceback opens a message with it (glmlaunch's own line for a
  reading), never inside another message's text (a prompt the request logger echoes).
* The ready line: ``Application startup complete`` (or the API server starting).
* A Python exception (``torch.OutOfMemoryError: …``), an engine's fatal error, the markers of an OOM.
* The milestones a boot passes (weights loaded, KV cache sized, graphs captured, startup complete).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from glmlaunch.vllmlog.lines import Message, iter_messages
from glmlaunch.vllmlog.numbers import NUM, to_bytes

# --- milestones -----------------------------------------------------------------------------------

#: each worker, once its weights are in (``Model loading took 43.01 GiB memory and 61.3 seconds``)
WEIGHTS_LOADED = "Model loading took"
#: the EngineCore, once the profiling run sized the KV cache (``GPU KV cache size: 1,234 tokens``)
KV_CACHE_SIZED = "GPU KV cache size:"
#: each worker, after CUDA graph capture (``Graph capturing finished in 12 secs, took 1.23 GiB``)
GRAPHS_CAPTURED = "Graph capturing finished"
#: the API server serves: the line that ends a boot
STARTUP_COMPLETE = "Application startup complete"
#: the API server starting (vLLM says it before startup completes)
API_SERVER_START = "Starting vLLM API server"
READY_RE = re.compile(f"{STARTUP_COMPLETE}|{API_SERVER_START}")
#: the milestones in the order a boot passes them
MILESTONES = (WEIGHTS_LOADED, KV_CACHE_SIZED, GRAPHS_CAPTURED, STARTUP_COMPLETE)
_MILESTONE_RE = re.compile("|".join(re.escape(m) for m in MILESTONES))


def milestone_of(text: str) -> str | None:
    """The milestone (one of :data:`MILESTONES`) a log line states, or None."""
    m = _MILESTONE_RE.search(text)
    return m.group(0) if m else None


# --- out of memory --------------------------------------------------------------------------------

#: the words every CUDA OOM message holds (a cheap test before the patterns below)
OUT_OF_MEMORY = "out of memory"
#: the markers of an OOM line, PyTorch's message or its exception's name
OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError")
_SIZE = NUM + r" ?(B|KiB|MiB|GiB)"
#: the failed allocation, in bytes: the number and its unit
TRIED_RE = re.compile(r"Tried to allocate " + _SIZE)
#: PyTorch's whole message: tried (1, 2), the GPU (3, optional), total (4, 5), free (6, 7)
OOM_RE = re.compile(
    r"CUDA out of memory\. " + TRIED_RE.pattern + r"\. GPU "
    r"(?:\(?([0-9]+)\)? )?has a total capacity of " + _SIZE + " of which " + _SIZE + " is free"
)
#: The allocation and the GPU's capacity as printed (``2.00 GiB``), each found on its own: the
#: supervisor's one-line diagnosis quotes them. Looser than :data:`OOM_RE` (any ``[KMGT]i?B`` unit, a
#: message cut short after the allocation still names it), which the figures in bytes need.
TRIED_AS_PRINTED_RE = re.compile(r"Tried to allocate ([0-9.]+ ?[KMGT]?i?B)")
CAPACITY_AS_PRINTED_RE = re.compile(
    r"GPU ([0-9]+) has a total capacity of ([0-9.]+ ?[KMGT]?i?B) of which ([0-9.]+ ?[KMGT]?i?B) is free"
)
#: the free-memory reading glmlaunch writes (:func:`free_reading`): GPU (1), free (2, 3)
FREE_RE = re.compile(r"\bGPU ([0-9]+): " + NUM + r" ?(MiB|GiB) free\b")
_FREE_LEAD = " free"

# --- where an event may be stated ------------------------------------------------------------------
# A figure counts only where vLLM's logger or a Python traceback states it, at the opening of the message:
# the same words inside a message (a prompt echoed by vLLM's request logger, ``Received request …:
# prompt: '… CUDA out of memory. Tried to allocate 900.00 GiB …'``) are someone's text, never evidence.
# vLLM's logger writes a prompt with %r, so a prompt cannot open a line of its own.

#: vLLM's logger header where no process tag consumed it (:data:`glmlaunch.vllmlog.lines.PREFIX_RE`
#: consumes it after a tag): level, then date and time, then ``[file.py:123]``, each but the level optional
LOGGER_HEAD_RE = re.compile(
    r"[ \t]*(?:(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)[ \t]+"
    r"(?:[0-9]{2}-[0-9]{2}[ \t]+[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?[ \t]+)?"
    r"(?:\[[^\]\s]+\][ \t]*)?)?"
)
#: an OOM opening a message: PyTorch's words, bare or as the message of an exception line
#: (``torch.OutOfMemoryError: CUDA out of memory.``, ``RuntimeError: CUDA out of memory.``), or an
#: ``…OutOfMemoryError`` exception line of any message
OOM_OPENING_RE = re.compile(
    r"(?:(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*(?:Error|Exception): )?CUDA out of memory\."
    r"|(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_]*OutOfMemoryError\b"
)
#: the prefix glmlaunch's own readings carry (``2026-12-04T03:50:00+00:00 glmlaunch watch: ``)
_READING_HEAD_RE = re.compile(r"[ \t]*(?:[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.+-]+Z? glmlaunch watch: )?")


def statement(text: str) -> str:
    """A message's own words: ``text`` after the vLLM logger header a process tag left in it, if any."""
    head = LOGGER_HEAD_RE.match(text)
    return text[head.end() :] if head else text


def oom_statement(text: str) -> str | None:
    """The OOM a message states from its opening words on (:data:`OOM_OPENING_RE`), else None."""
    said = statement(text)
    return said if OOM_OPENING_RE.match(said) else None


def reading_statement(msg: Message) -> str | None:
    """A free-memory reading as glmlaunch writes it, opening a line no vLLM process wrote, else None."""
    if msg.process is not None:
        return None
    head = _READING_HEAD_RE.match(msg.text)
    said = msg.text[head.end() :] if head else msg.text
    return said if said.startswith("GPU ") else None


def free_reading(gpu: int, free_mib: int) -> str:
    """A free-memory reading as ``glmlaunch watch --readings`` writes it, and :data:`FREE_RE` reads it."""
    return f"GPU {gpu}: {free_mib} MiB free"

# --- failures -------------------------------------------------------------------------------------

#: A Python exception line: ``torch.OutOfMemoryError: CUDA out of memory…`` (the name, the message).
#: A name starts only where a dotted name can (not after ``word.``): a search that tried every part of
#: a long ``a.b.c.…`` chain again would be quadratic in the line (a 256 KiB line: minutes).
def exception_name_re(suffixes: str = "Error|Exception", rest: str = r": (.+)") -> re.Pattern[str]:
    """A dotted exception name ending in one of ``suffixes`` (group 1), then ``rest``: the one grammar of
    an exception's name, for every reader of one (the probes of a managed LMCache server too)."""
    return re.compile(
        r"(?<![A-Za-z0-9_])(?<![A-Za-z0-9_]\.)"
        rf"((?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Z][A-Za-z0-9_]*(?:{suffixes})){rest}"
    )


EXCEPTION_RE = exception_name_re()
#: the words :data:`EXCEPTION_RE` needs (a cheap test before it)
EXCEPTION_LEADS = ("Error: ", "Exception: ")
#: What vLLM writes when its engine dies (v1: core.py, core_client.py, engine/utils.py, exceptions.py).
ENGINE_FATAL_MARKERS = (
    "EngineDeadError",
    "EngineCore encountered a fatal error",
    "EngineCore failed to start",
    "Engine core initialization failed",
)
#: one scan that rules out a line holding none of the failures above (the common line)
FAILURE_LEAD_RE = re.compile(
    "|".join(re.escape(m) for m in (*OOM_MARKERS, *ENGINE_FATAL_MARKERS, *EXCEPTION_LEADS))
)


def exception_statement(text: str) -> str | None:
    """A message's statement (:func:`statement`) where it opens with a Python exception line
    (``ValueError: …``, as a traceback ends or vLLM's logger repeats it), else None."""
    said = statement(text)
    return said if EXCEPTION_RE.match(said) else None


def exception_of(text: str) -> str | None:
    """``Name: message`` of the first exception a line states where a traceback or vLLM's logger states
    one (the opening of a message, after its process tag and logger header), or None; the same words
    inside a message (a prompt the request logger echoes) are no exception."""
    if not may_state_exception(text):
        return None
    for msg in iter_messages(text):
        said = exception_statement(msg.text)
        if said is not None:
            m = EXCEPTION_RE.match(said)
            assert m is not None
            return f"{m.group(1)}: {m.group(2).strip()}"
    return None


def is_oom_line(text: str) -> bool:
    """Whether a line states an OOM where vLLM's logger or a traceback does (:func:`oom_statement`)."""
    if not any(m in text for m in OOM_MARKERS):
        return False
    return any(oom_statement(msg.text) is not None for msg in iter_messages(text))


def is_engine_fatal(text: str) -> bool:
    return any(m in text for m in ENGINE_FATAL_MARKERS)


def may_state_exception(text: str) -> bool:
    return any(lead in text for lead in EXCEPTION_LEADS)


def is_ready_line(text: str) -> bool:
    """Whether a log line is vLLM's API server saying it is ready (what makes later events runtime ones)."""
    return READY_RE.search(text) is not None


def tried_unit(line: str) -> str | None:
    """The unit the failed allocation was printed in (``MiB``: two decimals of a MiB)."""
    m = TRIED_RE.search(line)
    return m.group(2) if m else None


# --- runtime events -------------------------------------------------------------------------------

RuntimeKind = Literal["oom", "free"]


class RuntimeEvent(BaseModel):
    """Runtime evidence in a serve log: a CUDA OOM (``Tried to allocate X … of which Y is free``) or a
    free-memory reading (``GPU N: X MiB free``, as ``glmlaunch`` writes it), with when it happened."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    kind: RuntimeKind
    process: str | None = None
    gpu: int | None = None
    tried_bytes: int | None = None
    free_bytes: int
    total_bytes: int | None = None
    #: after the API server said it was ready (startup complete): the runtime, not the boot
    after_ready: bool
    line: str


def may_hold_runtime_event(text: str) -> bool:
    """False for a line that can hold no :class:`RuntimeEvent` (a cheap test before the patterns)."""
    return OUT_OF_MEMORY in text or _FREE_LEAD in text


def _opens(said: str, at: int) -> bool:
    """Whether PyTorch's words at ``at`` are where the statement opens (after an exception's name, if any)."""
    if at == 0:
        return True
    name = said[: at - 2]
    return said[:at].endswith(": ") and name.replace(".", "_").isidentifier()


def runtime_event(msg: Message, ready: bool) -> RuntimeEvent | None:
    """The OOM or free-memory reading one message states; ValueError or OverflowError on a figure too
    large to convert."""
    said = oom_statement(msg.text) if OUT_OF_MEMORY in msg.text else None
    at = said.find(OOM_MARKERS[0]) if said is not None else -1
    # PyTorch's words where the statement opens with them, or right after the exception's name
    m = OOM_RE.match(said, at) if said is not None and at >= 0 and _opens(said, at) else None
    if m:
        gpu = m.group(3)
        return RuntimeEvent(
            kind="oom",
            process=msg.process,
            gpu=int(gpu) if gpu is not None else None,
            tried_bytes=to_bytes(m.group(1), m.group(2)),
            free_bytes=to_bytes(m.group(6), m.group(7)),
            total_bytes=to_bytes(m.group(4), m.group(5)),
            after_ready=ready,
            line=msg.text.strip()[:240],
        )
    reading = reading_statement(msg) if _FREE_LEAD in msg.text else None
    f = FREE_RE.match(reading) if reading is not None else None
    if f:
        return RuntimeEvent(
            kind="free",
            process=msg.process,
            gpu=int(f.group(1)),
            free_bytes=to_bytes(f.group(2), f.group(3)),
            after_ready=ready,
            line=msg.text.strip()[:240],
        )
    return None


def runtime_events_of(text: str, *, after_ready: bool) -> list[RuntimeEvent]:
    """The OOMs and free-memory readings in a few lines of a log, parsed as the boot parser
    (:func:`glmlaunch.vllmlog.boot.parse_log_text`) parses them: the watch reads a live log line by line."""
    if not may_hold_runtime_event(text):
        return []
    found: list[RuntimeEvent] = []
    for msg in iter_messages(text):
        try:
            event = runtime_event(msg, after_ready)
        except (ValueError, OverflowError):
            event = None
        if event is not None:
            found.append(event)
    return found
