"""``serve``'s weights check, part of its preflight stage: is the pinned checkpoint on disk, complete?

Offline and cheap (a stamp read and a ``stat`` per file; no hub): the launch then runs offline as the
profiles say (``HF_HUB_OFFLINE=1`` for vLLM). Present means, in order of evidence:

* glmlaunch's stamp says complete, and every file it lists is there with its size;
* (hub cache) huggingface_hub's own tree listing of the commit (``get_cached_repo_tree``, written by its
  ``snapshot_download``) lists files that are all there with their sizes;
* (local directory) upstream's completion marker names this repository (entrypoint.sh L896-898).

A local directory with weights but no stamp or marker is the operator's own selection (upstream's
``MODEL_READ_ONLY`` "explicit immutable checkpoint selection", entrypoint.sh L785-797): ``unverified``, and
the launch goes on saying so. Anything else is missing: ``serve --fetch`` fetches it first (the container's
entrypoint does), otherwise the launch stops naming ``glmlaunch fetch``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from glmlaunch.config.resolve import Resolved
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import format_size
from glmlaunch.errors import GlmlaunchError, WeightsError
from glmlaunch.fetch import disk
from glmlaunch.fetch.documented import documented_size
from glmlaunch.fetch.payload import FetchedCheckpoint, WeightsPayload
from glmlaunch.fetch.stamp import Stamp, identity, read_stamp, read_upstream
from glmlaunch.fetch.target import CheckpointTarget, resolve_target
from glmlaunch.ledger.inputs import CheckpointOnDisk

WeightsState = Literal["present", "unverified", "missing", "fetched"]


@dataclass(frozen=True)
class WeightsStatus:
    """The weights check's answer, for the preflight stage's record."""

    state: WeightsState
    detail: str
    #: what a launch stops with here (None: it goes on)
    error: GlmlaunchError | None = None
    fetched: FetchedCheckpoint | None = None

    def line(self) -> str:
        return f"weights {self.state}: {self.detail}"


def _present(target: CheckpointTarget) -> tuple[WeightsState, str]:
    """(present | unverified | missing, why), from what is on disk only."""
    commit = target.resolved_commit()
    where = target.checkpoint_dir(commit)
    if where is None:
        return (
            "missing",
            f"{target.repository}@{target.revision or 'main'} was never fetched into {target.describe()}",
        )
    stamp = read_stamp(target.stamp_path(commit))
    if stamp is not None and stamp.complete and stamp.files:
        state = disk.scan(where, [(f.path, f.size) for f in stamp.files])
        if state.complete:
            size = format_size(stamp.total_bytes)
            return "present", f"{where}: {len(stamp.files)} files, {size}, as stamped"
        return "missing", f"{where} no longer matches its stamp ({state.summary()})"
    if target.kind == "hub-cache" and commit is not None and where.is_dir():
        listed = _tree_listing(target, commit)
        if listed:
            state = disk.scan(where, listed)
            if state.complete:
                return "present", f"{where}: {len(listed)} files, as huggingface_hub listed them (no stamp)"
            return "missing", f"{where} is incomplete ({state.summary()})"
    if target.kind == "local-dir" and where.is_dir():
        marker = read_upstream(where)
        if marker.complete_repository and marker.complete_repository == target.repository:
            return "present", f"{where}: upstream's completion marker names {marker.complete}"
        if stamp is None and any(where.glob("*.safetensors")) and (where / "config.json").is_file():
            return "unverified", f"{where} has weights but no stamp: served as it is, not verified"
    if stamp is not None and not stamp.complete:
        return "missing", f"{where} holds a partial fetch of {stamp.repository} (stamped incomplete)"
    return "missing", f"{target.repository or 'the checkpoint'} is not at {where}"


def _tree_listing(target: CheckpointTarget, commit: str) -> list[tuple[str, int]]:
    from huggingface_hub import get_cached_repo_tree
    from huggingface_hub.errors import CachedRepoTreeNotFoundError

    assert target.repository is not None
    try:
        files = get_cached_repo_tree(target.repository, revision=commit, cache_dir=target.directory)
    except (CachedRepoTreeNotFoundError, OSError, ValueError):
        return []
    return [(f.path, int(f.size)) for f in files]


def profile_argument(resolved: Resolved) -> str:
    """What to pass ``-p`` to name this profile again: a built-in's name, else its file."""
    last = resolved.profile_chain[-1] if resolved.profile_chain else None
    if last is None or last.builtin or last.path is None:
        return resolved.profile_name
    return str(last.path)


def ensure_weights(
    resolved: Resolved,
    *,
    caller_env: Mapping[str, str],
    launch_env: Mapping[str, str],
    fetch_missing: bool,
    dry_run: bool,
    bars: bool = False,
    say: Callable[[str], None] = lambda _: None,
    warn: Callable[[str], None] = lambda _: None,
) -> WeightsStatus:
    """The weights check of ``serve``: present, unverified or missing; missing with ``fetch_missing``
    fetches them (a real launch) or says it would (a dry run). A real launch raises what stops it; a dry run
    returns it in ``error``."""
    config = resolved.config
    profile = profile_argument(resolved)
    try:
        target, _, _ = identity(resolve_target(config, launch_env))
        state, detail = _present(target)
    except GlmlaunchError as exc:
        if not dry_run:
            raise
        return WeightsStatus("missing", exc.message, error=exc)
    if state != "missing":
        return WeightsStatus(state, detail)
    if fetch_missing:
        if dry_run:
            doc = documented_size(target.repository, target.revision)
            size = f"{format_size(doc.bytes)} documented" if doc is not None else "its size from the hub"
            return WeightsStatus("missing", f"{detail}; --fetch: a real launch fetches it first ({size})")
        from glmlaunch.fetch.run import fetch  # the downloader (huggingface_hub): only when fetching

        report = fetch(
            config,
            profile,
            caller_env=caller_env,
            launch_env=launch_env,
            bars=bars,
            say=say,
            warn=warn,
        )
        assert report.fetched is not None
        return WeightsStatus(
            "fetched", f"{report.fetched.directory}: {report.action}", fetched=report.fetched
        )
    error = WeightsError(
        f"the checkpoint is not on disk: {detail}",
        key="model.path",
        hint=f"fetch it first: glmlaunch fetch -p {profile}"
        + (" with the same --set options" if resolved.overrides else "")
        + " (or serve --fetch, as the container does)",
    )
    if not dry_run:
        raise error
    return WeightsStatus("missing", detail, error=error)


def find_checkpoint(config: DeploymentConfig, launch_env: Mapping[str, str]) -> FetchedCheckpoint | None:
    """The profile's checkpoint as it is on disk, stamped complete and verified by size; no hub, no fetch.

    What a fetch left, with its commit and file count; the plan reads the payload through
    :func:`checkpoint_on_disk`, which applies the same verification."""
    target, _, _ = identity(resolve_target(config, launch_env))
    commit = target.resolved_commit()
    where = target.checkpoint_dir(commit)
    stamp = read_stamp(target.stamp_path(commit))
    if where is None or stamp is None or not stamp.complete or target.repository is None:
        return None
    specs = [(f.path, f.size) for f in stamp.files]
    if not disk.scan(where, specs).complete:
        return None
    payload = WeightsPayload.read(where, [p for p, _ in specs], config.model.geometry)
    return FetchedCheckpoint(
        target.repository, stamp.revision, stamp.commit, where, stamp.total_bytes, len(specs), payload
    )


def checkpoint_on_disk(config: DeploymentConfig, launch_env: Mapping[str, str]) -> CheckpointOnDisk | None:
    """What the plan prices W from when nothing better is known: the safetensors payload of ``config``'s
    checkpoint where vLLM will load it (``launch_env``: the environment vLLM gets, which decides the hub
    cache), read from disk only (a stamp, a ``stat`` per file, the safetensors headers; no hub).

    Priced: a checkpoint stamped complete whose every file is there with its size (as
    :func:`find_checkpoint`); a hub-cache snapshot huggingface_hub itself listed, every file there (serve's
    weights check accepts it too); a local directory without a stamp, read as it is (the operator's own
    selection, which serve serves as it is). Not priced, with the reason: a partial fetch, files that no
    longer match their stamp, a snapshot nothing verifies, another model's directory, a header that does
    not read. None when nothing of the checkpoint is on disk: a machine without the weights plans as
    before, and says nothing about them."""
    if not config.model.path:
        return None
    target = resolve_target(config, launch_env)
    try:
        target, stamp, _ = identity(target)
        commit = target.resolved_commit()
        where = target.checkpoint_dir(commit)
        if where is None or not where.is_dir():
            return None
        return _on_disk(config, target, commit, where, stamp)
    except GlmlaunchError as exc:  # another model's directory, an unreadable stamp
        return _unpriced(config, target.directory, exc.message)
    except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        return _unpriced(config, target.directory, f"a safetensors header does not read: {exc}")


_FETCH_IT = "glmlaunch fetch completes and verifies it"


def _unpriced(config: DeploymentConfig, where: Path, why: str) -> CheckpointOnDisk:
    return CheckpointOnDisk(config.model.path or "", str(where), None, 0, why)


def _on_disk(
    config: DeploymentConfig, target: CheckpointTarget, commit: str | None, where: Path, stamp: Stamp | None
) -> CheckpointOnDisk | None:
    if stamp is not None and stamp.complete and stamp.files:
        specs = [(f.path, f.size) for f in stamp.files]
        state = disk.scan(where, specs)
        if not state.complete:
            return _unpriced(
                config, where, f"its files no longer match its stamp ({state.summary()}); {_FETCH_IT}"
            )
        return _priced(
            config,
            where,
            [p for p, _ in specs],
            f"fetched and verified by its stamp ({len(specs)} files, each with its size)",
        )
    if stamp is not None:
        return _unpriced(
            config, where, f"a partial fetch of {stamp.repository} (stamped incomplete); {_FETCH_IT}"
        )
    if target.kind == "hub-cache":
        assert commit is not None  # ``where`` is the snapshot of a known commit
        listed = _tree_listing(target, commit)
        if listed and disk.scan(where, listed).complete:
            return _priced(
                config,
                where,
                [p for p, _ in listed],
                f"verified by huggingface_hub's listing ({len(listed)} files, each with its size)",
            )
        return _unpriced(
            config, where, f"nothing verifies it (no glmlaunch stamp, no complete listing); {_FETCH_IT}"
        )
    names = sorted(p.name for p in where.glob("*.safetensors"))
    if not names:
        return None
    return _priced(config, where, names, "a local directory with no stamp, read as it is")


def _priced(config: DeploymentConfig, where: Path, paths: list[str], detail: str) -> CheckpointOnDisk:
    payload = WeightsPayload.read(where, paths, config.model.geometry)
    if payload is None:
        return _unpriced(config, where, "it holds no safetensors files")
    return payload.on_disk(config, detail)
