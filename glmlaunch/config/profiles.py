"""Finding and loading deployment profiles (YAML with ``extends:`` inheritance).

A profile is a YAML mapping of configuration keys plus two reserved keys: ``description`` (one line)
and ``extends`` (the name or relative path of the base profile). Lookup order for a name: the
directories of ``GLMLAUNCH_PROFILE_PATH``, then the profiles shipped inside the package. A value that
names an existing file (or contains a path separator / ends in .yaml) is used as a path.

Only ``yaml.safe_load`` is used (through :mod:`glmlaunch.config.safeload`, within the limits of
:mod:`glmlaunch.config.limits`): tags that construct Python objects are rejected with a clear error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glmlaunch.config.limits import MAX_EXTENDS_DEPTH, MAX_PROFILE_BYTES
from glmlaunch.config.registry import GLMLAUNCH_PROFILE_PATH
from glmlaunch.config.safeload import check_name_lengths, decode_utf8, load_yaml, read_file, short
from glmlaunch.errors import ConfigError

PROFILE_SUFFIXES = (".yaml", ".yml")
MAX_DEPTH = MAX_EXTENDS_DEPTH


@dataclass(frozen=True)
class ProfileFile:
    name: str
    path: Path
    data: Mapping[str, Any]
    builtin: bool

    @property
    def description(self) -> str:
        value = self.data.get("description", "")
        return str(value) if value is not None else ""

    @property
    def extends(self) -> str | None:
        value = self.data.get("extends")
        return None if value is None else str(value)

    def display(self) -> str:
        return f"{self.name} ({'built-in' if self.builtin else self.path})"


def builtin_dir() -> Path:
    """The profiles shipped with the package (wheel), or the checkout's profiles/ (editable install)."""
    # The package directory itself, not importlib.resources.files(): profiles are read as real files
    # (an install inside a zip could not be read either way), and importlib.resources costs every
    # command ~1 ms of imports.
    package = Path(__file__).resolve().parents[1]
    packaged = package / "builtin_profiles"
    if packaged.is_dir():
        return packaged
    return package.parent / "profiles"


def search_dirs(environ: Mapping[str, str] | None = None) -> list[tuple[Path, bool]]:
    env = os.environ if environ is None else environ
    dirs: list[tuple[Path, bool]] = []
    for part in env.get(GLMLAUNCH_PROFILE_PATH, "").split(os.pathsep):
        if part.strip():
            try:
                dirs.append((Path(part.strip()).expanduser(), False))
            except RuntimeError:  # ~user for an unknown user
                dirs.append((Path(part.strip()), False))
    dirs.append((builtin_dir(), True))
    return dirs


def _looks_like_path(ref: str) -> bool:
    return "/" in ref or os.sep in ref or ref.endswith(PROFILE_SUFFIXES)


def _is_file(path: Path, key: str) -> bool:
    """``path.is_file()``, with a too-long or unreadable name reported instead of raised."""
    check_name_lengths(path, key=key, what="the profile reference")
    try:
        return path.is_file()
    except OSError as exc:
        raise ConfigError(
            f"cannot look up the profile: {exc.strerror or exc}", key=key, value=short(path, 200)
        ) from None


def locate(
    ref: str,
    *,
    relative_to: Path | None = None,
    environ: Mapping[str, str] | None = None,
    key: str = "profile",
) -> Path:
    """Find the file a profile reference names (``key`` names the flag or field it came from)."""
    if not ref or not ref.strip():
        raise ConfigError("empty profile name", key=key, hint="pass -p NAME, e.g. -p turnkey")
    if "\0" in ref:
        raise ConfigError("a profile name cannot contain a NUL byte", key=key, value=short(ref))
    candidates: list[Path] = []
    if _looks_like_path(ref) or (relative_to is not None and _is_file(relative_to / ref, key)):
        base = relative_to if relative_to is not None else Path.cwd()
        path = (base / ref) if not Path(ref).is_absolute() else Path(ref)
        candidates.append(path)
        for suffix in PROFILE_SUFFIXES:
            if path.name and not path.name.endswith(PROFILE_SUFFIXES):
                candidates.append(path.with_name(path.name + suffix))
    else:
        for directory, _ in search_dirs(environ):
            for suffix in PROFILE_SUFFIXES:
                candidates.append(directory / f"{ref}{suffix}")
    for path in candidates:
        if _is_file(path, key):
            return path
    known = sorted(p.name for p in list_profiles(environ))
    raise ConfigError(
        "profile not found",
        key=key,
        value=short(ref),
        allowed=known,
        hint=f"list profiles with `glmlaunch profiles list`; add directories with {GLMLAUNCH_PROFILE_PATH}",
    )


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML file that must hold one mapping with string keys (within the limits of ``limits``)."""
    raw = read_file(path, limit=MAX_PROFILE_BYTES, key="profile", what="profile")
    text = decode_utf8(raw, key="profile", value=short(path, 200), what="profile")
    return parse_yaml_mapping(text, str(path))


def parse_yaml_mapping(text: str, origin: str) -> dict[str, Any]:
    data = load_yaml(
        text,
        key="profile",
        value=short(origin, 200),
        what="profile",
        hint_tags="profiles are plain data; remove tags such as !!python/object",
    )
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"a profile must be a YAML mapping of settings, not a {type(data).__name__}",
            key="profile",
            value=origin,
            hint="start the file with keys such as `extends: r12-exl3`",
        )
    _check_keys(data, origin, "")
    return data


def _check_keys(data: Mapping[Any, Any], origin: str, prefix: str) -> None:
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(
                "keys must be strings",
                key=short(f"{prefix}{key!r}"),
                value=short(key),
                source=origin,
                hint="quote the key",
            )
        if isinstance(value, dict):
            _check_keys(value, origin, f"{prefix}{key}.")


def load_chain(ref: str | Path, environ: Mapping[str, str] | None = None) -> list[ProfileFile]:
    """The profile and its ``extends`` ancestors, base first."""
    chain: list[ProfileFile] = []
    seen: list[Path] = []
    current: str = str(ref)
    relative_to: Path | None = None
    builtin_root = builtin_dir().resolve()
    while True:
        key = "profile" if relative_to is None else "extends"
        path = locate(current, relative_to=relative_to, environ=environ, key=key).resolve()
        if path in seen:
            cycle = " -> ".join(p.stem for p in [*seen, path])
            raise ConfigError("extends cycle", key="extends", value=cycle, hint="remove one of the extends")
        if len(seen) >= MAX_DEPTH:
            raise ConfigError("extends chain too deep", key="extends", value=len(seen))
        seen.append(path)
        data = read_yaml_mapping(path)
        profile = ProfileFile(name=path.stem, path=path, data=data, builtin=path.parent == builtin_root)
        chain.append(profile)
        parent = data.get("extends")
        if parent is None:
            break
        if not isinstance(parent, str):
            raise ConfigError(
                "extends must name one profile",
                key="extends",
                value=parent,
                source=str(path),
            )
        current = parent
        relative_to = path.parent
    chain.reverse()
    return chain


def list_profiles(environ: Mapping[str, str] | None = None) -> list[ProfileFile]:
    """Every profile visible on the search path; earlier directories shadow later ones."""
    found: dict[str, ProfileFile] = {}
    for directory, builtin in search_dirs(environ):
        try:
            paths = sorted(directory.iterdir()) if directory.is_dir() else []
        except OSError:
            continue
        for path in paths:
            if path.suffix not in PROFILE_SUFFIXES or path.stem in found:
                continue
            try:
                data = read_yaml_mapping(path)
            except ConfigError:
                data = {"description": "(unreadable: run `glmlaunch profiles show` for the error)"}
            found[path.stem] = ProfileFile(name=path.stem, path=path, data=data, builtin=builtin)
    return list(found.values())
