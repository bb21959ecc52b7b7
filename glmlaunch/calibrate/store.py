"""Calibration records on disk, and the lookup ``plan`` / ``check`` / ``preflight`` use.

Layout: ``<cache>/calibration/<record_id>.json``, one JSON document per ingested boot, where ``<cache>`` is
``$GLMLAUNCH_CACHE_DIR`` or the platform's user cache directory (platformdirs) for ``glmlaunch``.

* Writes are atomic: a temporary file in the same directory, flushed and fsynced, then ``os.replace``.
  Records are the owner's alone (files 0600, a directory glmlaunch creates 0700): a boot log is private
  data, and whatever credential it printed is masked before it is stored (``logs.redact``).
* A record is written only if :func:`read_record` would read it back: a boot whose record breaks a limit of
  :mod:`glmlaunch.config.limits` (a 50 MB argument, tens of thousands of environment lines) is refused at
  ``ingest`` with the limit named, never saved to be skipped by every later command.
* Writers hold ``<cache>/calibration/.lock`` (filelock) for the whole check-then-write, so concurrent ingests
  of the same boot leave one record and concurrent ingests of different boots lose none. Readers take no
  lock: a reader sees either the old file or the new one, never a half-written one.
* Files that are not valid JSON, not a glmlaunch calibration, or of an unknown schema version are skipped
  with a warning naming the file; they are never deleted. So are files that break the limits of
  :mod:`glmlaunch.config.limits` (too large, too deep, not UTF-8) and anything that is not a regular file
  (a FIFO is never opened, so a lookup cannot hang; a symlink to a device is never read).
* A schema-1 record is migrated as it is read (:mod:`glmlaunch.calibrate.migrate`: its settings over the
  profile as the glmlaunch that wrote it shipped it), or skipped with the reason its configuration cannot
  be recovered. The file is left as it is: a reader never writes.
* A record is used only when its fingerprint matches; every record that did not match is reported with the
  fields that differ (:class:`Lookup`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs
from pydantic import ValidationError

from glmlaunch.config.limits import MAX_RECORD_BYTES
from glmlaunch.config.registry import GLMLAUNCH_CACHE_DIR
from glmlaunch.config.safeload import check_name_lengths, decode_utf8, load_json, read_file, short
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.errors import ConfigError
from glmlaunch.files import write_text

if TYPE_CHECKING:
    # Records, fingerprints and inventories are imported where a record is read or compared: `plan` on an
    # empty store (every fresh install) does not pay for building their pydantic models (~17 ms).
    from glmlaunch.calibrate.fingerprint import Comparison
    from glmlaunch.calibrate.records import Calibration
    from glmlaunch.hardware.inventory import Inventory

LOCK_TIMEOUT_S = 30.0


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    configured = env.get(GLMLAUNCH_CACHE_DIR, "").strip()
    if configured:
        try:
            return Path(configured).expanduser()
        except RuntimeError:  # ~user for an unknown user
            return Path(configured)
    return Path(platformdirs.user_cache_dir("glmlaunch", appauthor=False))


def calibration_dir(environ: Mapping[str, str] | None = None) -> Path:
    return cache_dir(environ) / "calibration"


@dataclass(frozen=True)
class SaveResult:
    path: Path
    replaced: bool


@dataclass(frozen=True)
class Loaded:
    records: tuple[Calibration, ...]
    warnings: tuple[str, ...]


def _atomic_write(path: Path, text: str) -> None:
    write_text(path, text, key=GLMLAUNCH_CACHE_DIR, mode=0o600)


class Store:
    """The calibration directory. Construct with an explicit root in tests; ``Store.default()`` otherwise."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def default(cls, environ: Mapping[str, str] | None = None) -> Store:
        return cls(calibration_dir(environ))

    @property
    def lock_path(self) -> Path:
        return self.root / ".lock"

    def _ensure(self) -> None:
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the calibration directory: {exc.strerror or exc}",
                key=GLMLAUNCH_CACHE_DIR,
                value=str(self.root),
                hint=f"set {GLMLAUNCH_CACHE_DIR} to a writable directory",
            ) from None

    def path_for(self, record_id: str) -> Path:
        return self.root / f"{record_id}.json"

    def save(self, record: Calibration) -> SaveResult:
        path = self.path_for(record.record_id)
        text = record.model_dump_json(indent=2) + "\n"
        check_record_text(text, source=record.boot.source)
        check_record_evidence(record)
        self._ensure()
        from filelock import FileLock, Timeout  # only writers lock: `plan` only reads the store

        try:
            with FileLock(str(self.lock_path), timeout=LOCK_TIMEOUT_S):
                replaced = path.exists()
                _atomic_write(path, text)
        except Timeout:
            raise ConfigError(
                f"another glmlaunch has held the calibration lock for {LOCK_TIMEOUT_S:.0f} s",
                key=GLMLAUNCH_CACHE_DIR,
                value=str(self.lock_path),
                hint="wait for it, or remove the lock file if no glmlaunch is running",
            ) from None
        except OSError as exc:  # the lock file: a symlink loop (ELOOP), a directory, no permission
            raise ConfigError(
                f"cannot take the calibration lock: {exc.strerror or exc}",
                key=GLMLAUNCH_CACHE_DIR,
                value=str(self.lock_path),
                hint="remove what is at that path (glmlaunch creates its lock file itself)",
            ) from None
        return SaveResult(path=path, replaced=replaced)

    def load(self) -> Loaded:
        """Every readable record, newest first; each unreadable ``*.json`` is one warning, never an error."""
        try:
            check_name_lengths(self.root, key=GLMLAUNCH_CACHE_DIR, what="the calibration directory")
            if not self.root.is_dir():
                return Loaded((), ())
            with os.scandir(self.root) as entries:
                names = sorted(e.name for e in entries if e.name.endswith(".json"))
        except (OSError, ConfigError) as exc:
            why = exc.message if isinstance(exc, ConfigError) else (exc.strerror or str(exc))
            return Loaded((), (f"cannot read the calibration directory {short(self.root, 200)}: {why}",))
        records: list[Calibration] = []
        warnings: list[str] = []
        for path in (self.root / name for name in names):
            record, problem = read_record(path)
            if record is not None:
                records.append(record)
            elif problem is not None:
                warnings.append(f"skipped {path}: {problem}")
        records.sort(key=lambda r: r.created_at, reverse=True)
        return Loaded(tuple(records), tuple(warnings))

    def get(self, ref: str) -> Calibration:
        """A record by id or unique id prefix."""
        loaded = self.load()
        hits = [r for r in loaded.records if r.record_id == ref] or [
            r for r in loaded.records if r.record_id.startswith(ref)
        ]
        if len(hits) == 1:
            return hits[0]
        allowed = [r.record_id for r in loaded.records]
        if not hits:
            raise ConfigError("no calibration record with this id", key="record", value=ref, allowed=allowed)
        raise ConfigError("the id prefix matches several records", key="record", value=ref, allowed=allowed)


def check_record_text(text: str, *, source: str) -> None:
    """Refuse a record the reader would skip: the limits :func:`read_record` holds it to, named."""
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_RECORD_BYTES:
        raise ConfigError(
            f"the calibration record of this log would be {size:,} bytes; records are read up to "
            f"{MAX_RECORD_BYTES:,} bytes (config.limits.MAX_RECORD_BYTES), so it is not saved",
            key="LOG",
            value=source,
            hint="ingest the server log of one boot as vLLM wrote it",
        )
    try:
        load_json(text, key="LOG", value=source, what="calibration record of this log")
    except ConfigError as exc:
        raise ConfigError(
            f"{exc.message}, so it is not saved (records are read within config.limits)",
            key="LOG",
            value=source,
            hint="ingest the server log of one boot as vLLM wrote it",
        ) from None


def check_record_evidence(record: Calibration) -> None:
    """Refuse to write a record whose log's figures disagree (:mod:`glmlaunch.calibrate.evidence`), unless
    the record itself says so (``evidence_refused``: a supervised boot kept, never learned from)."""
    if record.evidence_refused is not None:
        return
    from glmlaunch.calibrate.evidence import record_disagreements, refuse_evidence
    from glmlaunch.calibrate.learn import record_config

    refused = record_disagreements(record, record_config(record))
    if refused:
        raise refuse_evidence(refused[0].text(), record.boot.source, len(refused))


_REINGEST = "ingest its boot log again (glmlaunch calibrate ingest LOG) for a record of this glmlaunch"


def read_record(path: Path) -> tuple[Calibration | None, str | None]:
    """Read one file: (record, None), or (None, why it was skipped); never raises on a bad file.

    Only regular files of at most ``MAX_RECORD_BYTES`` are read (a FIFO, a device or a symlink to one is
    skipped without being opened for reading), and the JSON is held to ``config.limits``.
    """
    from glmlaunch.calibrate.records import RECORD_KIND, SCHEMA_VERSION, Calibration

    try:
        raw = read_file(path, limit=MAX_RECORD_BYTES, key="record", what="file")
        text = decode_utf8(raw, key="record", value=path.name, what="file")
        data = load_json(text, key="record", value=path.name, what="record")
    except ConfigError as exc:
        return None, exc.message
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc})"
    if not isinstance(data, dict) or data.get("kind") != RECORD_KIND:
        return None, "not a glmlaunch calibration record"
    if data.get("schema_version") == 1:
        from glmlaunch.calibrate.migrate import MigrationRefused, migrate_schema1

        try:
            data = migrate_schema1(data)
        except MigrationRefused as exc:
            return None, f"a schema-1 record whose configuration cannot be recovered: {exc}; {_REINGEST}"
    if data.get("schema_version") != SCHEMA_VERSION:
        version = short(repr(data.get("schema_version")), 40)
        return None, f"schema version {version}; this glmlaunch reads {SCHEMA_VERSION} (and migrates 1)"
    try:
        record = Calibration.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return None, f"invalid record ({where}: {first['msg']})"
    if record.fingerprint_digest != record.fingerprint.digest:
        return None, "its fingerprint digest does not match its fingerprint (edited by hand?)"
    if path.stem != record.record_id:
        return None, f"its record id {record.record_id} does not match the file name"
    return record, None


@dataclass(frozen=True)
class Rejected:
    record_id: str
    reason: str


@dataclass(frozen=True)
class Lookup:
    """The outcome of looking for a calibration: the record used (if any), and why the others were not."""

    calibration: Calibration | None
    comparison: Comparison | None
    rejected: tuple[Rejected, ...]
    warnings: tuple[str, ...]
    store: Path

    def message(self) -> str:
        """One line for stderr: which record is used instead of defaults, or why none is."""
        if self.calibration is not None and self.comparison is not None:
            return (
                f"using calibration {self.calibration.record_id} (boot log {self.calibration.boot.source}) "
                f"instead of defaults; {self.comparison.explain()}"
            )
        if not self.rejected:
            return f"no calibration records in {self.store}; using defaults"
        first = self.rejected[0]
        more = f" (and {len(self.rejected) - 1} more)" if len(self.rejected) > 1 else ""
        return f"no matching calibration; using defaults. {first.record_id}: {first.reason}{more}"


def lookup_calibration(
    config: DeploymentConfig,
    inventory: Inventory | None = None,
    *,
    store: Store | None = None,
    relax: Iterable[str] = (),
    versions: Mapping[str, str | None] | None = None,
) -> Lookup:
    """The newest usable record whose fingerprint matches; ``relax`` lists settings keys allowed to differ."""
    from glmlaunch.calibrate.fingerprint import compare, make_fingerprint

    st = store or Store.default()
    loaded = st.load()
    current = make_fingerprint(config, inventory, versions=versions)
    relax = tuple(relax)
    rejected: list[Rejected] = []
    for record in loaded.records:
        comparison = compare(record.fingerprint, current, relax=relax)
        if not comparison.matches:
            rejected.append(Rejected(record.record_id, "differs in " + comparison.explain()))
            continue
        reason = record.unusable_reason()
        if reason is not None:
            rejected.append(Rejected(record.record_id, f"matches but is not usable: {reason}"))
            continue
        return Lookup(record, comparison, tuple(rejected), loaded.warnings, st.root)
    return Lookup(None, None, tuple(rejected), loaded.warnings, st.root)


def find_calibration(config: DeploymentConfig, inventory: Inventory | None = None) -> Calibration | None:
    """The matching record from the default store, or None; use :func:`lookup_calibration` to say why."""
    return lookup_calibration(config, inventory).calibration
