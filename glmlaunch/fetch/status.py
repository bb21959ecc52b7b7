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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from glmlaunch.config.resolve import Resolved
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.errors import GlmlaunchError, WeightsError
from glmlaunch.fetch import disk
from glmlaunch.fetch.documented import documented_size
from glmlaunch.fetch.payload import FetchedCheckpoint, WeightsPayload
from glmlaunch.fetch.run import fetch, human, identity
from glmlaunch.fetch.stamp import read_stamp, read_upstream
from glmlaunch.fetch.target import CheckpointTarget, resolve_target

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
            return "present", f"{where}: {len(stamp.files)} files, {human(stamp.total_bytes)}, as stamped"
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
            size = f"{human(doc.bytes)} documented" if doc is not None else "its size from the hub"
            return WeightsStatus("missing", f"{detail}; --fetch: a real launch fetches it first ({size})")
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

    The plan's seam for the weights (:mod:`.payload`): ``find_checkpoint(config, launch_env).payload``
    prices W from the fetched safetensors payload when nothing better is known."""
    target, _, _ = identity(resolve_target(config, launch_env))
    commit = target.resolved_commit()
    where = target.checkpoint_dir(commit)
    stamp = read_stamp(target.stamp_path(commit))
    if where is None or stamp is None or not stamp.complete or target.repository is None:
        return None
    specs = [(f.path, f.size) for f in stamp.files]
    if not disk.scan(where, specs).complete:
        return None
    payload = WeightsPayload.read(where, [p for p, _ in specs])
    return FetchedCheckpoint(
        target.repository, stamp.revision, stamp.commit, where, stamp.total_bytes, len(specs), payload
    )
