"""Where a profile's checkpoint lives, and which repository it comes from.

``model.path`` is what ``vllm serve`` is given: a hub repository id (vLLM then loads ``--revision`` from
the hub cache; with the profiles' ``HF_HUB_OFFLINE=1`` it never downloads) or a local directory (vLLM
loads it as it is, as transformers does for any existing directory). So the destination is:

* a repository id: the hub cache of the *launch* environment (the caller's environment with the
  profile's ``env:`` over it), found as huggingface_hub finds it (``constants.py``: ``HF_HUB_CACHE``,
  else ``HUGGINGFACE_HUB_CACHE``, else ``HF_HOME/hub``, else ``XDG_CACHE_HOME/huggingface/hub``, else
  ``~/.cache/huggingface/hub``), so vLLM finds what was fetched;
* a local directory: that directory, downloaded from ``--repo`` or from the repository its stamp names
  (upstream keeps the two apart the same way: ``MODEL_DIR`` and ``MODEL_REPO``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from glmlaunch.config.registry import (
    HF_ENDPOINT,
    HF_HOME,
    HF_HUB_CACHE,
    HF_HUB_OFFLINE,
    HF_TOKEN,
    HOME,
    HUGGINGFACE_HUB_CACHE,
    XDG_CACHE_HOME,
)
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.errors import ConfigError

Kind = Literal["hub-cache", "local-dir"]
DEFAULT_ENDPOINT = "https://huggingface.co"
#: what a stamp file is called inside a local checkpoint directory
LOCAL_STAMP = ".glmlaunch-checkpoint.json"
#: a full commit hash (a pinned revision; anything else is a branch or a tag)
COMMIT = re.compile(r"^[0-9a-f]{40}$")
_TRUE = frozenset({"1", "true", "yes", "on"})


def _value(env: Mapping[str, str], name: str) -> str | None:
    # compose's ${VAR:-} sets a variable to "": that means unset, as everywhere in glmlaunch
    value = env.get(name, "").strip()
    return value or None


def _expand(path: str, env: Mapping[str, str]) -> Path:
    home = _value(env, HOME) or os.path.expanduser("~")
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    return Path(os.path.abspath(path))


def hub_cache_dir(env: Mapping[str, str]) -> Path:
    """The hub cache ``env`` points huggingface_hub (and so vLLM) at."""
    for name in (HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE):
        value = _value(env, name)
        if value:
            return _expand(value, env)
    hf_home = _value(env, HF_HOME)
    if hf_home is None:
        cache = _value(env, XDG_CACHE_HOME) or os.path.join(_value(env, HOME) or "~", ".cache")
        hf_home = os.path.join(cache, "huggingface")
    return _expand(hf_home, env) / "hub"


def hub_cache_source(env: Mapping[str, str]) -> str:
    """Which variable decided :func:`hub_cache_dir` (said beside the destination)."""
    for name in (HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME, XDG_CACHE_HOME):
        if _value(env, name):
            return name
    return "the default (~/.cache/huggingface/hub)"


def is_local_path(path: str, env: Mapping[str, str]) -> bool:
    """Whether ``model.path`` names a directory rather than a hub repository id (``owner/name``)."""
    if path.startswith(("/", "./", "../", "~")) or path in (".", ".."):
        return True
    if path.count("/") > 1:
        return True  # a repository id has one slash at most
    return _expand(path, env).is_dir()


def caller_offline(caller: Mapping[str, str]) -> bool:
    """``HF_HUB_OFFLINE=1`` in the caller's own environment: the hub is not to be reached at all."""
    return (_value(caller, HF_HUB_OFFLINE) or "").lower() in _TRUE


@dataclass(frozen=True)
class HubAccess:
    """How the hub is reached. The token is never shown: not in ``repr``, not in a document."""

    endpoint: str
    token: str | None = None
    token_source: str | None = None  # "HF_TOKEN" or None (huggingface_hub's stored login, if any)

    def __repr__(self) -> str:
        return f"HubAccess(endpoint={self.endpoint!r}, token_source={self.token_source!r})"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> HubAccess:
        endpoint = (_value(env, HF_ENDPOINT) or DEFAULT_ENDPOINT).rstrip("/")
        token = _value(env, HF_TOKEN)
        return cls(endpoint, token, HF_TOKEN if token else None)


@dataclass(frozen=True)
class CheckpointTarget:
    """The checkpoint a profile pins and where it goes."""

    #: the hub repository (None: a local directory whose source is not known yet)
    repository: str | None
    #: ``model.revision`` (None: the repository's default branch)
    revision: str | None
    kind: Kind
    #: hub cache: the cache root; local directory: the directory itself
    directory: Path
    #: where the destination was read from ("HF_HOME", "model.path", …)
    source: str

    @property
    def repo_folder(self) -> Path:
        """The hub cache's folder of this repository (``models--owner--name``)."""
        assert self.repository is not None
        return self.directory / ("models--" + self.repository.replace("/", "--"))

    def checkpoint_dir(self, commit: str | None) -> Path | None:
        """The directory vLLM loads: the snapshot of ``commit`` in the hub cache, or the local directory."""
        if self.kind == "local-dir":
            return self.directory
        if commit is None or self.repository is None:
            return None
        return self.repo_folder / "snapshots" / commit

    def stamp_path(self, commit: str | None) -> Path | None:
        """Where the identity stamp is: inside a local directory; beside the snapshots in the hub cache (a
        file inside ``snapshots/`` would make huggingface_hub's cache scan call the cache corrupted)."""
        if self.kind == "local-dir":
            return self.directory / LOCAL_STAMP
        if commit is None or self.repository is None:
            return None
        return self.repo_folder / "glmlaunch" / f"{commit}.json"

    def lock_path(self) -> Path:
        """One fetch at a time per destination (a second one would race the first's partial files)."""
        if self.kind == "local-dir":
            return self.directory.parent / f".{self.directory.name}.glmlaunch.lock"
        return self.directory / ".locks" / self.repo_folder.name / "glmlaunch-fetch.lock"

    def resolved_commit(self) -> str | None:
        """The commit of ``revision`` without the hub: the revision itself when pinned, else the hub cache's
        ``refs/<revision>`` (written by a previous download), else unknown."""
        if self.revision is not None and COMMIT.match(self.revision):
            return self.revision
        if self.kind != "hub-cache" or self.repository is None:
            return None
        ref = self.repo_folder / "refs" / (self.revision or "main")
        try:
            text = ref.read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return text if COMMIT.match(text) else None

    def kind_text(self) -> str:
        return "local directory, model.path" if self.kind == "local-dir" else f"hub cache, from {self.source}"

    def describe(self) -> str:
        where = self.directory if self.kind == "local-dir" or self.repository is None else self.repo_folder
        return f"{where} ({self.kind_text()})"


def resolve_target(
    config: DeploymentConfig, launch_env: Mapping[str, str], *, repo: str | None = None
) -> CheckpointTarget:
    """The checkpoint of ``config`` and its destination in ``launch_env`` (the environment vLLM gets).

    ``repo`` (``fetch --repo``) names the repository a local ``model.path`` directory is downloaded from;
    without it, the directory's stamp says (:mod:`.stamp`), or nobody knows yet (``repository`` None).
    """
    path = config.model.path
    if not path:
        raise ConfigError(
            "no checkpoint to fetch", key="model.path", hint="set model.path in the profile or with --set"
        )
    revision = config.model.revision or None
    if is_local_path(path, launch_env):
        return CheckpointTarget(repo, revision, "local-dir", _expand(path, launch_env), "model.path")
    if repo is not None and repo != path:
        raise ConfigError(
            "names another repository than model.path, which is a hub repository id already",
            key="--repo",
            value=repo,
            hint=f"--repo is for a local model.path directory; this profile fetches {path}",
        )
    return CheckpointTarget(
        path, revision, "hub-cache", hub_cache_dir(launch_env), hub_cache_source(launch_env)
    )
