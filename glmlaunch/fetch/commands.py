"""``glmlaunch fetch``: the profile's pinned checkpoint, downloaded, verified and stamped.

stdout is data: a fetch prints the directory vLLM loads (``MODEL=$(glmlaunch fetch -p turnkey)``); a dry run
prints what it found and would do; ``--json`` one document (docs/schemas/fetch.schema.json). Notes, the
progress bar (on a terminal, never with ``-q``) and warnings go to stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from glmlaunch.config.environment import compose
from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.fetch.run import FetchReport, fetch, human
from glmlaunch.output import is_quiet, note, out_json, out_text, register_secrets, warn

#: ``fetch --json``'s document version (docs/schemas/fetch.schema.json)
SCHEMA_VERSION = 1


def run_fetch(
    profile: str | None,
    overrides: Sequence[str],
    *,
    dry_run: bool,
    offline: bool,
    repo: str | None,
    as_json: bool,
    environ: Mapping[str, str] | None = None,
) -> None:
    env = dict(os.environ if environ is None else environ)
    register_secrets(env)
    resolved = resolve_config(profile, overrides, env)
    config = resolved.config
    register_secrets(config.env)
    for diagnostic in resolved.warnings:
        warn(diagnostic.one_line())
    launch = compose(config, env)
    report = fetch(
        config,
        resolved.profile_name,
        caller_env=env,
        launch_env=launch.full,
        dry_run=dry_run,
        offline=offline,
        repo=repo,
        bars=not is_quiet() and sys.stderr.isatty(),
        say=note,
        warn=warn,
    )
    if as_json:
        out_json(document(report, config))
    elif dry_run:
        out_text(dry_run_text(report))
    elif report.fetched is not None:
        out_text(str(report.fetched.directory))
    if report.error is not None:
        raise report.error


def _on_disk(report: FetchReport) -> str:
    if not report.files:
        return {"absent": "nothing yet", "unknown": "files there, no stamp to verify them against"}.get(
            report.state, report.state
        )
    done = [f for f in report.files if f.complete]
    if len(done) == len(report.files):
        return f"complete: {len(done)} files, {human(sum(f.size for f in done))}"
    return f"{len(done)} of {len(report.files)} files complete ({human(sum(f.size for f in done))})"


def _would(report: FetchReport) -> str:
    if report.error is not None:
        return f"stop with exit {int(report.error.exit_code)}"
    if report.needed_bytes:
        return f"download {human(report.needed_bytes)}, verify, stamp"
    if report.state == "complete":
        return "nothing: the revision is complete on disk" + (
            " (verified against the hub)" if not report.offline else ""
        )
    return "download it where the hub is reachable (size unknown offline)"


def dry_run_text(report: FetchReport) -> str:
    t = report.target
    commit = report.commit or "unknown offline"
    rows = [
        ("repository", t.repository or "?"),
        ("revision", f"{t.revision or 'main (model.revision unset)'} (commit {commit})"),
        ("destination", f"{report.checkpoint_dir or t.directory} ({t.kind_text()})"),
        ("size", report.size.text()),
        ("on disk", _on_disk(report)),
        ("free", f"{human(report.free_bytes)} at {report.free_at}"),
        ("hub", report.access.endpoint + (f" (not asked: {report.offline})" if report.offline else "")),
        ("token", report.access.token_source or "none (huggingface_hub's stored login, if any)"),
        ("would", _would(report)),
    ]
    if report.leftovers:
        rows.insert(
            5,
            (
                "leftovers",
                f"{report.leftovers} partial file(s), {human(report.leftover_bytes)}, removed first",
            ),
        )
    lines = [f"# glmlaunch fetch --dry-run: profile {report.profile}; nothing was downloaded"]
    width = max(len(k) for k, _ in rows)
    lines += [f"{k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)


def document(report: FetchReport, config: DeploymentConfig) -> dict[str, Any]:
    t = report.target
    payload = report.fetched.payload if report.fetched is not None else None
    return {
        "schema_version": SCHEMA_VERSION,
        "profile": report.profile,
        "dry_run": report.dry_run,
        "repository": t.repository,
        "revision": t.revision,
        "commit": report.commit,
        "destination": {
            "kind": t.kind,
            "checkpoint_dir": str(report.checkpoint_dir) if report.checkpoint_dir is not None else None,
            "root": str(t.directory),
            "source": t.source,
            "free_bytes": report.free_bytes,
            "free_at": str(report.free_at),
        },
        "hub": {
            "endpoint": report.access.endpoint,
            "offline": report.offline,
            # where the token came from, never the token
            "token": report.access.token_source,
        },
        "size": {"bytes": report.size.bytes, "source": report.size.source, "detail": report.size.detail},
        "state": report.state,
        "needed_bytes": report.needed_bytes,
        "leftovers": {"files": report.leftovers, "bytes": report.leftover_bytes},
        "files": [{"path": f.path, "size": f.size, "on_disk": f.on_disk} for f in report.files],
        "stamp": report.stamp.to_json() if report.stamp is not None else None,
        "payload": payload.to_json(config) if payload is not None else None,
        "action": report.action,
        "would_fetch": report.would_fetch,
        "exit_code": int(report.error.exit_code) if report.error is not None else 0,
        "error": report.error.one_line() if report.error is not None else None,
        "warnings": list(report.warnings),
    }
