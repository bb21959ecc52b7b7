"""On PYTHONPATH of a glmlaunch process under test: every parse of a log is written down (its source and
length) in the file ``COUNT_PARSES_FILE`` names, one line each, and the parse still runs
(tests/supervise/test_supervise_parse_once.py)."""

from __future__ import annotations

import os

_FILE = os.environ.get("COUNT_PARSES_FILE")
if _FILE:
    import glmlaunch.vllmlog.boot as _boot

    _real = _boot.parse_log_text

    def _counted(text: str, *, source: str = "<text>", digest: object = None) -> object:
        with open(_FILE, "a", encoding="utf-8") as fh:
            fh.write(f"{len(text)} {source}\n")
        return _real(text, source=source, digest=digest)  # type: ignore[arg-type]

    _boot.parse_log_text = _counted  # type: ignore[assignment]
