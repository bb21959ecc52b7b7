"""One exception family and the documented exit codes.

Library code raises a :class:`GlmlaunchError` subclass; only ``cli.py`` converts it into a one-line
message on stderr and the exit code of its class. The codes are part of the public contract (README).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import IntEnum

#: A name is secret when one of its parts (split at anything but letters and digits) is one of these:
#: HF_TOKEN, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, ``env.MY_TOKEN``, ``--api-key``. Whole parts
#: only: "turnkey" is a profile and VLLM_DCP_A2A_MAX_TOKENS a count, neither a secret. The rule lives here,
#: below :mod:`glmlaunch.output` (which re-exports it), so an error's own message masks its value.
SECRET_MARKERS: frozenset[str] = frozenset(
    {"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "APIKEY", "CREDENTIAL", "CREDENTIALS"}
)
MASK = "****"
#: A marker followed by one of these parts names a quantity, not a credential:
#: VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD (a token count), a KEY_SIZE, a TOKEN_BUDGET.
QUANTITY_PARTS: frozenset[str] = frozenset(
    {"THRESHOLD", "LIMIT", "COUNT", "BUDGET", "SIZE", "LEN", "LENGTH", "CAPACITY", "NUM", "BYTES", "RATIO"}
)


def is_secret_name(name: str) -> bool:
    parts = re.split(r"[^A-Z0-9]+", name.upper())
    return any(
        part in SECRET_MARKERS and (i + 1 == len(parts) or parts[i + 1] not in QUANTITY_PARTS)
        for i, part in enumerate(parts)
    )


class ExitCode(IntEnum):
    OK = 0
    INTERNAL = 1  # a bug in glmlaunch: reported with a traceback only when GLMLAUNCH_DEBUG=1
    CONFIG = 2  # usage, profile or configuration error
    HARDWARE = 3  # a hardware check failed (GPU count, capability, P2P, driver, free memory)
    MARGIN = 4  # the memory margin is below the deployment's minimum
    PREFLIGHT = 5  # a preflight worker failed, hung, or measured memory disagrees with the ledger
    LAUNCH = 6  # the vllm executable is missing or cannot be executed
    WARNINGS = 7  # only warnings, and --strict was given
    NO_GPU = 8  # no NVIDIA driver / NVML, or no GPU visible
    ENGINE_FAILED = 9  # serve --strict-exit: vLLM exited 0 after a fatal engine error in its log
    WEIGHTS = 10  # the checkpoint is not on disk or cannot be fetched (gated, wrong revision, another model)
    DISK_SPACE = 11  # the checkpoint does not fit in the free space at its destination
    #: serve: the LMCache server did not become ready, its port was taken or (external) did not answer, or
    #: it died while vLLM ran (vLLM was then stopped). Upstream's wrappers exit 1, glmlaunch's internal error.
    LMCACHE = 12
    INTERRUPTED = 130  # Ctrl-C / SIGTERM


class GlmlaunchError(Exception):
    """Base of every error glmlaunch reports to a user."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        value: object = None,
        allowed: Sequence[str] | None = None,
        source: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.key = key
        self.value = value
        self.allowed = list(allowed) if allowed is not None else None
        self.source = source
        self.hint = hint

    def one_line(self) -> str:
        """The message, with key, value, allowed values, source and hint, on one line."""
        parts: list[str] = []
        if self.key is not None:
            parts.append(f"{self.key}: {self.message}")
        else:
            parts.append(self.message)
        if self.value is not None:
            # The value of a secret-named key is never shown, whatever its type (`--set env.X_TOKEN=[…]`);
            # everything else is masked again as text where it is printed (output.mask_secrets).
            shown = MASK if self.key is not None and is_secret_name(self.key) else repr(self.value)
            parts.append(f"got {shown}")
        if self.allowed:
            shown = ", ".join(self.allowed[:12]) + (", …" if len(self.allowed) > 12 else "")
            parts.append(f"allowed: {shown}")
        if self.source:
            parts.append(f"from {self.source}")
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "; ".join(parts).replace("\n", " ")


class ConfigError(GlmlaunchError):
    exit_code = ExitCode.CONFIG


class EvidenceError(ConfigError):
    """A boot log whose figures disagree with each other, the configuration or the GPU (calibrate.evidence):
    refused as a calibration record. A bad input like any other: exit 2."""


class ConfigErrors(ConfigError):
    """Several configuration errors found at once; each is kept for JSON output and tests."""

    def __init__(self, errors: Sequence[ConfigError]) -> None:
        self.errors = list(errors)
        first = self.errors[0]
        more = len(self.errors) - 1
        super().__init__(
            first.message,
            key=first.key,
            value=first.value,
            allowed=first.allowed,
            source=first.source,
            hint=first.hint,
        )
        self.more = more

    def one_line(self) -> str:
        line = self.errors[0].one_line()
        if self.more:
            line += f" (and {self.more} more error{'s' if self.more > 1 else ''})"
        return line

    def all_lines(self) -> list[str]:
        return [e.one_line() for e in self.errors]


class HardwareError(GlmlaunchError):
    exit_code = ExitCode.HARDWARE


class NoGpuError(GlmlaunchError):
    exit_code = ExitCode.NO_GPU


class MarginError(GlmlaunchError):
    exit_code = ExitCode.MARGIN


class PreflightError(GlmlaunchError):
    exit_code = ExitCode.PREFLIGHT


class LaunchError(GlmlaunchError):
    exit_code = ExitCode.LAUNCH


class LmcacheError(GlmlaunchError):
    exit_code = ExitCode.LMCACHE


class StrictWarningsError(GlmlaunchError):
    exit_code = ExitCode.WARNINGS


class WeightsError(GlmlaunchError):
    """The checkpoint's weights: missing on disk, or the hub refused them (glmlaunch.fetch)."""

    exit_code = ExitCode.WEIGHTS


class DiskSpaceError(GlmlaunchError):
    exit_code = ExitCode.DISK_SPACE
