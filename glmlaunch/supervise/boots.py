"""One directory per supervised boot: ``<cache>/boots/<id>/`` (``<cache>``: ``GLMLAUNCH_CACHE_DIR`` or the
user cache directory, as for calibration records).

Written before vLLM starts (JSON, each with ``schema_version`` first):

* ``launch.json``: the boot id, when, the profile, the command line and the environment changes (secret
  values masked), glmlaunch's version, the host;
* ``config.json``: the resolved configuration glmlaunch launched (secret-named values masked);
* ``plan.json``: the plan stage's verdict and budget terms, and the calibration it used;
* ``preflight.json``: the stages up to the launch, and the preflight report when one ran;
* ``inventory.json``: the GPU inventory the check stage read, when it read one.

Written while and after vLLM runs: ``boot.log`` and ``serve.log`` (:mod:`glmlaunch.supervise.stream`),
then ``outcome.json`` (how vLLM ended, the one-line diagnosis, the timeline, the record, what was reaped,
the GPU baseline check); ``outcome.json`` is first written when vLLM is ready and rewritten at exit.

The directories are 0700 and every file 0600: only the user reads them; no secret is written in clear
(every JSON document passes :func:`glmlaunch.output.mask_obj`, every log line the stream's masking).
Reading (``glmlaunch boots``) holds each file to the limits the calibration store uses.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glmlaunch.calibrate.store import cache_dir
from glmlaunch.config.limits import MAX_RECORD_BYTES
from glmlaunch.config.registry import GLMLAUNCH_CACHE_DIR
from glmlaunch.config.safeload import decode_utf8, load_json, read_file, short
from glmlaunch.errors import ConfigError
from glmlaunch.files import write_text
from glmlaunch.output import mask_obj

BOOTS = "boots"
#: the version of every JSON document in a boot directory (outcome.json: docs/schemas/boots.schema.json)
SCHEMA_VERSION = 1
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def boots_root(environ: Mapping[str, str] | None = None) -> Path:
    return cache_dir(environ) / BOOTS


def new_boot_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class BootDir:
    root: Path
    boot_id: str

    @property
    def path(self) -> Path:
        return self.root / self.boot_id

    @classmethod
    def create(cls, environ: Mapping[str, str] | None = None) -> BootDir:
        root = boots_root(environ)
        try:
            root.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
            os.chmod(root, PRIVATE_DIR)
            for _ in range(8):
                boot = cls(root, new_boot_id())
                try:
                    boot.path.mkdir(mode=PRIVATE_DIR)
                except FileExistsError:
                    continue
                os.chmod(boot.path, PRIVATE_DIR)
                return boot
        except OSError as exc:
            raise ConfigError(
                f"cannot create the boot directory: {exc.strerror or exc}",
                key=GLMLAUNCH_CACHE_DIR,
                value=str(root),
                hint=f"set {GLMLAUNCH_CACHE_DIR} to a writable directory",
            ) from None
        raise ConfigError("cannot find a free boot id", key=GLMLAUNCH_CACHE_DIR, value=str(root))

    def write_json(self, name: str, document: Mapping[str, Any]) -> Path:
        """``name`` (a JSON document, schema_version first), masked, 0600, atomically replaced."""
        doc = {
            "schema_version": SCHEMA_VERSION,
            **{k: v for k, v in document.items() if k != "schema_version"},
        }
        text = json.dumps(mask_obj(doc), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
        return write_text(self.path / name, text, key=GLMLAUNCH_CACHE_DIR, mode=PRIVATE_FILE)

    def read_json(self, name: str) -> dict[str, Any] | None:
        path = self.path / name
        if not path.exists():
            return None
        raw = read_file(path, limit=MAX_RECORD_BYTES, key="boot", what="boot file")
        data = load_json(
            decode_utf8(raw, key="boot", value=name, what="file"), key="boot", value=name, what=name
        )
        return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class BootSummary:
    boot: BootDir
    launch: dict[str, Any]
    outcome: dict[str, Any] | None
    problem: str | None = None


def list_boots(environ: Mapping[str, str] | None = None) -> tuple[list[BootSummary], list[str]]:
    """Every boot directory, newest first, and a warning per one that cannot be read."""
    root = boots_root(environ)
    if not root.is_dir():
        return [], []
    out: list[BootSummary] = []
    warnings: list[str] = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name, reverse=True):
        if not entry.is_dir(follow_symlinks=False):
            continue
        boot = BootDir(root, entry.name)
        try:
            launch = boot.read_json("launch.json")
            outcome = boot.read_json("outcome.json")
        except (ConfigError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            why = exc.message if isinstance(exc, ConfigError) else str(exc)
            warnings.append(f"skipped {short(boot.path, 200)}: {why}")
            continue
        if launch is None:
            warnings.append(f"skipped {short(boot.path, 200)}: no launch.json")
            continue
        out.append(BootSummary(boot, launch, outcome))
    return out, warnings


def find_boot(ref: str, environ: Mapping[str, str] | None = None) -> BootSummary:
    """A boot by id, unique id prefix, or ``last``."""
    boots, _ = list_boots(environ)
    if ref == "last" and boots:
        return boots[0]
    hits = [b for b in boots if b.boot.boot_id == ref] or [b for b in boots if b.boot.boot_id.startswith(ref)]
    if len(hits) == 1:
        return hits[0]
    allowed = [b.boot.boot_id for b in boots[:12]]
    if not hits:
        raise ConfigError(
            "no supervised boot with this id", key="BOOT", value=ref, allowed=allowed or ["none yet"]
        )
    raise ConfigError("the id prefix matches several boots", key="BOOT", value=ref, allowed=allowed)


def last_timeline(
    profile: str, digest: str, environ: Mapping[str, str] | None = None
) -> tuple[str, list[dict[str, Any]]] | None:
    """The phases of the newest boot of the same profile and configuration that reached ready."""
    boots, _ = list_boots(environ)
    for b in boots:
        if b.outcome is None or not b.outcome.get("ready"):
            continue
        if b.launch.get("profile") != profile or b.launch.get("config_digest") != digest:
            continue
        phases = (b.outcome.get("timeline") or {}).get("phases")
        if isinstance(phases, list):
            return b.boot.boot_id, [p for p in phases if isinstance(p, dict)]
    return None
