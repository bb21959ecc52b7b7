"""Dotted setting keys (``memory.gpu_memory_utilization``) over nested mappings: get, set, flatten, nest.

A configuration is a tree of mappings; a setting is named by the path to its leaf, parts joined by ``.``.
A leaf is anything but a non-empty mapping: an empty mapping (``env: {}``) is a value of its own, so
:func:`flatten` keeps it and :func:`nest` gives it back.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

#: what :func:`get` returns for a key that is not there, unless told otherwise
MISSING: Any = object()


def ancestors(dotted: str) -> Iterator[str]:
    """``a.b.c``, then ``a.b``, then ``a``: the key and every section above it, nearest first."""
    probe = dotted
    while probe:
        yield probe
        probe = probe.rpartition(".")[0]


def within(dotted: str, section: str) -> bool:
    """Whether ``dotted`` is ``section`` or a key inside it (``memory.allocator.extra`` is within
    ``memory.allocator``; ``memory.allocator_x`` is not)."""
    return dotted == section or dotted.startswith(section + ".")


def get(data: Mapping[str, Any], dotted: str, default: Any = MISSING) -> Any:
    """The value at ``dotted``, or ``default`` where a part is missing or its parent is not a mapping."""
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def put(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Put ``value`` at ``dotted`` in place, making each missing section (and replacing a leaf that stands
    where a section must be)."""
    node = data
    *sections, leaf = dotted.split(".")
    for part in sections:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = value


def flatten(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf as ``(dotted key, value)``, in the mapping's order."""
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flatten(value, dotted + ".")
        else:
            yield dotted, value


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The tree whose leaves ``flat`` names (:func:`put` each, in ``flat``'s order)."""
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        put(out, dotted, value)
    return out
