"""The one bounded reader for untrusted files, JSON and YAML (limits in :mod:`glmlaunch.config.limits`).

Every source goes through here: profiles, ``--set`` / ``GLMLAUNCH_SET`` / ``GLMLAUNCH_<KEY>`` values,
``--inventory`` files, calibration records and boot logs. Each function raises
:class:`~glmlaunch.errors.ConfigError` (exit 2) naming the key (flag, file kind or variable) and the
offending value; readers that must not fail (the calibration cache) turn it into a skipped file with
its ``message``.

* :func:`read_file`: a regular file only (never opens a FIFO, socket or device, so it cannot hang or
  read forever), at most ``limit`` bytes, name components no longer than ``NAME_MAX``.
* :func:`decode_utf8`: bytes to text, or an error naming the first bad byte.
* :func:`load_json`: ``json.loads`` with a digit cap on integers, a depth cap and a key cap.
* :func:`load_yaml`: ``safe_load`` on libyaml when present, after a linear pass over the event stream
  that refuses deep nesting, recursive aliases, too many aliases and alias bombs before anything is
  built; integers are digit-capped and bad tagged scalars (``!!bool maybe``) are refused.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from glmlaunch.config.limits import (
    MAX_INT_DIGITS,
    MAX_KEYS,
    MAX_NESTING_DEPTH,
    MAX_YAML_ALIASES,
    MAX_YAML_NODES,
    NAME_MAX,
)
from glmlaunch.errors import ConfigError

# libyaml's CSafeLoader is safe_load's constructor on the C parser (same tags refused, same errors),
# and parses a profile ten times faster, which is a tenth of `glmlaunch env`'s start-up.
_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def short(value: object, width: int = 80) -> str:
    """``value`` as text, cut to ``width`` characters (a hostile value can be megabytes long)."""
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


class _Limit(Exception):
    """A limit was exceeded inside a parser callback; converted to ConfigError by the caller."""


# --- files -----------------------------------------------------------------------------------------


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def check_name_lengths(path: Path, *, key: str, what: str) -> None:
    """Refuse a path with a component longer than NAME_MAX bytes (the OS would say ENAMETOOLONG)."""
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            raise ConfigError(
                f"{what} has a file name of {size} bytes; the limit is {NAME_MAX} (NAME_MAX)",
                key=key,
                value=short(part, 40),
                hint="use a shorter name",
            )


def read_file(path: Path, *, limit: int, key: str, what: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (symlinks are followed to their target)."""
    check_name_lengths(path, key=key, what=f"the {what}")
    shown = short(path, 200)
    try:
        before = os.stat(path)
        if not stat.S_ISREG(before.st_mode):
            raise ConfigError(
                f"the {what} is {_kind(before.st_mode)}, not a regular file",
                key=key,
                value=shown,
                hint="give a regular file",
            )
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigError(f"cannot read the {what}: {exc.strerror or exc}", key=key, value=shown) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced between stat and open
            raise ConfigError(f"the {what} is {_kind(st.st_mode)}, not a regular file", key=key, value=shown)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ConfigError(f"cannot read the {what}: {exc.strerror or exc}", key=key, value=shown) from None
    finally:
        os.close(fd)
    if size > limit:
        raise ConfigError(
            f"the {what} is larger than the limit of {limit:,} bytes",
            key=key,
            value=shown,
            hint="is this the right file?",
        )
    return b"".join(chunks)


def decode_utf8(raw: bytes, *, key: str, value: str, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"the {what} is not UTF-8 text (bad byte at offset {exc.start})",
            key=key,
            value=value,
            hint="save the file as UTF-8",
        ) from None


# --- structure limits ------------------------------------------------------------------------------


def check_structure(data: Any, *, key: str, value: str, what: str, max_keys: int = MAX_KEYS) -> None:
    """Nesting depth and key count of parsed data, walked without recursion (``max_keys``: a document
    with a limit of its own, bounded by its size instead, e.g. an NVML trace)."""
    keys = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            keys += len(node)
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth >= MAX_NESTING_DEPTH:
            raise _too_deep(key, value, what)
        stack.extend((child, depth + 1) for child in children)
    if keys > max_keys:
        raise _too_many_keys(keys, key, value, what, max_keys)


def _too_deep(key: str, value: str, what: str) -> ConfigError:
    return ConfigError(
        f"the {what} nests deeper than {MAX_NESTING_DEPTH} levels",
        key=key,
        value=value,
        hint="flatten it; real configurations nest a few levels",
    )


def _too_many_keys(count: int, key: str, value: str, what: str, limit: int = MAX_KEYS) -> ConfigError:
    return ConfigError(
        f"the {what} has {count:,} keys; the limit is {limit:,}",
        key=key,
        value=value,
        hint="split it, or remove generated entries",
    )


def _bounded_int(text: str) -> int:
    digits = sum(ch.isdigit() for ch in text)
    if digits > MAX_INT_DIGITS:
        raise _Limit(f"an integer has {digits:,} digits; the limit is {MAX_INT_DIGITS}")
    return int(text)


# --- JSON ------------------------------------------------------------------------------------------


def load_json(text: str, *, key: str, value: str, what: str, max_keys: int = MAX_KEYS) -> Any:
    """Parse JSON within the limits; ``json.JSONDecodeError`` is left to the caller's wording."""
    try:
        data = json.loads(text, parse_int=_bounded_int)
    except _Limit as exc:
        raise ConfigError(f"the {what} is refused: {exc}", key=key, value=value) from None
    except RecursionError:
        raise _too_deep(key, value, what) from None
    check_structure(data, key=key, value=value, what=what, max_keys=max_keys)
    return data


# --- YAML ------------------------------------------------------------------------------------------


class _BoundedLoader(_BASE_LOADER):  # type: ignore[misc]
    """safe_load's loader with integers capped at MAX_INT_DIGITS digits."""


def _construct_int(loader: Any, node: Any) -> Any:
    value = str(node.value)
    digits = sum(ch.isdigit() for ch in value)
    if digits > MAX_INT_DIGITS:
        line = f" at line {node.start_mark.line + 1}" if node.start_mark is not None else ""
        raise _Limit(f"an integer{line} has {digits:,} digits; the limit is {MAX_INT_DIGITS}")
    return yaml.SafeLoader.construct_yaml_int(loader, node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


class _Duplicate(Exception):
    """A mapping names one key twice; converted to ConfigError by :func:`load_yaml`."""


def _construct_map(loader: Any, node: Any) -> Any:
    # YAML says keys are unique; PyYAML keeps the last one silently, so `max_num_seqs: 1` twenty lines
    # above `max_num_seqs: 8` would be a setting nobody sees. Merge keys (<<) are not duplicates.
    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
            continue
        key = loader.construct_object(key_node)
        line = key_node.start_mark.line + 1
        if key in first:
            where = f"at line {first[key]} and line {line}"
            raise _Duplicate(f"the key {short(key, 60)!r} appears twice, {where}")
        first[key] = line
    yield from yaml.SafeLoader.construct_yaml_map(loader, node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)


def scan_yaml_events(text: str) -> None:
    """One linear pass over the event stream: depth, aliases, expanded size; raises ``_Limit``.

    Nothing is built here, so a self-referencing alias (``a: &x [*x]``) or a billion-laughs document
    is refused before the composer recurses or the constructor expands it.
    """
    # One frame per open collection: [anchor, expanded size so far].
    frames: list[list[Any]] = []
    sizes: dict[str, int] = {}
    aliases = 0
    total = 0

    def add(count: int) -> None:
        nonlocal total
        total += count
        if frames:
            frames[-1][1] += count
        if total > MAX_YAML_NODES:
            raise _Limit(f"it expands to more than {MAX_YAML_NODES:,} nodes (an alias bomb?)")

    for event in yaml.parse(text, Loader=_BASE_LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            if len(frames) >= MAX_NESTING_DEPTH:
                raise _Limit(f"it nests deeper than {MAX_NESTING_DEPTH} levels")
            add(1)
            frames.append([event.anchor, 1])
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, size = frames.pop()
            if anchor is not None:
                sizes[anchor] = size
            if frames:
                frames[-1][1] += size - 1  # the 1 for the collection itself was added at its start
        elif isinstance(event, yaml.ScalarEvent):
            add(1)
            if event.anchor is not None:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_YAML_ALIASES:
                raise _Limit(f"it uses more than {MAX_YAML_ALIASES} aliases")
            if any(frame[0] == event.anchor for frame in frames):
                raise _Limit(f"the alias *{event.anchor} refers to a collection that contains it")
            add(sizes.get(str(event.anchor), 1))


def load_yaml(text: str, *, key: str, value: str, what: str, hint_tags: str | None = None) -> Any:
    """``yaml.safe_load`` within the limits, every failure a ConfigError naming ``key`` and ``value``."""
    try:
        scan_yaml_events(text)
        loader = _BoundedLoader(text)
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except _Limit as exc:
        raise ConfigError(f"the {what} is refused: {exc}", key=key, value=value) from None
    except _Duplicate as exc:
        raise ConfigError(
            f"the {what} is refused: {exc}", key=key, value=value, hint="keep one of them"
        ) from None
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(
            f"YAML tag not allowed{where}: {short(exc.problem, 120)}",
            key=key,
            value=value,
            hint=hint_tags or "plain data only; remove tags such as !!python/object",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"invalid YAML{where}: {short(problem, 120)}", key=key, value=value) from None
    except RecursionError:
        raise ConfigError(f"the {what} nests too deeply", key=key, value=value) from None
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, IndexError) as exc:
        # A tagged scalar the tag cannot read: `!!bool maybe` (KeyError), `!!float x` (ValueError), ...
        raise ConfigError(
            f"a tagged YAML value cannot be read ({type(exc).__name__}: {short(exc, 60)})",
            key=key,
            value=value,
            hint="remove the !!tag or fix the value",
        ) from None
    check_structure(data, key=key, value=value, what=what)
    return data


__all__ = [
    "check_name_lengths",
    "check_structure",
    "decode_utf8",
    "load_json",
    "load_yaml",
    "read_file",
    "scan_yaml_events",
    "short",
]
