"""Resource limits for every file and value glmlaunch parses: profiles, ``--set``, inventories, records, logs.

Input is untrusted: a profile from a colleague, a cache directory on a shared disk, a boot log from a bug
report. Each parser checks these limits before (or while) it builds anything, so hostile input gives a
one-line error (exit 2), or a skipped cache file with one warning, and never a crash, a hang or a memory
blow-up. Readers live in :mod:`glmlaunch.config.safeload`; every limit has a test in
``tests/config/test_hostile_input.py``.

The caps are generous: each is at least ten times the largest legitimate input seen so far, and says why.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB

MAX_PROFILE_BYTES = 1 * MIB
"""Largest profile file read. Shipped profiles are 1-10 KiB; a profile with a few thousand ``env``
entries is still under 200 KiB."""

MAX_INVENTORY_BYTES = 8 * MIB
"""Largest ``--inventory`` JSON file read. A captured 8-GPU inventory (every pair, every process) is
about 80 KiB; 8 MiB leaves room for hosts with many GPUs and many processes."""

MAX_RECORD_BYTES = 8 * MIB
"""Largest calibration record read from the cache. A record is 20-100 KiB (the boot's settings, the
rank observations, notes); a larger file is skipped with a warning."""

MAX_BOOT_LOG_BYTES = 256 * MIB
"""Largest boot log ``calibrate ingest`` reads. A real vLLM boot log is about 300 KiB, a few MiB with
``VLLM_LOGGING_LEVEL=DEBUG`` or NCCL_DEBUG=INFO on 8 ranks; 256 MiB keeps a long-running server's whole
log acceptable (the parser is linear, ~1 s per 50 MiB) while refusing a runaway file or a device."""

MAX_OVERRIDE_CHARS = 64 * KIB
"""Longest ``--set`` / ``GLMLAUNCH_SET`` / ``GLMLAUNCH_<KEY>`` value parsed as YAML. A list of CUDA
graph capture sizes, the longest real value, is under 2 KiB."""

MAX_NESTING_DEPTH = 64
"""Deepest nesting of mappings / lists in any YAML or JSON document. The deepest real structure (a
calibration record's boot settings) nests 7 levels; Python's recursion limit is about 1000."""

MAX_YAML_ALIASES = 100
"""Most alias uses (``*name``) in one YAML document. Profiles are written by hand and use a handful; a
"billion laughs" document needs many."""

MAX_YAML_NODES = 100_000
"""Most nodes (scalars, lists, mappings) in one YAML document counted with every alias expanded, so an
alias bomb is refused before it is built. A large profile has a few hundred."""

MAX_KEYS = 20_000
"""Most mapping keys in one YAML or JSON document, all levels together. The largest shipped profile has
about 150, a record about 1,500; the layering and provenance walk over keys is linear up to here."""

MAX_TRACE_SAMPLES = 86_400
"""Most samples an NVML trace (``watch --record``) holds: twelve hours at the default 2 Hz. The recorder
stops recording there (the watch goes on) and ``--replay`` reads every trace it can write: the two share
this bound and :data:`MAX_TRACE_BYTES`, not :data:`MAX_KEYS` (a one-GPU sample is five keys: 20,000 keys
were 34 minutes)."""

MAX_TRACE_BYTES = 32 * MIB
"""Largest NVML trace written or read. A sample is ~80 bytes per GPU plus ~25 per process: twelve hours of
four GPUs is ~15 MiB, of eight busy GPUs ~30 MiB. Loading one builds a few hundred bytes of objects per
byte of JSON at most, linear in its size."""

MAX_INT_DIGITS = 100
"""Most digits in an integer literal (YAML, JSON, ``--set``). A 64-bit value has at most 20 digits.
Python refuses to convert more than 4,300 (``sys.get_int_max_str_digits``) with a ValueError; checking
here turns that into a one-line error and avoids the quadratic conversion below it."""

MAX_EXTENDS_DEPTH = 32
"""Longest ``extends:`` chain (profiles above the one named). The shipped chains are 2-3 long."""

MAX_CAPTURE_SIZE = 65_536
"""Largest CUDA-graph capture size, and most capture sizes in a list. vLLM captures at most
``max_num_batched_tokens`` tokens per graph (the shipped profiles stop at 64); a rule like ``max: 2**31``
would otherwise build a list of two billion sizes before anything could refuse it."""

MAX_TOKENS = 2**31 - 1
"""Largest token count any setting may hold (batched tokens, sequences, model length, capacities). vLLM
indexes tokens with int32 positions; anything larger cannot be served and would overflow the float
arithmetic of the budget."""

NAME_MAX = 255
"""Longest file name (one path component) in bytes, the Linux / macOS ``NAME_MAX``. A profile name,
an ``extends:`` target or a cache directory component longer than this is refused by name instead of
surfacing the operating system's ENAMETOOLONG."""

__all__ = [
    "MAX_BOOT_LOG_BYTES",
    "MAX_CAPTURE_SIZE",
    "MAX_EXTENDS_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_INVENTORY_BYTES",
    "MAX_KEYS",
    "MAX_NESTING_DEPTH",
    "MAX_OVERRIDE_CHARS",
    "MAX_PROFILE_BYTES",
    "MAX_RECORD_BYTES",
    "MAX_TOKENS",
    "MAX_TRACE_BYTES",
    "MAX_TRACE_SAMPLES",
    "MAX_YAML_ALIASES",
    "MAX_YAML_NODES",
    "NAME_MAX",
]
