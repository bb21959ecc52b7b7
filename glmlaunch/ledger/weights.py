"""Weights per rank: the profile's value, calibration, or an estimate from safetensors headers.

Order: ``calibration.weights_bytes`` (calibrated) > ``model.weights_per_rank`` (profile) > the local model
directory's ``*.safetensors`` headers (sum of tensor byte ranges / TP; estimate: replicated tensors and
quantization metadata make the real split uneven) > a table of known models (r14 boot logs) scaled by TP.
Reading headers is the only file I/O in the ledger; it is cached per (directory, mtimes).
"""

from __future__ import annotations

import json
import os
import struct
from functools import lru_cache
from pathlib import Path

from glmlaunch.ledger.context import Context, Draft, fmt_int

GIB = 1024**3

#: "Model loading took 83.28 GiB" on r14 TP4 boots of the EXL3 3.0 bpw build.
KNOWN_WEIGHTS: dict[str, tuple[int, int, str]] = {
    "brandonmusic/GLM-5.2-EXL3-TR3-3.0bpw": (
        int(83.28 * GIB),
        4,
        "r14 boot log 'Model loading took 83.28 GiB' at TP4",
    ),
}
FALLBACK = KNOWN_WEIGHTS["brandonmusic/GLM-5.2-EXL3-TR3-3.0bpw"]


def safetensors_bytes(path: Path) -> int:
    """Sum of tensor data sizes declared in one safetensors header (8-byte length + JSON)."""
    with path.open("rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    total = 0
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        total += int(end) - int(start)
    return total


@lru_cache(maxsize=16)
def _dir_bytes(directory: str, _stamp: tuple[tuple[str, int, int], ...]) -> tuple[int, int]:
    files = sorted(Path(directory).glob("*.safetensors"))
    return sum(safetensors_bytes(f) for f in files), len(files)


def model_dir_bytes(directory: str) -> tuple[int, int] | None:
    if not os.path.isdir(directory):
        return None
    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        return None
    stamp = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    return _dir_bytes(directory, stamp)


def entries(ctx: Context) -> list[Draft]:
    cfg = ctx.config
    tp = cfg.parallel.tp
    cal = ctx.calibrated("weights_bytes")
    path = cfg.model.path
    if cal is not None:
        # A term model says how it knows W: logged by a boot (calibrated) or carried over (estimate).
        o = getattr(ctx.calibration, "weights_origin", None) or "calibrated"
        why = ctx.calibration_note("w")
        v, f = cal, f"calibration.weights_bytes = {fmt_int(cal)}" + (f" ({why})" if why else "")
    elif cfg.model.weights_per_rank is not None:
        v, o, f = (
            cfg.model.weights_per_rank,
            "default",
            f"model.weights_per_rank = {fmt_int(cfg.model.weights_per_rank)}",
        )
    else:
        found = model_dir_bytes(path) if path else None
        if found is not None:
            total, nfiles = found
            v, o = -(-total // tp), "estimate"
            f = f"safetensors headers of {path}: {fmt_int(total)} B in {nfiles} files"
            f += f" / TP {tp} = {fmt_int(v)}"
        else:
            base, base_tp, why = KNOWN_WEIGHTS.get(path or "", FALLBACK)
            v = base * base_tp // tp
            o = "default" if (path in KNOWN_WEIGHTS and tp == base_tp) else "estimate"
            f = f"{fmt_int(base)} * {base_tp} / {tp} = {fmt_int(v)} ({why})"
    return [
        Draft(
            name="weights",
            subsystem="weights",
            requested_bytes=v,
            count=1,
            kind="torch",
            lifetime="budget-term",
            condition="always",
            reader="the model",
            formula=f,
            origin=o,  # type: ignore[arg-type]
            alloc="fixed",
        )
    ]


def key(ctx: Context) -> tuple[object, ...]:
    """Everything :func:`entries` reads (the ledger memoizes on it; a model directory is read once)."""
    cfg = ctx.config
    return (
        cfg.parallel.tp,
        cfg.model.path,
        cfg.model.weights_per_rank,
        ctx.calibrated("weights_bytes"),
        ctx.calibration_note("w"),
        getattr(ctx.calibration, "weights_origin", None),
    )
