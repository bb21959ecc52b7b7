"""Whether a boot log's figures can be evidence, checked before they become a calibration record.

A log is text anyone can edit, and a record learned from it moves every later plan of its rig shape (two
figures changed in a real log turned ``runtime-oom`` into ``ok … confirmed``: issue 31). So the figures are
held to each other, to the configuration the record is keyed on and to the GPU. Each rule below is vLLM's
own arithmetic or physics, with the tolerance of the two-decimal GiB figures it reads (±5 MiB each):

* **physics**: the device total T is more than 0 B and no larger than the GPU (``nvidia-smi``'s figure in
  the log, else the total the record agreed on, else ``hardware.memory_per_gpu``); the free memory F0 is at
  most T; nothing the log says was allocated (W, P, N, G, KV, the requested budget R, an OOM's allocation)
  is larger than T; an OOM's free memory is at most its total;
* **the free-memory line against itself** (vLLM's ``gpu_worker.py``, which prints it): R = GMU x T; the two
  ``--kv-cache-memory-bytes`` suggestions (newer builds print ``--kv-cache-memory=``: the same setting, the
  same bytes; the messages below name it by the flag vLLM takes) are R, resp. F0, less W + P + N + G and
  vLLM's 150 MiB buffer, and each is the figure printed beside it (``(2.08 GiB)``); the KV memory "in use"
  is the available KV memory logged before (one variable printed twice);
* **the KV cache**: the engine's token count is what the logged KV memory holds at the record's
  configuration's bytes per token (whole 64-token blocks per rank, times DCP), where vLLM sized the pool;
* **the launched configuration**: the GMU in the free-memory line is the configuration's; a
  ``kv_cache_memory_bytes`` is the KV memory vLLM logged; for a boot glmlaunch launched, every memory setting
  the log's own configuration shows is the launch's (:func:`launch_disagreements`).

Pure functions over a record or a parsed log: :mod:`.ingest` refuses a log that breaks one, the store
refuses to write such a record unless it says so (``Calibration.evidence_refused``), and learning skips it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from glmlaunch.config.safeload import short
from glmlaunch.config.units import GIB, MIB
from glmlaunch.errors import EvidenceError

if TYPE_CHECKING:
    from glmlaunch.calibrate.records import Calibration
    from glmlaunch.config.schema import DeploymentConfig
    from glmlaunch.vllmlog.boot import BootLog, RankObservation
    from glmlaunch.vllmlog.events import RuntimeEvent

#: half of the last digit of a ``%.2f GiB`` figure: what one printed figure may be off by
RESOLUTION = int(0.005 * GIB)
#: vLLM's ``redundancy_buffer_memory`` (gpu_worker.py): each suggestion leaves 150 MiB unassigned
VLLM_BUFFER = 150 * MIB
#: the suggestions sum five printed figures (R or F0, W, P, N, G): each may be off by RESOLUTION
SUM_TOLERANCE = 6 * RESOLUTION
#: the engine's KV token count may differ from the logged memory's by a block per rank and the rounding
#: of that memory; beyond this share of it, the two figures are of different pools
KV_TOKEN_SHARE = 0.02
KV_BLOCK = 64


@dataclass(frozen=True)
class Disagreement:
    """One figure of a log, its value, and what it disagrees with."""

    figure: str
    value: str
    against: str

    def text(self) -> str:
        return f"{self.figure} {self.value} disagrees with {self.against}"


def _g(n: int | float) -> str:
    return f"{n / GIB:.2f} GiB"


def gpu_capacity(boot: BootLog, config: DeploymentConfig | None, exact: int | None) -> tuple[int, str] | None:
    """The GPU's memory and where it comes from: the log's ``nvidia-smi`` lines, else the total the record
    agreed on (an inventory or the profile, to the log's 0.01 GiB), else ``hardware.memory_per_gpu``."""
    bc = boot.boot_config
    if bc is not None and bc.gpu_memory_mib:
        return bc.gpu_memory_mib * MIB, f"the GPU's {bc.gpu_memory_mib:,} MiB (the log's nvidia-smi lines)"
    if exact is not None:
        return exact, f"the GPU's total {_g(exact)}"
    if config is not None:
        total = int(config.hardware.memory_per_gpu)
        return total, f"the GPU's hardware.memory_per_gpu {_g(total)} ({config.hardware.gpu_model})"
    return None


def _rank_physics(obs: RankObservation, capacity: tuple[int, str] | None) -> Iterator[Disagreement]:
    who = obs.rank
    total = obs.total_bytes
    if total is None:
        return
    if total <= 0:
        yield Disagreement(f"{who}'s device total T", _g(total), "any GPU (a total of 0 B or less)")
        return
    if capacity is not None and total > capacity[0] + RESOLUTION:
        yield Disagreement(f"{who}'s device total T", _g(total), f"{capacity[1]}: larger than the GPU")
    for name, value in (
        ("free memory at start F0", obs.free_at_start_bytes),
        ("requested memory R", obs.requested_bytes),
        ("weights W", obs.weights_bytes),
        ("peak activation P", obs.peak_activation_bytes),
        ("non-torch memory N", obs.non_torch_bytes),
        ("CUDA graph memory G", obs.cudagraph_bytes),
        ("available KV cache memory", obs.kv_available_bytes),
        ("KV cache memory in use", obs.kv_in_use_bytes),
        ("--kv-cache-memory-bytes to fully use the GPU", obs.kv_bytes_to_gpu),
    ):
        if value is not None and value > total:
            yield Disagreement(f"{who}'s {name}", _g(value), f"its device total T {_g(total)}: larger")
        if value is not None and value < 0 and name != "--kv-cache-memory-bytes to fully use the GPU":
            yield Disagreement(f"{who}'s {name}", _g(value), "physics: an allocation below 0 B")


def _free_line(obs: RankObservation) -> Iterator[Disagreement]:
    """The free-memory line against itself: vLLM computed every figure in it from the same few."""
    who = f"{obs.rank}'s free-memory line:"
    gmu, total = obs.gpu_memory_utilization, obs.total_bytes
    req, free = obs.requested_bytes, obs.free_at_start_bytes
    if gmu is None or total is None or req is None or free is None:
        return
    if abs(req - gmu * total) > 2 * RESOLUTION + 1:
        yield Disagreement(
            f"{who} requested memory R", _g(req), f"GMU {gmu} x T {_g(total)} = {_g(gmu * total)}"
        )
    used = [obs.weights_bytes, obs.peak_activation_bytes, obs.non_torch_bytes, obs.cudagraph_bytes]
    if None not in used:
        non_kv = sum(int(u or 0) for u in used)
        for name, exact, base, base_name in (
            ("--kv-cache-memory-bytes to fit into requested memory", obs.kv_bytes_to_requested, req, "R"),
            ("--kv-cache-memory-bytes to fully use the GPU", obs.kv_bytes_to_gpu, free, "F0"),
        ):
            if exact is None:
                continue
            want = base - non_kv - VLLM_BUFFER
            if abs(exact - want) > SUM_TOLERANCE:
                yield Disagreement(
                    f"{who} {name}",
                    f"{exact:,}",
                    f"{base_name} {_g(base)} - (W + P + N + G) {_g(non_kv)} - vLLM's 150 MiB = {want:,} "
                    "(vLLM computes one from the other)",
                )
    kv, in_use = obs.kv_available_bytes, obs.kv_in_use_bytes
    if kv is not None and in_use is not None and abs(kv - in_use) > 2 * RESOLUTION + 1:
        # vLLM prints the same figure twice (gpu_worker.py: available_kv_cache_memory_bytes)
        yield Disagreement(
            f"{who} KV cache memory in use", _g(in_use), f"the available KV cache memory {_g(kv)} it logged"
        )
    for name, exact, printed in (
        (
            "--kv-cache-memory-bytes to fit into requested memory",
            obs.kv_bytes_to_requested,
            obs.kv_bytes_to_requested_printed,
        ),
        ("--kv-cache-memory-bytes to fully use the GPU", obs.kv_bytes_to_gpu, obs.kv_bytes_to_gpu_printed),
    ):
        if exact is not None and printed is not None and abs(exact - printed) > RESOLUTION + 1:
            yield Disagreement(f"{who} {name}", f"{exact:,}", f"the {_g(printed)} vLLM printed beside it")


def _record_sizes(config: DeploymentConfig, claimed: frozenset[str] | None) -> list[int]:
    """The exact KV bytes per token/rank of ``config`` and, where the log does not state the indexer
    sharding (which splits the indexer part of the record, ledger/kv_cache.py), of every sharding its DCP
    allows: a log is held to the record only as far as it states what sizes it."""
    from glmlaunch.ledger.kv_cache import geometry

    variants = [config]
    dcp = max(1, config.parallel.dcp)
    if claimed is not None and "dcp_policy.indexer_shards" not in claimed:
        variants += [
            config.model_copy(
                update={"dcp_policy": config.dcp_policy.model_copy(update={"indexer_shards": s})}
            )
            for s in range(dcp)
        ]
    sizes = []
    for cfg in variants:
        geo = geometry(cfg)
        if geo.origin == "exact" and geo.bytes_per_token > 0:
            sizes.append(geo.bytes_per_token)
    return sorted(set(sizes))


def _kv_tokens(
    boot: BootLog, config: DeploymentConfig, claimed: frozenset[str] | None
) -> Iterator[Disagreement]:
    """The engine's token count against the logged KV memory, at the configuration's bytes per token."""
    tokens = boot.engine.kv_cache_tokens
    kv = next((r.kv_available_bytes for r in boot.ranks if r.kv_available_bytes is not None), None)
    if tokens is None or kv is None or config.memory.num_gpu_blocks_override is not None:
        return  # a pinned pool holds the pin's blocks whatever memory was measured
    sizes = _record_sizes(config, claimed)
    if not sizes:
        return
    dcp = max(1, config.parallel.dcp)

    def off(per_token: int) -> bool:
        held = tokens / dcp * per_token
        return abs(held - kv) > max(RESOLUTION + 2 * KV_BLOCK * per_token, KV_TOKEN_SHARE * kv)

    if all(off(size) for size in sizes):
        size = sizes[0]
        held = tokens / dcp * size
        shown = ", ".join(f"{x:,}" for x in sizes)
        yield Disagreement(
            "the engine's GPU KV cache size",
            f"{tokens:,} tokens",
            f"the logged KV memory {_g(kv)}: at {shown} B/token/rank and DCP {dcp} of the record's "
            f"configuration those tokens take {_g(held)} per rank",
        )


def shown_settings(boot: BootLog) -> frozenset[str]:
    """The settings the log's own configuration states (vLLM's args, the launcher's header, its runtime
    lines): where it states none, the configuration took a default, which is no claim about the boot."""
    from glmlaunch.calibrate.bootconfig import map_boot

    if boot.boot_config is None:
        return frozenset()
    mapped = map_boot(boot.boot_config)
    return frozenset(k for k, src in mapped.sources.items() if not src.startswith("vLLM default"))


def _kv_record_claimed(config: DeploymentConfig, claimed: frozenset[str] | None) -> bool:
    """Whether the settings the KV bytes per token rest on are claims (the model, MTP and DCP are in every
    log's args): the KV dtype, and for NVFP4 its scale contract."""
    if claimed is None:
        return True
    if "memory.kv_cache_dtype" not in claimed:
        return False
    return config.memory.kv_cache_dtype != "nvfp4_ds_mla" or "memory.kv_scale_mode" in claimed


def _against_config(
    boot: BootLog, config: DeploymentConfig, claimed: frozenset[str] | None
) -> Iterator[Disagreement]:
    gmu = config.memory.gpu_memory_utilization
    pinned_kv = config.memory.kv_cache_memory_bytes
    gmu_claimed = claimed is None or "memory.gpu_memory_utilization" in claimed
    for obs in boot.ranks if gmu_claimed else ():
        logged = obs.gpu_memory_utilization
        if logged is not None and pinned_kv is None and abs(logged - gmu) > 5e-4:
            yield Disagreement(
                f"{obs.rank}'s GPU memory utilization",
                f"{logged}",
                f"memory.gpu_memory_utilization {gmu} of the configuration the record is keyed on",
            )
            break
    kv = next((r.kv_available_bytes for r in boot.ranks if r.kv_available_bytes is not None), None)
    if pinned_kv is not None and kv is not None and abs(kv - int(pinned_kv)) > RESOLUTION + 1:
        yield Disagreement(
            "the available KV cache memory",
            _g(kv),
            f"memory.kv_cache_memory_bytes {int(pinned_kv):,} of the configuration the record is keyed on",
        )


def _event(event: RuntimeEvent, capacity: tuple[int, str] | None) -> Iterator[Disagreement]:
    what = f"the {'OOM' if event.kind == 'oom' else 'free-memory reading'} {event.line[:80]!r}:"
    total = event.total_bytes
    if total is not None and total <= 0:
        yield Disagreement(f"{what} total capacity", _g(total), "any GPU (a total of 0 B or less)")
        return
    if total is not None and event.free_bytes > total:
        yield Disagreement(f"{what} free memory", _g(event.free_bytes), f"its total capacity {_g(total)}")
    bound = total if total is not None else (capacity[0] if capacity is not None else None)
    if event.tried_bytes is not None and bound is not None and event.tried_bytes > bound:
        yield Disagreement(
            f"{what} allocation", _g(event.tried_bytes), f"a GPU of {_g(bound)}: larger than the GPU"
        )
    if capacity is not None:
        for name, value in (("total capacity", total), ("free memory", event.free_bytes)):
            if value is not None and value > capacity[0] + RESOLUTION:
                yield Disagreement(f"{what} {name}", _g(value), f"{capacity[1]}: larger than the GPU")


def boot_disagreements(
    boot: BootLog,
    config: DeploymentConfig | None,
    *,
    exact_total: int | None = None,
    claimed: frozenset[str] | None = None,
) -> list[Disagreement]:
    """Every rule of this module the parsed ``boot`` breaks, keyed on ``config`` (None: the log's figures
    only), in the order a reader checks them: physics, the free-memory line, the KV cache, the
    configuration. ``claimed``: the settings of ``config`` that are claims to hold the log to (None:
    all, the launch's or a ``-p`` profile's; a configuration read from the log claims what the log states,
    :func:`shown_settings`, not the defaults filled in around it)."""
    capacity = gpu_capacity(boot, config, exact_total)
    out: list[Disagreement] = []
    for obs in boot.ranks:
        out += _rank_physics(obs, capacity)
        out += _free_line(obs)
    for event in boot.runtime_events:
        out += _event(event, capacity)
    if config is not None:
        if _kv_record_claimed(config, claimed):
            out += _kv_tokens(boot, config, claimed)
        out += _against_config(boot, config, claimed)
    return out


def record_disagreements(record: Calibration, config: DeploymentConfig | None) -> list[Disagreement]:
    """:func:`boot_disagreements` of a record: its log, keyed on ``config`` (the record's own,
    ``learn.record_config``) and the total it agreed on."""
    exact = next((t.total_bytes for t in record.ranks if t.total_bytes is not None), None)
    return boot_disagreements(
        record.boot,
        config,
        exact_total=exact if record.total_bytes_exact else None,
        claimed=None if record.supervised is not None else shown_settings(record.boot),
    )


def launch_disagreements(
    launched: DeploymentConfig, boot: BootLog, logged: DeploymentConfig
) -> list[Disagreement]:
    """Every memory setting the log's own configuration shows (vLLM's args, the launcher's header; resolved
    as ``logged``) that is not what glmlaunch launched. Settings the log does not show are not compared:
    whatever base fills them in is a guess, not the log."""
    from glmlaunch.calibrate.bootconfig import boot_settings
    from glmlaunch.calibrate.fingerprint import memory_settings

    shown = boot_settings(boot.boot_config) if boot.boot_config is not None else {}
    theirs, mine = memory_settings(logged), memory_settings(launched)
    return [
        Disagreement(f"the log's {key}", repr(theirs.get(key)), f"the launched {key} {mine.get(key)!r}")
        for key in sorted(set(shown) & set(mine))
        if not key.startswith("env.") and theirs.get(key) != mine.get(key)
    ]


def refuse_evidence(
    why: str, path: Path | str, count: int = 1, *, profile: str | None = None
) -> EvidenceError:
    """The error a log whose figures are no evidence is refused with: the first disagreement, named.
    ``profile``: the ``-p`` profile the record was keyed on, where the log shows no configuration."""
    more = f" (and {count - 1} more)" if count > 1 else ""
    hint = "ingest the server log of one boot as vLLM wrote it; nothing was stored"
    if profile is not None:
        hint = (
            f"the log shows no configuration and was keyed on -p {profile}: give the profile it booted with; "
            "nothing was stored"
        )
    return EvidenceError(
        f"the log's figures are no evidence: {why}{more}", key="LOG", value=short(path, 200), hint=hint
    )
