"""The one module that talks to the hub, through ``huggingface_hub`` and nothing hand-written.

* :func:`remote_revision`: the revision's commit and every file's name and size
  (``HfApi.model_info(files_metadata=True)``: ``GET /api/models/{repo}/revision/{rev}?blobs=true``), before
  any byte is downloaded;
* :func:`check_access`: one ``HEAD /{repo}/resolve/{commit}/{file}``, the request every download starts with,
  so a gated repository without access is refused before the download starts too;
* :func:`download`: ``snapshot_download`` into the hub cache or a local directory (resumable: the files
  already complete are not fetched again, see :mod:`.disk` for what a killed download leaves).

The endpoint, the token and the cache come from the mapping glmlaunch resolved (never from this process's
environment as it was when huggingface_hub was imported). Every hub failure becomes one
:class:`~glmlaunch.errors.WeightsError` line with a hint; the token is never part of one.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glmlaunch.errors import DiskSpaceError, GlmlaunchError, WeightsError
from glmlaunch.fetch.target import CheckpointTarget, HubAccess

LIBRARY = "glmlaunch"
#: files fetched at once (upstream's entrypoint uses 16 for a 300 GiB checkpoint: entrypoint.sh L848)
MAX_WORKERS = 8


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int


@dataclass(frozen=True)
class RemoteRevision:
    """A revision as the hub's file metadata describes it."""

    repository: str
    revision: str | None
    commit: str
    files: tuple[RemoteFile, ...]
    #: the repository's gating ("auto", "manual") or None
    gated: str | None = None

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def safetensors(self) -> tuple[RemoteFile, ...]:
        return tuple(f for f in self.files if f.path.endswith(".safetensors"))


class HubUnreachable(WeightsError):
    """No hub answered (connection refused, DNS, timeout, or ``HF_HUB_OFFLINE``): a dry run goes on
    offline, a fetch stops."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("glmlaunch")
    except PackageNotFoundError:
        return "0"


def _no_token(access: HubAccess) -> str:
    return "set HF_TOKEN to a token that has access" if access.token is None else "HF_TOKEN has no access"


def hub_error(exc: BaseException, target: CheckpointTarget, access: HubAccess) -> GlmlaunchError:
    """A huggingface_hub failure as one line: what, the key it comes from, the hint."""
    import httpx2
    from huggingface_hub.errors import (
        DisabledRepoError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo = target.repository or "?"
    if isinstance(exc, GatedRepoError):
        code = exc.response.status_code if exc.response is not None else "?"
        return WeightsError(
            f"{repo} is a gated repository and the hub refused the download ({code}): "
            + ("no token was sent" if access.token is None else "the token has no access to it"),
            key="model.path",
            value=repo,
            hint=f"accept its terms on the hub and {_no_token(access)} (it is masked in every output)",
        )
    if isinstance(exc, RevisionNotFoundError):
        return WeightsError(
            f"{repo} has no revision {target.revision!r}",
            key="model.revision",
            value=target.revision,
            hint="pin a commit of that repository (its history on the hub); `glmlaunch config -p NAME` "
            "shows where the revision was set",
        )
    if isinstance(exc, RepositoryNotFoundError):
        return WeightsError(
            f"the hub at {access.endpoint} has no repository {repo} (or it is private)",
            key="model.path",
            value=repo,
            hint=f"check model.path; for a private repository, {_no_token(access)}",
        )
    if isinstance(exc, DisabledRepoError):
        return WeightsError(f"{repo} is disabled on the hub", key="model.path", value=repo)
    if isinstance(exc, RemoteEntryNotFoundError):
        return WeightsError(
            f"a file of {repo}@{target.revision} vanished from the hub during the fetch: {_first_line(exc)}",
            hint="fetch again",
        )
    if isinstance(exc, OfflineModeIsEnabled | LocalEntryNotFoundError | httpx2.TransportError):
        return HubUnreachable(
            f"the hub at {access.endpoint} cannot be reached: {_first_line(exc) or type(exc).__name__}",
            hint="check the network (or HF_ENDPOINT for a mirror); `glmlaunch fetch --offline` checks what "
            "is on disk without it",
        )
    if isinstance(exc, HfHubHTTPError):
        code = exc.response.status_code if exc.response is not None else "?"
        return WeightsError(f"the hub answered {code} for {repo}: {_first_line(exc)}", hint="try again later")
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return DiskSpaceError(
            f"the disk filled up while fetching {repo} into {target.directory}",
            hint="free space there (or point the cache elsewhere) and fetch again: finished files are kept",
        )
    return WeightsError(f"the fetch of {repo} failed: {_first_line(exc) or type(exc).__name__}")


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    # huggingface_hub's messages start with "404 Client Error." and say the useful part after it
    useful = [ln for ln in lines if not ln.endswith("Client Error.")]
    return (useful or lines or [""])[0][:300]


def _api(access: HubAccess) -> Any:
    from huggingface_hub import HfApi

    return HfApi(
        endpoint=access.endpoint,
        token=access.token,
        library_name=LIBRARY,
        library_version=_version(),
    )


@contextmanager
def _quiet_library() -> Iterator[None]:
    """huggingface_hub's own log lines are not glmlaunch's (one error line, notes, warnings): errors only."""
    logger = logging.getLogger("huggingface_hub")
    before = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(before)


def _hub_failures() -> tuple[type[BaseException], ...]:
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    return (HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled, httpx2.HTTPError, OSError)


def remote_revision(target: CheckpointTarget, access: HubAccess) -> RemoteRevision:
    """The revision's commit and files from the hub's file metadata; nothing is downloaded."""
    assert target.repository is not None
    with _quiet_library():
        try:
            info = _api(access).model_info(target.repository, revision=target.revision, files_metadata=True)
        except _hub_failures() as exc:
            raise hub_error(exc, target, access) from None
        files = [RemoteFile(s.rfilename, s.size) for s in info.siblings or [] if s.size is not None]
        if info.siblings and len(files) != len(info.siblings):
            # an answer without sizes (an older mirror): the tree listing has them
            try:
                tree = _api(access).list_repo_tree(target.repository, revision=info.sha, recursive=True)
                files = [
                    RemoteFile(f.path, int(f.size)) for f in tree if getattr(f, "size", None) is not None
                ]
            except _hub_failures() as exc:
                raise hub_error(exc, target, access) from None
    if not info.sha:
        raise WeightsError(f"the hub at {access.endpoint} named no commit for {target.repository}")
    gated = info.gated if isinstance(info.gated, str) else None
    return RemoteRevision(
        target.repository, target.revision, str(info.sha), tuple(sorted(files, key=lambda f: f.path)), gated
    )


def check_access(target: CheckpointTarget, access: HubAccess, remote: RemoteRevision, path: str) -> None:
    """The first request of a download (a ``HEAD`` of one file) on its own: access before any byte."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(remote.repository, path, revision=remote.commit, endpoint=access.endpoint)
    with _quiet_library():
        try:
            get_hf_file_metadata(
                url,
                token=access.token,
                endpoint=access.endpoint,
                library_name=LIBRARY,
                library_version=_version(),
            )
        except _hub_failures() as exc:
            raise hub_error(exc, target, access) from None


def _bars(show: bool) -> Any:
    """huggingface_hub's progress bars where they belong (a terminal), and a class that draws none else."""
    if show:
        return None  # huggingface_hub's own bars, on stderr
    from huggingface_hub.utils.tqdm import tqdm as hf_tqdm

    class Silent(hf_tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]

    return Silent


def download(
    target: CheckpointTarget, access: HubAccess, remote: RemoteRevision, *, cache_dir: Path, bars: bool
) -> Path:
    """``snapshot_download`` of the exact commit; the directory it filled."""
    from huggingface_hub import snapshot_download

    local_dir = target.directory if target.kind == "local-dir" else None
    # A branch or tag is downloaded by its name, so the cache's refs/<name> is written and vLLM's offline
    # `--revision <name>` finds the snapshot; the commit it resolved to is compared afterwards.
    revision = target.revision if target.revision is not None else None
    with _quiet_library():
        try:
            where = snapshot_download(
                remote.repository,
                revision=revision,
                cache_dir=str(cache_dir),
                local_dir=str(local_dir) if local_dir is not None else None,
                token=access.token,
                endpoint=access.endpoint,
                max_workers=MAX_WORKERS,
                tqdm_class=_bars(bars),
                library_name=LIBRARY,
                library_version=_version(),
            )
        except _hub_failures() as exc:
            raise hub_error(exc, target, access) from None
    return Path(where)


#: how long one metadata request of the plan's weights lookup may wait (the plan stays fast offline)
METADATA_TIMEOUT_S = 4.0
#: headers read at once (each is one ranged GET of the file's first 100 kB)
HEADER_WORKERS = 8
#: how long all the headers together may take (a 150-file checkpoint is ~20 rounds of 8): past it, the
#: files' sizes stand
HEADERS_DEADLINE_S = 12.0


@dataclass(frozen=True)
class RemoteWeights:
    """A revision's safetensors weights as the hub describes them, nothing downloaded: the files' sizes
    (``model_info(files_metadata=True)``) and, when their headers could be read (one ranged ``GET`` of
    each file's header: ``HfApi.parse_safetensors_file_metadata``), every tensor's name and data size."""

    repository: str
    revision: str | None
    commit: str
    #: safetensors files and the sum of their sizes (headers included)
    files: int
    file_bytes: int
    #: (tensor name, data bytes) from the headers; None: the headers were not read (sizes only)
    tensors: tuple[tuple[str, int], ...] | None

    @property
    def tensor_bytes(self) -> int:
        """The tensors' bytes (the headers'), else the files' sizes (headers are a few kB of each)."""
        return sum(n for _, n in self.tensors) if self.tensors is not None else self.file_bytes


def remote_weights(
    target: CheckpointTarget, access: HubAccess, *, timeout: float = METADATA_TIMEOUT_S, headers: bool = True
) -> RemoteWeights:
    """The revision's safetensors files from the hub's file metadata, and their headers (``headers``);
    nothing else is fetched. A header that does not come within ``timeout`` leaves the tensors unknown (the
    sizes stand); a hub that does not answer the file metadata raises :class:`HubUnreachable` (or the
    hub's error, as :func:`hub_error` words it)."""
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures import wait as wait_for

    assert target.repository is not None
    api = _api(access)
    with _quiet_library():
        try:
            info = api.model_info(
                target.repository, revision=target.revision, files_metadata=True, timeout=timeout
            )
        except _hub_failures() as exc:
            raise hub_error(exc, target, access) from None
        if not info.sha:
            raise WeightsError(f"the hub at {access.endpoint} named no commit for {target.repository}")
        files = sorted(
            (s.rfilename, int(s.size))
            for s in info.siblings or []
            if s.rfilename.endswith(".safetensors") and s.size is not None
        )
        tensors: tuple[tuple[str, int], ...] | None = None
        if headers and files:

            def header(name: str) -> list[tuple[str, int]]:
                meta = api.parse_safetensors_file_metadata(
                    target.repository, name, revision=info.sha, timeout=timeout
                )
                return [(t, int(i.data_offsets[1]) - int(i.data_offsets[0])) for t, i in meta.tensors.items()]

            from huggingface_hub.errors import SafetensorsParsingError

            stops: tuple[type[BaseException], ...] = (
                *_hub_failures(),
                SafetensorsParsingError,
                ValueError,
                KeyError,
            )
            pool = ThreadPoolExecutor(max_workers=HEADER_WORKERS)
            try:
                futures = [pool.submit(header, f) for f, _ in files]
                _done, late = wait_for(futures, timeout=HEADERS_DEADLINE_S)
                if not late:
                    tensors = tuple(t for f in futures for t in f.result())
            except stops:
                tensors = None  # whatever stops a header, the files' sizes stand
            finally:
                # a header still under way when the deadline passed is not waited for
                pool.shutdown(wait=False, cancel_futures=True)
    return RemoteWeights(
        target.repository, target.revision, str(info.sha), len(files), sum(n for _, n in files), tensors
    )
