"""The configuration a vLLM boot ran with, read back from its log.

A boot log of the target rig carries the configuration three times over:

* the launcher's header: the GPUs (``nvidia-smi`` lines), the ``>>> effective configuration`` table
  (``NAME = VALUE [source]``), the ``>>> profile runtime: NAME=VALUE`` environment, the NVFP4 KV scale
  mode, the DCP prefill policy and the CKV gather capacity;
* vLLM's own ``non-default args: {…}``: a Python ``repr`` of a dict whose enum members print as
  ``<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>``. It is parsed without ``eval``: every enum repr is
  replaced by the string ``'CUDAGraphMode.FULL_AND_PIECEWISE'`` and the rest goes to
  :func:`ast.literal_eval`, which accepts literals only (a call such as ``__import__('os')`` is refused);
* the workers' lines: the V2 runner, the EXL3 runtime plan, the PCIe crossovers the comm layer chose.

:func:`parse_boot_config` keeps all of it in a frozen, JSON-safe :class:`BootConfig` (a calibration record
stores it inside the parsed :class:`~glmlaunch.vllmlog.boot.BootLog`);
:mod:`glmlaunch.calibrate.bootconfig` maps it onto glmlaunch's dotted setting keys.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from glmlaunch.config.limits import MAX_INT_DIGITS, MAX_NESTING_DEPTH
from glmlaunch.errors import MASK, is_secret_name
from glmlaunch.vllmlog.lines import iter_lines
from glmlaunch.vllmlog.numbers import MAX_LOG_NUMBER, to_bytes

#: Where vLLM states its version: the API server line, the start-up banner (box-drawing art, then
#: ``version 0.11.2.dev280+…`` or ``version dev``) and the engine's ``Initializing a V1 LLM engine (v…)``.
VERSION_RES: tuple[re.Pattern[str], ...] = (
    re.compile(r"vLLM API server version ([0-9A-Za-z][^\s,]*)"),
    re.compile(r"[\u2580-\u259f]\s+version\s+([0-9A-Za-z][^\s,]*)\s*$"),
    re.compile(r"Initializing a V[0-9] LLM engine \(v([0-9A-Za-z][^\s)]*)\)"),
)

_ARGS_RE = re.compile(r"non-default args: (\{.*)$")
_EFFECTIVE_HEAD_RE = re.compile(r"^>>> effective configuration\b")
_EFFECTIVE_ROW_RE = re.compile(r"^\s+([A-Z][A-Z0-9_]*)\s+=\s?(.*?)\s*\[([^\]]*)\]\s*$")
_RUNTIME_RE = re.compile(r"^>>> profile runtime: ([A-Za-z_][A-Za-z0-9_]*)=(.*?)\s*$")
_GPU_RE = re.compile(r"^(NVIDIA [^,]+), ([0-9]+) MiB, ([0-9][0-9.]*)\s*$")
_FAMILY_RE = re.compile(r"^>>> model family: (.+?)\s*$")
_SCALE_RE = re.compile(r">>> NVFP4 MLA scale mode: ([A-Za-z0-9_-]+)(?: \((.*)\))?")
_POLICY_RE = re.compile(r"DCP prefill policy: ((?:[A-Za-z-]+=-?[0-9]+\s*)+)")
_CKV_CAPACITY_RE = re.compile(r"full CKV gather capacity: ([0-9]+) tokens")
_RUNNER_RE = re.compile(r"Using V([12]) Model Runner")
#: The target model's EXL3 capacities (``EXL3 mixed Trellis runtime planned: …``), buffers optional and
#: any tiers text: the booted configuration needs the capacities. The per-rank observation of the same
#: line (:data:`glmlaunch.vllmlog.boot.EXL3_ARENA_RE`) needs the arena's size and so the whole line. The
#: gap is bounded, as in :mod:`glmlaunch.vllmlog.boot`: linear in a line that repeats the opening words.
EXL3_CAPACITIES_RE = re.compile(
    r"EXL3 mixed Trellis runtime planned:.{0,1024}? decode_capacity=([0-9]+) prefill_capacity=([0-9]+)"
    r" scheduler_capacity=([0-9]+)(?: buffers=([0-9.]+) ?(GiB|MiB|KiB|B)\b)?"
)
#: The same line as Gilded Gnosis r28+ and Infernal Invocation print it: ``one-grid decode=D one-grid
#: prefill=C/S block_m=B buffers=X+Y MiB`` (D the decode window, C the prefill capacity, S the scheduler's
#: batched tokens, B the prefill route block; buffers optional)
EXL3_GRID_CAPACITIES_RE = re.compile(
    r"EXL3 mixed Trellis runtime planned:.{0,1024}? one-grid decode=([0-9]+)"
    r" one-grid prefill=([0-9]+)/([0-9]+)"
    r" block_m=([0-9]+)(?: buffers=([0-9.]+)\+([0-9.]+) ?(GiB|MiB|KiB|B)\b)?"
)
#: ``Configured b12x PCIe crossovers: oneshot max=…, fused max=…, DMA min=….`` (bytes)
CROSSOVERS_RE = re.compile(r"PCIe crossovers: oneshot max=([0-9]+), fused max=([0-9]+), DMA min=([0-9]+)")


class BootConfigError(ValueError):
    """A ``non-default args`` dict that is not plain Python literals (refused, never evaluated)."""


class BootConfig(BaseModel):
    """Everything a boot log says about the configuration that booted; JSON-safe and frozen."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    vllm_version: str | None = None
    vllm_args: dict[str, Any] | None = None
    vllm_args_error: str | None = None  # why a `non-default args` line did not parse
    effective: dict[str, tuple[str, str]] = {}  # launcher name -> (value, source such as "env")
    runtime_env: dict[str, str] = {}  # `>>> profile runtime:` lines
    model_family: str | None = None
    kv_scale_mode: str | None = None
    kv_scale_detail: str | None = None
    dcp_prefill_policy: dict[str, int] | None = None  # as printed: query-split, min-context, …
    ckv_gather_capacity_tokens: int | None = None
    runner: str | None = None  # "v2" from `Using V2 Model Runner`; None when the log does not say
    gpu_model: str | None = None
    gpu_memory_mib: int | None = None
    gpu_driver: str | None = None
    gpu_count: int | None = None
    exl3_decode_capacity: int | None = None
    exl3_prefill_capacity: int | None = None
    exl3_scheduler_capacity: int | None = None
    exl3_buffers_bytes: int | None = None
    #: the prefill route block vLLM chose (r28+ lines; 32 for GLM-5.2's three-tier experts on SM12x)
    exl3_prefill_block_m: int | None = None
    oneshot_max_bytes: int | None = None
    fused_max_bytes: int | None = None
    dma_min_bytes: int | None = None

    @property
    def empty(self) -> bool:
        return self == BootConfig()


# --- the Python-repr dict, without eval ----------------------------------------------------------

_ENUM_HEAD_RE = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?=[:>])")
_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}


def _skip_string(text: str, i: int) -> int:
    """Index just past the string literal starting at ``text[i]`` (a quote)."""
    quote = text[i]
    if text.startswith(quote * 3, i):
        end = text.find(quote * 3, i + 3)
        return len(text) if end < 0 else end + 3
    # The next quote or backslash by str.find, not character by character: a 50 MB argument in a
    # hostile log is then a few scans, not tens of millions of Python steps.
    j = i + 1
    n = len(text)
    while j < n:
        q = text.find(quote, j)
        b = text.find("\\", j, q if q >= 0 else n)
        if b >= 0:
            j = b + 2
            continue
        return n if q < 0 else q + 1
    return n


def _enum_end(text: str, i: int) -> int:
    """Index just past the ``>`` that closes the enum repr opened at ``text[i] == '<'`` (balanced)."""
    stack: list[str] = []
    j = i
    while j < len(text):
        ch = text[j]
        if ch in "'\"":
            j = _skip_string(text, j)
            continue
        if ch in _OPEN:
            stack.append(_OPEN[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack:
                return j + 1
        j += 1
    raise BootConfigError("an enum repr <…> is not closed")


def replace_enum_reprs(text: str) -> str:
    """``<Name.MEMBER: value>`` (balanced, outside string literals) -> ``'Name.MEMBER'``.

    Any other ``<`` outside a string is refused: it is not a literal this parser knows.
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "'\"":
            j = _skip_string(text, i)
            out.append(text[i:j])
            i = j
            continue
        if ch == "<":
            m = _ENUM_HEAD_RE.match(text, i)
            if m is None:
                raise BootConfigError(
                    f"unexpected '<' at offset {i}: only enum reprs <Name.MEMBER: …> are read"
                )
            j = _enum_end(text, i)
            out.append(repr(m.group(1)))
            i = j
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_json_safe(v) for v in value), key=repr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    return str(value)


def _check_limits(value: Any) -> None:
    """The args dict within the limits a record must keep to be read back (depth, integer digits)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = [*node.keys(), *node.values()]
        elif isinstance(node, list | tuple | set | frozenset):
            children = node
        else:
            if isinstance(node, int) and not isinstance(node, bool) and abs(node) >= 10**MAX_INT_DIGITS:
                raise BootConfigError(f"an integer has more than {MAX_INT_DIGITS} digits")
            continue
        if depth >= MAX_NESTING_DEPTH:
            raise BootConfigError(f"nests deeper than {MAX_NESTING_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


def parse_args_repr(text: str) -> dict[str, Any]:
    """vLLM's ``non-default args`` dict as JSON-safe data; literals only, never evaluated as code."""
    try:
        value = ast.literal_eval(replace_enum_reprs(text.strip()))
    except BootConfigError:
        raise
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise BootConfigError(f"not a Python literal: {type(exc).__name__}: {exc}"[:200]) from None
    if not isinstance(value, dict):
        raise BootConfigError(f"expected a dict, got {type(value).__name__}")
    _check_limits(value)
    result = _json_safe(value)
    assert isinstance(result, dict)
    return result


# --- the whole log ---------------------------------------------------------------------------------


def version_of(text: str) -> str | None:
    for vre in VERSION_RES:
        vm = vre.search(text)
        if vm:
            return vm.group(1)
    return None


def parse_boot_config(text: str) -> BootConfig:
    """Read the booted configuration from a log's text; never raises (a bad args line is reported)."""
    values: dict[str, Any] = {}
    effective: dict[str, tuple[str, str]] = {}
    runtime: dict[str, str] = {}
    gpus: list[tuple[str, int, str]] = []
    in_table = False
    in_gpus = False
    for line in iter_lines(text):
        if in_table:
            row = _EFFECTIVE_ROW_RE.match(line)
            if row:
                effective[row.group(1)] = (row.group(2).strip(), row.group(3).strip())
                continue
            in_table = False
        if _EFFECTIVE_HEAD_RE.match(line):
            in_table = True
            continue
        gpu = _GPU_RE.match(line)
        if gpu:
            if not in_gpus:
                gpus = []  # a second boot in the same file: the later one wins
            if len(gpu.group(2)) > 18:  # a corrupt line: no GPU has that much memory
                continue
            gpus.append((gpu.group(1), int(gpu.group(2)), gpu.group(3)))
            in_gpus = True
            continue
        in_gpus = False
        if "version" in line and values.get("vllm_version") is None:
            found = version_of(line)
            if found:
                values["vllm_version"] = found
        try:
            _scan_line(line, values, runtime)
        except (ValueError, OverflowError):  # a number too long for int() or too large: skip the line
            continue
    if gpus:
        values.update(
            gpu_model=gpus[0][0], gpu_memory_mib=gpus[0][1], gpu_driver=gpus[0][2], gpu_count=len(gpus)
        )
    if isinstance(values.get("vllm_args"), dict):
        values["vllm_args"] = _masked_args(values["vllm_args"])
    # A figure no real boot prints (a corrupt or hostile line): not kept, as boot.py drops such a worker
    # line, so the record holds only what its reader accepts (config.limits.MAX_INT_DIGITS).
    values = {k: v for k, v in values.items() if not (isinstance(v, int) and abs(v) >= MAX_LOG_NUMBER)}
    return BootConfig(
        effective={k: (MASK if _secret(k, v) else v, src) for k, (v, src) in effective.items()},
        runtime_env={k: MASK if _secret(k, v) else v for k, v in runtime.items()},
        **values,
    )


def _secret(name: str, value: object) -> bool:
    """A credential the log printed (HF_TOKEN=hf_…, 'api_key': 'sk-…'): a calibration record and an
    imported profile keep ``****`` instead. A number under a secret-looking name is a count, and stays."""
    if not isinstance(value, str) or not is_secret_name(name):
        return False
    return re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", value.strip()) is None


def _masked_args(args: dict[str, Any]) -> dict[str, Any]:
    return {
        k: MASK if _secret(k, v) else _masked_args(v) if isinstance(v, dict) else v for k, v in args.items()
    }


def _scan_line(line: str, values: dict[str, Any], runtime: dict[str, str]) -> None:
    if m := _RUNTIME_RE.match(line):
        runtime[m.group(1)] = m.group(2)
    elif m := _ARGS_RE.search(line):
        try:
            values["vllm_args"] = parse_args_repr(m.group(1))
            values["vllm_args_error"] = None
        except BootConfigError as exc:
            values["vllm_args"] = None
            values["vllm_args_error"] = str(exc)
    elif m := _FAMILY_RE.match(line):
        values["model_family"] = m.group(1)
    elif m := _SCALE_RE.search(line):
        values["kv_scale_mode"], values["kv_scale_detail"] = m.group(1), m.group(2)
    elif m := _POLICY_RE.search(line):
        values["dcp_prefill_policy"] = {
            k: int(v) for k, v in re.findall(r"([A-Za-z-]+)=(-?[0-9]+)", m.group(1))
        }
    elif m := _CKV_CAPACITY_RE.search(line):
        values["ckv_gather_capacity_tokens"] = int(m.group(1))
    elif m := _RUNNER_RE.search(line):
        # `Using V1 Model Runner` is printed by more than the runner choice in this tree: unknown.
        values["runner"] = "v2" if m.group(1) == "2" else values.get("runner")
    elif m := EXL3_CAPACITIES_RE.search(line):
        values.update(
            exl3_decode_capacity=int(m.group(1)),
            exl3_prefill_capacity=int(m.group(2)),
            exl3_scheduler_capacity=int(m.group(3)),
            exl3_buffers_bytes=to_bytes(m.group(4), m.group(5)) if m.group(4) else None,
        )
    elif m := EXL3_GRID_CAPACITIES_RE.search(line):
        values.update(
            exl3_decode_capacity=int(m.group(1)),
            exl3_prefill_capacity=int(m.group(2)),
            exl3_scheduler_capacity=int(m.group(3)),
            exl3_prefill_block_m=int(m.group(4)),
            exl3_buffers_bytes=to_bytes(m.group(5), m.group(7)) + to_bytes(m.group(6), m.group(7))
            if m.group(5)
            else None,
        )
    elif m := CROSSOVERS_RE.search(line):
        values.update(
            oneshot_max_bytes=int(m.group(1)), fused_max_bytes=int(m.group(2)), dma_min_bytes=int(m.group(3))
        )
