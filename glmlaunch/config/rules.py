"""Validation rules as data: one small named function each, with a stable id, a level and its evidence.

A rule reads a type-valid :class:`DeploymentConfig` and yields zero or more :class:`Finding`; the
registry :data:`RULES` lists them in the order they are reported, and :mod:`.validate` runs it and adds
where each value came from. Ids are kebab-case; the rules that encode upstream's measured failures keep
upstream's own id (malaiwah/glm52-exl3-vast ``scripts/glm_config.py`` ``validate()``, commit eba43a5) and
cite the failure in ``evidence``.

Levels: ``error`` stops the command (the configuration cannot mean what it says); ``warning`` is printed
by every command that resolves the configuration; ``note`` is said once and silenced by ``-q``. A rule
about runtime risk (a pool that may OOM after a clean boot) is a warning here and a verdict blocker in
the plan, never an error: ``plan`` of such a configuration still prints a plan and a verdict.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from glmlaunch.config.registry import (
    KNOWN_PASSTHROUGH,
    LIBRARY_PREFIXES,
    MANAGED_BY_NAME,
    VLLM_READS_LIBRARY_NAMES,
    generations_reading,
    library_reads,
    library_spelling,
    stack_label,
)
from glmlaunch.config.releases import SPARKINFER_STACKS, parse_release, stack_is_read, stack_of_release
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import KIB, format_size
from glmlaunch.config.worldsizes import DCP_A2A_WORLD_SIZES, ONESHOT_WORLD_SIZES

Level = Literal["error", "warning", "note"]

SUPPORTED_TP_DCP = frozenset({(4, 1), (4, 2), (4, 4), (8, 1), (8, 2), (8, 4), (8, 8)})
#: the EXL3 Trellis decode window the runtime uses when VLLM_EXL3_TRELLIS_MAX_M is unset (the appliance's
#: entrypoint.sh L1459 and the release line's serve-gilded-gnosis.sh L43 both default it to 32)
TRELLIS_MAX_M_DEFAULT = 32
UPSTREAM = "malaiwah/glm52-exl3-vast@eba43a5"
#: What the capture-size rules read besides the sizes: the decode window is max_num_seqs x (1 + MTP).
WINDOW_INPUTS = (
    "cudagraph.capture_sizes",
    "cudagraph.capture_rule",
    "scheduler.max_num_seqs",
    "speculative.num_speculative_tokens",
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Finding:
    key: str
    message: str
    value: object = None
    allowed: tuple[str, ...] = ()
    hint: str | None = None
    #: the other settings the rule read: where a later layer set one of them, the finding names that source
    inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    id: str
    level: Level
    summary: str
    evidence: str
    check: Callable[[DeploymentConfig], Iterator[Finding]]


RULES: list[Rule] = []


def rule(
    id: str, level: Level, summary: str, evidence: str = ""
) -> Callable[
    [Callable[[DeploymentConfig], Iterator[Finding]]], Callable[[DeploymentConfig], Iterator[Finding]]
]:
    def register(
        fn: Callable[[DeploymentConfig], Iterator[Finding]],
    ) -> Callable[[DeploymentConfig], Iterator[Finding]]:
        RULES.append(Rule(id, level, summary, evidence, fn))
        return fn

    return register


def by_id(rule_id: str) -> Rule | None:
    return next((r for r in RULES if r.id == rule_id), None)


def decode_window(config: DeploymentConfig) -> int:
    """Query tokens one decode step carries: max_num_seqs x (1 + MTP)."""
    return config.scheduler.max_num_seqs * config.decode_step


def trellis_window(config: DeploymentConfig) -> tuple[int, bool]:
    """The EXL3 Trellis decode window in force, and whether it was set (the runtime default otherwise)."""
    if config.exl3_trellis_max_m is not None:
        return config.exl3_trellis_max_m, True
    return TRELLIS_MAX_M_DEFAULT, False


def _capture_key(config: DeploymentConfig) -> str:
    return "cudagraph.capture_rule" if config.cudagraph.capture_rule else "cudagraph.capture_sizes"


def _variant(config: DeploymentConfig, bpw: str) -> bool:
    return f"exl3-tr3-{bpw}bpw" in (config.model.path or "").lower()


def _offloads(config: DeploymentConfig) -> bool:
    return config.lmcache and config.lmcache_config.offload_fraction > 0


# --- parallelism --------------------------------------------------------------------------------------


@rule("dcp-divides-tp", "error", "decode context parallelism must divide tensor parallelism")
def _dcp_divides(c: DeploymentConfig) -> Iterator[Finding]:
    tp, dcp = c.parallel.tp, c.parallel.dcp
    if tp % dcp:
        # the divisors worth naming: a TP in the millions (a typo) must not cost a loop over all of them
        divisors = tuple(str(d) for d in range(1, min(tp, 64) + 1) if tp % d == 0)
        yield Finding("parallel.dcp", f"decode context parallel size must divide tp={tp}", dcp, divisors)


@rule("tp-dcp-untuned", "warning", "a TP:DCP pair the DCP policy was not tuned for")
def _tp_dcp_pairs(c: DeploymentConfig) -> Iterator[Finding]:
    tp, dcp = c.parallel.tp, c.parallel.dcp
    if not tp % dcp and dcp > 1 and (tp, dcp) not in SUPPORTED_TP_DCP:
        yield Finding(
            "parallel.dcp",
            f"TP:DCP {tp}:{dcp} is outside the pairs the DCP policy was tuned for",
            f"{tp}:{dcp}",
            tuple(f"{a}:{b}" for a, b in sorted(SUPPORTED_TP_DCP)),
        )


@rule("heads-divisible-by-tp", "error", "attention heads must split evenly over TP ranks")
def _heads(c: DeploymentConfig) -> Iterator[Finding]:
    heads, tp = c.model.geometry.num_attention_heads, c.parallel.tp
    if heads % tp:
        yield Finding(
            "parallel.tp",
            f"{heads} attention heads are not divisible by tp",
            tp,
            # the TP sizes that split the heads, up to the GPUs there are: a loop to ``heads`` never ends
            # for a fuzzed head count of 10**18
            tuple(str(d) for d in range(1, min(heads, max(c.hardware.gpu_count, 1)) + 1) if heads % d == 0),
        )


@rule("tp-exceeds-gpus", "error", "more TP ranks than GPUs the deployment expects")
def _tp_gpus(c: DeploymentConfig) -> Iterator[Finding]:
    if c.parallel.tp > c.hardware.gpu_count:
        yield Finding(
            "parallel.tp",
            f"tp exceeds the expected GPU count ({c.hardware.gpu_count})",
            c.parallel.tp,
            hint="raise hardware.gpu_count or lower parallel.tp",
        )


@rule("gpu-list", "error", "the GPU list must name one GPU per TP rank, each one present")
def _gpu_list(c: DeploymentConfig) -> Iterator[Finding]:
    gpus, tp = c.parallel.gpus, c.parallel.tp
    if gpus is None:
        return
    if len(gpus) < tp:
        yield Finding("parallel.gpus", f"{len(gpus)} GPUs listed for tp={tp}", gpus)
    too_high = [g for g in gpus if g >= c.hardware.gpu_count]
    if too_high:
        yield Finding("parallel.gpus", f"GPU index beyond the expected {c.hardware.gpu_count} GPUs", too_high)


@rule("gpu-list-unused", "warning", "GPUs listed beyond the TP group are exposed but unused")
def _gpu_list_extra(c: DeploymentConfig) -> Iterator[Finding]:
    gpus, tp = c.parallel.gpus, c.parallel.tp
    if gpus is not None and len(gpus) > tp:
        yield Finding(
            "parallel.gpus",
            f"{len(gpus)} GPUs listed but tp={tp}: CUDA_VISIBLE_DEVICES exposes GPUs nothing uses",
            gpus,
        )


# --- communication pools ------------------------------------------------------------------------------


@rule("pcie-allreduce-single-rank", "warning", "no PCIe all-reduce is built at tp=1")
def _pcie_tp1(c: DeploymentConfig) -> Iterator[Finding]:
    if c.comm.pcie_allreduce and c.parallel.tp == 1:
        yield Finding(
            "comm.pcie_allreduce",
            "no PCIe all-reduce is built at tp=1",
            True,
            hint="--set comm.pcie_allreduce=false",
            inputs=("parallel.tp",),
        )


@rule("oneshot-world-size", "error", "the one-shot all-reduce's world sizes")
def _oneshot_world(c: DeploymentConfig) -> Iterator[Finding]:
    tp, sizes = c.parallel.tp, ONESHOT_WORLD_SIZES[c.stack]
    if c.comm.pcie_allreduce and tp > 1 and tp not in sizes:
        yield Finding(
            "parallel.tp",
            "the one-shot all-reduce supports no such world size",
            tp,
            tuple(str(w) for w in sorted(sizes)),
        )


@rule("dcp-a2a-world-size", "error", "the DCP all-to-all's world sizes, per library stack")
def _a2a_world(c: DeploymentConfig) -> Iterator[Finding]:
    dcp = c.parallel.dcp
    sizes = DCP_A2A_WORLD_SIZES[c.stack]
    if dcp > 1 and c.comm.dcp_a2a and dcp not in sizes:
        yield Finding(
            "parallel.dcp",
            f"the {c.stack} DCP all-to-all supports no such world size",
            dcp,
            tuple(str(w) for w in sorted(sizes)),
        )


@rule(
    "dcp-a2a-uncapped",
    "warning",
    "VLLM_DCP_A2A_MAX_TOKENS=0 sizes every DCP A2A channel from max_num_batched_tokens",
)
def _a2a_uncapped(c: DeploymentConfig) -> Iterator[Finding]:
    if c.parallel.dcp > 1 and c.comm.dcp_a2a and c.comm.dcp_a2a_max_tokens == 0:
        geo = c.model.geometry
        heads = c.dcp_total_heads
        width = max(geo.kv_lora_rank, geo.query_head_dim)
        per_token = 2 * (2 * heads * width + 4 * heads)
        per_channel = per_token * c.scheduler.max_num_batched_tokens
        yield Finding(
            "comm.dcp_a2a_max_tokens",
            f"0 (uncapped) sizes DCP A2A staging from max_num_batched_tokens: {per_token / KIB:.1f} KiB per "
            f"batched token per channel, {format_size(per_channel)} per channel here",
            0,
            hint="--set comm.dcp_a2a_max_tokens=64 (what the launchers use; 16 at DCP2)",
            inputs=("scheduler.max_num_batched_tokens",),
        )


@rule("compressed-wire-opt-in", "error", "compressed DMA wire modes change numerics: explicit opt-in")
def _wire(c: DeploymentConfig) -> Iterator[Finding]:
    if c.comm.compressed_wire and not c.comm.allow_compressed_wire:
        yield Finding(
            "comm.dma_wire_mode",
            "compressed DMA wire modes change model numerics and need an explicit opt-in",
            c.comm.dma_wire_mode,
            ("0",),
            hint="set comm.allow_compressed_wire=true to opt in",
        )


# --- model, scheduler and the decode window -----------------------------------------------------------


@rule("max-model-len-positions", "error", "max_model_len within the model's positions")
def _positions(c: DeploymentConfig) -> Iterator[Finding]:
    limit = c.model.geometry.max_position_embeddings
    if c.scheduler.max_model_len > limit:
        yield Finding(
            "scheduler.max_model_len",
            f"longer than the model's max_position_embeddings ({limit})",
            c.scheduler.max_model_len,
        )


@rule("mtp-needs-layer", "error", "MTP needs an MTP layer in the checkpoint")
def _mtp_layer(c: DeploymentConfig) -> Iterator[Finding]:
    if c.mtp > 0 and c.model.geometry.num_mtp_layers == 0:
        yield Finding("speculative.num_speculative_tokens", "MTP needs an MTP layer in the model", c.mtp)


@rule(
    "concurrency-window",
    "error",
    "max_num_seqs x (1 + MTP) must fit the CUDA-graph capture window",
    f"{UPSTREAM} concurrency-window: exceeding it does not error at boot; decode silently leaves the "
    "captured fast path under concurrency. Upstream's rule also takes min(capture max, Trellis max); the "
    "Trellis half is the trellis-window warning here",
)
def _concurrency(c: DeploymentConfig) -> Iterator[Finding]:
    sizes = c.capture_sizes()
    window = decode_window(c)
    # The capture rule that serves exactly the decode window: multiples of MTP+1 (step null) up to it.
    step = c.cudagraph.capture_rule.step if c.cudagraph.capture_rule else None
    to_window = (
        f"--set cudagraph.capture_rule.step=null --set cudagraph.capture_rule.max={window} "
        f"--set cudagraph.max_capture_size={window}"
        if step is not None and step != c.decode_step
        else f"--set cudagraph.capture_rule.max={window} --set cudagraph.max_capture_size={window}"
    )
    if c.cudagraph.mode != "NONE" and sizes:
        top = c.cudagraph.max_capture_size or max(sizes)
        if min(top, max(sizes)) < window:
            yield Finding(
                _capture_key(c),
                f"largest capture size {min(top, max(sizes))} is below max_num_seqs x (1 + MTP) = "
                f"{c.scheduler.max_num_seqs} x {c.decode_step} = {window}: full decode batches would "
                "silently leave the CUDA-graph fast path",
                sizes,
                hint=f"capture up to {window} ({to_window}), or lower scheduler.max_num_seqs",
                inputs=WINDOW_INPUTS,
            )


@rule(
    "trellis-window",
    "warning",
    "on EXL3, max_num_seqs x (1 + MTP) should fit the Trellis decode window",
    "a runtime risk, not a configuration error: a decode batch above VLLM_EXL3_TRELLIS_MAX_M runs off the "
    "Trellis fast path (slower, not wrong) and boots as configured; the runtime's default is 32 when the "
    "variable is unset (malaiwah/glm52-exl3-vast@eba43a5 entrypoint.sh L1459; blackwell-llm-docker@d568788 "
    "launchers/serve-gilded-gnosis.sh L43), and the release line's own GLM composes serve MTP3 at MNS 8 on "
    "that default",
)
def _trellis(c: DeploymentConfig) -> Iterator[Finding]:
    if not c.is_exl3:
        return
    window = decode_window(c)
    trellis, given = trellis_window(c)
    if trellis < window:
        yield Finding(
            "exl3_trellis_max_m",
            f"the EXL3 Trellis decode window {trellis}"
            + ("" if given else " (unset: the runtime's default)")
            + f" is below max_num_seqs x (1 + MTP) = {window}: full decode batches leave the Trellis "
            "fast path (slower decode at full concurrency; vLLM boots and serves as configured)",
            c.exl3_trellis_max_m,
            hint=f"--set exl3_trellis_max_m={window} (with capture sizes up to {window}), or lower "
            "scheduler.max_num_seqs",
            inputs=WINDOW_INPUTS[2:],
        )


@rule(
    "capture-sizes-max",
    "warning",
    "the largest capture size should equal --max-cudagraph-capture-size",
    f"{UPSTREAM} capture-sizes-max: decode above the largest captured size runs eager whatever the max says",
)
def _capture_max(c: DeploymentConfig) -> Iterator[Finding]:
    sizes = c.capture_sizes()
    top = c.cudagraph.max_capture_size
    if top is not None and sizes and max(sizes) != top:
        yield Finding(
            "cudagraph.max_capture_size",
            f"the largest captured size ({max(sizes)}) is not the maximum capture size ({top}); decode above "
            f"{max(sizes)} runs eager whatever the maximum says",
            top,
            hint=f"--set cudagraph.max_capture_size={max(sizes)} (or capture up to {top})",
            inputs=WINDOW_INPUTS[:2],
        )


@rule(
    "exl3-prefill-capacity-above-scheduler",
    "error",
    "the EXL3 prefill arena cannot exceed max_num_batched_tokens",
    f"{UPSTREAM} exl3-prefill-capacity-above-scheduler: the arena is reused inside one scheduler chunk; "
    "upstream rejects rather than clamps so the measured memory shape stays reproducible",
)
def _prefill_capacity(c: DeploymentConfig) -> Iterator[Finding]:
    cap = c.exl3.prefill_capacity
    mnbt = c.scheduler.max_num_batched_tokens
    if c.is_exl3 and cap is not None and cap > mnbt:
        yield Finding(
            "exl3.prefill_capacity",
            f"larger than scheduler.max_num_batched_tokens ({mnbt}): the EXL3 arena lives inside one "
            "scheduler chunk, so the extra capacity (240 KiB/token, +320 KiB/token for the MTP drafter) "
            "could only take KV cache memory",
            cap,
            hint=f"--set exl3.prefill_capacity={mnbt} (or null: unset), or raise "
            "scheduler.max_num_batched_tokens",
            inputs=("scheduler.max_num_batched_tokens",),
        )


#: the EXL3 prefill route block vLLM cannot launch for three-tier experts on SM120 (below)
EXL3_BLOCK_M_SMEM_LIMITED = "64"
EXL3_THREE_TIER_BITS = (3, 4, 5)


@rule(
    "exl3-prefill-block-m-three-tier",
    "error",
    "VLLM_EXL3_PREFILL_BLOCK_M=64 cannot launch for three-tier K3/K4/K5 experts on SM120",
    "blackwell-llm-docker patches/releases/infernal-invocation-r18/vllm/integration.patch@3dd078a "
    "L6512-6520 (vllm/model_executor/layers/quantization/exl3.py, _is_glm52_block32_tier_signature): "
    "'Three-tier K3/K4/K5 uses a wider cooperative kernel. The block-64 geometry needs 109,568 B of shared "
    "memory and cannot launch on SM120; block-32 is the qualified native geometry for every projection "
    "split' (the same in gilded-gnosis-v20-r34 L10205-10213). Left unset, vLLM picks block 32 for GLM-5.2; "
    "an explicit value is honoured as given (L8505-8518, explicit_override), so 64 reaches the kernel",
)
def _prefill_block_m(c: DeploymentConfig) -> Iterator[Finding]:
    value = c.env.get("VLLM_EXL3_PREFILL_BLOCK_M")
    tiers = c.expert_bits_effective
    sm12 = c.hardware.compute_capability.split(".")[0] == "12"
    arch = c.hardware.compute_capability.replace(".", "")
    if (
        c.is_exl3
        and value is not None
        and value.strip() == EXL3_BLOCK_M_SMEM_LIMITED
        and tiers == EXL3_THREE_TIER_BITS
        and sm12
    ):
        yield Finding(
            "env.VLLM_EXL3_PREFILL_BLOCK_M",
            f"the routed experts of {c.model.path} are three-tier K3/K4/K5: block 64 needs 109,568 B of "
            f"shared memory per block and cannot launch on SM{arch}",
            value,
            hint="remove it (vLLM then picks block 32 for GLM-5.2), or set it to 32",
            inputs=("model.path", "model.expert_bits", "hardware.compute_capability"),
        )


# --- memory and the KV pool ---------------------------------------------------------------------------


@rule("kv-scale-mode-dtype", "note", "the NVFP4 MLA scale mode only applies to nvfp4_ds_mla KV")
def _scale_mode(c: DeploymentConfig) -> Iterator[Finding]:
    if c.memory.kv_scale_mode is not None and c.memory.kv_cache_dtype != "nvfp4_ds_mla":
        yield Finding(
            "memory.kv_scale_mode",
            f"ignored: the NVFP4 MLA scale modes apply to kv_cache_dtype nvfp4_ds_mla, not "
            f"{c.memory.kv_cache_dtype}; nothing is exported for it",
            c.memory.kv_scale_mode,
        )


@rule(
    "fixed-kv-block-conflict",
    "error",
    "one KV-pool control: --kv-cache-memory-bytes or --num-gpu-blocks-override",
    f"{UPSTREAM} fixed-kv-block-conflict: combining both is ambiguous and was never qualified",
)
def _fixed_kv(c: DeploymentConfig) -> Iterator[Finding]:
    m = c.memory
    if m.kv_cache_memory_bytes is not None and m.num_gpu_blocks_override is not None:
        yield Finding(
            "memory.num_gpu_blocks_override",
            "memory.kv_cache_memory_bytes already fixes the per-GPU pool; a block-count override on top "
            "is ambiguous",
            m.num_gpu_blocks_override,
            hint="keep one of memory.kv_cache_memory_bytes and memory.num_gpu_blocks_override",
        )


@rule(
    "mixed-336-offload-needs-pool-pin",
    "warning",
    "the 3.36 bpw K6 offload profile needs a pinned KV pool",
    f"{UPSTREAM} mixed-336-offload-needs-pool-pin: r20 booted 741,888 auto-sized tokens, then OOMed its "
    "first 32K request on a 48 MiB mixed-K temporary with ~43 MiB free "
    "(docs/glm52-r20-3.36-qualification-plan.md)",
)
def _pin_336(c: DeploymentConfig) -> Iterator[Finding]:
    if (
        _variant(c, "3.36")
        and c.scheduler.max_model_len >= 524288
        and _offloads(c)
        and c.memory.num_gpu_blocks_override is None
        and c.memory.kv_cache_memory_bytes is None
    ):
        yield Finding(
            "memory.num_gpu_blocks_override",
            "an automatically sized pool OOMed this checkpoint's first request after a clean boot (r20: "
            "741,888 tokens, a 48 MiB mixed-K temporary met ~43 MiB free)",
            None,
            hint="pin 2,048 blocks (524,288 tokens at DCP4): --set memory.num_gpu_blocks_override=2048",
        )


@rule(
    "hybrid-512k-needs-pool-pin",
    "warning",
    "the MadeBy561 hybrid at 512K needs a pinned KV pool",
    f"{UPSTREAM} hybrid-512k-needs-pool-pin: an auto-sized pool consumed the first MTP proposal's "
    "transient (TEST_RESULTS.md: 36 MiB NF3 allocation, 24.75 MiB free)",
)
def _pin_hybrid(c: DeploymentConfig) -> Iterator[Finding]:
    if (
        "mxfp8-nvfp4-nf3-hybrid" in (c.model.path or "").lower()
        and c.scheduler.max_model_len >= 524288
        and c.memory.num_gpu_blocks_override is None
    ):
        yield Finding(
            "memory.num_gpu_blocks_override",
            "an automatically sized pool can pass startup and still OOM in the first MTP proposal",
            None,
            hint="pin 2,048 blocks: --set memory.num_gpu_blocks_override=2048",
        )


@rule(
    "mixed-325-offload-headroom",
    "warning",
    "the 3.25 bpw 512K offload profile needs a 2,048-token prefill chunk",
    f"{UPSTREAM} mixed-325-offload-headroom: the 3,072-token shape OOMed its first 128K request after a "
    "successful boot",
)
def _chunk_325(c: DeploymentConfig) -> Iterator[Finding]:
    if (
        _variant(c, "3.25")
        and c.scheduler.max_model_len >= 524288
        and (c.memory.num_gpu_blocks_override or 0) >= 2048
        and _offloads(c)
        and c.scheduler.max_num_batched_tokens > 2048
    ):
        yield Finding(
            "scheduler.max_num_batched_tokens",
            "the 3,072-token chunk of this checkpoint's full-context offload shape OOMed its first 128K "
            "request after a clean boot",
            c.scheduler.max_num_batched_tokens,
            hint="keep scheduler.max_num_batched_tokens <= 2048 with the pinned 512K offload profile",
        )


@rule(
    "instanttensor-context-margin",
    "warning",
    "InstantTensor loads more resident memory than safetensors at the 512K edge",
    f"{UPSTREAM} instanttensor-context-margin: TP4/DCP2 at 524,288 tokens and GMU 0.978 failed KV "
    "admission on both InstantTensor attempts (9.04 GiB needed, 9.03 GiB left; TEST_RESULTS.md L1320-1321)",
)
def _instanttensor(c: DeploymentConfig) -> Iterator[Finding]:
    if (
        (c.model.load_format or "").lower() == "instanttensor"
        and c.scheduler.max_model_len >= 524288
        and c.memory.gpu_memory_utilization <= 0.978
    ):
        yield Finding(
            "model.load_format",
            "InstantTensor held ~0.04 GiB/GPU more than safetensors and failed KV admission by 0.01 GiB at "
            "this context; the production profile loads safetensors",
            c.model.load_format,
            hint="load safetensors, or re-qualify from a cold start at maximum context",
        )


@rule(
    "online-quant-needs-exl3",
    "error",
    "online quantization is qualified only over an EXL3 checkpoint",
    f"{UPSTREAM} online-quant-needs-exl3: another serialized quantizer would emit a competing "
    "--quantization-config",
)
def _online_quant(c: DeploymentConfig) -> Iterator[Finding]:
    if c.model.online_quant != "none" and not c.is_exl3:
        yield Finding(
            "model.online_quant",
            f"online quantization is qualified only over an EXL3 checkpoint (model.quantization is "
            f"{c.model.quantization!r})",
            c.model.online_quant,
            ("none",),
        )


@rule("lmcache-expandable-segments", "warning", "LMCache forces expandable segments off")
def _lmcache_alloc(c: DeploymentConfig) -> Iterator[Finding]:
    if c.lmcache and c.memory.allocator.expandable_segments:
        yield Finding(
            "memory.allocator.expandable_segments",
            "LMCache forces expandable_segments off; every torch footprint is computed without it",
            True,
            hint="--set memory.allocator.expandable_segments=false",
            inputs=("lmcache",),
        )


@rule("lmcache-ports", "error", "LMCache's ports are TCP ports, distinct from each other and the API port")
def _lmcache_ports(c: DeploymentConfig) -> Iterator[Finding]:
    if not c.lmcache:
        return
    from glmlaunch.config.lmcache_endpoint import endpoint

    ep = endpoint(c)
    ports = {
        "server.port": c.server.port,
        "lmcache_config.port": ep.port,
        "lmcache_config.http_port": ep.http_port,
    }
    if ep.prometheus_port is not None:
        ports["lmcache_config.prometheus_port"] = ep.prometheus_port
    seen: dict[int, str] = {}
    for key, port in ports.items():
        how = "derived from server.port" if key in ep.derived else "set"
        if not 1 <= port <= 65535:
            yield Finding(
                key,
                f"is not a TCP port ({how}: the wrapper adds server.port - 8000 to its base)",
                port,
                ("1..65535",),
                hint=f"set {key} explicitly",
                inputs=("server.port",),
            )
        elif port in seen:
            yield Finding(
                key,
                f"is the same port as {seen[port]} ({how})",
                port,
                hint=f"set {key} to a free port",
                inputs=("server.port", seen[port]),
            )
        else:
            seen[port] = key


# --- environment and extra arguments ------------------------------------------------------------------


@rule("env-names", "error", "env: names must be valid, hold no NUL, and not shadow a managed setting")
def _env_errors(c: DeploymentConfig) -> Iterator[Finding]:
    for name, value in c.env.items():
        key = f"env.{name}"
        if not _ENV_NAME.fullmatch(name):
            yield Finding(key, "not a valid environment variable name", name)
        elif "\0" in value:
            # No environment (execve) or shell can carry a NUL: the value would be cut at it silently.
            yield Finding(
                key,
                "the value contains a NUL byte, which no environment variable can hold",
                hint="remove the NUL (\\0) from the value",
            )
        elif name in MANAGED_BY_NAME and c.stack in MANAGED_BY_NAME[name].stacks:
            spec = MANAGED_BY_NAME[name]
            yield Finding(
                key,
                "this variable is managed by glmlaunch; passing it through would shadow the setting",
                value,
                hint="set " + " / ".join(spec.settings or ("(derived)",)) + " instead",
            )


@rule("env-other-stack", "warning", "env: names the configured library stack never reads")
def _env_stack(c: DeploymentConfig) -> Iterator[Finding]:
    for name, value in c.env.items():
        if name in MANAGED_BY_NAME and c.stack not in MANAGED_BY_NAME[name].stacks:
            spelling = library_spelling(name, c.stack)
            yield Finding(
                f"env.{name}",
                f"the {c.stack} stack never reads this variable",
                value,
                hint=(f"{c.stack} reads {spelling}, which glmlaunch sets from "
                      + " / ".join(MANAGED_BY_NAME[spelling].settings) if spelling in MANAGED_BY_NAME
                      else f"its spelling on {c.stack} is {spelling}" if spelling
                      else "remove it, or switch `stack`"),
            )


def _library_name(c: DeploymentConfig, name: str) -> str | None:
    """Why the stack's library generation does not read a SPARKINFER_*/B12X_* name; None if it does."""
    if name in library_reads(c.stack) or name in VLLM_READS_LIBRARY_NAMES:
        return None
    spark = c.stack in SPARKINFER_STACKS
    if name.startswith("SPARKINFER_") and not spark:
        return (
            f"{stack_label(c.stack)} is B12X, which reads no SPARKINFER_* name "
            "(B12X replaced every one at r29)"
        )
    if name in KNOWN_PASSTHROUGH:
        # a knob the deployments export for vLLM's own b12x backends (vLLM reads some B12X_* names itself,
        # e.g. B12X_MHC_MAX_TOKENS), which the release patches do not show in full
        return None
    if name.startswith("B12X_") and spark:
        return f"{stack_label(c.stack)} is SparkInfer, whose library does not read {name}"
    others = [s for s in generations_reading(name) if s != c.stack]
    if others:
        readers = ", ".join(map(stack_label, others))
        return f"the {stack_label(c.stack)} library does not read it; {readers} " + (
            "does" if len(others) == 1 else "do"
        )
    return "no library generation glmlaunch knows reads this name (a typo?)"


@rule(
    "env-library-generation",
    "warning",
    "env: SPARKINFER_*/B12X_* names the stack's library generation does not read",
    "each generation's reads are recorded from its own tree (glmlaunch/config/library_env.json, "
    "tests/fixtures/generations/); B12X from r29 reads no SPARKINFER_* name",
)
def _env_generation(c: DeploymentConfig) -> Iterator[Finding]:
    for name, value in c.env.items():
        if not name.startswith(LIBRARY_PREFIXES) or name in MANAGED_BY_NAME:
            continue  # managed names: env-names / env-other-stack
        why = _library_name(c, name)
        if why is None:
            continue
        spelling = library_spelling(name, c.stack)
        yield Finding(
            f"env.{name}",
            why,
            value,
            hint=f"its {c.stack} spelling is {spelling}" if spelling else "remove it, or switch `stack`",
            inputs=("stack",),
        )


@rule(
    "stack-release",
    "warning",
    "the library generation (stack) and the release it runs must agree",
    "the release integration locks of local-inference-lab/blackwell-llm-docker@3dd078a: SparkInfer de04125 "
    "through r16, SparkInfer 272a84bd+PR106+PR117 from r17 to r28, B12X from r29; Infernal Invocation "
    "r16-r18 B12X master c25cdba2+PR145/221/223/227-230",
)
def _stack_release(c: DeploymentConfig) -> Iterator[Finding]:
    release = c.release_effective
    expected = stack_of_release(release)
    if expected is None or c.stack == expected or c.stack == "b12x-1.5":
        return
    if not stack_is_read(release):
        return  # no tree read for it yet: stack_of_release's guess is not evidence
    yield Finding(
        "stack",
        f"release {release} runs the {stack_label(expected)} library generation, not {c.stack}: the ledger "
        "would size its pools with another generation's constants",
        c.stack,
        hint=f"--set stack={expected}",
        inputs=("release", "vllm_version"),
    )


@rule(
    "release-image-line",
    "note",
    "a vNN release names the older image line, not a release of the Gilded Gnosis or Infernal Invocation "
    "lines: no library generation is inferred from it",
    "blackwell-llm-docker's v-numbered images (v18-v31) predate the gilded-gnosis v20 releases",
)
def _image_line(c: DeploymentConfig) -> Iterator[Finding]:
    rel = parse_release(c.release)
    if rel is None or rel.line != "v":
        return
    yield Finding(
        "release",
        f"{rel.label} is an image of {rel.line_name}: it picks the weights and overheads documented for it, "
        "and no library generation (set `stack` yourself)",
        c.release,
        inputs=("release",),
    )


@rule(
    "oneshot-topology-generation",
    "note",
    "the one-shot topology transports exist from B12X r32 (b12x-r32, and b12x-ii, which has r32's pool code)",
)
def _topology(c: DeploymentConfig) -> Iterator[Finding]:
    if c.stack in ("b12x-r32", "b12x-ii"):
        return
    for key in ("oneshot_tp2_remote_push", "oneshot_tp4_remote_push", "oneshot_tp8_owner_reduce"):
        value = getattr(c.comm, key)
        if value is not None:
            yield Finding(
                f"comm.{key}",
                f"ignored: {stack_label(c.stack)} has no such transport (B12X r32-r34 and ii-r16-r18 read "
                "it); nothing is "
                "exported for it",
                value,
                inputs=("stack",),
            )


@rule("env-unknown-vllm", "warning", "env: VLLM_* names glmlaunch does not know vLLM to read")
def _env_unknown(c: DeploymentConfig) -> Iterator[Finding]:
    for name, value in c.env.items():
        if (
            _ENV_NAME.fullmatch(name)
            and name.startswith("VLLM_")
            and name not in MANAGED_BY_NAME
            and name not in KNOWN_PASSTHROUGH
        ):
            yield Finding(
                f"env.{name}",
                "unknown VLLM_* variable (not one glmlaunch knows vLLM to read)",
                value,
                hint="check the spelling against vllm/envs.py",
            )


@rule("vllm-args", "error", "extra vLLM arguments: no NUL, no second copy of a managed flag")
def _vllm_args(c: DeploymentConfig) -> Iterator[Finding]:
    for i, arg in enumerate(c.vllm_args):
        if "\0" in arg:
            # execve cannot pass a NUL inside an argument: vLLM would receive it cut short.
            yield Finding(
                f"vllm_args[{i}]",
                "the argument contains a NUL byte, which no process argument can hold",
                hint="remove the NUL (\\0) from the argument",
            )
    from glmlaunch.config.render_args import managed_flag_conflicts

    for arg, setting in managed_flag_conflicts(c.vllm_args):
        yield Finding(
            "vllm_args",
            f"{arg} is managed by glmlaunch; a second copy would win by argparse's last-one-wins",
            arg,
            hint=f"set {setting} instead",
        )


@rule("value-not-an-option", "error", "a value vllm serve receives on its own may not start with '-'")
def _standalone(c: DeploymentConfig) -> Iterator[Finding]:
    from glmlaunch.config.render_args import standalone_values

    for key, value in standalone_values(c):
        if value.startswith("-"):
            yield Finding(
                key,
                "starts with '-': vllm serve would read it as an option, not as this value",
                value,
                hint="give the value itself (a path: ./-name); extra flags belong in vllm_args",
            )


@rule("chat-template-kwargs-finite", "error", "chat-template kwargs must be standard JSON")
def _chat_kwargs(c: DeploymentConfig) -> Iterator[Finding]:
    for name, value in (c.server.default_chat_template_kwargs or {}).items():
        if isinstance(value, float) and not math.isfinite(value):
            # vLLM reads the flag with Python's JSON, which accepts NaN; no JSON standard does.
            yield Finding(
                f"server.default_chat_template_kwargs.{name}",
                "not a finite number (NaN or infinity): the flag's JSON would not be standard JSON",
                value,
                hint="use a finite number, a string or a boolean",
            )
