"""What a fetched checkpoint is (:class:`FetchedCheckpoint`), and the safetensors payload of its weights.

:class:`WeightsPayload` is read from the fetched files' own safetensors headers (the tensor bytes each
header declares: :func:`safetensors_bytes`), never from file names. What it can say per rank honestly is the
ledger's payload estimate (:func:`glmlaunch.ledger.weights.payload_figure`): the payload split over TP as
the checkpoint splits (the replicated BF16 tensors whole on every rank), plus the measured
payload-to-loaded offset. A documented or calibrated W (a real boot's "Model loading took") is better than
that estimate, and the ledger keeps it so.

How the plan uses it: the ledger reads no file. The commands look the checkpoint up where vLLM will load
it (``glmlaunch.fetch.status.checkpoint_on_disk``: a hub-cache snapshot or a local ``model.path``) and hand
:meth:`WeightsPayload.on_disk` to the plan, which carries it to the ledger in its inputs.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.inputs import CheckpointOnDisk
from glmlaunch.ledger.weights import Figure, payload_figure


def safetensors_bytes(path: Path) -> int:
    """Sum of tensor data sizes declared in one safetensors header (8-byte little-endian length + JSON)."""
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


@dataclass(frozen=True)
class WeightsPayload:
    """The tensor bytes of a checkpoint's safetensors files, as their headers declare them."""

    directory: Path
    #: sum of the tensors' data sizes over every ``*.safetensors`` file
    safetensors_bytes: int
    #: the files' sizes on disk (headers included)
    file_bytes: int
    files: int

    @classmethod
    def read(cls, directory: Path, paths: Iterable[str]) -> WeightsPayload | None:
        """The payload of ``paths`` (repository paths) under ``directory``; None without safetensors files."""
        names = sorted(p for p in paths if p.endswith(".safetensors"))
        if not names:
            return None
        tensors = on_disk = 0
        for name in names:
            path = directory / name
            tensors += safetensors_bytes(path)
            on_disk += path.stat().st_size
        return cls(directory, tensors, on_disk, len(names))

    def on_disk(self, config: DeploymentConfig, detail: str) -> CheckpointOnDisk:
        """What the plan carries to the ledger: this payload, of ``config``'s checkpoint, verified as
        ``detail`` says."""
        return CheckpointOnDisk(
            config.model.path or "", str(self.directory), self.safetensors_bytes, self.files, detail
        )

    def per_rank(self, config: DeploymentConfig) -> Figure:
        """The ledger's payload estimate of W per rank for ``config`` (its TP, MTP, online quantization)."""
        return payload_figure(config, self.safetensors_bytes, self.files, str(self.directory))

    def to_json(self, config: DeploymentConfig | None = None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "directory": str(self.directory),
            "safetensors_bytes": self.safetensors_bytes,
            "file_bytes": self.file_bytes,
            "files": self.files,
            "per_rank": None,
        }
        if config is not None:
            fig = self.per_rank(config)
            doc["per_rank"] = {"bytes": fig.value, "origin": fig.origin, "formula": fig.formula}
        return doc


@dataclass(frozen=True)
class FetchedCheckpoint:
    """A checkpoint on disk, verified: exactly the files of one revision, by name and size."""

    repository: str
    revision: str | None
    commit: str | None
    #: the directory vLLM loads (the hub cache's snapshot, or the local directory)
    directory: Path
    total_bytes: int
    files: int
    payload: WeightsPayload | None
