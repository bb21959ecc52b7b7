"""Rules that need several settings at once (docs/configuration.md §4), run before anything else.

Input: a type-valid :class:`DeploymentConfig` and its provenance. Output: diagnostics (errors and
warnings), each naming the key, the value, the allowed values and where the value came from.
Hardware facts (NVML) are checked later, in :mod:`glmlaunch.hardware.checks`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Literal

from glmlaunch.config.diagnostics import Diagnostic, Source
from glmlaunch.config.registry import KNOWN_PASSTHROUGH, MANAGED_BY_NAME
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import KIB, format_size

SUPPORTED_TP_DCP = frozenset({(4, 1), (4, 2), (4, 4), (8, 1), (8, 2), (8, 4), (8, 8)})
ONESHOT_WORLD_SIZES = frozenset({2, 4, 6, 8, 10})
DCP_A2A_WORLD_SIZES: dict[str, frozenset[int]] = {
    "sparkinfer-r12": frozenset({2, 4, 8}),
    "b12x": frozenset({2, 4, 8, 9, 10, 12, 16}),
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Layers, lowest first (config.resolve): a warning names the most specific source of what it read.
_LAYER = ("default", "profile", "env", "cli")
#: What the capture-size rules read besides the sizes: the decode window is max_num_seqs x (1 + MTP).
_WINDOW_INPUTS = (
    "cudagraph.capture_sizes",
    "cudagraph.capture_rule",
    "scheduler.max_num_seqs",
    "speculative.num_speculative_tokens",
)


def validate_config(config: DeploymentConfig, provenance: Mapping[str, Source]) -> list[Diagnostic]:
    out: list[Diagnostic] = []

    def sources_of(key: str) -> list[Source]:
        probe = key
        while probe:
            if probe in provenance:
                return [provenance[probe]]
            probe = probe.rpartition(".")[0]
        # A section set as a whole (capture_rule: {max: 32}) is recorded at its leaves.
        return [v for k, v in provenance.items() if k.startswith(key + ".")]

    def most_specific(found: list[Source]) -> Source | None:
        # the latest layer wins; within one layer the first found (the rule's own key comes first)
        return max(found, key=lambda s: _LAYER.index(s.kind), default=None)

    def src(key: str, *inputs: str) -> str | None:
        """Where the value a rule is about came from, and, when a later layer set another value it read,
        that one first: a --set that made a profile's capture sizes wrong is named, not 'default'."""
        own = most_specific(sources_of(key))
        other = most_specific([s for k in inputs if k != key for s in sources_of(k)])
        if other is not None and (own is None or _LAYER.index(other.kind) > _LAYER.index(own.kind)):
            return str(other) if own is None or own.kind == "default" else f"{other} and {own}"
        return None if own is None else str(own)

    def add(
        level: Literal["error", "warning"],
        key: str,
        message: str,
        value: object = None,
        allowed: tuple[str, ...] = (),
        hint: str | None = None,
        inputs: tuple[str, ...] = (),
    ) -> None:
        out.append(Diagnostic(level, key, message, value, allowed, src(key, *inputs), hint))

    tp, dcp = config.parallel.tp, config.parallel.dcp
    geo = config.model.geometry

    if tp % dcp:
        divisors = tuple(str(d) for d in range(1, tp + 1) if tp % d == 0)
        add("error", "parallel.dcp", f"decode context parallel size must divide tp={tp}", dcp, divisors)
    elif dcp > 1 and (tp, dcp) not in SUPPORTED_TP_DCP:
        add(
            "warning",
            "parallel.dcp",
            f"TP:DCP {tp}:{dcp} is outside the pairs the DCP policy was tuned for",
            f"{tp}:{dcp}",
            tuple(f"{a}:{b}" for a, b in sorted(SUPPORTED_TP_DCP)),
        )
    if geo.num_attention_heads % tp:
        add(
            "error",
            "parallel.tp",
            f"{geo.num_attention_heads} attention heads are not divisible by tp",
            tp,
            tuple(str(d) for d in range(1, geo.num_attention_heads + 1) if geo.num_attention_heads % d == 0),
        )
    if tp > config.hardware.gpu_count:
        add(
            "error",
            "parallel.tp",
            f"tp exceeds the expected GPU count ({config.hardware.gpu_count})",
            tp,
            hint="raise hardware.gpu_count or lower parallel.tp",
        )
    if config.parallel.gpus is not None:
        gpus = config.parallel.gpus
        if len(gpus) < tp:
            add("error", "parallel.gpus", f"{len(gpus)} GPUs listed for tp={tp}", gpus)
        elif len(gpus) > tp:
            add(
                "warning",
                "parallel.gpus",
                f"{len(gpus)} GPUs listed but tp={tp}: CUDA_VISIBLE_DEVICES exposes GPUs nothing uses",
                gpus,
            )
        too_high = [g for g in gpus if g >= config.hardware.gpu_count]
        if too_high:
            add(
                "error",
                "parallel.gpus",
                f"GPU index beyond the expected {config.hardware.gpu_count} GPUs",
                too_high,
            )

    if config.comm.pcie_allreduce:
        if tp == 1:
            add(
                "warning",
                "comm.pcie_allreduce",
                "no PCIe all-reduce is built at tp=1",
                True,
                hint="--set comm.pcie_allreduce=false",
                inputs=("parallel.tp",),
            )
        elif tp not in ONESHOT_WORLD_SIZES:
            add(
                "error",
                "parallel.tp",
                "the one-shot all-reduce supports no such world size",
                tp,
                tuple(str(w) for w in sorted(ONESHOT_WORLD_SIZES)),
            )
    if dcp > 1 and config.comm.dcp_a2a:
        a2a_sizes = DCP_A2A_WORLD_SIZES[config.stack]
        if dcp not in a2a_sizes:
            add(
                "error",
                "parallel.dcp",
                f"the {config.stack} DCP all-to-all supports no such world size",
                dcp,
                tuple(str(w) for w in sorted(a2a_sizes)),
            )
        if config.comm.dcp_a2a_max_tokens == 0:
            heads = config.dcp_total_heads
            width = max(geo.kv_lora_rank, geo.query_head_dim)
            per_token = 2 * (2 * heads * width + 4 * heads)
            per_channel = per_token * config.scheduler.max_num_batched_tokens
            add(
                "warning",
                "comm.dcp_a2a_max_tokens",
                f"0 (uncapped) sizes DCP A2A staging from max_num_batched_tokens: {per_token / KIB:.1f} KiB "
                "per "
                f"batched token per channel, {format_size(per_channel)} per channel here",
                0,
                hint="--set comm.dcp_a2a_max_tokens=64 (what the launchers use)",
                inputs=("scheduler.max_num_batched_tokens",),
            )

    if config.comm.compressed_wire and not config.comm.allow_compressed_wire:
        add(
            "error",
            "comm.dma_wire_mode",
            "compressed DMA wire modes change model numerics and need an explicit opt-in",
            config.comm.dma_wire_mode,
            ("0",),
            hint="set comm.allow_compressed_wire=true to opt in",
        )

    if config.scheduler.max_model_len > geo.max_position_embeddings:
        add(
            "error",
            "scheduler.max_model_len",
            f"longer than the model's max_position_embeddings ({geo.max_position_embeddings})",
            config.scheduler.max_model_len,
        )
    if config.mtp > 0 and geo.num_mtp_layers == 0:
        add("error", "speculative.num_speculative_tokens", "MTP needs an MTP layer in the model", config.mtp)

    sizes = config.capture_sizes()
    window = config.scheduler.max_num_seqs * config.decode_step
    cap_key = "cudagraph.capture_rule" if config.cudagraph.capture_rule else "cudagraph.capture_sizes"
    # The capture rule that serves exactly the decode window: multiples of MTP+1 (step null) up to it.
    # A hint names the step too whenever a step is set, or following it would not clear its warning.
    step = config.cudagraph.capture_rule.step if config.cudagraph.capture_rule else None
    to_window = (
        f"--set cudagraph.capture_rule.step=null --set cudagraph.capture_rule.max={window}"
        if step is not None and step != config.decode_step
        else f"--set cudagraph.capture_rule.max={window}"
    )
    n = window // config.decode_step
    shown = ", ".join(str(config.decode_step * i) for i in range(1, n + 1)) if n <= 3 else (
        f"{config.decode_step}, {2 * config.decode_step}, … {window}"
    )
    if config.cudagraph.mode != "NONE" and sizes:
        if max(sizes) < window:
            add(
                "error",
                cap_key,
                f"largest capture size {max(sizes)} is below max_num_seqs x (1 + MTP) = "
                f"{config.scheduler.max_num_seqs} x {config.decode_step} = {window}: full decode batches "
                "would silently leave the CUDA-graph fast path",
                sizes,
                hint=f"capture up to {window} ({to_window}), or lower scheduler.max_num_seqs",
                inputs=_WINDOW_INPUTS,
            )
        if (config.model.quantization or "").lower() == "exl3" and config.decode_step > 1:
            off = [s for s in sizes if s % config.decode_step]
            if off:
                add(
                    "warning",
                    cap_key,
                    f"on the EXL3 path capture sizes should be multiples of MTP+1 = {config.decode_step} "
                    f"({len(off)} of {len(sizes)} are not)",
                    sizes,
                    hint=f"{to_window} (sizes {shown}; it replaces a capture_sizes list)",
                    inputs=(*_WINDOW_INPUTS, "model.quantization"),
                )
        beyond = [s for s in sizes if s > window]
        if beyond:
            # A decode step never holds more than max_num_seqs x (1 + MTP) tokens: these graphs are only
            # memory (the audit's capture-beyond-decode-window finding prices them).
            fits = step is None or window % step == 0
            add(
                "warning",
                cap_key,
                f"capture sizes above max_num_seqs x (1 + MTP) = {window} never serve a decode step "
                f"({len(beyond)} of {len(sizes)}): they only cost graph memory",
                sizes,
                hint=f"--set cudagraph.capture_rule.max={window}" if fits else to_window,
                inputs=_WINDOW_INPUTS,
            )
    if config.exl3_trellis_max_m is not None and config.exl3_trellis_max_m < window:
        add(
            "warning",
            "exl3_trellis_max_m",
            f"the EXL3 Trellis decode window is below max_num_seqs x (1 + MTP) = {window}",
            config.exl3_trellis_max_m,
            hint=f"--set exl3_trellis_max_m={window}",
            inputs=_WINDOW_INPUTS[2:],
        )
    cap = config.exl3.prefill_capacity
    if cap is not None and cap > config.scheduler.max_num_batched_tokens:
        add(
            "warning",
            "exl3.prefill_capacity",
            f"larger than scheduler.max_num_batched_tokens ({config.scheduler.max_num_batched_tokens}): the "
            "scheduler never sends more, so the extra EXL3 arena (240 KiB/token, +320 KiB/token for the "
            "MTP drafter) only takes KV cache memory",
            cap,
            hint=f"--set exl3.prefill_capacity={config.scheduler.max_num_batched_tokens} (or null: unset)",
            inputs=("scheduler.max_num_batched_tokens",),
        )
    if config.memory.kv_scale_mode is not None and config.memory.kv_cache_dtype != "nvfp4_ds_mla":
        add(
            "error",
            "memory.kv_scale_mode",
            f"the NVFP4 MLA scale modes (static, dynamic-token) only apply to kv_cache_dtype "
            f"nvfp4_ds_mla, not {config.memory.kv_cache_dtype}",
            config.memory.kv_scale_mode,
            ("null",),
            hint="set memory.kv_scale_mode=null, or memory.kv_cache_dtype=nvfp4_ds_mla",
        )
    if config.lmcache and config.memory.allocator.expandable_segments:
        add(
            "warning",
            "memory.allocator.expandable_segments",
            "LMCache forces expandable_segments off; every torch footprint is computed without it",
            True,
            hint="--set memory.allocator.expandable_segments=false",
            inputs=("lmcache",),
        )

    for name in config.env:
        key = f"env.{name}"
        if not _ENV_NAME.fullmatch(name):
            add("error", key, "not a valid environment variable name", name)
        elif "\0" in config.env[name]:
            # No environment (execve) or shell can carry a NUL: the value would be cut at it silently.
            add(
                "error",
                key,
                "the value contains a NUL byte, which no environment variable can hold",
                hint="remove the NUL (\\0) from the value",
            )
        elif name in MANAGED_BY_NAME:
            spec = MANAGED_BY_NAME[name]
            if config.stack in spec.stacks:
                add(
                    "error",
                    key,
                    "this variable is managed by glmlaunch; passing it through would shadow the setting",
                    config.env[name],
                    hint="set " + " / ".join(spec.settings or ("(derived)",)) + " instead",
                )
            else:
                add(
                    "warning",
                    key,
                    f"the {config.stack} stack never reads this variable",
                    config.env[name],
                    hint="remove it, or switch `stack`",
                )
        elif name.startswith("VLLM_") and name not in KNOWN_PASSTHROUGH:
            add(
                "warning",
                key,
                "unknown VLLM_* variable (not one glmlaunch knows vLLM to read)",
                config.env[name],
                hint="check the spelling against vllm/envs.py",
            )

    for i, arg in enumerate(config.vllm_args):
        if "\0" in arg:
            # execve cannot pass a NUL inside an argument: vLLM would receive it cut short.
            add(
                "error",
                f"vllm_args[{i}]",
                "the argument contains a NUL byte, which no process argument can hold",
                hint="remove the NUL (\\0) from the argument",
            )
    kwargs = config.server.default_chat_template_kwargs or {}
    for name, value in kwargs.items():
        if isinstance(value, float) and not math.isfinite(value):
            # vLLM reads the flag with Python's JSON, which accepts NaN; no JSON standard does.
            add(
                "error",
                f"server.default_chat_template_kwargs.{name}",
                "not a finite number (NaN or infinity): the flag's JSON would not be standard JSON",
                value,
                hint="use a finite number, a string or a boolean",
            )

    from glmlaunch.config.render_args import managed_flag_conflicts, standalone_values

    for key, value in standalone_values(config):
        if value.startswith("-"):
            add(
                "error",
                key,
                "starts with '-': vllm serve would read it as an option, not as this value",
                value,
                hint="give the value itself (a path: ./-name); extra flags belong in vllm_args",
            )
    for arg, setting in managed_flag_conflicts(config.vllm_args):
        add(
            "error",
            "vllm_args",
            f"{arg} is managed by glmlaunch; a second copy would win by argparse's last-one-wins",
            arg,
            hint=f"set {setting} instead",
        )
    return out
