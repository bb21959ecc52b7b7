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

Reading (``glmlaunch boots``, and the supervisor looking for the last boot of a configuration) trusts
nothing it finds: each file is held to the limits the calibration store uses, parsed as strict JSON (no
``NaN``, no number beyond a float: glmlaunch never writes one), and validated field by field
(:class:`LaunchDoc`, :class:`OutcomeDoc`: strict types, finite seconds within a century, bounded
integers). A boot that fails any of it is left out of the listing with one warning that names the file,
the field and why (:class:`BootProblem`); the others are listed as ever, and a boot asked for by id says
its problem (exit 2).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from glmlaunch.calibrate.store import cache_dir
from glmlaunch.config.limits import MAX_INT_DIGITS, MAX_RECORD_BYTES
from glmlaunch.config.registry import GLMLAUNCH_CACHE_DIR
from glmlaunch.config.safeload import check_structure, decode_utf8, read_file, short
from glmlaunch.errors import ConfigError
from glmlaunch.files import write_text
from glmlaunch.output import mask_obj
from glmlaunch.supervise.outcome import OutcomeKind
from glmlaunch.supervise.timeline import Phase

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
        """``name`` as a strict JSON object; None when the file is not there. A file that is not a
        regular one, too large, not UTF-8, not JSON, with a NaN or an infinity, or not an object is a
        ConfigError naming why."""
        path = self.path / name
        try:
            os.stat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(f"cannot read {name}: {exc.strerror or exc}", key="boot", value=name) from None
        raw = read_file(path, limit=MAX_RECORD_BYTES, key="boot", what=name)
        text = decode_utf8(raw, key="boot", value=name, what=name)
        try:
            # strict: glmlaunch writes with allow_nan=False, so a NaN, an Infinity or a 1e400 is a file
            # someone else wrote, and it would make every JSON output of it fail
            data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite, parse_int=_int)
        except _NotFinite as exc:
            raise ConfigError(f"{name}: {exc}", key="boot", value=name) from None
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{name}: not JSON ({exc.msg} at line {exc.lineno})", key="boot", value=name
            ) from None
        except RecursionError:
            raise ConfigError(f"{name}: nests too deep", key="boot", value=name) from None
        check_structure(data, key="boot", value=name, what=name)
        if not isinstance(data, dict):
            raise ConfigError(f"{name}: not a JSON object", key="boot", value=name)
        return data


class _NotFinite(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NotFinite(f"not a finite number: {name}")


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _NotFinite(f"not a finite number: {short(literal, 40)}")
    return value


def _int(literal: str) -> int:
    digits = len(literal.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _NotFinite(f"an integer of {digits:,} digits (the limit is {MAX_INT_DIGITS})")
    return int(literal)


# --- what a boot directory holds, validated on read -------------------------------------------------------

#: a boot's seconds: finite, 0 or more, at most a century (a server may run long after its ready line)
MAX_SECONDS = 100 * 366 * 86400.0
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
Pid = Annotated[int, Field(ge=0, le=2**32)]
Status = Annotated[int, Field(ge=-(2**31), le=2**31)]
Text = Annotated[str, Field(max_length=64 * 1024)]


class _Doc(BaseModel):
    # strict: a "12" is not a 12, a 1 is not True; extra keys are kept (a newer glmlaunch adds some)
    model_config = ConfigDict(frozen=True, extra="allow", strict=True)


class PhaseDoc(_Doc):
    name: Text
    start_s: Seconds
    end_s: Seconds
    seconds: Seconds
    merged: list[Text] = []


class MarkerDoc(_Doc):
    first_s: Seconds
    last_s: Seconds


class TimelineDoc(_Doc):
    markers: dict[Text, MarkerDoc] = {}
    phases: list[PhaseDoc] = []
    ready_s: Seconds | None = None
    expected_s: dict[Text, Seconds] = {}
    expected_from: Text = ""
    hung: dict[Text, Seconds] = {}


class ExitDoc(_Doc):
    code: Status | None = None
    signal: Status | None = None
    signal_name: Text | None = None
    status: Text


class RecordRefDoc(_Doc):
    record_id: Text | None = None
    path: Text | None = None
    problem: Text | None = None


class FindingDoc(_Doc):
    kind: Text
    process: Text | None = None
    text: Text
    t_s: Seconds
    after_ready: bool


class LeftBehindDoc(_Doc):
    pid: Pid
    name: Text
    ended: Text


class ProcessSeenDoc(_Doc):
    pid: Pid
    name: Text


class GpuBaselineDoc(_Doc):
    checked: bool = False
    ok: bool | None = None
    problems: list[Text] = []
    note: Text | None = None


class OutcomeDoc(_Doc):
    """``outcome.json`` (docs/schemas/boots.schema.json ``$defs.outcome``)."""

    schema_version: Literal[1]
    boot_id: Text
    profile: Text | None = None
    pid: Pid | None = None
    started_at: Text | None = None
    ready_at: Text | None = None
    ended_at: Text | None = None
    running: bool = False
    ready: bool = False
    outcome: OutcomeKind | Literal["running"]
    diagnosis: Text | None = None
    exit: ExitDoc | None = None
    glmlaunch_exit: ExitDoc | None = None
    timeline: TimelineDoc = TimelineDoc()
    findings: list[FindingDoc] = []
    record: RecordRefDoc = RecordRefDoc()
    signals_forwarded: list[dict[str, Any]] = []
    escalations: list[dict[str, Any]] = []
    left_behind: list[LeftBehindDoc] = []
    processes_seen: list[ProcessSeenDoc] = []
    gpu_baseline: GpuBaselineDoc | None = None
    log: dict[str, Any] = {}
    notes: list[Text] = []
    watch: dict[str, Any] | None = None
    lmcache: dict[str, Any] | None = None


class LaunchDoc(_Doc):
    """``launch.json``: what ``boots`` and the supervisor read of it."""

    schema_version: Literal[1]
    boot_id: Text | None = None
    started_at: Text | None = None
    profile: Text | None = None
    config_digest: Text | None = None
    command: Text = ""


def _why(exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(x) for x in first["loc"]) or "(document)"
    return f"{short(where, 80)}: {first['msg']}"


@dataclass(frozen=True)
class BootSummary:
    boot: BootDir
    launch: LaunchDoc
    outcome: OutcomeDoc | None
    #: the documents as read (strict JSON, validated above): what ``boots BOOT --json`` prints
    launch_json: dict[str, Any]
    outcome_json: dict[str, Any] | None


@dataclass(frozen=True)
class BootProblem:
    """A boot left out of the listing, and why (the file, the field)."""

    boot: BootDir
    reason: str

    @property
    def warning(self) -> str:
        return f"skipped boot {short(self.boot.boot_id, 80)} ({short(self.boot.path, 200)}): {self.reason}"


def read_boot(boot: BootDir) -> BootSummary | BootProblem:
    """One boot directory, validated (module docstring), or the problem that leaves it out."""
    docs: dict[str, dict[str, Any] | None] = {}
    for name in ("launch.json", "outcome.json"):
        try:
            docs[name] = boot.read_json(name)
        except ConfigError as exc:
            return BootProblem(boot, exc.message)
    launch_json, outcome_json = docs["launch.json"], docs["outcome.json"]
    if launch_json is None:
        return BootProblem(boot, "no launch.json")
    try:
        launch = LaunchDoc.model_validate(launch_json)
    except ValidationError as exc:
        return BootProblem(boot, f"launch.json: {_why(exc)}")
    outcome = None
    if outcome_json is not None:
        try:
            outcome = OutcomeDoc.model_validate(outcome_json)
        except ValidationError as exc:
            return BootProblem(boot, f"outcome.json: {_why(exc)}")
    return BootSummary(boot, launch, outcome, launch_json, outcome_json)


def list_boots(environ: Mapping[str, str] | None = None) -> tuple[list[BootSummary], list[BootProblem]]:
    """Every boot directory, newest first, and the ones left out (one problem each)."""
    root = boots_root(environ)
    out: list[BootSummary] = []
    problems: list[BootProblem] = []
    try:
        if not root.is_dir():
            return [], []
        entries = sorted(os.scandir(root), key=lambda e: e.name, reverse=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot read the boots directory: {exc.strerror or exc}",
            key=GLMLAUNCH_CACHE_DIR,
            value=str(root),
        ) from None
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
        except OSError:
            continue
        got = read_boot(BootDir(root, entry.name))
        if isinstance(got, BootProblem):
            problems.append(got)
        else:
            out.append(got)
    return out, problems


def find_boot(ref: str, environ: Mapping[str, str] | None = None) -> BootSummary:
    """A boot by id, unique id prefix, or ``last`` (the newest that can be read)."""
    boots, problems = list_boots(environ)
    if ref == "last" and boots:
        return boots[0]
    ids = [b.boot.boot_id for b in boots] + [p.boot.boot_id for p in problems]
    exact = [i for i in ids if i == ref]
    hits = exact or [i for i in ids if i.startswith(ref)]
    if len(hits) == 1:
        found = next((b for b in boots if b.boot.boot_id == hits[0]), None)
        if found is not None:
            return found
        problem = next(p for p in problems if p.boot.boot_id == hits[0])
        raise ConfigError(
            f"the boot cannot be read: {problem.reason}",
            key="BOOT",
            value=ref,
            hint=f"its files are in {problem.boot.path}",
        )
    allowed = [b.boot.boot_id for b in boots[:12]]
    if not hits:
        raise ConfigError(
            "no supervised boot with this id", key="BOOT", value=ref, allowed=allowed or ["none yet"]
        )
    raise ConfigError("the id prefix matches several boots", key="BOOT", value=ref, allowed=allowed)


def last_timeline(
    profile: str, digest: str, environ: Mapping[str, str] | None = None
) -> tuple[str, list[Phase]] | None:
    """The phases of the newest boot of the same profile and configuration that reached ready (every
    figure validated: an earlier boot's corrupt file is skipped, never carried into this boot's)."""
    boots, _ = list_boots(environ)
    for b in boots:
        if b.outcome is None or not b.outcome.ready:
            continue
        if b.launch.profile != profile or b.launch.config_digest != digest:
            continue
        return b.boot.boot_id, [
            Phase(p.name, p.start_s, p.end_s, tuple(p.merged)) for p in b.outcome.timeline.phases
        ]
    return None
