"""Layer defaults, the profile chain, the environment and command-line overrides into one config.

Precedence, lowest first: built-in defaults < profile chain (base first) < ``GLMLAUNCH_*`` environment
(``GLMLAUNCH_<SECTION>__<FIELD>``, then ``GLMLAUNCH_SET``) < command-line ``--set key=value``.
Every leaf of the result records where its value came from.

A settings library that layers sources into one merged dict does not keep the origin of each leaf, so
the layering walk is done here; pydantic does all parsing and type validation, and
``glmlaunch.config.settings.ToolSettings`` reads glmlaunch's own variables.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from glmlaunch.config import paths
from glmlaunch.config.diagnostics import Diagnostic, Source
from glmlaunch.config.limits import MAX_OVERRIDE_CHARS
from glmlaunch.config.profiles import ProfileFile, load_chain
from glmlaunch.config.registry import (
    GLMLAUNCH_SET,
    SETTING_ENV_SEPARATOR,
    TOOL_PREFIX,
    TOOL_VARS,
)
from glmlaunch.config.safeload import load_yaml, short
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.settings import ToolSettings
from glmlaunch.config.validate import validate_config
from glmlaunch.errors import ConfigError, ConfigErrors

RESERVED_PROFILE_KEYS = frozenset({"extends"})
DEFAULT_PROFILE = "turnkey"


@dataclass(frozen=True)
class Resolved:
    config: DeploymentConfig
    provenance: Mapping[str, Source]
    warnings: tuple[Diagnostic, ...] = ()
    profile_chain: tuple[ProfileFile, ...] = ()
    overrides: tuple[str, ...] = field(default=())
    #: findings said once and silenced by -q (a setting ignored for this configuration)
    notes: tuple[Diagnostic, ...] = ()

    @property
    def profile_name(self) -> str:
        return self.profile_chain[-1].name if self.profile_chain else "(defaults)"

    def source_of(self, key: str) -> Source:
        if key in self.provenance:
            return self.provenance[key]
        prefix = key + "."
        kinds = {v for k, v in self.provenance.items() if k.startswith(prefix)}
        non_default = [s for s in kinds if s.kind != "default"]
        if non_default:
            return sorted(non_default, key=lambda s: ("default", "profile", "env", "cli").index(s.kind))[-1]
        return Source("default")


# --- layering ------------------------------------------------------------------------------------


# Two spellings of one setting: a layer that sets one replaces what a lower layer set with the other.
_EXCLUSIVE: dict[str, str] = {
    "cudagraph.capture_sizes": "capture_rule",
    "cudagraph.capture_rule": "capture_sizes",
}
#: Maps that are one value, not a section: a layer that gives the whole map replaces it (a profile that
#: writes `{enable_thinking: false}` means exactly that, not that plus its base's reasoning_effort), while
#: `--set server.default_chat_template_kwargs.KEY=VALUE` sets one entry.
WHOLE_MAPS = frozenset({"server.default_chat_template_kwargs"})


def _merge(
    base: dict[str, Any],
    layer: Mapping[str, Any],
    provenance: dict[str, Source],
    source_for: Any,
    prefix: str = "",
    *,
    whole: bool = True,
) -> None:
    """Deep-merge ``layer`` into ``base``; mappings merge key by key, anything else replaces (and so does
    a map of :data:`WHOLE_MAPS` when ``whole``: the layer gives the map itself, not a key inside it)."""
    for key, value in layer.items():
        dotted = f"{prefix}{key}"
        other = _EXCLUSIVE.get(dotted)
        if other is not None and value is not None and other not in layer and base.get(other) is not None:
            _forget(provenance, prefix + other, base[other])
            base[other] = None
            provenance[prefix + other] = source_for(dotted)
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            if whole and dotted in WHOLE_MAPS:
                _forget(provenance, dotted, base[key])
                base[key] = {}
                if not value:
                    provenance[dotted] = source_for(dotted)
            _merge(base[key], value, provenance, source_for, dotted + ".", whole=whole)
            continue
        if key in base:
            _forget(provenance, dotted, base[key])
        if isinstance(value, Mapping) and value:
            base[key] = {}
            _merge(base[key], value, provenance, source_for, dotted + ".", whole=whole)
        else:
            base[key] = _copy(value)
            provenance[dotted] = source_for(dotted)


def _forget(provenance: dict[str, Source], dotted: str, old: Any) -> None:
    """Drop the provenance of a value being replaced: its own key, or every leaf below it.

    Walks only the replaced subtree, so layering is linear in the number of keys (scanning the whole
    provenance per key made a 30k-key profile take half a minute).
    """
    provenance.pop(dotted, None)
    if isinstance(old, Mapping):
        for leaf, _ in paths.flatten(old, dotted + "."):
            provenance.pop(leaf, None)


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def parse_override_value(raw: str, *, key: str = "--set") -> Any:
    """Values from --set and the environment: kept as text for pydantic, except lists, maps and null.

    Lists and maps are read by the same bounded YAML loader as profiles (:mod:`.safeload`): the same
    depth, alias, size and digit limits hold for every source. ``key`` names the flag or variable.
    """
    if len(raw) > MAX_OVERRIDE_CHARS:
        raise ConfigError(
            f"the value is {len(raw):,} characters long; the limit is {MAX_OVERRIDE_CHARS:,}",
            key=key,
            value=short(raw, 40),
            hint="put long values in a profile",
        )
    text = raw.strip()
    if text in {"null", "~"}:
        return None
    if text.startswith(("[", "{")):
        return load_yaml(
            text, key=key, value=short(raw, 60), what="value", hint_tags="values are plain YAML lists or maps"
        )
    return raw


def parse_override(item: str, *, flag: str = "--set") -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(
            "an override must look like dotted.name=value",
            key=flag,
            value=short(item),
            hint="e.g. --set scheduler.max_num_seqs=4 or --set comm.dma_min_bytes=off",
        )
    if any(not part or not part.replace("_", "").replace("-", "").isalnum() for part in key.split(".")[:1]):
        raise ConfigError(
            "bad key", key=short(key, 60), value=short(item), hint="use dotted keys such as memory.min_margin"
        )
    return key, parse_override_value(raw, key=f"{flag} {short(key, 60)}")


def split_set_env(value: str) -> list[str]:
    return [p.strip() for p in value.replace("\n", ";").split(";") if p.strip()]


def _env_name_to_key(name: str) -> str:
    body = name[len(TOOL_PREFIX) :]
    parts = body.split(SETTING_ENV_SEPARATOR)
    if parts[0].lower() == "env" and len(parts) >= 2:
        # Environment variable names are case-sensitive: keep the passthrough name as written.
        return "env." + SETTING_ENV_SEPARATOR.join(parts[1:])
    return ".".join(p.lower() for p in parts)


def setting_env_name(key: str) -> str:
    """The GLMLAUNCH_* variable that sets a dotted key."""
    parts = key.split(".")
    if parts[0] == "env" and len(parts) >= 2:
        return TOOL_PREFIX + "ENV" + SETTING_ENV_SEPARATOR + ".".join(parts[1:])
    return TOOL_PREFIX + SETTING_ENV_SEPARATOR.join(p.upper() for p in parts)


def _all_setting_keys() -> list[str]:
    return [k for k, _ in paths.flatten(DeploymentConfig().model_dump(mode="json"))] + _section_keys(
        DeploymentConfig
    )


def _section_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys: list[str] = []
    for name, info in model.model_fields.items():
        dotted = prefix + name
        keys.append(dotted)
        for sub in _model_types(info.annotation):
            keys.extend(_section_keys(sub, dotted + "."))
    return keys


def _model_types(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) is not None:
        found: list[type[BaseModel]] = []
        for arg in get_args(annotation):
            found.extend(_model_types(arg))
        return found
    return []


def _env_layer(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Source]]:
    layer: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    known_keys: set[str] = set()
    for name in sorted(environ):
        if not name.startswith(TOOL_PREFIX) or name in TOOL_VARS or not environ[name].strip():
            continue  # empty means unset, as for the tool's own variables (settings._read)
        known_keys = known_keys or set(_all_setting_keys())
        key = _env_name_to_key(name)
        if key not in known_keys and not key.startswith("env."):
            candidates = [setting_env_name(k) for k in known_keys] + list(TOOL_VARS)
            close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
            raise ConfigError(
                "unknown glmlaunch variable",
                key=short(name, 80),
                value=short(environ[name]),
                source="environment",
                hint=(f"did you mean {close[0]}?" if close else "settings are GLMLAUNCH_<SECTION>__<FIELD>")
                + " (`glmlaunch config` lists every key)",
            )
        value = parse_override_value(environ[name], key=name)
        _merge(layer, paths.nest({key: value}), {}, lambda _k: Source("env"))
        sources[key] = Source("env", name)
    return layer, sources


def _env_origin(key: str, env_sources: Mapping[str, Source]) -> Source:
    """The variable that set ``key`` or a mapping above it: a lookup per prefix, not a scan."""
    for probe in paths.ancestors(key):
        if probe in env_sources:
            return env_sources[probe]
    return Source("env")


def _apply(
    merged: dict[str, Any], provenance: dict[str, Source], key: str, value: Any, source: Source
) -> None:
    # `--set server.default_chat_template_kwargs.x=1` sets one entry of a whole map; the map's own key
    # (or one above it) gives the map
    whole = not any(key.startswith(w + ".") for w in WHOLE_MAPS)
    _merge(merged, paths.nest({key: value}), provenance, lambda _k: source, whole=whole)


def resolve_config(
    profile: str | Path | None = None,
    overrides: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> Resolved:
    """Resolve a deployment configuration with provenance; raises ConfigError(s) on any problem."""
    env = dict(os.environ if environ is None else environ)
    tool = ToolSettings.from_environ(env)
    ref = profile if profile is not None else (tool.profile or DEFAULT_PROFILE)
    chain = load_chain(ref, env)

    merged: dict[str, Any] = {}
    provenance: dict[str, Source] = {}
    for prof in chain:
        data = {k: v for k, v in prof.data.items() if k not in RESERVED_PROFILE_KEYS}
        label = prof.name if prof.builtin else str(prof.path)

        def _profile_source(dotted: str, _label: str = label) -> Source:
            return Source("profile", f"{_label}:{dotted}")

        _merge(merged, data, provenance, _profile_source)

    env_layer, env_sources = _env_layer(env)
    for key, value in paths.flatten(env_layer):
        _apply(merged, provenance, key, value, _env_origin(key, env_sources))

    applied: list[str] = []
    for item in split_set_env(tool.set or ""):
        key, value = parse_override(item, flag=GLMLAUNCH_SET)
        _apply(merged, provenance, key, value, Source("env", f"{GLMLAUNCH_SET} {key}"))
        applied.append(item)
    for item in overrides:
        key, value = parse_override(item)
        _apply(merged, provenance, key, value, Source("cli", f"--set {key}"))
        applied.append(item)

    try:
        config = DeploymentConfig.model_validate(merged)
    except ValidationError as exc:
        raise ConfigErrors(_convert(exc, provenance)) from None

    for key, _ in paths.flatten(config.model_dump(mode="json")):
        provenance.setdefault(key, Source("default"))

    diagnostics = validate_config(config, provenance)
    errors = [d for d in diagnostics if d.level == "error"]
    if errors:
        raise ConfigErrors([d.as_error() for d in errors])
    return Resolved(
        config=config,
        provenance=dict(sorted(provenance.items())),
        warnings=tuple(d for d in diagnostics if d.level == "warning"),
        profile_chain=tuple(chain),
        overrides=tuple(applied),
        notes=tuple(d for d in diagnostics if d.level == "note"),
    )


# --- pydantic errors -> one-line messages ---------------------------------------------------------


def _fields_at(loc: Sequence[str | int]) -> list[str]:
    model: type[BaseModel] | None = DeploymentConfig
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return []
        subs = _model_types(model.model_fields[part].annotation)
        model = subs[0] if subs else None
    return list(model.model_fields) if model is not None else []


def _source_for(dotted: str, provenance: Mapping[str, Source]) -> str | None:
    for probe in paths.ancestors(dotted):
        if probe in provenance:
            return str(provenance[probe])
    return None


def _short(value: object) -> object:
    text = repr(value)
    return value if len(text) <= 80 else text[:77] + "..."


def _convert(exc: ValidationError, provenance: Mapping[str, Source]) -> list[ConfigError]:
    errors: list[ConfigError] = []
    for err in exc.errors(include_url=False):
        loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        kind = err["type"]
        ctx = err.get("ctx") or {}
        value = err.get("input")
        source = _source_for(dotted, provenance)
        allowed: list[str] | None = None
        hint: str | None = None
        message = str(err["msg"])
        if kind == "extra_forbidden":
            siblings = _fields_at(loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), siblings, n=1, cutoff=0.6)
            message = "unknown key"
            hint = f"did you mean {'.'.join([*map(str, loc[:-1]), close[0]])}?" if close else None
            allowed = siblings
            value = None
        elif kind in {"literal_error", "enum"}:
            expected = str(ctx.get("expected", ""))
            allowed = [a.strip().strip("'") for a in expected.replace(" or ", ", ").split(",") if a.strip()]
            close = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.5)
            message = "not an allowed value"
            hint = f"did you mean {close[0]!r}?" if close else None
        elif message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        errors.append(
            ConfigError(message, key=dotted, value=_short(value), allowed=allowed, source=source, hint=hint)
        )
    return errors
