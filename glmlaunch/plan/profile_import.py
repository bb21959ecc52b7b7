"""``glmlaunch profiles import LOG``: a profile that reproduces the configuration a vLLM boot ran with.

The log's configuration (:mod:`glmlaunch.calibrate.bootconfig`) is mapped onto glmlaunch settings; the
profile ``extends:`` the closest shipped profile (fewest settings that differ once each candidate is
resolved; ``--base`` forces one), writes every setting that differs from it, and passes the launcher's
remaining environment through ``env:``. A header comment names the log (file name and sha256) and the
vLLM version. Before anything is printed or written, the profile is resolved and every mapped setting is
checked to come back with the log's value.

Settings this glmlaunch does not have yet (``DeploymentConfig`` has no such field) are left out and listed
in the header, so they start being written as soon as the configuration grows them.

The YAML goes to stdout unmasked: secret masking would rewrite values of variables such as
``VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD`` and corrupt the profile. Variables that look like secrets and
hold anything but a number are therefore not copied from the log at all (stderr says so).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel

from glmlaunch.calibrate.bootconfig import map_boot
from glmlaunch.calibrate.learn import keyed_shape
from glmlaunch.config import paths
from glmlaunch.config.limits import MAX_BOOT_LOG_BYTES
from glmlaunch.config.profiles import PROFILE_SUFFIXES, list_profiles
from glmlaunch.config.registry import GLMLAUNCH_PROFILE_PATH, MANAGED_BY_NAME
from glmlaunch.config.resolve import Resolved, resolve_config
from glmlaunch.config.safeload import read_file
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.errors import ConfigError
from glmlaunch.files import check_writable_target, comment_header, refuse_existing, write_text
from glmlaunch.output import header_text, is_safe, is_secret_name, note
from glmlaunch.vllmlog.bootconfig import BootConfig, parse_boot_config

_MISSING = object()


@dataclass
class ImportedProfile:
    """The profile text and what went into it."""

    text: str
    base: str
    settings: dict[str, object]  # every setting mapped from the log that this glmlaunch has
    written: dict[str, object]  # the ones that differ from the base (written explicitly)
    env: dict[str, str]
    held_back: dict[str, object]  # mapped, but DeploymentConfig has no such setting yet
    skipped_env: dict[str, str] = field(default_factory=dict)  # name -> why it was not passed through
    distances: dict[str, int] = field(default_factory=dict)  # candidate base -> settings that differ
    version: str | None = None


def _model_types(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    if get_origin(annotation) is not None:
        for arg in get_args(annotation):
            found.extend(_model_types(arg))
    return found


def has_setting(key: str, model: type[BaseModel] = DeploymentConfig) -> bool:
    """Whether the configuration has the dotted setting ``key`` (checked at run time)."""
    head, _, rest = key.partition(".")
    info = model.model_fields.get(head)
    if info is None:
        return False
    if not rest:
        return True
    return any(has_setting(rest, sub) for sub in _model_types(info.annotation))


def lookup(data: Mapping[str, Any], key: str) -> Any:
    return paths.get(data, key, _MISSING)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return bool(a == b)


def _profile_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Only the profile search path: a GLMLAUNCH_* setting in the caller's shell must not shape the import."""
    return {k: v for k, v in environ.items() if k == GLMLAUNCH_PROFILE_PATH}


def _candidates(base: str | None, environ: Mapping[str, str]) -> list[str]:
    if base is not None:
        # a path is written absolute, so `extends:` finds it from wherever the profile is saved
        return [str(Path(base).resolve()) if looks_like_path(base) else base]
    return sorted(p.name for p in list_profiles(environ) if p.builtin)


def looks_like_path(ref: str) -> bool:
    return "/" in ref or os.sep in ref or ref.endswith(PROFILE_SUFFIXES)


def _differences(resolved: Resolved, settings: Mapping[str, object]) -> dict[str, object]:
    dumped = resolved.config.model_dump(mode="json")
    return {k: v for k, v in settings.items() if not _same(lookup(dumped, k), v)}


def read_boot_config(log: Path) -> tuple[BootConfig, str]:
    """The configuration a log booted, and the log's sha256; read once, like ``calibrate ingest`` reads it
    (a regular file under the boot-log size cap: a FIFO or a device is refused, never read)."""
    raw = read_file(log, limit=MAX_BOOT_LOG_BYTES, key="LOG", what="log")
    bc = parse_boot_config(raw.decode("utf-8", "surrogateescape"))
    if bc.vllm_args is None:
        raise ConfigError(
            "the log has no vLLM `non-default args: {…}` line that parses"
            + (f" ({bc.vllm_args_error})" if bc.vllm_args_error else ""),
            key="LOG",
            value=str(log),
            hint="import the whole server log of one boot (the API server prints its args at start)",
        )
    return bc, hashlib.sha256(raw).hexdigest()


def build_profile(
    log: Path, *, base: str | None = None, environ: Mapping[str, str] | None = None
) -> ImportedProfile:
    """The profile that reproduces the boot in ``log``; verified by resolving it before it is returned."""
    env = _profile_env(os.environ if environ is None else environ)
    bc, sha256 = read_boot_config(log)
    mapped = map_boot(bc)
    settings = {k: v for k, v in mapped.settings.items() if has_setting(k)}
    # The rig shape the record of this log is keyed on (calibrate ingest), stated whether or not the log
    # shows it: a log that names no release (a `dev` build) must not take the closest base's library
    # generation, or the record of the very log it came from would not apply to it.
    settings = {**keyed_shape(dict(mapped.settings)), **settings}
    held_back = {k: v for k, v in mapped.settings.items() if not has_setting(k)}

    passthrough: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name, value in mapped.env.items():
        if name in MANAGED_BY_NAME:
            skipped[name] = "managed by glmlaunch: set " + " / ".join(
                MANAGED_BY_NAME[name].settings or ("-",)
            )
        elif is_secret_name(name) and not re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", value.strip()):
            skipped[name] = "looks like a secret: set it in the environment instead"
        elif not is_safe(value) or not is_safe(name):
            # A profile value is text; a control character, a line break or a byte that is not UTF-8 in
            # a log's environment line is corruption or an attack, never a setting to copy.
            skipped[name] = "holds a control character or a byte that is not UTF-8: set it yourself"
        else:
            passthrough[name] = value

    distances: dict[str, int] = {}
    best: tuple[int, str, dict[str, object], Resolved] | None = None
    candidates = [(name, resolve_config(name, (), env)) for name in _candidates(base, env)]
    # What the log does not show comes from the base, so the base must be of the log's library
    # generation: an r14 log over an r28 profile would inherit r28's unlogged library knobs.
    same_stack = [(n, r) for n, r in candidates if r.config.stack == settings.get("stack")]
    for name, resolved in same_stack if base is None and same_stack else candidates:
        differing = _differences(resolved, settings)
        distances[name] = len(differing)
        if best is None or len(differing) < best[0]:
            best = (len(differing), name, differing, resolved)
    if best is None:
        raise ConfigError("no profile to extend", key="--base", hint="pass --base NAME")
    _, base_name, written, _ = best

    text = _render(log, sha256, bc, base_name, written, passthrough, held_back, skipped, distances)
    _verify(text, log, settings, env)
    return ImportedProfile(
        text=text,
        base=base_name,
        settings=settings,
        written=written,
        env=passthrough,
        held_back=held_back,
        skipped_env=skipped,
        distances=distances,
        version=bc.vllm_version,
    )


def _render(
    log: Path,
    sha256: str,
    bc: BootConfig,
    base: str,
    written: Mapping[str, object],
    env: Mapping[str, str],
    held_back: Mapping[str, object],
    skipped: Mapping[str, str],
    distances: Mapping[str, int],
) -> str:
    header = [
        "Imported by `glmlaunch profiles import` from a vLLM boot log.",
        f"log: {log.name}",
        f"sha256: {sha256}",
        f"vLLM version: {bc.vllm_version or 'unknown'}",
        f"base: {base} ("
        + ", ".join(f"{name}: {n} setting{'s' if n != 1 else ''} differ" for name, n in distances.items())
        + ")",
    ]
    if held_back:
        header.append("not written (this glmlaunch has no such setting yet):")
        header.extend(f"  {k}: {v!r}" for k, v in sorted(held_back.items()))
    if skipped:
        header.append("launcher environment not passed through:")
        header.extend(f"  {k}: {why}" for k, why in sorted(skipped.items()))
    doc: dict[str, Any] = {
        # generated text, like the header: masked and escaped (a log may be named HF_TOKEN=…)
        "description": header_text(f"imported from {log.name} (vLLM {bc.vllm_version or 'unknown'})"),
        "extends": base,
    }
    nested = paths.nest({k: written[k] for k in sorted(written) if k != "description"})
    doc.update(nested)
    if env:
        doc["env"] = dict(sorted(env.items()))
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)
    return comment_header(header) + body


def _verify(text: str, log: Path, settings: Mapping[str, object], env: Mapping[str, str]) -> None:
    """Resolve the written profile and check that every mapped setting comes back with the log's value."""
    with tempfile.TemporaryDirectory(prefix="glmlaunch-import-") as tmp:
        path = Path(tmp) / "imported.yaml"
        path.write_text(text, encoding="utf-8")
        resolved = resolve_config(path, (), env)
    dumped = resolved.config.model_dump(mode="json")
    wrong = {k: (v, lookup(dumped, k)) for k, v in settings.items() if not _same(lookup(dumped, k), v)}
    if wrong:
        key, (want, got) = next(iter(wrong.items()))
        raise ConfigError(
            f"the imported profile does not reproduce the boot: resolves to {got!r}, the log says {want!r}",
            key=key,
            value=str(log),
            hint="a bug in glmlaunch's import; report it with the log",
        )


def run_import(log: Path, *, output: Path | None, base: str | None, force: bool) -> None:
    """Print the profile on stdout, or write it to ``output`` (an existing file only with ``force``)."""
    if output is not None:
        check_writable_target(output, key="--output")
        refuse_existing(output, key="--output", force=force)
    imported = build_profile(log, base=base)
    for name, why in imported.skipped_env.items():
        note(f"not passed through: {name} ({why})")
    if imported.held_back:
        note("not written, no such setting in this glmlaunch yet: " + ", ".join(sorted(imported.held_back)))
    if output is None:
        sys.stdout.write(imported.text)
        sys.stdout.flush()
    else:
        write_text(output, imported.text, key="--output")
        note(f"wrote {output}")
    note(
        f"extends {imported.base}: {len(imported.written)} setting(s) written, "
        f"{len(imported.env)} environment variable(s) passed through"
    )
