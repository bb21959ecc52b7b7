"""The plan's look at the hub for a checkpoint glmlaunch does not know: its safetensors payload from the
hub's file metadata (:func:`.hub.remote_weights`: the files' sizes, then their headers), nothing downloaded.

Asked only where nothing better can price W (the commands call it for a hub repository that is neither
in the documented weights table nor on disk), with a short timeout per request, never when the caller
set ``HF_HUB_OFFLINE`` (the profiles' own ``HF_HUB_OFFLINE=1`` is for vLLM, not for this look), and
once: the answer is kept under glmlaunch's cache directory (``<cache>/hub-metadata/``), for good for a
pinned commit (its files cannot change), a day for a branch or tag or for an answer whose headers did not
come; a hub that did not answer is not asked again for ten minutes, so planning twice offline does not
wait twice.

The answer is a :class:`~glmlaunch.ledger.inputs.CheckpointOnDisk` of origin ``hub``: priced (the tensor
bytes, the files, and the tensors by how vLLM places them on the TP ranks) or not, with the reason. The
token is sent as huggingface_hub sends it and is never written to the cache or a message.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.errors import GlmlaunchError
from glmlaunch.fetch.payload import TensorSplit
from glmlaunch.fetch.target import COMMIT, HubAccess, caller_offline, is_local_path, resolve_target
from glmlaunch.files import write_text
from glmlaunch.ledger.inputs import CheckpointOnDisk

#: the cache's folder under glmlaunch's cache directory, and its format
FOLDER = "hub-metadata"
SCHEMA = 1
#: how long a branch's answer and a failure are kept (a pinned commit's answer is kept for good)
BRANCH_TTL_S = 24 * 3600
FAILURE_TTL_S = 600
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def cache_file(cache_dir: Path, repository: str, revision: str | None, endpoint: str) -> Path:
    """Where the answer for ``repository``@``revision`` from ``endpoint`` is kept."""
    host = _UNSAFE.sub("_", endpoint.split("://", 1)[-1]).strip("_")
    name = _UNSAFE.sub("_", f"{repository.replace('/', '--')}@{revision or 'main'}")
    return cache_dir / FOLDER / host / f"{name}.json"


def _read(path: Path, pinned: bool) -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if doc.get("schema") != SCHEMA or not isinstance(doc.get("at"), int | float):
        return None
    age = time.time() - float(doc["at"])
    if "error" in doc:
        return doc if age < FAILURE_TTL_S else None
    # headers that did not come (a stall, a timeout) are asked again after a day, even of a commit
    complete = doc.get("tensors") is not None or not doc.get("files")
    return doc if (pinned and complete) or age < BRANCH_TTL_S else None


def _write(path: Path, doc: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps({"schema": SCHEMA, "at": time.time(), **doc}, sort_keys=True) + "\n")
    except (OSError, GlmlaunchError):
        pass  # a cache that cannot be written only means asking again next time


def hub_checkpoint(
    config: DeploymentConfig,
    *,
    caller_env: Mapping[str, str],
    launch_env: Mapping[str, str],
    cache_dir: Path,
) -> CheckpointOnDisk | None:
    """``config``'s checkpoint as the hub's file metadata describes it; None for a local directory.

    ``caller_env`` decides whether the hub may be asked (``HF_HUB_OFFLINE``); ``launch_env`` (the
    caller's with the profile's ``env:`` over it) the endpoint and the token, as for the fetch."""
    path = config.model.path
    if not path or is_local_path(path, launch_env):
        return None
    target = resolve_target(config, launch_env)
    assert target.repository is not None
    access = HubAccess.from_env(launch_env)
    revision = target.revision
    pinned = revision is not None and bool(COMMIT.match(revision))
    where = cache_file(cache_dir, target.repository, revision, access.endpoint)
    doc = _read(where, pinned)
    if doc is None and caller_offline(caller_env):
        return _unpriced(config, access, f"HF_HUB_OFFLINE is set: the hub at {access.endpoint} was not asked")
    if doc is None:
        doc = _ask(target, access)
        _write(where, doc)
    if "error" in doc:
        return _unpriced(config, access, str(doc["error"]))
    return _priced(config, access, doc)


def _ask(target: Any, access: HubAccess) -> dict[str, Any]:
    from glmlaunch.fetch.hub import remote_weights

    try:
        remote = remote_weights(target, access)
    except GlmlaunchError as exc:
        return {"error": exc.message}
    return {
        "repository": remote.repository,
        "revision": remote.revision,
        "commit": remote.commit,
        "files": remote.files,
        "file_bytes": remote.file_bytes,
        "tensors": [list(t) for t in remote.tensors] if remote.tensors is not None else None,
    }


def _unpriced(config: DeploymentConfig, access: HubAccess, why: str) -> CheckpointOnDisk:
    return CheckpointOnDisk(config.model.path or "", access.endpoint, None, 0, why, origin="hub")


def _priced(config: DeploymentConfig, access: HubAccess, doc: dict[str, Any]) -> CheckpointOnDisk:
    name = f"{access.endpoint}/{doc['repository']}@{str(doc['commit'])[:12]}"
    if not doc.get("files"):
        return _unpriced(config, access, f"{name} has no safetensors files")
    tensors = doc.get("tensors")
    if tensors is None:
        return CheckpointOnDisk(
            config.model.path or "",
            name,
            int(doc["file_bytes"]),
            int(doc["files"]),
            f"the hub's file sizes of {doc['files']} safetensors files (headers not read: the TP split "
            "takes the geometry's replicated tensors)",
            origin="hub",
        )
    split = TensorSplit.of(((str(t), int(n)) for t, n in tensors), config.model.geometry)
    return CheckpointOnDisk(
        config.model.path or "",
        name,
        split.total,
        int(doc["files"]),
        f"the hub's file metadata and safetensors headers of {doc['files']} files, nothing downloaded "
        f"({len(tensors)} tensors: {split.split:,} B split over TP, {split.replicated:,} B replicated; the "
        f"MTP layer {split.mtp:,} B split, {split.mtp_replicated:,} B replicated, {split.shared:,} B "
        "shared with the target)",
        origin="hub",
        replicated_bytes=split.replicated,
        mtp_bytes=split.mtp,
        mtp_replicated_bytes=split.mtp_replicated,
    )
