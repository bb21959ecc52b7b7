"""What is on disk: the revision's files by name and size, partial leftovers, and the free space.

Partial files: huggingface_hub (2.x) downloads each file into a process-unique ``*.incomplete`` file and
deletes it when the download fails (``file_download._download_to_tmp_and_move``: "it could not be reused
anyway since the temporary name is unique to this download"). A process killed outright (SIGKILL, the OOM
killer, a container stop past its grace) leaves it behind, and a 5 GiB shard left per kill adds up. The
next fetch, holding the destination's lock, removes them before it measures the free space. What a killed
download keeps is every file it had finished: those are not fetched again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from glmlaunch.fetch.target import CheckpointTarget

#: (repository path, size in bytes)
FileSpec = tuple[str, int]


@dataclass(frozen=True)
class FileState:
    path: str
    size: int
    #: bytes on disk at that name (None: no such file, or a dangling link into the hub cache's blobs)
    on_disk: int | None

    @property
    def complete(self) -> bool:
        return self.on_disk == self.size


@dataclass(frozen=True)
class DiskState:
    directory: Path | None
    files: tuple[FileState, ...]

    @property
    def complete(self) -> bool:
        return bool(self.files) and all(f.complete for f in self.files)

    @property
    def present_bytes(self) -> int:
        return sum(f.size for f in self.files if f.complete)

    @property
    def missing_bytes(self) -> int:
        return sum(f.size for f in self.files if not f.complete)

    @property
    def wrong(self) -> tuple[FileState, ...]:
        return tuple(f for f in self.files if not f.complete)

    def summary(self) -> str:
        done = sum(1 for f in self.files if f.complete)
        return f"{done} of {len(self.files)} files complete"


def scan(directory: Path | None, files: Iterable[FileSpec]) -> DiskState:
    """Each file's size on disk under ``directory`` (links followed, as vLLM reads them)."""
    states = []
    for path, size in files:
        on_disk: int | None = None
        if directory is not None:
            try:
                on_disk = (directory / path).stat().st_size
            except OSError:
                on_disk = None
        states.append(FileState(path, size, on_disk))
    return DiskState(directory, tuple(states))


def leftovers(target: CheckpointTarget) -> list[Path]:
    """Partial downloads huggingface_hub can no longer use (module docstring)."""
    if target.kind == "local-dir":
        root = target.directory / ".cache" / "huggingface" / "download"
    elif target.repository is not None:
        root = target.repo_folder / "blobs"
    else:
        return []
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*.incomplete") if p.is_file())


def leftover_bytes(paths: Iterable[Path]) -> int:
    total = 0
    for p in paths:
        with contextlib.suppress(OSError):
            total += p.stat().st_size
    return total


def remove(paths: Iterable[Path]) -> int:
    """Delete ``paths``; the bytes freed."""
    freed = 0
    for p in paths:
        try:
            size = p.stat().st_size
            p.unlink()
        except OSError:
            continue
        freed += size
    return freed


def remove_files(directory: Path, paths: Iterable[str]) -> None:
    """Delete the files at ``paths`` under ``directory``; a link into the hub cache's blobs takes its blob
    along (the blob is the wrong bytes; the link alone would be recreated pointing at it)."""
    for rel in paths:
        path = directory / rel
        try:
            if path.is_symlink():
                path.resolve().unlink(missing_ok=True)
            path.unlink(missing_ok=True)
        except OSError:
            continue


def existing_ancestor(path: Path) -> Path:
    """The nearest directory of ``path`` that exists: where its filesystem's free space is read."""
    here = path
    while not here.exists() and here.parent != here:
        here = here.parent
    return here


def free_bytes(path: Path) -> tuple[Path, int]:
    """(the directory measured, its filesystem's free bytes for this user) for a path that may not exist."""
    where = existing_ancestor(path)
    return where, shutil.disk_usage(where).free


def same_filesystem(a: Path, b: Path) -> bool:
    try:
        return os.stat(existing_ancestor(a)).st_dev == os.stat(existing_ancestor(b)).st_dev
    except OSError:
        return False
