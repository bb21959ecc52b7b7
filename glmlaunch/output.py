"""Where output goes, and secret masking.

stdout carries data only (tables, JSON, export lines); messages, warnings and progress go to stderr.
Every printed string passes through :func:`mask_secrets` so a token never reaches a terminal or a log.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from glmlaunch.config.registry import GLMLAUNCH_DEBUG, NO_COLOR

if TYPE_CHECKING:
    from rich.console import Console

#: A name is secret when one of its _-separated parts is one of these (HF_TOKEN, OPENAI_API_KEY,
#: AWS_SECRET_ACCESS_KEY, DB_PASSWORD). Whole parts only: "turnkey" is a profile and
#: VLLM_DCP_A2A_MAX_TOKENS a count, neither a secret.
SECRET_MARKERS: frozenset[str] = frozenset(
    {"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "APIKEY", "CREDENTIAL", "CREDENTIALS"}
)
MASK = "****"

_CONSOLES: dict[str, Console] = {}


def __getattr__(name: str) -> Console:
    # `err_console` / `out_console` are made on first use: importing rich costs ~40 ms, which the
    # commands that print only export lines or JSON (env, args, config --json) need not pay.
    if name not in ("err_console", "out_console"):
        raise AttributeError(name)
    if name not in _CONSOLES:
        from rich.console import Console

        if name == "err_console":
            _CONSOLES[name] = Console(stderr=True, highlight=False, soft_wrap=True)
        else:
            # Data on stdout must not be wrapped to an imaginary 80-column terminal when piped.
            _CONSOLES[name] = Console(
                highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 240
            )
    return _CONSOLES[name]


_known_secrets: set[str] = set()


def is_secret_name(name: str) -> bool:
    return any(part in SECRET_MARKERS for part in re.split(r"[^A-Z0-9]+", name.upper()))


def register_secrets(environ: Mapping[str, str]) -> None:
    """Remember the values of secret-named variables so they are masked wherever they appear."""
    for name, value in environ.items():
        if is_secret_name(name) and len(value) >= 4:
            _known_secrets.add(value)


def mask_secrets(text: str, extra: Iterable[str] = ()) -> str:
    """Replace every known secret value, and NAME=value pairs of secret-named variables, by a mask."""
    secrets = sorted({*(_known_secrets), *(s for s in extra if len(s) >= 4)}, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, MASK)
    return _ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)


_ASSIGNMENT = re.compile(
    r"\b((?:[A-Z0-9]+_)*(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|APIKEY)(?:_[A-Z0-9]+)*)"
    r"(\s*[=:]\s*[\"']?)(?!\*\*\*\*)[^\s\"',;]+"
)


def mask_mapping(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_name(k) else v) for k, v in env.items()}


_ENV_LIKE = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def _secret_key(key: object) -> bool:
    # JSON documents use lowercase snake_case for their own fields ("key", "kv_bytes_per_token_origin");
    # only keys written like an environment variable (HF_TOKEN, OPENAI_API_KEY) name secrets.
    return isinstance(key, str) and bool(_ENV_LIKE.match(key)) and is_secret_name(key)


def mask_obj(obj: Any) -> Any:
    """Mask secret-named keys at any depth of a JSON-like object, and known secret values in strings."""
    if isinstance(obj, Mapping):
        return {k: (MASK if _secret_key(k) and isinstance(v, str) else mask_obj(v)) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [mask_obj(v) for v in obj]
    if isinstance(obj, str):
        return mask_secrets(obj)
    return obj


def out_json(obj: Any) -> None:
    """Write exactly one JSON document to stdout (secrets masked)."""
    sys.stdout.write(json.dumps(mask_obj(obj), indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def out_text(text: str) -> None:
    sys.stdout.write(mask_secrets(text))
    if not text.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()


def note(message: str) -> None:
    """A human message on stderr."""
    sys.stderr.write(mask_secrets(message) + "\n")
    sys.stderr.flush()


def warn(message: str) -> None:
    line = "warning: " + mask_secrets(message)
    if sys.stderr.isatty() and not os.environ.get(NO_COLOR):
        line = f"\x1b[33m{line}\x1b[0m"
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def debug_enabled() -> bool:
    return os.environ.get(GLMLAUNCH_DEBUG, "").strip().lower() in {"1", "true", "yes", "on"}
