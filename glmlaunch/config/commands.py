"""Plain functions behind the configuration commands (config, env, args, profiles).

Each resolves, renders data to stdout, and reports warnings on stderr. Every ``--json`` document is one
object whose first key is ``schema_version``; its JSON Schema is in ``docs/schemas/`` (written by
:mod:`.docschemas`, checked against the real output by tests/config/test_json_documents.py).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from glmlaunch import output
from glmlaunch.config import paths
from glmlaunch.config.environment import produced_env, split_secrets
from glmlaunch.config.profiles import list_profiles as _list_profiles
from glmlaunch.config.profiles import load_chain
from glmlaunch.config.render_args import full_argv
from glmlaunch.config.resolve import Resolved, resolve_config
from glmlaunch.config.schema import DeploymentConfig, profile_json_schema, size_keys
from glmlaunch.config.shells import SHELLS, ShellName, detect_shell, render_exports
from glmlaunch.config.units import display_size
from glmlaunch.errors import ConfigError
from glmlaunch.files import write_text
from glmlaunch.output import (
    contains_secret,
    mask_obj,
    mask_secrets,
    note,
    out_data,
    out_json,
    out_text,
    register_config_secrets,
    warn,
)


def resolve(profile: str | None, overrides: Sequence[str]) -> Resolved:
    """Resolve and print the configuration's warnings on stderr."""
    resolved = resolve_config(profile, overrides)
    register_config_secrets(resolved.config.env, resolved.config.vllm_args)
    for diag in resolved.warnings:
        warn(diag.one_line())
    for diag in resolved.notes:
        note(diag.one_line())
    return resolved


#: ``schema_version`` of the documents below; bump it when a key changes meaning or goes away.
SCHEMA_VERSION = 1


def config_document(resolved: Resolved) -> dict[str, Any]:
    config = resolved.config
    return {
        "schema_version": SCHEMA_VERSION,
        "profile": resolved.profile_name,
        "chain": [str(p.path) for p in resolved.profile_chain],
        "overrides": list(resolved.overrides),
        "config": config.model_dump(mode="json"),
        "derived": {
            "capture_sizes": config.capture_sizes(),
            "gpus": config.gpu_list,
            "oneshot_eager_bytes": config.comm.oneshot_eager_bytes,
            "dcp_total_heads": config.dcp_total_heads,
        },
        "sources": {k: str(v) for k, v in resolved.provenance.items()},
        "warnings": [d.one_line() for d in resolved.warnings],
    }


def show_config(profile: str | None, overrides: Sequence[str], *, as_json: bool) -> None:
    resolved = resolve(profile, overrides)
    if as_json:
        out_json(config_document(resolved))
        return
    from rich.table import Table

    table = Table(title=f"profile {resolved.profile_name}", show_lines=False, expand=False)
    table.add_column("key", no_wrap=True)
    table.add_column("value")
    table.add_column("source")
    for key, value in paths.flatten(resolved.config.model_dump(mode="json")):
        table.add_row(key, setting_text(key, value), str(resolved.source_of(key)))
    output.out_console.print(table)


@functools.cache
def _size_keys() -> frozenset[str]:
    return size_keys()


def setting_text(key: str, value: Any) -> str:
    """One setting's value as every table shows it (``config``, ``diff``): a size in units as a profile
    writes it (95.01 GiB, not 102016210698: the JSON keeps the exact integer), anything else as its JSON
    (``null``, ``true``, ``"exl3"``), a secret-named key's value masked."""
    if key in _size_keys() and isinstance(value, int) and not isinstance(value, bool):
        return display_size(value)
    leaf = key.rsplit(".", 1)[-1]
    return mask_secrets(json.dumps(mask_obj({leaf: value})[leaf], ensure_ascii=False))


def _shell_name(shell: str | None) -> ShellName:
    if shell is None:
        return detect_shell()
    name = shell.strip().lower()
    if name not in SHELLS:
        raise ConfigError("unknown shell", key="--shell", value=shell, allowed=list(SHELLS))
    return name  # type: ignore[return-value]


def exported_env(config: DeploymentConfig) -> dict[str, str]:
    return {e.name: e.value for e in produced_env(config)}


def show_env(profile: str | None, overrides: Sequence[str], *, shell: str | None) -> None:
    resolved = resolve(profile, overrides)
    shell_name = _shell_name(shell)
    env, withheld = split_secrets(exported_env(resolved.config))
    for name in withheld:
        warn(f"{name} looks like a secret and is not printed; export it yourself")
    # A value is exported exactly or not at all: masking inside a quoted value would change it (and could
    # break the quoting), so a value that holds a known secret is withheld like a secret-named one.
    for name in [n for n, v in env.items() if contains_secret(v)]:
        del env[name]
        warn(f"{name} holds a secret value and is not printed; export it yourself")
    for name, value in env.items():
        before = os.environ.get(name)
        if before is not None and before != value:
            note(f"{name}: your environment has {before!r}; this output sets {value!r}")
    out_data(render_exports(env, shell_name).rstrip("\n") or "")


def args_document(resolved: Resolved) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "profile": resolved.profile_name,
        "argv": full_argv(resolved.config),
    }


def show_args(profile: str | None, overrides: Sequence[str], *, as_json: bool) -> None:
    resolved = resolve(profile, overrides)
    # The argument vector itself, exactly (``--api-key X`` included): it is what `vllm serve` runs.
    if as_json:
        out_json(args_document(resolved), mask=False)
    else:
        out_data("\n".join(argv_line(a) for a in full_argv(resolved.config)))


def argv_line(arg: str) -> str:
    """One argument as ``args`` prints it, one per line: as it is, unless a line break or another control
    character would make the lines ambiguous; then in bash's ``$'…'`` quoting (and so is an argument that
    itself starts with ``$'``). ``args --json`` gives every argument exactly."""
    from glmlaunch.output import is_safe, shell_quote

    return arg if is_safe(arg) and not arg.startswith("$'") else shell_quote(arg)


def list_profiles(*, as_json: bool) -> None:
    rows = []
    for prof in _list_profiles():
        rows.append(
            {
                "name": prof.name,
                "extends": prof.extends,
                "description": prof.description,
                "path": str(prof.path),
                "builtin": prof.builtin,
            }
        )
    if as_json:
        out_json({"schema_version": SCHEMA_VERSION, "profiles": rows})
        return
    from rich.table import Table

    table = Table(show_lines=False)
    for column in ("name", "extends", "description", "location"):
        table.add_column(column, no_wrap=column in ("name", "extends"))
    for row in rows:
        table.add_row(
            str(row["name"]),
            str(row["extends"] or ""),
            str(row["description"]),
            "built-in" if row["builtin"] else str(row["path"]),
        )
    output.out_console.print(output.fit(table))


def show_profile(name: str) -> None:
    chain = load_chain(name)
    note("chain: " + " -> ".join(p.display() for p in chain))
    out_text(chain[-1].path.read_text(encoding="utf-8"))


def profile_schema_document() -> dict[str, Any]:
    return profile_json_schema()


def profile_schema(output: Path | None) -> None:
    text = json.dumps(profile_schema_document(), indent=2) + "\n"
    if output is None:
        out_text(text)
    else:
        write_text(output, text, key="--output")
        note(f"wrote {output}")
