"""How a runtime transient becomes a ledger entry (lifetime ``runtime``, kind ``transient``)."""

from __future__ import annotations

from glmlaunch.ledger.footprint import PAGE, align
from glmlaunch.ledger.model import Entry, Origin, Phase, Transient


def transient(
    name: str,
    requested: int,
    *,
    phase: Phase,
    trigger: str,
    reader: str,
    formula: str,
    origin: Origin,
    note: str = "",
    rounded: bool = True,
) -> Transient:
    """A transient of ``requested`` bytes; a fresh torch block is rounded to whole 2 MiB pages."""
    device = align(requested, PAGE) if rounded and requested > 0 else max(0, requested)
    return Transient(
        Entry(
            name=name,
            subsystem="demand",
            requested_bytes=requested,
            count=1,
            device_bytes=device,
            kind="transient",
            lifetime="runtime",
            condition=trigger,
            reader=reader,
            formula=formula,
            origin=origin,
            note=f"fires in the {phase} phase" + (f"; {note}" if note else ""),
        ),
        phase,
    )
