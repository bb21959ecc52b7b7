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

from glmlaunch.config.schema import DeploymentConfig, ModelGeometry
from glmlaunch.ledger.inputs import CheckpointOnDisk
from glmlaunch.ledger.weights import Figure, payload_figure, tensor_role

#: the longest header read (safetensors itself refuses a header above 100 MB: safetensors/src/tensor.rs
#: MAX_HEADER_SIZE)
MAX_HEADER_BYTES = 100_000_000


def header_tensors(path: Path) -> dict[str, int]:
    """Every tensor's data size declared in one safetensors header, by name.

    The header is read as the format defines it (an 8-byte little-endian length, then that many bytes of
    JSON whose entries carry ``data_offsets``), not through the ``safetensors`` package: that package is
    not a dependency of glmlaunch (it is in the test extra only), and its ``safe_open`` memory-maps the
    whole file and wants a tensor framework to hand tensors to, where only the header is wanted. The hub
    path parses the same header with huggingface_hub (:mod:`.hub`)."""
    with path.open("rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        if n > MAX_HEADER_BYTES:
            raise ValueError(f"{path.name}: a {n}-byte header is not a safetensors header")
        header = json.loads(fh.read(n))
    out: dict[str, int] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        out[name] = int(end) - int(start)
    return out


def safetensors_bytes(path: Path) -> int:
    """Sum of tensor data sizes declared in one safetensors header (8-byte little-endian length + JSON)."""
    return sum(header_tensors(path).values())


@dataclass(frozen=True)
class TensorSplit:
    """A checkpoint's tensor bytes by how vLLM places them on the TP ranks
    (:func:`glmlaunch.ledger.weights.tensor_role`)."""

    split: int = 0
    replicated: int = 0
    mtp: int = 0
    mtp_replicated: int = 0
    #: the MTP layer's own embedding, which the drafter shares with the target (not loaded again)
    shared: int = 0

    @classmethod
    def of(cls, tensors: Iterable[tuple[str, int]], geometry: ModelGeometry) -> TensorSplit:
        sums = {"split": 0, "replicated": 0, "mtp": 0, "mtp-replicated": 0, "shared": 0}
        for name, nbytes in tensors:
            sums[tensor_role(name, geometry)] += nbytes
        return cls(sums["split"], sums["replicated"], sums["mtp"], sums["mtp-replicated"], sums["shared"])

    @property
    def total(self) -> int:
        return self.split + self.replicated + self.mtp + self.mtp_replicated + self.shared


@dataclass(frozen=True)
class WeightsPayload:
    """The tensor bytes of a checkpoint's safetensors files, as their headers declare them."""

    directory: Path
    #: sum of the tensors' data sizes over every ``*.safetensors`` file
    safetensors_bytes: int
    #: the files' sizes on disk (headers included)
    file_bytes: int
    files: int
    #: the tensors by how they are placed on the TP ranks (their names, from the headers)
    split: TensorSplit | None = None

    @classmethod
    def read(
        cls, directory: Path, paths: Iterable[str], geometry: ModelGeometry | None = None
    ) -> WeightsPayload | None:
        """The payload of ``paths`` (repository paths) under ``directory``; None without safetensors files.
        With ``geometry`` (the model's layer count decides which layer is the MTP layer), the tensors are
        classified too."""
        names = sorted(p for p in paths if p.endswith(".safetensors"))
        if not names:
            return None
        tensors: list[tuple[str, int]] = []
        on_disk = 0
        for name in names:
            path = directory / name
            tensors.extend(header_tensors(path).items())
            on_disk += path.stat().st_size
        split = TensorSplit.of(tensors, geometry) if geometry is not None else None
        return cls(directory, sum(n for _, n in tensors), on_disk, len(names), split)

    def on_disk(self, config: DeploymentConfig, detail: str) -> CheckpointOnDisk:
        """What the plan carries to the ledger: this payload, of ``config``'s checkpoint, verified as
        ``detail`` says."""
        split = self.split
        return CheckpointOnDisk(
            config.model.path or "",
            str(self.directory),
            self.safetensors_bytes,
            self.files,
            detail,
            replicated_bytes=split.replicated if split is not None else None,
            mtp_bytes=split.mtp if split is not None else None,
            mtp_replicated_bytes=split.mtp_replicated if split is not None else None,
        )

    def per_rank(self, config: DeploymentConfig) -> Figure:
        """The ledger's payload estimate of W per rank for ``config`` (its TP, MTP, online quantization)."""
        return payload_figure(
            config,
            self.safetensors_bytes,
            self.files,
            str(self.directory),
            tensors=self.on_disk(config, "") if self.split is not None else None,
        )

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
