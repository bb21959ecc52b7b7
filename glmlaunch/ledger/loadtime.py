"""The load-time peak: what a rank holds at the end of model loading, against the free memory F0.

Model loading ends before vLLM profiles, and what it holds beside the weights is freed before the KV cache
is sized, so none of it is in vLLM's budget. It still has to fit: vLLM loads into ``F0 = T - U_oth -
U_pre``, and a load that does not fit fails before any budget is computed. The peak is the weights W plus,
at the same moment:

* **the R7 preparation ballast** (three-tier EXL3 experts on the r34 and ii stacks): one shared, never-read
  pool of 512 planes (2 projections x 256 experts) of one expert projection at the lowest tier, which
  ``prepare_weights`` validates against, "approximately 576 MiB"; freed once every layer is bound
  (``release_r7_ballast`` in ``process_weights_after_loading``: blackwell-llm-docker
  patches/releases/infernal-invocation-r18/vllm/integration.patch@3dd078a L6831-6867, L9231, L10218-10238;
  inline in gilded-gnosis-v20-r34 L13862-13876);
* **the InstantTensor ring** (``model.load_format: instanttensor``): the GPU tensor buffer
  (``INSTANTTENSOR_BUFFER_SIZE``, at least the largest tensor) and the I/O staging of ``chunk x concurrency x
  io_depth x TP`` (8 MiB x 1 x 512 // TP x TP for the buffered and direct backends), whose io_depth shrinks
  to fit ``INSTANTTENSOR_MAX_FREE_MEM_USAGE x free`` (default 0.5) measured when the loader opens
  (voipmonitor/InstantTensor@b0f9534 instanttensor/_impl.py, ``_determine_io_params``,
  ``_determine_buffer_size``);
* **online-K6 staging** (``model.online_quant: exl3-b6``): one layer's eligible BF16 projections and their
  K6 encoding, held together while that layer is encoded (an estimate: the encoder's own scratch is not
  read).

The section exists only where loading holds more than W and one layer's staging: an InstantTensor load or
the R7 ballast. A safetensors load of the older checkpoints streams each tensor straight to its parameter.
"""

from __future__ import annotations

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger import r7
from glmlaunch.ledger.context import fmt_int
from glmlaunch.ledger.model import Entry, LoadPeak

MIB = 1024 * 1024
#: 2 projections x 256 experts, the structural maximum the shared pool is sized for
BALLAST_PLANES = 512
#: InstantTensor's defaults for disk files (AIO/URING, buffered or not): chunk 8 MiB, one thread, 512 // TP
IT_CHUNK = 8 * MIB
IT_CONCURRENCY = 1
IT_IO_DEPTH = 512
IT_MIN_IO_DEPTH = 3
IT_MAX_FREE_DEFAULT = 0.5


def _env_float(cfg: DeploymentConfig, name: str) -> float | None:
    raw = (cfg.env.get(name) or "").strip()
    try:
        return float(raw) if raw else None
    except ValueError:
        return None


def _env_int(cfg: DeploymentConfig, name: str) -> int | None:
    raw = (cfg.env.get(name) or "").strip()
    return int(raw) if raw.isdigit() else None


def ballast_bytes(cfg: DeploymentConfig) -> tuple[int, str] | None:
    """The R7 preparation pool, or None when the configuration does not prepare three-tier experts."""
    tiers = cfg.expert_bits_effective
    if not r7.applies(cfg) or tiers is None:
        return None
    g = cfg.model.geometry
    inter = g.moe_intermediate_size // cfg.parallel.tp
    bits = min(tiers)
    plane = g.hidden_size * inter * bits // 8
    n = BALLAST_PLANES * plane
    return n, (
        f"{BALLAST_PLANES} planes x (hidden {g.hidden_size} x {inter} intermediate rows per rank "
        f"x {bits} bits / 8 = {fmt_int(plane)} B) = {fmt_int(n)}"
    )


def instanttensor_bytes(cfg: DeploymentConfig, free: int) -> tuple[int, str] | None:
    if (cfg.model.load_format or "").lower() != "instanttensor":
        return None
    tp = cfg.parallel.tp
    share = _env_float(cfg, "INSTANTTENSOR_MAX_FREE_MEM_USAGE")
    share = IT_MAX_FREE_DEFAULT if share is None else share
    chunk = _env_int(cfg, "INSTANTTENSOR_CHUNK_SIZE") or IT_CHUNK
    conc = _env_int(cfg, "INSTANTTENSOR_CONCURRENCY") or IT_CONCURRENCY
    depth = _env_int(cfg, "INSTANTTENSOR_IO_DEPTH") or max(IT_IO_DEPTH // tp, IT_MIN_IO_DEPTH)
    avail = int(free * share)
    if chunk * conc * depth * tp > avail:
        depth = max(avail // (chunk * conc * tp), IT_MIN_IO_DEPTH)
    staging = chunk * conc * depth * tp
    buffer = _env_int(cfg, "INSTANTTENSOR_BUFFER_SIZE")
    buf_text = "INSTANTTENSOR_BUFFER_SIZE"
    if buffer is None:
        # unset: InstantTensor sizes it from the tensor sizes (at least the I/O staging)
        buffer, buf_text = staging, "INSTANTTENSOR_BUFFER_SIZE unset: the I/O staging's size (an estimate)"
    n = buffer + staging
    return n, (
        f"tensor buffer {fmt_int(buffer)} ({buf_text}) + I/O staging chunk {fmt_int(chunk)} x concurrency "
        f"{conc} x io_depth {depth} x TP {tp} = {fmt_int(staging)} (io_depth capped by "
        f"INSTANTTENSOR_MAX_FREE_MEM_USAGE {share:g} x free {fmt_int(free)} = {fmt_int(avail)}) = "
        f"{fmt_int(n)}"
    )


def k6_staging_bytes(cfg: DeploymentConfig) -> tuple[int, str] | None:
    """One layer's online-K6 eligible BF16 projections per rank, with their K6 encoding (6/16 of BF16)."""
    if cfg.model.online_quant != "exl3-b6" or not cfg.is_exl3:
        return None
    g = cfg.model.geometry
    tp = cfg.parallel.tp
    heads = g.num_attention_heads
    attn = (
        g.q_lora_rank * heads * (g.qk_nope_head_dim + g.qk_rope_head_dim)
        + g.kv_lora_rank * heads * (g.qk_nope_head_dim + g.v_head_dim)
        + heads * g.v_head_dim * g.hidden_size
    ) // tp
    shared = 3 * g.hidden_size * g.moe_intermediate_size // tp
    bf16 = 2 * (attn + shared)
    n = bf16 + bf16 * 6 // 16
    return n, (
        f"one MoE layer's attention q_b/kv_b/o ({fmt_int(attn)}) and shared-expert ({fmt_int(shared)}) "
        f"parameters per rank x 2 B = {fmt_int(bf16)}, + their K6 encoding x 6/16 = {fmt_int(n)}"
    )


def _entry(name: str, n: int, formula: str, origin: str, reader: str, note: str = "") -> Entry:
    return Entry(
        name=name,
        subsystem="load",
        requested_bytes=n,
        count=1,
        device_bytes=n,
        kind="torch",
        lifetime="load-time",
        condition="model loading (freed before vLLM profiles)",
        reader=reader,
        formula=formula,
        origin=origin,  # type: ignore[arg-type]
        note=note,
    )


def load_peak(cfg: DeploymentConfig, weights: Entry, free: int) -> LoadPeak | None:
    """The load-time peak over ``free`` (F0 as the plan sees it), or None when loading holds nothing
    beside the weights that this model charges (see the module docstring)."""
    ballast = ballast_bytes(cfg)
    ring = instanttensor_bytes(cfg, free)
    if ballast is None and ring is None:
        return None
    entries = [weights._replace(lifetime="load-time", condition="the weights as loaded (W)")]
    if ballast is not None:
        entries.append(
            _entry(
                "load.r7_ballast",
                *ballast,
                "exact",
                "vLLM EXL3 R7 loader (prepare_weights' FC1/FC2 placeholder pool)",
                "freed by release_r7_ballast() after every layer is bound (ii r16+; inline on r34)",
            )
        )
    if ring is not None:
        entries.append(
            _entry(
                "load.instanttensor_ring",
                *ring,
                "estimate",
                "InstantTensor loader (model.load_format instanttensor)",
                "chunk, concurrency and io_depth are InstantTensor's defaults unless "
                "INSTANTTENSOR_CHUNK_SIZE, "
                "_CONCURRENCY or _IO_DEPTH are passed; closed when loading ends",
            )
        )
    staging = k6_staging_bytes(cfg)
    if staging is not None:
        entries.append(
            _entry(
                "load.k6_staging",
                *staging,
                "estimate",
                "the online K6 encoder (model.online_quant exl3-b6)",
                "an estimate: the exllamav3 encoder's own scratch is not read; a warm start reuses the "
                "cached encodings (VLLM_EXL3_ONLINE_CACHE_DIR) and stages less",
            )
        )
    return LoadPeak(entries=tuple(entries), free=free)
