"""One boot of vLLM, from its log: per-rank memory observations, the engine's lines, vLLM's refusals.

Input: the text of one or more boot logs (the composed r14 vLLM tree; docs/memory-model.md §6 lists the
lines), split into messages by :mod:`glmlaunch.vllmlog.lines` (each attributed to the process in its
prefix, so interleaved ranks do not mix). Per rank, the parser reports which expected lines were found
and which were not, and names a line whose opening words were seen but whose body did not parse (a
truncated write, or a format this parser does not know).

Values printed in GiB with two decimals are converted to bytes and carry that rounding (±5 MiB); the two
``--kv-cache-memory-bytes`` (newer builds: ``--kv-cache-memory``) suggestions are exact bytes, and so is
their difference F0 - R.
Pure functions over strings; :func:`parse_log_file` is the only one that touches the filesystem.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

from pydantic import BaseModel, ConfigDict

from glmlaunch.config.limits import MAX_BOOT_LOG_BYTES
from glmlaunch.config.safeload import read_file
from glmlaunch.vllmlog.bootconfig import CROSSOVERS_RE, BootConfig, parse_boot_config, version_of
from glmlaunch.vllmlog.events import (
    GRAPHS_CAPTURED,
    KV_CACHE_SIZED,
    WEIGHTS_LOADED,
    RuntimeEvent,
    exception_of,
    exception_statement,
    is_ready_line,
    may_hold_runtime_event,
    runtime_event,
)
from glmlaunch.vllmlog.lines import is_engine, is_ranked, is_worker, iter_messages, rank_indices
from glmlaunch.vllmlog.numbers import INT, MAX_LOG_NUMBER, NUM, count, gib, named, to_bytes

# The messages some process writes once per boot: a worker writes them per rank.
WORKER_FIELDS: tuple[str, ...] = (
    "weights",
    "kv_available",
    "graph_estimate",
    "graph_pool",
    "free_memory",
)
ENGINE_FIELDS: tuple[str, ...] = ("kv_cache_tokens",)


class Refusal(BaseModel):
    """vLLM refused to start: the KV budget cannot hold one request, or the start gate F0 >= R failed."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    kind: str  # "kv-too-small" | "no-kv-memory" | "start-gate"
    message: str
    max_model_len: int | None = None
    kv_needed_bytes: int | None = None
    kv_available_bytes: int | None = None
    estimated_max_model_len: int | None = None
    free_bytes: int | None = None
    total_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    requested_bytes: int | None = None


class DcpGeometry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    world_size: int
    max_batch_size: int
    heads: int
    query_head_dim: int
    output_head_dim: int


class Exl3Plan(BaseModel):
    """``EXL3 mixed Trellis runtime planned: …``: the target model's EXL3 runtime arena (rank 0 logs it).

    Two forms: up to r27 ``decode_capacity=D prefill_capacity=C scheduler_capacity=S buffers=X MiB``; from
    Gilded Gnosis r28 (and on the Infernal Invocation line) ``one-grid decode=D one-grid prefill=C/S
    block_m=B buffers=X+Y MiB``, the decode and prefill buffers apart and the prefill route block."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    tiers: str | None = None
    decode_capacity: int
    prefill_capacity: int
    scheduler_capacity: int
    buffers_bytes: int
    #: r28+: the prefill route block and the two states' buffers (their sum is ``buffers_bytes``)
    block_m: int | None = None
    decode_buffers_bytes: int | None = None
    prefill_buffers_bytes: int | None = None


class R7Arena(BaseModel):
    """``R7 fused MoE scratch arena (worst-case sized): capacity=C block_m=B topk=K max_m_blocks=M``: one
    shared mixed-Trellis arena (r34+, Infernal Invocation), one line per owner and launch geometry."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    capacity: int
    block_m: int
    topk: int
    max_m_blocks: int


class R7GraphRuntime(BaseModel):
    """``R7 EXL3 CUDA-graph runtime planned: …``: the projection-wise R7 fallback's arena
    (``VLLM_EXL3_R7_FUSED=0``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    capacity: int
    route_block: int
    concurrency: int
    topk: int
    experts: int
    arena_bytes: int
    a1_min_rows: int


class RoutePackWarmup(BaseModel):
    """``Warmed up N EXL3 mixed-Trellis route-pack variant(s); free-memory delta X MiB.`` (r34+)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    variants: int
    free_delta_bytes: int


class Exl3DraftPlan(BaseModel):
    """``EXL3 rank-sliced runtime planned: …``: the MTP drafter's EXL3 arena (rank 0 logs it, MTP only)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    trellis_m_min: int
    trellis_m_max: int
    capacity: int
    arena_bytes: int
    scheduler_capacity: int
    block_m: int | None = None
    prefill_block_m: int | None = None
    chunk: int | None = None
    topk: int | None = None


class PcieCrossovers(BaseModel):
    """``Configured b12x PCIe crossovers: oneshot max=…, fused max=…, DMA min=….`` (bytes)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    oneshot_max_bytes: int
    fused_max_bytes: int
    dma_min_bytes: int


class RankObservation(BaseModel):
    """Everything one worker process said about memory during one boot."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    rank: str
    tp_rank: int | None = None
    dcp_rank: int | None = None
    pp_rank: int | None = None
    dp_rank: int | None = None
    pids: list[int] = []
    weights_bytes: int | None = None
    load_seconds: float | None = None
    kv_available_bytes: int | None = None
    graph_estimate_bytes: int | None = None
    graph_estimate_retained_bytes: int | None = None
    graph_actual_bytes: int | None = None
    graph_pool_estimate_bytes: int | None = None
    graph_capture_bytes: int | None = None
    graph_capture_seconds: float | None = None
    free_at_start_bytes: int | None = None
    total_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    requested_bytes: int | None = None
    peak_activation_bytes: int | None = None
    non_torch_bytes: int | None = None
    cudagraph_bytes: int | None = None
    kv_bytes_to_requested: int | None = None
    kv_bytes_to_gpu: int | None = None
    #: the same two suggestions as vLLM printed them beside the bytes, ``(2.08 GiB)`` (to 0.01 GiB)
    kv_bytes_to_requested_printed: int | None = None
    kv_bytes_to_gpu_printed: int | None = None
    kv_in_use_bytes: int | None = None
    dcp: DcpGeometry | None = None
    dcp_transient_bytes: int | None = None
    exl3: Exl3Plan | None = None
    exl3_draft: Exl3DraftPlan | None = None
    #: the R7 mixed-Trellis arenas in log order (target and drafter, decode and prefill), the projection-wise
    #: fallback's runtime, the layers that took the fused route and the route-pack warm-up
    r7_arenas: list[R7Arena] = []
    r7_graph_runtime: R7GraphRuntime | None = None
    r7_fused_layers: int | None = None
    route_pack_warmup: RoutePackWarmup | None = None
    ckv_gather_capacity_tokens: int | None = None
    crossovers: PcieCrossovers | None = None
    refusals: list[Refusal] = []
    found: list[str] = []
    missing: list[str] = []
    unparsed: list[str] = []

    @property
    def start_headroom_bytes(self) -> int | None:
        """F0 - R exactly: the difference of the two suggested --kv-cache-memory-bytes values."""
        if self.kv_bytes_to_gpu is None or self.kv_bytes_to_requested is None:
            return None
        return self.kv_bytes_to_gpu - self.kv_bytes_to_requested


class EngineObservation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    process: str | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens: int | None = None
    vllm_version: str | None = None
    refusals: list[Refusal] = []
    found: list[str] = []
    missing: list[str] = []
    unparsed: list[str] = []


class BootLog(BaseModel):
    """The parse of one log: per-rank observations, the engine's lines, and what the log lacked."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    source: str
    sha256: str
    size_bytes: int
    ranks: list[RankObservation]
    engine: EngineObservation
    unattributed_refusals: list[Refusal] = []
    ends_mid_line: bool = False
    complete: bool = False
    repeated_ranks: list[str] = []
    failure: str | None = None  # the first exception a boot that was not refused died of
    boot_config: BootConfig | None = None  # the configuration that booted (launcher header, vLLM args)
    #: OOMs and free-memory readings, in log order (runtime evidence: issue 19)
    runtime_events: list[RuntimeEvent] = []

    @property
    def runtime_ooms(self) -> list[RuntimeEvent]:
        """The OOMs after the server was ready: a clean boot that died on a request."""
        return [e for e in self.runtime_events if e.kind == "oom" and e.after_ready]

    @property
    def refused(self) -> bool:
        return bool(self.unattributed_refusals or self.engine.refusals or any(r.refusals for r in self.ranks))

    def rank(self, name: str) -> RankObservation:
        for r in self.ranks:
            if r.rank == name:
                return r
        raise KeyError(name)


@dataclass
class _Acc:
    """Mutable accumulator for one process while scanning; frozen into an observation at the end."""

    name: str
    #: in order of first appearance; a dict, not a list, so that a log of many pids or refusals is read in
    #: linear time (each line's "seen it already?" is one lookup, not a scan of all before it)
    pid_set: dict[int, None] = field(default_factory=dict)
    values: dict[str, object] = field(default_factory=dict)
    found: list[str] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)
    refusal_set: dict[Refusal, None] = field(default_factory=dict)
    repeated: bool = False

    @property
    def pids(self) -> list[int]:
        return list(self.pid_set)

    @property
    def refusals(self) -> list[Refusal]:
        return list(self.refusal_set)

    def put(self, key: str, updates: dict[str, object]) -> None:
        if key in ACCUMULATED:
            # one line per owner, geometry or layer: every line adds to the boot's list or count
            if key not in self.found:
                self.found.append(key)
            for name, value in updates.items():
                if isinstance(value, list):
                    before = self.values.get(name)
                    if isinstance(before, list):
                        before.extend(value)  # in place: a copy per line would be quadratic in the lines
                    else:
                        self.values[name] = list(value)
                else:
                    self.values[name] = int(self.values.get(name, 0)) + int(value)  # type: ignore[call-overload]
            return
        if key in self.found:
            # A second boot in the same file (or a restart): the later boot wins, and we say so.
            self.repeated = True
            if key == "weights":
                # the later boot's lines start again
                for name in ACCUMULATED_FIELDS:
                    self.values.pop(name, None)
        else:
            self.found.append(key)
        self.values.update(updates)


_Handler = Callable[[re.Match[str]], dict[str, object]]


@dataclass(frozen=True)
class _Matcher:
    key: str
    lead: str  # words that identify the line even when its body is cut off
    pattern: re.Pattern[str]
    handle: _Handler


def _weights(m: re.Match[str]) -> dict[str, object]:
    return {"weights_bytes": to_bytes(m.group(1), m.group(2)), "load_seconds": float(m.group(3))}


def _free_memory(m: re.Match[str]) -> dict[str, object]:
    return {
        "free_at_start_bytes": gib(m.group("free")),
        "total_bytes": gib(m.group("total")),
        "gpu_memory_utilization": float(m.group("gmu")),
        "requested_bytes": gib(m.group("req")),
        "weights_free_line_bytes": gib(m.group("w")),
        "peak_activation_bytes": gib(m.group("p")),
        "non_torch_bytes": gib(m.group("n")),
        "cudagraph_bytes": gib(m.group("g")),
        "kv_bytes_to_requested": int(m.group("kvreq")),
        "kv_bytes_to_gpu": int(m.group("kvgpu")),
        "kv_bytes_to_requested_printed": gib(m.group("kvreqp")) if m.group("kvreqp") else None,
        "kv_bytes_to_gpu_printed": gib(m.group("kvgpup")) if m.group("kvgpup") else None,
        "kv_in_use_bytes": gib(m.group("kvuse")),
    }


def _dcp(m: re.Match[str]) -> dict[str, object]:
    pairs = dict(re.findall(r"([a-z_]+)=([0-9]+)", m.group(1)))
    return {
        "dcp": DcpGeometry(
            world_size=int(pairs["world_size"]),
            max_batch_size=int(pairs["max_batch_size"]),
            heads=int(pairs["heads"]),
            query_head_dim=int(pairs["query_head_dim"]),
            output_head_dim=int(pairs["output_head_dim"]),
        )
    }


def _exl3_plan(m: re.Match[str]) -> dict[str, object]:
    if m.group("grid") is not None:
        decode = to_bytes(m.group("bdec"), m.group("unit"))
        prefill = to_bytes(m.group("bpre"), m.group("unit"))
        return {
            "exl3": Exl3Plan(
                tiers=m.group("tiers"),
                decode_capacity=int(m.group("gdec")),
                prefill_capacity=int(m.group("gpre")),
                scheduler_capacity=int(m.group("gsch")),
                buffers_bytes=decode + prefill,
                block_m=int(m.group("gbm")),
                decode_buffers_bytes=decode,
                prefill_buffers_bytes=prefill,
            )
        }
    return {
        "exl3": Exl3Plan(
            tiers=m.group("tiers"),
            decode_capacity=int(m.group("dec")),
            prefill_capacity=int(m.group("pre")),
            scheduler_capacity=int(m.group("sch")),
            buffers_bytes=to_bytes(m.group(5), m.group(6)),
        )
    }


def _opt(m: re.Match[str], name: str) -> int | None:
    value = m.group(name)
    return int(value) if value is not None else None


def _exl3_draft_plan(m: re.Match[str]) -> dict[str, object]:
    return {
        "exl3_draft": Exl3DraftPlan(
            trellis_m_min=int(m.group("mlo")),
            trellis_m_max=int(m.group("mhi")),
            block_m=_opt(m, "bm"),
            prefill_block_m=_opt(m, "pbm"),
            capacity=int(m.group("cap")),
            arena_bytes=to_bytes(m.group(6), m.group(7)),
            scheduler_capacity=int(m.group("sch")),
            chunk=_opt(m, "chunk"),
            topk=_opt(m, "topk"),
        )
    }


# Every ``.*?`` of a pattern here is bounded (``.{0,1024}?``: vLLM's gaps are a sentence or a tiers
# tuple): unbounded, a line repeating a pattern's opening words costs a scan to its end per repetition,
# quadratic in the line (issue 31).

#: The target model's EXL3 arena as rank 0 plans it: the capacities and the buffers' size, all of it (the
#: booted configuration reads the capacities of the same line more loosely:
#: :data:`glmlaunch.vllmlog.bootconfig.EXL3_CAPACITIES_RE`).
EXL3_ARENA_RE = re.compile(
    r"EXL3 mixed Trellis runtime planned:(?: tiers=(?P<tiers>\(\(.{0,1024}?\)\)))?"
    r"(?:"
    r" decode_capacity=(?P<dec>[0-9]+) prefill_capacity=(?P<pre>[0-9]+)"
    rf" scheduler_capacity=(?P<sch>[0-9]+) buffers={NUM} ?(GiB|MiB|KiB|B)\b"
    r"|(?P<grid> one-grid decode=(?P<gdec>[0-9]+) one-grid prefill=(?P<gpre>[0-9]+)/(?P<gsch>[0-9]+)"
    rf" block_m=(?P<gbm>[0-9]+) buffers=(?P<bdec>{NUM[1:-1]})\+(?P<bpre>{NUM[1:-1]})"
    r" ?(?P<unit>GiB|MiB|KiB|B)\b)"
    r")"
)
#: ``R7 fused MoE scratch arena (worst-case sized): …`` (Gilded Gnosis r34, Infernal Invocation)
R7_ARENA_RE = re.compile(
    r"R7 fused MoE scratch arena \(worst-case sized\): capacity=(?P<cap>[0-9]+) block_m=(?P<bm>[0-9]+)"
    r" topk=(?P<topk>[0-9]+) max_m_blocks=(?P<mmb>[0-9]+)"
)
#: ``R7 EXL3 CUDA-graph runtime planned: …`` (the projection-wise fallback)
R7_GRAPH_RE = re.compile(
    r"R7 EXL3 CUDA-graph runtime planned: capacity=(?P<cap>[0-9]+) route_block=(?P<rb>[0-9]+)"
    r" concurrency=(?P<conc>[0-9]+) topk=(?P<topk>[0-9]+) experts=(?P<exp>[0-9]+)"
    rf" arena={NUM} ?(GiB|MiB|KiB|B) a1_min_rows=(?P<a1>[0-9]+)"
)
#: ``R7 fused B12X MoE <layer>: <tiers>``: one layer on the fused route
R7_FUSED_RE = re.compile(r"R7 fused B12X MoE (?P<layer>\S+): (?P<summary>.+)")
#: ``Warmed up N EXL3 mixed-Trellis route-pack variant(s); free-memory delta X MiB.``
ROUTE_PACK_RE = re.compile(
    rf"Warmed up (?P<n>[0-9]+) EXL3 mixed-Trellis route-pack variant\(s\); free-memory delta"
    rf" (?P<delta>-?{NUM[1:-1]}) ?(?P<unit>GiB|MiB|KiB|B)"
)
#: matchers whose lines repeat within one boot (each adds to a list or a count)
ACCUMULATED = frozenset({"r7_arena", "r7_fused"})
ACCUMULATED_FIELDS = ("r7_arenas", "r7_fused_layers")

#: the flag the free-memory line suggests, as vLLM's gpu_worker.py prints it: ``--kv-cache-memory-bytes=``
#: (the builds of the shared boot logs), ``--kv-cache-memory=`` (local-inference-lab/vllm main 28be48f,
#: vllm/v1/worker/gpu_worker.py L704-722); both name ``kv_cache_memory_bytes``, the same bytes
KV_FLAG = r"--kv-cache-memory(?:-bytes)?"

_WORKER_MATCHERS: tuple[_Matcher, ...] = (
    _Matcher(
        "weights",
        WEIGHTS_LOADED,
        re.compile(rf"Model loading took {NUM} ?(GiB|MiB|GB|MB)(?: memory)? and {NUM} ?s(?:econds)?"),
        _weights,
    ),
    _Matcher(
        "kv_available",
        "Available KV cache memory:",
        re.compile(rf"Available KV cache memory: {NUM} ?(GiB|MiB)"),
        lambda m: {"kv_available_bytes": to_bytes(m.group(1), m.group(2))},
    ),
    _Matcher(
        "graph_estimate",
        "CUDA graph memory:",
        re.compile(
            rf"Estimated (?:[A-Za-z0-9]+ )?CUDA graph memory: {NUM} GiB total"
            rf"(?: \({NUM} GiB retained in the reusable pool\))?"
        ),
        lambda m: {
            "graph_estimate_bytes": gib(m.group(1)),
            "graph_estimate_retained_bytes": gib(m.group(2)) if m.group(2) else None,
        },
    ),
    _Matcher(
        "graph_pool",
        "CUDA graph pool memory:",
        re.compile(rf"CUDA graph pool memory: {NUM} GiB \(actual\), {NUM} GiB \(estimated\)"),
        lambda m: {"graph_actual_bytes": gib(m.group(1)), "graph_pool_estimate_bytes": gib(m.group(2))},
    ),
    _Matcher(
        "free_memory",
        "Free memory on device",
        re.compile(
            rf"Free memory on device(?: [^\s(]+)? \({named('free')}/{named('total')} GiB\)"
            rf" on startup\. Desired GPU memory utilization is \({named('gmu')},"
            rf" {named('req')} GiB\)\. Actual usage is {named('w')} GiB for"
            rf" weight, {named('p')} GiB for peak activation,"
            rf" {named('n')} GiB for non-torch memory, and"
            rf" {named('g')} GiB for CUDAGraph memory\..{{0,1024}}?"
            rf"{KV_FLAG}=(?P<kvreq>-?[0-9]+)`(?: \((?P<kvreqp>-?[0-9]+(?:\.[0-9]+)?) GiB\))?"
            r".{0,1024}?to fit into requested memory, or"
            rf" `{KV_FLAG}=(?P<kvgpu>-?[0-9]+)`(?: \((?P<kvgpup>-?[0-9]+(?:\.[0-9]+)?) GiB\))?"
            r".{0,1024}?to fully utilize gpu memory\."
            rf" Current kv cache memory in use is {named('kvuse')} GiB"
        ),
        _free_memory,
    ),
    _Matcher(
        "dcp_collectives",
        "Using B12X PCIe DCP collectives",
        re.compile(r"Using B12X PCIe DCP collectives \(((?:[a-z_]+=[0-9]+(?:, )?)+)\)"),
        _dcp,
    ),
    _Matcher(
        "dcp_transient",
        "of B12X sparse DCP transient memory",
        re.compile(
            rf"Including {NUM} ?(GiB|MiB|KiB|B) of B12X sparse DCP transient memory in the profile peak"
        ),
        lambda m: {"dcp_transient_bytes": to_bytes(m.group(1), m.group(2))},
    ),
    _Matcher(
        "graph_capture",
        GRAPHS_CAPTURED + " in",
        re.compile(rf"Graph capturing finished in {NUM} ?s(?:ecs?|econds)?, took {NUM} ?(GiB|MiB)"),
        lambda m: {
            "graph_capture_seconds": float(m.group(1)),
            "graph_capture_bytes": to_bytes(m.group(2), m.group(3)),
        },
    ),
    _Matcher("exl3_plan", "EXL3 mixed Trellis runtime planned", EXL3_ARENA_RE, _exl3_plan),
    _Matcher(
        "r7_arena",
        "R7 fused MoE scratch arena",
        R7_ARENA_RE,
        lambda m: {
            "r7_arenas": [
                R7Arena(
                    capacity=int(m.group("cap")),
                    block_m=int(m.group("bm")),
                    topk=int(m.group("topk")),
                    max_m_blocks=int(m.group("mmb")),
                )
            ]
        },
    ),
    _Matcher(
        "r7_graph_runtime",
        "R7 EXL3 CUDA-graph runtime planned",
        R7_GRAPH_RE,
        lambda m: {
            "r7_graph_runtime": R7GraphRuntime(
                capacity=int(m.group("cap")),
                route_block=int(m.group("rb")),
                concurrency=int(m.group("conc")),
                topk=int(m.group("topk")),
                experts=int(m.group("exp")),
                arena_bytes=to_bytes(m.group(6), m.group(7)),
                a1_min_rows=int(m.group("a1")),
            )
        },
    ),
    _Matcher("r7_fused", "R7 fused B12X MoE ", R7_FUSED_RE, lambda m: {"r7_fused_layers": 1}),
    _Matcher(
        "route_pack_warmup",
        "EXL3 mixed-Trellis route-pack variant",
        ROUTE_PACK_RE,
        lambda m: {
            "route_pack_warmup": RoutePackWarmup(
                variants=int(m.group("n")), free_delta_bytes=to_bytes(m.group("delta"), m.group("unit"))
            )
        },
    ),
    _Matcher(
        "exl3_draft_plan",
        "EXL3 rank-sliced runtime planned",
        re.compile(
            r"EXL3 rank-sliced runtime planned: Trellis m=(?P<mlo>[0-9]+)\.\.(?P<mhi>[0-9]+)"
            r"(?: block_m=(?P<bm>[0-9]+))?,?(?: prefill trellis block_m=(?P<pbm>[0-9]+))?"
            rf" capacity=(?P<cap>[0-9]+) arena={NUM} ?(GiB|MiB|KiB|B)"
            r" scheduler_capacity=(?P<sch>[0-9]+)(?: chunk=(?P<chunk>[0-9]+))?(?: topk=(?P<topk>[0-9]+))?"
        ),
        _exl3_draft_plan,
    ),
    _Matcher(
        "ckv_gather",
        "Using transient full-CKV gather",
        re.compile(
            r"Using transient full-CKV gather for B12X sparse MLA prefill \(capacity=([0-9]+) logical"
        ),
        lambda m: {"ckv_gather_capacity_tokens": int(m.group(1))},
    ),
    _Matcher(
        "crossovers",
        "PCIe crossovers:",
        CROSSOVERS_RE,
        lambda m: {
            "crossovers": PcieCrossovers(
                oneshot_max_bytes=int(m.group(1)),
                fused_max_bytes=int(m.group(2)),
                dma_min_bytes=int(m.group(3)),
            )
        },
    ),
)

#: Lines that every rank writes on a complete boot (``dcp_collectives`` only with DCP).
#: ``kv_available`` is written by the driver rank only (rank 0) in the r14 tree; the lines after the
#: table below are informative: a rank that lacks them is not missing anything.
RANK0_FIELDS: tuple[str, ...] = ("kv_available",)
OPTIONAL_FIELDS: tuple[str, ...] = (
    "dcp_transient",
    "graph_capture",
    "exl3_plan",
    "exl3_draft_plan",
    "r7_arena",
    "r7_graph_runtime",
    "r7_fused",
    "route_pack_warmup",
    "ckv_gather",
    "crossovers",
)

_ENGINE_MATCHERS: tuple[_Matcher, ...] = (
    _Matcher(
        "kv_cache_tokens",
        KV_CACHE_SIZED,
        re.compile(rf"GPU KV cache size: {INT} tokens"),
        lambda m: {"kv_cache_tokens": count(m.group(1))},
    ),
    _Matcher(
        "max_concurrency",
        "Maximum concurrency for",
        re.compile(rf"Maximum concurrency for {INT} tokens per request: {NUM}x"),
        lambda m: {"max_concurrency_tokens": count(m.group(1)), "max_concurrency": float(m.group(2))},
    ),
)


#: the opening words of each line a matcher reads (they name a line whose body did not parse)
LEADS: dict[str, str] = {m.key: m.lead for m in (*_WORKER_MATCHERS, *_ENGINE_MATCHERS)}

KV_REFUSAL_LEAD = "KV cache is needed, which is larger than the available KV cache memory"
_NO_KV_LEAD = "No available memory for the cache blocks"
_GATE_LEAD = "on startup is less than desired GPU memory utilization"
_GATE_RE = re.compile(
    rf"Free memory on device(?: [^\s(]+)? \({NUM}/{NUM} GiB\) on startup is less than desired GPU memory"
    rf" utilization \({NUM}, {NUM} GiB\)"
)


def _refusal(message: str) -> Refusal | None:
    if not (KV_REFUSAL_LEAD in message or _NO_KV_LEAD in message or _GATE_LEAD in message):
        return None
    if exception_statement(message) is None:
        # vLLM refuses with an exception (``ValueError: …``); the words in another message are text
        return None
    if KV_REFUSAL_LEAD in message:
        needed = re.search(rf"\(?{NUM} ?GiB KV cache is needed", message)
        avail = re.search(rf"available KV cache memory \({NUM} ?GiB\)", message)
        mml = re.search(r"max seq len \(([0-9]+)\)", message)
        est = re.search(r"estimated maximum model length is ([0-9]+)", message)
        return Refusal(
            kind="kv-too-small",
            message=message.strip(),
            kv_needed_bytes=gib(needed.group(1)) if needed else None,
            kv_available_bytes=gib(avail.group(1)) if avail else None,
            max_model_len=int(mml.group(1)) if mml else None,
            estimated_max_model_len=int(est.group(1)) if est else None,
        )
    if _NO_KV_LEAD in message:
        return Refusal(kind="no-kv-memory", message=message.strip())
    if _GATE_LEAD in message:
        gate = _GATE_RE.search(message)
        return Refusal(
            kind="start-gate",
            message=message.strip(),
            free_bytes=gib(gate.group(1)) if gate else None,
            total_bytes=gib(gate.group(2)) if gate else None,
            gpu_memory_utilization=float(gate.group(3)) if gate else None,
            requested_bytes=gib(gate.group(4)) if gate else None,
        )
    return None


def _apply(acc: _Acc, matchers: Iterable[_Matcher], text: str) -> None:
    for matcher in matchers:
        if matcher.lead not in text:
            continue
        m = matcher.pattern.search(text)
        if m:
            try:
                updates = matcher.handle(m)
            except (ValueError, OverflowError):  # a number too long for int() or too large for a float
                updates = None
            if updates is None or not _in_range(updates):
                acc.unparsed.append(f"{matcher.key}: a number is out of range: {text.strip()[:160]}")
                return
            acc.put(matcher.key, updates)
        elif matcher.key not in acc.found:
            acc.unparsed.append(f"{matcher.key}: {text.strip()[:160]}")
        return


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _in_range(updates: dict[str, object]) -> bool:
    """Every number in a matcher's result is finite and fits in 64 bits (nested models included)."""
    stack: list[object] = list(updates.values())
    while stack:
        value = stack.pop()
        if isinstance(value, BaseModel):
            stack.extend(dict(value).values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif _is_number(value) and not _fits(value):
            return False
    return True


def _fits(value: int | float) -> bool:
    # An int is compared as an int: math.isfinite(10**400) itself raises OverflowError.
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return abs(value) < MAX_LOG_NUMBER


def _rank_sort_key(obs: RankObservation) -> tuple[int, int, int, str]:
    return (obs.dp_rank or 0, obs.pp_rank or 0, obs.tp_rank if obs.tp_rank is not None else 1 << 30, obs.rank)


def _worker_key(process: str, pid: int | None) -> str:
    """Accumulator key: a ranked worker by its name; an unranked ``(Worker pid=N)`` by its pid."""
    if is_ranked(process) or pid is None:
        return process
    return f"{process} pid={pid}"


def _merge_unranked(workers: dict[str, _Acc]) -> dict[str, _Acc]:
    """Fold each ``(Worker pid=N)`` accumulator into the ranked worker that pid was renamed to.

    vLLM names a worker ``Worker`` until its rank is known, then ``Worker_TPx_DCPy``; the pid is the same
    process. Lines of an unranked pid that was never renamed (a boot cut short) stay a rank of their own.
    """
    by_pid: dict[int, _Acc] = {}
    for key, acc in workers.items():
        if is_ranked(key):
            for pid in acc.pids:
                by_pid.setdefault(pid, acc)
    merged: dict[str, _Acc] = {}
    for key, acc in workers.items():
        target = by_pid.get(acc.pids[0]) if acc.pids and not is_ranked(key) else None
        if target is None:
            merged.setdefault(key, acc)
            continue
        # The unranked lines came first: the ranked worker's own values win where both said something.
        target.values = {**acc.values, **target.values}
        target.found = [k for k in acc.found if k not in target.found] + target.found
        target.unparsed = acc.unparsed + target.unparsed
        target.refusal_set = {**acc.refusal_set, **target.refusal_set}
        target.repeated = target.repeated or acc.repeated
    return merged


def _event_key(event: RuntimeEvent) -> tuple[tuple[str, object], ...]:
    """What makes two events the same event: every field but the process that logged it."""
    return tuple((name, value) for name, value in event if name != "process")


def parse_log_text(text: str, *, source: str = "<text>", digest: tuple[str, int] | None = None) -> BootLog:
    """Parse one boot log's text; never raises on malformed content (it is reported instead).

    ``digest``: the sha256 and size of the bytes ``text`` was read from (default: of ``text`` in UTF-8)."""
    workers: dict[str, _Acc] = {}
    engine = _Acc(name="engine")
    engine_name: str | None = None
    # Every "seen it already?" below is one lookup in a dict kept in log order, never a scan of what came
    # before: a log of N distinct OOMs, readings or refusals is read in time linear in N (issue 31).
    unattributed: dict[Refusal, None] = {}
    version: str | None = None
    failure: str | None = None
    ready = False
    events: dict[tuple[tuple[str, object], ...], RuntimeEvent] = {}

    for msg in iter_messages(text):
        if version is None:
            version = version_of(msg.text)
        if not ready and is_ready_line(msg.text):
            ready = True
        if may_hold_runtime_event(msg.text):
            try:
                event = runtime_event(msg, ready)
            except (ValueError, OverflowError):
                event = None
            if event is not None:
                # the parent process echoes a worker's exception: one event per distinct message
                events.setdefault(_event_key(event), event)
        try:
            refusal = _refusal(msg.text)
        except (ValueError, OverflowError):  # a number too long for int() or too large for a float
            engine.unparsed.append(f"refusal: a number is out of range: {msg.text.strip()[:160]}")
            refusal = None
        if refusal is not None and not _in_range(dict(refusal)):
            engine.unparsed.append(f"refusal: a number is out of range: {msg.text.strip()[:160]}")
            refusal = None
        if refusal is None and failure is None:
            stated = exception_of(msg.text)
            if stated is not None:
                failure = stated[:300]
        if msg.process is None:
            if refusal is not None:
                unattributed.setdefault(refusal)
            continue
        if is_worker(msg.process):
            key = _worker_key(msg.process, msg.pid)
            acc = workers.setdefault(key, _Acc(name=key))
            if msg.pid is not None:
                acc.pid_set.setdefault(msg.pid)
            if refusal is not None:
                acc.refusal_set.setdefault(refusal)
                continue
            _apply(acc, _WORKER_MATCHERS, msg.text)
        elif is_engine(msg.process):
            engine_name = engine_name or msg.process
            if refusal is not None:
                engine.refusal_set.setdefault(refusal)
                continue
            _apply(engine, _ENGINE_MATCHERS, msg.text)
        elif refusal is not None:
            unattributed.setdefault(refusal)

    workers = _merge_unranked(workers)
    attributed = {r: None for a in (engine, *workers.values()) for r in a.refusal_set}
    # A worker's or EngineCore's exception is often echoed again, unprefixed, by the parent process.
    unechoed = [r for r in unattributed if r not in attributed]
    kinds = {r.kind for r in (*attributed, *unechoed)}
    ranks = [_freeze_rank(acc, kinds) for acc in workers.values()]
    ranks.sort(key=_rank_sort_key)
    refused = bool(kinds)
    engine_obs = EngineObservation(
        process=engine_name,
        vllm_version=version,
        refusals=engine.refusals,
        found=engine.found,
        missing=[] if refused else [k for k in ENGINE_FIELDS if k not in engine.found],
        unparsed=engine.unparsed,
        **{k: v for k, v in engine.values.items() if k in EngineObservation.model_fields},
    )
    complete = refused or (
        bool(ranks) and all(not r.missing for r in ranks) and engine_obs.kv_cache_tokens is not None
    )
    if digest is None:
        raw = text.encode("utf-8", "surrogateescape")
        digest = hashlib.sha256(raw).hexdigest(), len(raw)
        del raw
    boot_config = parse_boot_config(text)
    return BootLog(
        source=source,
        sha256=digest[0],
        size_bytes=digest[1],
        ranks=ranks,
        engine=engine_obs,
        unattributed_refusals=unechoed,
        ends_mid_line=bool(text) and not text.endswith(("\n", "\r")),
        complete=complete,
        repeated_ranks=[a.name for a in workers.values() if a.repeated],
        failure=None if refused else failure,
        boot_config=None if boot_config.empty else boot_config,
        runtime_events=list(events.values()),
    )


def _is_first_rank(name: str) -> bool:
    """The driver rank (all rank indices 0), which alone writes the lines in RANK0_FIELDS."""
    return all(v == 0 for v in rank_indices(name).values())


def _freeze_rank(acc: _Acc, refusal_kinds: set[str]) -> RankObservation:
    values = dict(acc.values)
    # Both lines state W; the load line is the primary one, the free-memory line backs it up.
    free_line_w = values.pop("weights_free_line_bytes", None)
    if values.get("weights_bytes") is None and free_line_w is not None:
        values["weights_bytes"] = free_line_w
    first = _is_first_rank(acc.name)
    expected = [k for k in WORKER_FIELDS if first or k not in RANK0_FIELDS]
    if "_DCP" in acc.name:
        expected.append("dcp_collectives")
    if "start-gate" in refusal_kinds:
        # The start gate refuses before the model loads: nothing was expected yet.
        expected = []
    elif refusal_kinds:
        # A KV refusal ends the boot before graph capture: only what came before it is expected.
        expected = [k for k in expected if k in ("weights", "kv_available", "dcp_collectives")]
    missing = [k for k in expected if k not in acc.found]
    return RankObservation(
        rank=acc.name,
        pids=acc.pids,
        refusals=acc.refusals,
        found=acc.found,
        missing=missing,
        unparsed=acc.unparsed,
        **rank_indices(acc.name),
        **values,
    )


def parse_log_file(path: str | Path) -> BootLog:
    """Read a log (any encoding; undecodable bytes are kept as visible ``\\xNN`` escapes) and parse it.

    Only a regular file of at most ``MAX_BOOT_LOG_BYTES`` is read; anything else is a ConfigError. The
    record names the file by its escaped name (:func:`glmlaunch.output.escape`): every later ``list``,
    ``show`` and ``plan`` prints what is stored, and a name is shown, never obeyed by the terminal.
    """
    from glmlaunch.output import escape

    p = Path(path)
    raw = read_file(p, limit=MAX_BOOT_LOG_BYTES, key="LOG", what="boot log")
    # A record is JSON, which holds Unicode only: a byte that is not UTF-8 is kept as its escape.
    text = raw.decode("utf-8", "backslashreplace")
    # Hash the bytes on disk, not the re-encoded text, so a record names exactly the file it came from;
    # then let them go (a 64 MiB boot.log is not held twice while it is parsed).
    digest = hashlib.sha256(raw).hexdigest(), len(raw)
    del raw
    log = parse_log_text(text, source=escape(str(p)), digest=digest)
    del text
    return redact(log)


def redact(log: BootLog) -> BootLog:
    """The log with every credential it printed masked, as a record may keep it.

    The boot configuration is masked by structure as it is parsed (``HF_TOKEN=…`` runtime lines, a
    ``'api_key': …`` argument); the free text kept from the log (unparsed lines, a failure, a refusal's
    message) passes through :func:`glmlaunch.output.mask_secrets` here.
    """
    from glmlaunch.output import mask_secrets

    def walk(node: object) -> object:
        if isinstance(node, str):
            return mask_secrets(node)
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    doc = log.model_dump(mode="json")
    masked = walk(doc)
    return log if masked == doc else BootLog.model_validate(masked)
