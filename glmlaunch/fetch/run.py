"""The fetch, in order: identity, metadata, access, space, stamp, download, verify, stamp.

1. The destination and its identity (:mod:`.target`, :mod:`.stamp`): a directory that holds another
   repository is refused before anything else.
2. The revision's file metadata from the hub (:func:`.hub.remote_revision`): the commit, every file's name
   and size. Without a hub (``--offline``, ``HF_HUB_OFFLINE=1``, or none answering a dry run), the stamp's
   file list and the documented size (:mod:`.documented`) stand in.
3. Access (one ``HEAD``), then the space: what is not on disk yet against the free space at the
   destination, less the partial leftovers that will be removed. A checkpoint that does not fit is refused
   (:class:`~glmlaunch.errors.DiskSpaceError`, exit 11) before any byte.
4. A dry run stops here and says what a fetch would do. A fetch stamps the destination's identity
   (``complete: false``) before any byte lands, removes the leftovers, downloads (:func:`.hub.download`),
   verifies every file's name and size against the metadata and stamps it complete, with the file list
   and the safetensors payload (:class:`~.payload.WeightsPayload`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import format_size
from glmlaunch.errors import DiskSpaceError, GlmlaunchError, WeightsError
from glmlaunch.fetch import disk
from glmlaunch.fetch.documented import documented_size
from glmlaunch.fetch.hub import HubUnreachable, RemoteRevision
from glmlaunch.fetch.payload import FetchedCheckpoint, WeightsPayload
from glmlaunch.fetch.stamp import (
    Stamp,
    StampedFile,
    identity,
    read_stamp,
    write_stamp,
)
from glmlaunch.fetch.target import (
    COMMIT,
    CheckpointTarget,
    HubAccess,
    caller_offline,
    hub_cache_dir,
    resolve_target,
)
from glmlaunch.output import register_secret

SizeSource = Literal["hub", "stamp", "documented", "unknown"]
State = Literal["complete", "partial", "absent", "unknown"]


def human(n: int) -> str:
    return format_size(n)


@dataclass(frozen=True)
class Size:
    bytes: int | None
    source: SizeSource
    detail: str

    def text(self) -> str:
        if self.bytes is None:
            return self.detail
        return f"{human(self.bytes)} ({self.detail})"


@dataclass(frozen=True)
class FetchReport:
    """What a fetch found, did, or (dry run) would do."""

    profile: str
    dry_run: bool
    target: CheckpointTarget
    access: HubAccess
    #: why the hub was not asked or did not answer (None: it answered)
    offline: str | None
    commit: str | None
    #: the directory vLLM loads (None: the hub cache's snapshot, when the commit is not known)
    checkpoint_dir: Path | None
    size: Size
    files: tuple[disk.FileState, ...]
    state: State
    free_at: Path
    free_bytes: int
    #: bytes still to download (None: not known without the hub)
    needed_bytes: int | None
    leftovers: int
    leftover_bytes: int
    stamp: Stamp | None
    #: what happened: "downloaded", "already complete", "verified offline", "would download", …
    action: str
    fetched: FetchedCheckpoint | None = None
    #: what a fetch stops with (a dry run records it, then exits with its code)
    error: GlmlaunchError | None = None
    warnings: tuple[str, ...] = ()

    @property
    def would_fetch(self) -> bool:
        return self.error is None and bool(self.needed_bytes)


Say = Callable[[str], None]


def _unknown_repository(target: CheckpointTarget) -> GlmlaunchError:
    from glmlaunch.errors import ConfigError

    return ConfigError(
        "is a local directory, and which hub repository to fetch it from is not known (it has no stamp)",
        key="model.path",
        value=str(target.directory),
        hint="name it once: glmlaunch fetch -p NAME --repo OWNER/NAME (the stamp remembers it)",
    )


def fetch(
    config: DeploymentConfig,
    profile: str,
    *,
    caller_env: Mapping[str, str],
    launch_env: Mapping[str, str],
    dry_run: bool = False,
    offline: bool = False,
    repo: str | None = None,
    bars: bool = False,
    say: Say = lambda _: None,
    warn: Say = lambda _: None,
) -> FetchReport:
    """Fetch ``config``'s checkpoint (module docstring). A dry run returns its report with ``error`` set
    to what a fetch would stop with; a fetch raises it."""
    target = resolve_target(config, launch_env, repo=repo)
    access = HubAccess.from_env(launch_env)
    if access.token:
        register_secret(access.token)
    target, stamp, _ = identity(target)
    if target.repository is None:
        raise _unknown_repository(target)
    warnings: list[str] = []

    def warning(text: str) -> None:
        warnings.append(text)
        warn(text)

    why_offline: str | None = None
    if offline:
        why_offline = "--offline"
    elif caller_offline(caller_env):
        why_offline = "HF_HUB_OFFLINE=1 in the environment"
    remote: RemoteRevision | None = None
    error: GlmlaunchError | None = None
    if why_offline is None:
        from glmlaunch.fetch.hub import remote_revision

        try:
            remote = remote_revision(target, access)
        except HubUnreachable as exc:
            if not dry_run:
                raise
            why_offline = exc.message
            warning(f"fetch: {exc.message}; the dry run goes on without the hub")
        except GlmlaunchError as exc:
            if not dry_run:
                raise
            error = exc

    commit = remote.commit if remote is not None else (stamp.commit if stamp else target.resolved_commit())
    if target.kind == "hub-cache" and (stamp is None or stamp.commit != commit):
        stamp = read_stamp(target.stamp_path(commit))
    if remote is not None and target.revision is None:
        warning(
            f"model.revision is not set: the default branch's head ({commit}) is fetched; pin it with "
            f"--set model.revision={commit}"
        )
    elif remote is not None and target.revision is not None and not COMMIT.match(target.revision):
        warning(f"model.revision {target.revision} is a branch or tag (now {commit}); pin the commit")
    checkpoint_dir = target.checkpoint_dir(commit)

    if remote is not None:
        specs = [(f.path, f.size) for f in remote.files]
        size = Size(remote.total_bytes, "hub", f"{len(specs)} files, the hub's file metadata")
    elif stamp is not None and stamp.files:
        specs = [(f.path, f.size) for f in stamp.files]
        size = Size(stamp.total_bytes, "stamp", f"{len(specs)} files, the stamp of {stamp.stamped_at}")
    else:
        specs = []
        doc = documented_size(target.repository, target.revision)
        if doc is not None:
            size = Size(doc.bytes, "documented", f"documented, not from the hub: {doc.source}")
        else:
            size = Size(None, "unknown", "size unknown offline")
    state_of_disk = disk.scan(checkpoint_dir, specs)
    if not specs:
        state: State = "unknown" if checkpoint_dir is not None and checkpoint_dir.exists() else "absent"
    elif state_of_disk.complete:
        state = "complete"
    elif state_of_disk.present_bytes or any(f.on_disk is not None for f in state_of_disk.files):
        state = "partial"
    else:
        state = "absent"

    needed: int | None
    if specs:
        needed = state_of_disk.missing_bytes
    elif state == "absent" and size.bytes is not None:
        needed = size.bytes
    else:
        needed = None
    left = disk.leftovers(target)
    left_bytes = disk.leftover_bytes(left)
    free_at, free = disk.free_bytes(checkpoint_dir or target.directory)
    reclaim = left_bytes if left and disk.same_filesystem(left[0], free_at) else 0

    if error is None and remote is not None and needed:
        from glmlaunch.fetch.hub import check_access

        first = next(f.path for f in state_of_disk.files if not f.complete)
        try:
            check_access(target, access, remote, first)
        except GlmlaunchError as exc:
            if not dry_run:
                raise
            error = exc
    if error is None and needed and needed > free + reclaim:
        space = DiskSpaceError(
            f"{target.repository}@{target.revision or 'main'} needs {human(needed)} more, and "
            f"{free_at} has {human(free + reclaim)} free",
            hint=f"free {human(needed - free - reclaim)} there, or point "
            + ("model.path" if target.kind == "local-dir" else "HF_HOME (or HF_HUB_CACHE)")
            + " at a larger disk",
        )
        if remote is not None:
            if not dry_run:
                raise space
            error = space
        else:
            warning(f"fetch: {space.message} (the documented size; the hub decides)")

    def report(action: str, **more: object) -> FetchReport:
        base = FetchReport(
            profile=profile,
            dry_run=dry_run,
            target=target,
            access=access,
            offline=why_offline,
            commit=commit,
            checkpoint_dir=checkpoint_dir,
            size=size,
            files=state_of_disk.files,
            state=state,
            free_at=free_at,
            free_bytes=free,
            needed_bytes=needed,
            leftovers=len(left),
            leftover_bytes=left_bytes,
            stamp=stamp,
            action=action,
            error=error,
            warnings=tuple(warnings),
        )
        return replace(base, **more)  # type: ignore[arg-type]

    if dry_run:
        if error is not None:
            return report("stops")
        if needed:
            return report("would download")
        if state == "complete":
            return report("already complete")
        return report("cannot tell offline")

    if remote is None:
        # offline and not a dry run: verify what is there, fetch nothing
        if state == "complete" and stamp is not None and stamp.complete and checkpoint_dir is not None:
            payload = WeightsPayload.read(checkpoint_dir, [p for p, _ in specs], config.model.geometry)
            fetched = _fetched(target, stamp.revision, commit, checkpoint_dir, specs, payload)
            say(f"fetch: {target.repository} verified on disk ({why_offline}): {state_of_disk.summary()}")
            return report("verified offline", fetched=fetched)
        raise WeightsError(
            f"{target.repository} is not complete at {checkpoint_dir or target.directory} "
            f"({state_of_disk.summary() if specs else 'no stamp to verify against'}), and the hub is not "
            f"to be reached ({why_offline})",
            hint="fetch it where the hub is reachable (without --offline, HF_HUB_OFFLINE unset)",
        )
    assert checkpoint_dir is not None
    with _locked(target):
        if not state_of_disk.complete:
            _download(
                target,
                access,
                remote,
                commit,
                checkpoint_dir,
                launch_env,
                left,
                state_of_disk,
                needed,
                bars,
                say,
            )
        after = disk.scan(checkpoint_dir, specs)
        if not after.complete:
            bad = ", ".join(
                f"{f.path} ({'missing' if f.on_disk is None else f'{f.on_disk} of {f.size} bytes'})"
                for f in after.wrong[:3]
            )
            raise WeightsError(
                f"{target.repository}@{commit} does not verify at {checkpoint_dir}: {bad}"
                + (f" and {len(after.wrong) - 3} more" if len(after.wrong) > 3 else ""),
                hint="fetch again (complete files are kept); if it persists, delete the directory",
            )
        payload = WeightsPayload.read(checkpoint_dir, [p for p, _ in specs], config.model.geometry)
        done = Stamp(
            repository=target.repository,
            revision=target.revision,
            commit=commit,
            complete=True,
            files=tuple(StampedFile(p, s) for p, s in specs),
            safetensors_bytes=payload.safetensors_bytes if payload is not None else None,
        )
        stamp_path = target.stamp_path(commit)
        assert stamp_path is not None
        write_stamp(stamp_path, done)
    fetched = _fetched(target, target.revision, commit, checkpoint_dir, specs, payload)
    action = "already complete" if state_of_disk.complete else "downloaded"
    total = human(size.bytes or 0)
    say(f"fetch: {target.repository}@{commit} {action} and verified: {len(specs)} files, {total}")
    return replace(report(action, fetched=fetched), state="complete", stamp=done, needed_bytes=0)


def _fetched(
    target: CheckpointTarget,
    revision: str | None,
    commit: str | None,
    directory: Path,
    specs: list[tuple[str, int]],
    payload: WeightsPayload | None,
) -> FetchedCheckpoint:
    assert target.repository is not None
    return FetchedCheckpoint(
        target.repository, revision, commit, directory, sum(s for _, s in specs), len(specs), payload
    )


class _locked:
    """The destination's fetch lock, taken without waiting: a second fetch is refused, not queued."""

    def __init__(self, target: CheckpointTarget) -> None:
        from filelock import FileLock

        path = target.lock_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.lock = FileLock(str(path), timeout=0)

    def __enter__(self) -> None:
        from filelock import Timeout

        try:
            self.lock.acquire()
        except Timeout:
            raise WeightsError(
                f"another fetch is writing this checkpoint (it holds {self.path})",
                hint="wait for it to finish; a fetch killed outright releases the lock with its process",
            ) from None

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def _download(
    target: CheckpointTarget,
    access: HubAccess,
    remote: RemoteRevision,
    commit: str | None,
    checkpoint_dir: Path,
    launch_env: Mapping[str, str],
    left: list[Path],
    on_disk: disk.DiskState,
    needed: int | None,
    bars: bool,
    say: Say,
) -> None:
    from glmlaunch.fetch.hub import download

    assert target.repository is not None
    stamp_path = target.stamp_path(commit)
    assert stamp_path is not None
    # the identity first, before any byte (entrypoint.sh L807-811)
    write_stamp(
        stamp_path,
        Stamp(repository=target.repository, revision=target.revision, commit=commit, complete=False),
    )
    if left:
        freed = disk.remove(left)
        say(f"fetch: removed {len(left)} partial file(s) a killed download left ({human(freed)})")
    # huggingface_hub keeps a file that is there under its name whatever its size: one that does not match
    # the metadata goes first (in the hub cache, with the blob it points at), so it is fetched again
    wrong = [f for f in on_disk.files if f.on_disk is not None and not f.complete]
    if wrong:
        disk.remove_files(checkpoint_dir, [f.path for f in wrong])
        say(
            f"fetch: removed {len(wrong)} file(s) whose size did not match the hub's: "
            + ", ".join(f.path for f in wrong[:3])
        )
    token = f"with {access.token_source}" if access.token_source else "without a token"
    say(
        f"fetch: downloading {human(needed or 0)} of {target.repository}@{remote.commit} into "
        f"{checkpoint_dir} from {access.endpoint} ({token})"
    )
    where = download(target, access, remote, cache_dir=hub_cache_dir(launch_env), bars=bars)
    if where.resolve() != checkpoint_dir.resolve():
        raise WeightsError(
            f"the hub resolved {target.repository}@{target.revision} to {where.name}, not {remote.commit}: "
            "the revision moved during the fetch",
            key="model.revision",
            value=target.revision,
            hint="pin a commit (model.revision) and fetch again",
        )
