"""Dotted setting keys (glmlaunch.config.paths) on the shipped configuration's own tree."""

from __future__ import annotations

from typing import Any

from glmlaunch.config import paths
from glmlaunch.config.resolve import resolve_config


def _turnkey() -> dict[str, Any]:
    return resolve_config("turnkey", environ={}).config.model_dump(mode="json")


def test_flatten_names_every_leaf_and_nest_gives_the_tree_back() -> None:
    tree = _turnkey()
    flat = dict(paths.flatten(tree))
    assert flat["memory.gpu_memory_utilization"] == tree["memory"]["gpu_memory_utilization"]
    assert flat["parallel.dcp"] == tree["parallel"]["dcp"]
    assert not any(isinstance(v, dict) and v for v in flat.values())  # a leaf is never a non-empty map
    assert paths.nest(flat) == tree
    assert list(paths.nest(flat)) == list(tree)  # in the tree's order


def test_an_empty_mapping_is_a_leaf_of_its_own() -> None:
    flat = dict(paths.flatten({"env": {}, "server": {"default_chat_template_kwargs": {}, "port": 8000}}))
    assert flat == {"env": {}, "server.default_chat_template_kwargs": {}, "server.port": 8000}
    assert paths.nest(flat) == {"env": {}, "server": {"default_chat_template_kwargs": {}, "port": 8000}}
    assert list(paths.flatten({})) == []
    assert dict(paths.flatten({"b": 1}, "a.")) == {"a.b": 1}


def test_get_reads_a_key_or_says_it_is_not_there() -> None:
    tree = _turnkey()
    assert paths.get(tree, "scheduler.max_num_seqs") == tree["scheduler"]["max_num_seqs"]
    assert paths.get(tree, "memory") is tree["memory"]
    assert paths.get(tree, "memory.no_such_key") is paths.MISSING
    assert paths.get(tree, "memory.gpu_memory_utilization.deeper") is paths.MISSING  # a leaf has no keys
    assert paths.get(tree, "nowhere.at.all", None) is None
    assert paths.get({"a": None}, "a") is None and paths.get({"a": None}, "a.b") is paths.MISSING


def test_put_makes_the_sections_it_needs() -> None:
    tree = _turnkey()
    paths.put(tree, "memory.gpu_memory_utilization", 0.9)
    assert tree["memory"]["gpu_memory_utilization"] == 0.9
    data: dict[str, Any] = {"a": 1}
    paths.put(data, "b.c.d", 2)
    assert data == {"a": 1, "b": {"c": {"d": 2}}}
    paths.put(data, "a.x", 3)  # a leaf where a section must be is replaced by the section
    assert data == {"a": {"x": 3}, "b": {"c": {"d": 2}}}
    paths.put(data, "b", 4)
    assert data == {"a": {"x": 3}, "b": 4}


def test_nest_puts_in_order_so_a_later_key_wins() -> None:
    assert paths.nest({"a.b": 1, "a.c": 2, "d": 3}) == {"a": {"b": 1, "c": 2}, "d": 3}
    assert paths.nest({"a.b": 1, "a": 2}) == {"a": 2}
    assert paths.nest({"a": 2, "a.b": 1}) == {"a": {"b": 1}}
    assert list(paths.nest({"z": 1, "a": 2})) == ["z", "a"]


def test_ancestors_and_within() -> None:
    assert list(paths.ancestors("memory.allocator.extra")) == [
        "memory.allocator.extra",
        "memory.allocator",
        "memory",
    ]
    assert list(paths.ancestors("mtp")) == ["mtp"]
    assert list(paths.ancestors("")) == []
    assert paths.within("memory.allocator.extra", "memory.allocator")
    assert paths.within("memory.allocator", "memory.allocator")
    assert not paths.within("memory.allocator_x", "memory.allocator")
    assert not paths.within("memory", "memory.allocator")
