"""Rules that need several settings at once (docs/configuration.md §4), run before anything else.

Input: a type-valid :class:`DeploymentConfig` and its provenance. Output: diagnostics (errors, warnings
and notes), each naming the key, the value, the allowed values, where the value came from and the rule
that found it. The rules themselves are data, one small function each (:mod:`.rules`); hardware facts
(NVML) are checked later, in :mod:`glmlaunch.hardware.checks`.
"""

from __future__ import annotations

from collections.abc import Mapping

from glmlaunch.config import paths
from glmlaunch.config.diagnostics import Diagnostic, Source
from glmlaunch.config.rules import RULES
from glmlaunch.config.schema import DeploymentConfig

#: Layers, lowest first (config.resolve): a finding names the most specific source of what it read.
_LAYER = ("default", "profile", "env", "cli")


def _sources_of(key: str, provenance: Mapping[str, Source]) -> list[Source]:
    for probe in paths.ancestors(key):
        if probe in provenance:
            return [provenance[probe]]
    # A section set as a whole (capture_rule: {max: 32}) is recorded at its leaves.
    return [v for k, v in provenance.items() if k.startswith(key + ".")]


def _most_specific(found: list[Source]) -> Source | None:
    # the latest layer wins; within one layer the first found (the rule's own key comes first)
    return max(found, key=lambda s: _LAYER.index(s.kind), default=None)


def source_of(key: str, provenance: Mapping[str, Source], inputs: tuple[str, ...] = ()) -> str | None:
    """Where the value a rule is about came from, and, when a later layer set another value it read,
    that one first: a --set that made a profile's capture sizes wrong is named, not 'default'."""
    own = _most_specific(_sources_of(key, provenance))
    other = _most_specific([s for k in inputs if k != key for s in _sources_of(k, provenance)])
    if other is not None and (own is None or _LAYER.index(other.kind) > _LAYER.index(own.kind)):
        return str(other) if own is None or own.kind == "default" else f"{other} and {own}"
    return None if own is None else str(own)


def validate_config(config: DeploymentConfig, provenance: Mapping[str, Source]) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for rule in RULES:
        for f in rule.check(config):
            out.append(
                Diagnostic(
                    rule.level,
                    f.key,
                    f.message,
                    f.value,
                    f.allowed,
                    source_of(f.key, provenance, f.inputs),
                    f.hint,
                    rule.id,
                )
            )
    return out
