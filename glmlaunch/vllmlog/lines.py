"""Lines of a vLLM log, and the process each message came from.

Every worker line carries a prefix such as ``(Worker_TP1_DCP1 pid=4242) INFO 11-28 10:15:32
[gpu_worker.py:312]``; EngineCore lines carry ``(EngineCore_DP0 pid=…)``. Real logs are messy, so

* ANSI colour codes are stripped (vLLM colours the process prefix on a TTY);
* text splits on both ``\\n`` and ``\\r`` (tqdm progress bars end in ``\\r`` with no newline), and
  :func:`iter_messages` also at every process prefix found in the middle of a physical line (another
  process's output glued onto a bar), so interleaved ranks do not mix.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Z0-9]|\x1b[=>]")
LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")
_SEGMENT_RE = re.compile(r"[^\r\n]+")

#: The whole prefix of a message: the process tag, then the level, date, time and source vLLM's logger
#: writes (each optional), all consumed, so the message text starts with what the process said. A tag's
#: name is vLLM's: a word, then ``_TP1``-like rank parts.
PREFIX_RE = re.compile(
    r"\((?P<proc>[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z]+[0-9]+)*)\s+pid=(?P<pid>[0-9]+)\)\s*"
    r"(?:(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+"
    r"(?:(?P<date>[0-9]{2}-[0-9]{2})\s+(?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?)\s+)?"
    r"(?:\[(?P<src>[^\]\s:]+)(?::(?P<lineno>[0-9]+))?\]\s?)?)?"
)
#: The process tag alone, any word for a name: what the supervisor names a failing process by. Looser
#: in the name and stricter in the spacing than :data:`PREFIX_RE`, and it leaves the level, time and
#: source in the text that follows (a finding shows them); the two disagree on names no vLLM writes
#: (``(api_server pid=1)``), so each reader keeps the one its output was built on.
PROCESS_TAG_RE = re.compile(r"\((?P<proc>[A-Za-z][A-Za-z0-9_]*) pid=(?P<pid>[0-9]+)\)")
#: a rank part of a worker's name: ``_TP1``, ``_DCP1``, ``_PP0``, ``_DP0``, ``_EP2``
RANK_PART_RE = re.compile(r"_(TP|DCP|PP|DP|EP)([0-9]+)")
_RANK_FIELDS = {"TP": "tp_rank", "DCP": "dcp_rank", "PP": "pp_rank", "DP": "dp_rank"}


@dataclass(frozen=True)
class Message:
    """One message: the process its prefix names (None: no prefix), its pid, and what it said."""

    process: str | None
    pid: int | None
    text: str


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text)


def iter_lines(text: str) -> Iterator[str]:
    """The non-blank lines of ``text``, ANSI codes stripped, split at ``\\r\\n``, ``\\r`` and ``\\n``, one
    at a time: a 64 MiB log is never held twice more as a list of its lines. (No ANSI code spans a line
    break, so stripping each line is stripping the text.)"""
    for m in _SEGMENT_RE.finditer(text):
        line = m.group(0)
        if "\x1b" in line:
            line = strip_ansi(line)
        if line.strip():
            yield line


def lines(text: str) -> list[str]:
    """:func:`iter_lines` as a list."""
    return list(iter_lines(text))


def small_int(text: str) -> int | None:
    """A pid or rank index from a prefix; None when it is absurdly long (a corrupt line)."""
    return int(text) if len(text) <= 18 else None


def iter_messages(text: str) -> Iterator[Message]:
    """Split a raw log into messages, each attributed to the process named in its prefix (or None)."""
    for segment in iter_lines(text):
        starts = list(PREFIX_RE.finditer(segment))
        if not starts:
            yield Message(None, None, segment)
            continue
        if starts[0].start() > 0 and segment[: starts[0].start()].strip():
            # progress-bar text glued in front of a prefixed line
            yield Message(None, None, segment[: starts[0].start()])
        for i, m in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(segment)
            yield Message(m.group("proc"), small_int(m.group("pid")), segment[m.end() : end])


def process_of(line: str) -> tuple[str | None, str]:
    """The process a line's tag names (:data:`PROCESS_TAG_RE`) and the text after the tag; (None, the
    line) without a tag."""
    tag = PROCESS_TAG_RE.search(line)
    if tag is None:
        return None, line
    return tag.group("proc"), line[tag.end() :]


def is_worker(process: str) -> bool:
    return process.startswith("Worker") or process.startswith("VllmWorker")


def is_engine(process: str) -> bool:
    return process.startswith("EngineCore") or process.startswith("LLMEngine")


def is_ranked(process: str) -> bool:
    """Whether a worker's name carries its rank (``Worker_TP1_DCP1``; ``Worker`` is not renamed yet)."""
    return RANK_PART_RE.search(process) is not None


def rank_indices(process: str) -> dict[str, int]:
    """``{"tp_rank": 1, "dcp_rank": 1}`` for ``Worker_TP1_DCP1`` (an absurdly long index is left out)."""
    return {
        _RANK_FIELDS[k]: int(v)
        for k, v in RANK_PART_RE.findall(process)
        if k in _RANK_FIELDS and len(v) <= 18
    }


def tp_index(process: str) -> int | None:
    """The tensor-parallel rank in a worker's name: its first ``_TPn`` part."""
    for m in RANK_PART_RE.finditer(process):
        if m.group(1) == "TP":
            return int(m.group(2))
    return None
