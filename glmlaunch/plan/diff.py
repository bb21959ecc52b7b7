"""``glmlaunch diff A [B] [--set ...]``: settings, ledger and budget of two configurations side by side.

The left side is profile A. The right side is profile B, or A again when B is omitted; ``--set``
overrides apply to the right side, so ``diff turnkey --set comm.single_channel=true`` shows what one
change does and ``diff gate r12-exl3`` compares two profiles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from glmlaunch.config import paths
from glmlaunch.errors import ConfigError
from glmlaunch.plan.planner import ProfilePlan, plan_profile

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class SettingDelta:
    key: str
    left: Any
    right: Any


@dataclass(frozen=True, slots=True)
class EntryDelta:
    name: str
    left_requested: int | None
    right_requested: int | None
    left_device: int | None
    right_device: int | None

    @property
    def delta_device(self) -> int:
        return (self.right_device or 0) - (self.left_device or 0)

    @property
    def delta_requested(self) -> int:
        return (self.right_requested or 0) - (self.left_requested or 0)


@dataclass(frozen=True, slots=True)
class Diff:
    left: ProfilePlan
    right: ProfilePlan
    settings: tuple[SettingDelta, ...]
    entries: tuple[EntryDelta, ...]
    budget: tuple[tuple[str, int, int], ...]  # (term, left, right)


def diff_plans(left: ProfilePlan, right: ProfilePlan) -> Diff:
    lf = dict(paths.flatten(left.config.model_dump(mode="json")))
    rf = dict(paths.flatten(right.config.model_dump(mode="json")))
    settings = tuple(
        SettingDelta(k, lf.get(k), rf.get(k)) for k in sorted(set(lf) | set(rf)) if lf.get(k) != rf.get(k)
    )
    le = {e.name: e for e in left.ledger.rank0.entries}
    re_ = {e.name: e for e in right.ledger.rank0.entries}
    names = list(le) + [n for n in re_ if n not in le]
    entries = []
    for n in names:
        a, b = le.get(n), re_.get(n)
        entries.append(
            EntryDelta(
                n,
                a.total_requested if a else None,
                b.total_requested if b else None,
                a.device_bytes if a else None,
                b.device_bytes if b else None,
            )
        )
    lt, rt = left.budget.terms, right.budget.terms
    budget = tuple((k, lt[k], rt[k]) for k in lt)
    return Diff(left, right, settings, tuple(entries), budget)


def run_diff(
    a: str,
    b: str | None,
    overrides: Sequence[str] = (),
    *,
    gpu_memory: str | None = None,
    library: str = "builtin",
) -> Diff:
    if b is None and not overrides:
        raise ConfigError(
            "nothing to compare",
            key="diff",
            hint=f"give a second profile (glmlaunch diff {a} gate) or overrides of {a}'s settings "
            f"(glmlaunch diff {a} --set comm.single_channel=true)",
        )
    from glmlaunch.output import note

    said: list[str] = []
    left = plan_profile(a, (), gpu_memory=gpu_memory, library=library, messages=said)
    right = plan_profile(
        b if b is not None else a, overrides, gpu_memory=gpu_memory, library=library, messages=said
    )
    # Both sides usually share the calibration message: say it once, or once per side when they differ.
    if len(set(said)) == 1:
        note(said[0])
    else:
        for side, message in zip(("left", "right"), said, strict=True):
            note(f"{side}: {message}")
    return diff_plans(left, right)


def diff_document(d: Diff) -> dict[str, Any]:
    """One document, ``schema_version`` first (docs/schemas/diff.schema.json)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "left": {"profile": d.left.resolved.profile_name, "overrides": list(d.left.resolved.overrides)},
        "right": {"profile": d.right.resolved.profile_name, "overrides": list(d.right.resolved.overrides)},
        "settings": [{"setting": s.key, "left": s.left, "right": s.right} for s in d.settings],
        "entries": [
            {
                "name": e.name,
                "left_requested_bytes": e.left_requested,
                "right_requested_bytes": e.right_requested,
                "left_device_bytes": e.left_device,
                "right_device_bytes": e.right_device,
                "delta_device_bytes": e.delta_device,
            }
            for e in d.entries
        ],
        "budget": [{"term": t, "left": a, "right": b, "delta": b - a} for t, a, b in d.budget],
        "verdict": {"left": d.left.budget.verdict, "right": d.right.budget.verdict},
        "verdicts": {"left": d.left.verdict.to_json(), "right": d.right.verdict.to_json()},
    }
