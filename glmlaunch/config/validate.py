"""Rules that need several settings at once (docs/configuration.md §4), run before anything else.

Input: a type-valid :class:`DeploymentConfig` and its provenance. Output: diagnostics (errors, warnings
and notes), each naming the key, the value, the allowed values, where the value came from and the rule
that found it. The rules themselves are data, one small function each (:mod:`.rules`); hardware facts
(NVML) are checked later, in :mod:`glmlaunch.hardware.checks`.
"""

from __future__ import annotations

from collections.abc import Mapping

from glmlaunch.config.diagnostics import Diagnostic, Source
from glmlaunch.config.rules import RULES
from glmlaunch.config.schema import DeploymentConfig


def source_of(key: str, provenance: Mapping[str, Source]) -> str | None:
    """Where ``key``'s value came from: its own entry, the nearest section's, or its newest leaf's."""
    probe = key
    while probe:
        if probe in provenance:
            return str(provenance[probe])
        probe = probe.rpartition(".")[0]
    # A section set as a whole (capture_rule: {max: 32}) is recorded at its leaves.
    inner = sorted(str(v) for k, v in provenance.items() if k.startswith(key + "."))
    return inner[-1].rsplit(".", 1)[0] if inner else None


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
                    source_of(f.key, provenance),
                    f.hint,
                    rule.id,
                )
            )
    return out
