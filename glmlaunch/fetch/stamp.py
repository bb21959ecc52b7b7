"""The identity stamp of a fetched checkpoint, and the rule that one model never lands on another.

Upstream's entrypoint (malaiwah/glm52-exl3-vast ``entrypoint.sh`` @eba43a5) keys a model directory by its
repository: ``.download-repo`` holds the repository and is written *before* any byte lands (L807-811: "a
partial download followed by a family/variant switch must hit the mismatch gate above, not interleave two
checkpoints' identically-named shards in one directory"); ``.download-complete`` holds ``repo@revision``
and is written only after ``snapshot_download`` returned (L896-898); a directory that holds another
repository is refused (L770-783: "Refusing to download one model on top of another"); and completion is
gated on the marker, not on ``config.json`` (L799-805: small files land first).

glmlaunch keeps that contract in one JSON stamp (:class:`Stamp`): written with ``complete: false`` before the
download, rewritten with ``complete: true``, the resolved commit and every file's name and size once they
are verified. Upstream's own markers are read too, so a directory the appliance downloaded is recognised.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from glmlaunch.errors import WeightsError
from glmlaunch.fetch.target import CheckpointTarget
from glmlaunch.files import write_text

STAMP_VERSION = 1
#: upstream's markers (entrypoint.sh L766-767)
UPSTREAM_REPO_MARKER = ".download-repo"
UPSTREAM_COMPLETE_MARKER = ".download-complete"


@dataclass(frozen=True)
class StampedFile:
    path: str
    size: int


@dataclass(frozen=True)
class Stamp:
    repository: str
    revision: str | None
    commit: str | None
    complete: bool
    files: tuple[StampedFile, ...] = ()
    safetensors_bytes: int | None = None
    stamped_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": STAMP_VERSION,
            "repository": self.repository,
            "revision": self.revision,
            "commit": self.commit,
            "complete": self.complete,
            "stamped_at": self.stamped_at,
            "total_bytes": self.total_bytes,
            "safetensors_bytes": self.safetensors_bytes,
            "files": [{"path": f.path, "size": f.size} for f in self.files],
        }

    @classmethod
    def from_json(cls, doc: Any) -> Stamp:
        if not isinstance(doc, dict) or doc.get("schema_version") != STAMP_VERSION:
            raise ValueError("not a glmlaunch checkpoint stamp of version 1")
        files = tuple(StampedFile(str(f["path"]), int(f["size"])) for f in doc.get("files") or [])
        payload = doc.get("safetensors_bytes")
        return cls(
            repository=str(doc["repository"]),
            revision=doc.get("revision"),
            commit=doc.get("commit"),
            complete=bool(doc.get("complete")),
            files=files,
            safetensors_bytes=int(payload) if payload is not None else None,
            stamped_at=str(doc.get("stamped_at") or ""),
        )


@dataclass(frozen=True)
class UpstreamMarkers:
    """What upstream's entrypoint left in a directory: its repository, and ``repo[@revision]`` once done."""

    repository: str | None
    complete: str | None

    @property
    def complete_repository(self) -> str | None:
        return self.complete.split("@", 1)[0] if self.complete else None

    @property
    def complete_revision(self) -> str | None:
        return self.complete.split("@", 1)[1] if self.complete and "@" in self.complete else None


def read_stamp(path: Path | None) -> Stamp | None:
    """The stamp at ``path``; None when there is none. An unreadable one is an error (it names a model,
    and which one is not known: guessing could put one model on top of another)."""
    if path is None or not path.is_file():
        return None
    try:
        return Stamp.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise WeightsError(
            f"the checkpoint stamp {path} cannot be read: {exc}",
            hint="delete it if that directory holds nothing you need, then fetch again",
        ) from None


def write_stamp(path: Path, stamp: Stamp) -> None:
    write_text(path, json.dumps(stamp.to_json(), indent=1) + "\n", make_parents=True)


def read_upstream(directory: Path) -> UpstreamMarkers:
    def one(name: str) -> str | None:
        try:
            text = (directory / name).read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return text or None

    return UpstreamMarkers(one(UPSTREAM_REPO_MARKER), one(UPSTREAM_COMPLETE_MARKER))


def known_repository(stamp: Stamp | None, upstream: UpstreamMarkers | None) -> str | None:
    """The repository a directory's bytes belong to, by its stamp or upstream's markers."""
    if stamp is not None:
        return stamp.repository
    if upstream is not None:
        return upstream.repository or upstream.complete_repository
    return None


def check_identity(target: CheckpointTarget, stamp: Stamp | None, upstream: UpstreamMarkers | None) -> None:
    """Refuse a destination that holds another repository's checkpoint (upstream entrypoint.sh L770-783)."""
    held = known_repository(stamp, upstream)
    if held is None or target.repository is None or held == target.repository:
        return
    raise WeightsError(
        f"{target.directory} already holds {held}, not {target.repository}: one model is never "
        "downloaded on top of another",
        key="model.path",
        value=str(target.directory),
        hint="point model.path at another directory, or delete that one first",
    )


def identity(target: CheckpointTarget) -> tuple[CheckpointTarget, Stamp | None, UpstreamMarkers | None]:
    """The destination's stamp and upstream's markers, the repository completed from them; refused when
    they name another repository."""
    if target.kind == "local-dir":
        stamp = read_stamp(target.stamp_path(None))
        upstream = read_upstream(target.directory)
        if target.repository is None:
            target = replace(target, repository=known_repository(stamp, upstream))
        check_identity(target, stamp, upstream)
        return target, stamp, upstream
    return target, read_stamp(target.stamp_path(target.resolved_commit())), None
