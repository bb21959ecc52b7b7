"""Calibration records of an earlier schema, read as what they meant when they were written.

Schema 1 kept the configuration a boot ran as ``boot_settings``: dotted settings over the shipped
``base_profile`` (always ``r12-exl3``), resolved again by every reader, so a record changed meaning
whenever that profile or a schema default changed (four times while schema 1 was written: the GPU total,
the r28 profile rework, new defaults, the stack's new name). Schema 2 keeps the whole configuration.

A schema-1 record is migrated by applying its settings over ``r12-exl3`` as the glmlaunch that wrote it
resolved the profile: ``schema1_bases.json`` holds each distinct resolution of that era with the commits
that shipped it (``scripts/freeze_record_bases.py``). The record names no glmlaunch version, so the base
is the one the record itself proves: every fact it derived from its configuration must come out again.

* its fingerprint: each memory setting, the effective capture sizes and allocator configuration, the
  library stack, and, where no inventory was read, the declared GPU model, count and capability;
* where no inventory was read and the device total was exact: every rank's total is the configuration's
  ``hardware.memory_per_gpu`` (ingest takes the total from it when it agrees with the log).

The schema-1 fingerprint's rules are frozen with the bases (which settings it left out), so a later change
of :mod:`.fingerprint` does not change how an old record is read. Bases that pass and give the same
configuration (under this glmlaunch's schema) are one answer. None, or two that give different
configurations, and the record is refused with the reason, never guessed. A schema-1 record without
settings kept no configuration (a log that showed none): it migrates to none, as every reader then
treated it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from glmlaunch.config import paths
from glmlaunch.config.schema import DeploymentConfig

BASES_FILE = Path(__file__).with_name("schema1_bases.json")
#: what every schema-1 reader took when a record named no base
SCHEMA1_DEFAULT_BASE = "r12-exl3"
_EFFECTIVE = ("cudagraph.capture_sizes_effective", "memory.allocator_conf_effective")
_UNSET = object()


@dataclass(frozen=True)
class Base:
    """``r12-exl3`` as a run of glmlaunch commits resolved it."""

    commits: tuple[str, ...]
    config: Mapping[str, Any]

    def label(self) -> str:
        """The first commit that shipped it (and how many did)."""
        more = len(self.commits) - 1
        return self.commits[0] + (f" (+{more} later commit{'s' * (more > 1)})" if more else "")


@cache
def _frozen() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(BASES_FILE.read_text(encoding="utf-8"))
    return doc


def schema1_bases() -> tuple[Base, ...]:
    return tuple(Base(tuple(b["commits"]), b["config"]) for b in _frozen()["bases"])


class MigrationRefused(ValueError):
    """A record whose meaning cannot be recovered; the message says why, for the store's warning."""


def _flatten(
    data: Mapping[str, Any], prefix: str = "", skip: frozenset[str] = frozenset()
) -> Iterator[tuple[str, Any]]:
    # as the schema-1 fingerprint flattened a configuration: a non-empty mapping is a branch; a key in
    # ``skip`` is left out with everything under it
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if dotted in skip:
            continue
        if isinstance(value, Mapping) and value:
            yield from _flatten(value, dotted + ".", skip)
        else:
            yield dotted, value


@cache
def _excluded() -> frozenset[str]:
    # the schema-1 fingerprint's NON_MEMORY_SETTINGS (the same at every commit that wrote schema 1)
    return frozenset(_frozen()["fingerprint_excludes"])


def apply_settings(base: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` (a configuration dump) with each dotted setting set, as schema-1 readers applied them."""
    data: dict[str, Any] = json.loads(json.dumps(base))  # a copy: JSON data, and faster than deepcopy
    for dotted, value in settings.items():
        paths.put(data, dotted, value)
    return data


def _contradiction(record: Mapping[str, Any], raw: dict[str, Any]) -> str | None:
    """The first fact of ``record`` the configuration dump ``raw`` does not reproduce, else None."""
    fp = record.get("fingerprint") or {}
    settings = dict(fp.get("settings") or {})
    mine = dict(_flatten(raw, skip=_excluded()))
    recorded = {k: v for k, v in settings.items() if k not in _EFFECTIVE}
    for key in sorted(set(mine) | set(recorded)):
        if mine.get(key, _UNSET) != recorded.get(key, _UNSET):
            return f"settings.{key}"
    software = fp.get("software") or {}
    if "stack" in software and software["stack"] != raw.get("stack"):
        return "software.stack"
    hardware = fp.get("hardware") or {}
    if hardware.get("source") != "declared":
        return None
    declared = {
        "gpu_name": raw.get("hardware", {}).get("gpu_model"),
        "gpu_count": raw.get("parallel", {}).get("tp"),
        "compute_capability": raw.get("hardware", {}).get("compute_capability"),
    }
    for key, value in declared.items():
        if key in hardware and hardware[key] != value:
            return f"hardware.{key}"
    total = raw.get("hardware", {}).get("memory_per_gpu")
    if record.get("total_bytes_exact") and any(
        r.get("total_bytes") not in (None, total) for r in record.get("ranks") or ()
    ):
        return "the ranks' exact device total"
    return None


def _effective_contradiction(record: Mapping[str, Any], cfg: DeploymentConfig) -> str | None:
    # the two settings the fingerprint keeps as their effective values, as this glmlaunch derives them
    settings = (record.get("fingerprint") or {}).get("settings") or {}
    effective = {_EFFECTIVE[0]: cfg.capture_sizes(), _EFFECTIVE[1]: cfg.allocator_conf}
    return next((f"settings.{k}" for k, v in effective.items() if k in settings and settings[k] != v), None)


def _differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    fa, fb = dict(_flatten(a)), dict(_flatten(b))
    return sorted(k for k in set(fa) | set(fb) if fa.get(k, _UNSET) != fb.get(k, _UNSET))


def _migrated_config(record: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    settings = record.get("boot_settings")
    base_name = record.get("base_profile") or SCHEMA1_DEFAULT_BASE
    if not isinstance(settings, dict):
        raise MigrationRefused("its boot_settings are not a mapping of settings")
    if base_name != SCHEMA1_DEFAULT_BASE:
        raise MigrationRefused(
            f"its boot settings are over profile {base_name!r}; this glmlaunch keeps only "
            f"{SCHEMA1_DEFAULT_BASE} as earlier versions shipped it"
        )
    answers: dict[str, tuple[dict[str, Any], list[Base]]] = {}
    invalid: list[tuple[Base, str]] = []
    for base in schema1_bases():
        raw = apply_settings(base.config, settings)
        if _contradiction(record, raw) is not None:
            continue
        try:
            cfg = DeploymentConfig.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            invalid.append((base, ".".join(str(p) for p in first["loc"]) + ": " + first["msg"]))
            continue
        if _effective_contradiction(record, cfg) is not None:
            continue
        dumped = cfg.model_dump(mode="json")
        answers.setdefault(json.dumps(dumped, sort_keys=True), (dumped, []))[1].append(base)
    if len(answers) > 1:
        (a, bases_a), (b, bases_b) = list(answers.values())[:2]
        differ = _differences(a, b)
        raise MigrationRefused(
            f"its boot settings over {SCHEMA1_DEFAULT_BASE} as glmlaunch {bases_a[0].label()} and as "
            f"{bases_b[0].label()} shipped it both reproduce the record but differ in "
            f"{', '.join(differ[:3])}{' …' if len(differ) > 3 else ''}: which one it meant is not known"
        )
    if not answers and invalid:
        base, why = invalid[0]
        raise MigrationRefused(
            f"its configuration (its boot settings over {SCHEMA1_DEFAULT_BASE} as glmlaunch "
            f"{base.label()} shipped it) is not valid here: {why}"
        )
    if not answers:
        raise MigrationRefused(
            f"its boot settings over {SCHEMA1_DEFAULT_BASE}, as any glmlaunch that wrote schema 1 shipped "
            "it, do not reproduce its fingerprint (written by another build of glmlaunch, or edited?)"
        )
    [(dumped, bases)] = answers.values()
    shipped = " or ".join(b.label() for b in bases)
    return dumped, (
        f"migrated from schema 1: its {len(settings)} boot setting(s) over {SCHEMA1_DEFAULT_BASE} as "
        f"glmlaunch {shipped} shipped it"
    )


def migrate_schema1(record: Mapping[str, Any]) -> dict[str, Any]:
    """A schema-1 record as schema 2; raises :class:`MigrationRefused` where its meaning is lost."""
    out = {k: v for k, v in record.items() if k not in ("boot_settings", "base_profile")}
    out["schema_version"] = 2
    if not record.get("boot_settings"):
        out["config"] = None
        return out
    config, note = _migrated_config(record)
    out["config"] = config
    out["notes"] = [*list(record.get("notes") or []), note]
    return out
