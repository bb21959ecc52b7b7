"""vLLM's KV budget and the steady-state margin per GPU rank (docs/memory-model.md §6).

```
F0     = T - U_oth - U_pre          free memory at vLLM's init snapshot
R      = ceil(GMU * T)              start gate: vLLM refuses to start when F0 < R
KV     = R - W - P - N - G_e        (or --kv-cache-memory-bytes when pinned)
margin = F0 - (W + P + N + G_e + KV) - X
```

U_pre, P, N, G_e and X are sums of the ledger's entries by lifetime (P: profiled torch/workspace,
N: profiled ipc/driver), except where a calibration's term model predicts a whole term: then that term
is used as predicted (:func:`glmlaunch.ledger.terms.budget_terms`). The ledger's ``kv_cache`` entry is
sized by the same functions, so the two agree whenever the budget's T is the profile's. The verdict
compares the margin with ``memory.min_margin``; a max_model_len request must fit the KV budget at the
configured KV dtype with DCP sharding; the recommended ``--kv-cache-memory-bytes`` is the KV size that
leaves the minimum margin and the runtime demand (floored to 1 MiB).

The runtime margin is ``margin - D``: D is the runtime demand's peak (:mod:`glmlaunch.ledger.demand`), what
a rank allocates after startup under one max_model_len prefill beside max_num_seqs - 1 decodes. vLLM
boots whatever D is; the first long request then needs it (``runtime-oom`` when the runtime margin is
below ``memory.min_runtime_margin``). The recommended pool pin and GMU keep it (docs/memory-model.md §9).
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger import kv_cache
from glmlaunch.ledger.band import EXACT, Band, band_for
from glmlaunch.ledger.model import Ledger, Origin, Terms
from glmlaunch.ledger.terms import budget_terms, gate_bytes, kv_bytes, terms

MIB = 1024 * 1024

Verdict = Literal["ok", "below-margin", "runtime-oom", "oom-risk", "refused"]


class Budget(NamedTuple):
    """Immutable; a NamedTuple because a calibration search builds thousands of them."""

    total: int  # T
    used_by_others: int  # U_oth
    u_pre: int
    f0: int
    gate: int  # R
    w: int
    p: int
    n: int
    g_e: int
    kv: int
    kv_pinned: bool
    x: int
    margin: int
    min_margin: int
    verdict: Verdict
    reasons: tuple[str, ...]
    start_gate_ok: bool
    kv_bytes_per_token: int  # all layers, one rank
    kv_bytes_per_token_origin: Origin
    kv_tokens: int  # tokens the KV budget holds across the DCP group
    request_bytes: int  # one max_model_len request, per rank
    request_fits: bool
    #: the KV size that keeps the minimum margin and the runtime demand; None when no pool keeps them (the
    #: advice names the obstacle: plan/advice.py), never a pool of 0 bytes
    recommended_kv_cache_memory_bytes: int | None
    # The request check rests on W and KV bytes/token. It decides the verdict when both come from the
    # profile, calibration (records, or the rig defaults fitted on the rig's real boots, estimates
    # included) or a formula; only a built-in default figure (another GPU's, a fallback size) leaves a
    # shortfall as a caution. How well the figures are known is the verdict's confidence, said apart.
    request_fit_confirmed: bool = True
    cautions: tuple[str, ...] = ()
    #: the pool vLLM would size from memory (R - W - P - N - G_e, or --kv-cache-memory-bytes); ``kv`` is the
    #: pool it allocates, which --num-gpu-blocks-override replaces
    kv_natural: int = 0
    kv_blocks_override: int | None = None
    #: where W came from (ledger/weights.py): profile, record, rig-defaults, documented, estimate, default
    w_source: str = "default"
    #: the runtime demand's peak phase sum (ledger/demand), and the margin it leaves: margin - demand
    runtime_demand: int = 0
    runtime_phase: str = "long-prefill"
    runtime_margin: int = 0
    min_runtime_margin: int = 0
    #: the transient that runs out of memory first (or the largest of the peak phase when all fit)
    runtime_deciding: str = ""
    #: the fix, computed (docs/memory-model.md §9): the smallest pool that holds one max_model_len request
    #: when it keeps the runtime margin, else the largest pool that does (its context in
    #: recommended_context_tokens); None when no pool keeps it
    recommended_num_gpu_blocks: int | None = None
    recommended_context_tokens: int = 0
    #: the highest GMU whose natural pool keeps both margins (None when none does), and the tokens that
    #: pool holds (it may be less than one max_model_len request: then only a pin fixes the deployment)
    recommended_gpu_memory_utilization: float | None = None
    recommended_gmu_kv_tokens: int = 0
    #: the load-time peak (ledger/loadtime.py: W and what loading holds beside it) and F0 minus it; None
    #: where loading holds nothing beside the weights that the ledger charges
    load_peak: int = 0
    load_margin: int | None = None
    #: the band (ledger/band.py): each figure at the pessimistic and the optimistic edge of its terms'
    #: uncertainty, as (low, high); low <= the figure <= high
    band: Band = EXACT
    kv_tokens_range: tuple[int, int] = (0, 0)
    margin_range: tuple[int, int] = (0, 0)
    runtime_margin_range: tuple[int, int] = (0, 0)
    #: why an `ok` is a caution: no boot covered the shape and a margin fails at the band's low edge
    band_cautions: tuple[str, ...] = ()
    #: recommendations dropped because, planned, they do not keep the plan (the plan stage plans them):
    #: each says what it was and what blocks it
    dropped_advice: tuple[str, ...] = ()

    @property
    def caution(self) -> bool:
        """`ok` at the figures, but not at the band's pessimistic edge on a shape no boot covered."""
        return self.verdict == "ok" and bool(self.band_cautions)

    @property
    def terms(self) -> dict[str, int]:
        return {
            "T": self.total,
            "U_oth": self.used_by_others,
            "U_pre": self.u_pre,
            "F0": self.f0,
            "R": self.gate,
            "W": self.w,
            "P": self.p,
            "N": self.n,
            "G_e": self.g_e,
            "KV": self.kv,
            "X": self.x,
            "margin": self.margin,
        }


def compute_budget(
    config: DeploymentConfig,
    ledger: Ledger,
    *,
    total_bytes: int | None = None,
    used_by_others: int = 0,
) -> Budget:
    """vLLM's budget over ``ledger`` (built for ``config``, with the inputs it carries), on a device of
    ``total_bytes`` (default ``hardware.memory_per_gpu``) of which others hold ``used_by_others``."""
    total = config.hardware.memory_per_gpu if total_bytes is None else total_bytes
    inputs = ledger.inputs
    # the terms the ledger sized its KV entry with; a ledger built by hand sums its entries here
    t: Terms = ledger.base_terms or budget_terms(
        terms(e for e in ledger.rank0.entries if e.subsystem != "kv_cache"), inputs
    )
    f0 = total - used_by_others - t.u_pre
    gate = gate_bytes(config.memory.gpu_memory_utilization, total)
    pinned = config.memory.kv_cache_memory_bytes
    budgeted_rest = t.w + t.p + t.n + t.g_e
    geo = kv_cache.geometry(config)
    per_token = geo.bytes_per_token
    origin: Origin = geo.origin
    cal = inputs.kv_bytes_per_token
    if cal is not None:
        per_token, origin = cal, "calibrated"
    natural = kv_bytes(gate, t, pinned)
    kv = kv_cache.pool_bytes(config, per_token, natural)
    margin = f0 - budgeted_rest - kv - t.x

    need = kv_cache.request_bytes(config, per_token)
    tokens = kv_cache.tokens_for(kv, per_token, config.parallel.dcp)
    # vLLM checks one request against the memory it measured; a pinned pool must hold it too (upstream's
    # pool-smaller-than-context rule: blocks x 64 x DCP >= max_model_len)
    fits = natural >= need and kv >= need
    demand = ledger.runtime
    runtime_peak = demand.peak_bytes
    runtime_margin = margin - runtime_peak
    min_rt = config.memory.min_runtime_margin
    deciding = demand.deciding(margin)
    keep = max(runtime_peak + min_rt, config.memory.min_margin)
    from glmlaunch.ledger.weights import decide_for

    w_figure = decide_for(config, inputs)
    w_source = w_figure.source
    w_low, w_high = w_figure.range
    band = band_for(
        config,
        w_source=w_source,
        # an unknown checkpoint's W carries how its figure was obtained; a known one's is in the band already
        w_range=None if w_figure.warning is None else (w_figure.value - w_low, w_high - w_figure.value),
        rig=inputs.calibrated and inputs.origin in ("calibrated", "rig-default"),
        records=inputs.covering_records,
    )
    kv_rng, margin_rng, rt_rng = _ranges(config, band, t, gate, f0, per_token, pinned, runtime_peak)
    # W from the profile, a boot, the documented table or an estimate built on them is good to decide with;
    # so is a formula's KV record size. A search that treated estimates as unknowable would grow
    # max_num_batched_tokens until the KV cache held a few MiB. Only the built-in fallback W is not.
    w_known = w_source != "default"
    confirmed = (pinned is not None or w_known) and origin != "default"

    reasons: list[str] = []
    load = ledger.load_time
    load_margin = None if load is None else f0 - load.peak_bytes
    if load_margin is not None and load_margin < 0:
        reasons.append(
            f"load: the load-time peak {load.peak_bytes:,} B (W and what loading holds beside it) > F0 "  # type: ignore[union-attr]
            f"{f0:,} B: loading runs out of memory before vLLM profiles"
        )
    start_ok = f0 >= gate
    if not start_ok:
        reasons.append(
            f"start gate: free memory at startup F0 {f0:,} B < R = GMU * T {gate:,} B: vLLM refuses"
        )
    if pinned is None and gate - budgeted_rest <= 0:
        reasons.append("no memory is left for the KV cache (R <= W + P + N + G_e)")
    cautions: list[str] = []
    if not fits:
        short = natural if natural < need else kv
        what = "the budget" if short == natural else "the pinned pool (memory.num_gpu_blocks_override)"
        shortfall = (
            f"one {config.scheduler.max_model_len:,}-token request needs {need:,} B of KV per rank "
            f"({per_token:,} B/token, DCP {config.parallel.dcp}) but {what} is {short:,} B"
        )
        if confirmed:
            reasons.append(shortfall)
        else:
            unknown = [] if (pinned is not None or w_known) else [f"W {t.w:,} B is a default"]
            if origin not in ("exact", "library", "calibrated"):
                unknown.append(
                    f"{per_token:,} B/token is an {origin}"
                    if origin == "estimate"
                    else f"{per_token:,} B/token is a {origin}"
                )
            cautions.append(
                f"unconfirmed: {shortfall}; vLLM would refuse it after loading the weights, but "
                + " and ".join(unknown)
                + ": calibrate from a boot log (glmlaunch calibrate ingest) or set model.weights_per_rank"
            )
    verdict: Verdict
    if reasons:
        verdict = "refused"
    elif margin < 0:
        verdict = "oom-risk"
        reasons.append(
            f"steady-state margin {margin:,} B is negative: unbudgeted allocations ({t.x:,} B) can OOM"
        )
    elif runtime_margin < min_rt:
        verdict = "runtime-oom"
        what = deciding.name if deciding is not None else "the runtime demand"
        reasons.append(
            f"runtime margin {runtime_margin:,} B < memory.min_runtime_margin {min_rt:,} B: the "
            f"{demand.peak_phase} phase needs {runtime_peak:,} B after startup and {what} runs out"
        )
    elif margin < config.memory.min_margin:
        verdict = "below-margin"
        reasons.append(
            f"steady-state margin {margin:,} B is below memory.min_margin {config.memory.min_margin:,} B"
        )
    else:
        verdict = "ok"
    band_cautions: list[str] = []
    if verdict == "ok" and not band.covered:
        wide = ", ".join(x.term for x in band.wide) or "none"
        if margin_rng[0] < config.memory.min_margin:
            band_cautions.append(
                f"the margin is {margin:,} B at the figures but {margin_rng[0]:,} B at the band's low edge "
                f"(< memory.min_margin {config.memory.min_margin:,} B); widened by {wide}"
            )
        if rt_rng[0] < min_rt:
            band_cautions.append(
                f"the runtime margin is {runtime_margin:,} B at the figures but {rt_rng[0]:,} B at the "
                f"band's low edge (< memory.min_runtime_margin {min_rt:,} B); widened by {wide}"
            )
    # The recommendations keep both margins at the band's low edge where no boot covered the shape: U_pre at
    # its largest, and (a pool of fixed size no longer absorbing them) W + P + N + G_e at theirs.
    # On a covered shape the figures are calibrated by a boot of it: the band shows what its precision leaves
    # and decides nothing (as the verdict).
    u_hi, over_hi = (0, 0) if band.covered else (band.term("U_pre").high, band_over(band)[1])
    f0_low = f0 - u_hi
    fixed_low = f0_low - budgeted_rest - over_hi - t.x
    natural_tokens = kv_cache.tokens_for(natural, per_token, config.parallel.dcp)
    needed = runtime_peak + min_rt
    blocks_rec, context_rec = _recommend_blocks(config, per_token, fixed_low, needed, natural_tokens)
    gmu_rec = _recommend_gmu(f0_low, t.x, total, keep, budgeted_rest + over_hi, kv_cache.KV_BLOCK * per_token)
    # the KV size that leaves both the minimum margin and the runtime demand (floored to 1 MiB)
    recommended = (fixed_low - keep) // MIB * MIB
    return Budget(
        total=total,
        used_by_others=used_by_others,
        u_pre=t.u_pre,
        f0=f0,
        gate=gate,
        w=t.w,
        p=t.p,
        n=t.n,
        g_e=t.g_e,
        kv=kv,
        kv_pinned=pinned is not None,
        x=t.x,
        margin=margin,
        min_margin=config.memory.min_margin,
        verdict=verdict,
        reasons=tuple(reasons),
        start_gate_ok=start_ok,
        kv_bytes_per_token=per_token,
        kv_bytes_per_token_origin=origin,
        kv_tokens=tokens,
        request_bytes=need,
        request_fits=fits,
        recommended_kv_cache_memory_bytes=recommended if recommended > 0 else None,
        request_fit_confirmed=confirmed,
        cautions=tuple(cautions),
        kv_natural=natural,
        kv_blocks_override=config.memory.num_gpu_blocks_override,
        w_source=w_source,
        runtime_demand=runtime_peak,
        runtime_phase=demand.peak_phase,
        runtime_margin=runtime_margin,
        min_runtime_margin=min_rt,
        runtime_deciding=deciding.name if deciding is not None else "",
        recommended_num_gpu_blocks=blocks_rec,
        recommended_context_tokens=context_rec,
        recommended_gpu_memory_utilization=gmu_rec,
        recommended_gmu_kv_tokens=0
        if gmu_rec is None
        else kv_cache.tokens_for(
            kv_bytes(gate_bytes(gmu_rec, total), t, None), per_token, config.parallel.dcp
        ),
        load_peak=0 if load is None else load.peak_bytes,
        load_margin=load_margin,
        band=band,
        kv_tokens_range=kv_rng,
        margin_range=margin_rng,
        runtime_margin_range=rt_rng,
        band_cautions=tuple(band_cautions),
    )


def band_over(band: Band) -> tuple[int, int]:
    """How far W + P + N + G_e may be below and above the figures."""
    w, o = band.term("W"), band.term("P+N+G_e")
    return w.low + o.low, w.high + o.high


def _ranges(
    config: DeploymentConfig,
    band: Band,
    t: Terms,
    gate: int,
    f0: int,
    per_token: int,
    pinned: int | None,
    runtime_peak: int,
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """(KV tokens, margin, runtime margin) at the band's pessimistic and optimistic edges.

    Larger W, P, N, G_e leave a smaller natural pool (and, with a pool of fixed size, a smaller margin);
    a larger U_pre leaves less free memory at startup. A natural pool absorbs the first, so its margin
    moves with U_pre alone."""
    below, above = band_over(band)
    u = band.term("U_pre")
    rest = t.w + t.p + t.n + t.g_e
    dcp = config.parallel.dcp

    def edge(over: int, u_pre_delta: int) -> tuple[int, int]:
        terms_at = rest + over
        # A natural pool absorbs the terms' band, also past an empty pool (the KV range says vLLM refuses
        # there; the margin is what the gate leaves). Where the figures themselves leave no pool, the point
        # has none (terms.kv_bytes) and neither edge has one: the margin is what W + P + N + G_e leave, so
        # the edges bracket the point.
        natural = gate - terms_at
        if pinned is not None:
            natural = pinned
        elif gate - rest <= 0:
            natural = max(0, natural)
        kv = kv_cache.pool_bytes(config, per_token, natural)
        margin = f0 - u_pre_delta - terms_at - kv - t.x
        return kv_cache.tokens_for(max(0, kv), per_token, dcp), margin

    tok_lo, margin_lo = edge(above, u.high)
    tok_hi, margin_hi = edge(-below, -u.low)
    return (tok_lo, tok_hi), (margin_lo, margin_hi), (margin_lo - runtime_peak, margin_hi - runtime_peak)


def _recommend_blocks(
    config: DeploymentConfig, per_token: int, free_without_pool: int, needed_after: int, natural_tokens: int
) -> tuple[int | None, int]:
    """(blocks, context): the smallest pool holding one max_model_len request if it leaves
    ``needed_after`` bytes free, else the largest pool that does and the context it holds.

    vLLM checks one request against the pool it sized from memory (``natural_tokens``) before a pin replaces
    it, and refuses a pin smaller than the context: so where the natural pool holds less than the context a
    pin would, the context is the natural pool's and the pin the smallest that holds it (a pin with a
    context vLLM accepts, never one it refuses)."""
    dcp = config.parallel.dcp
    block_bytes = kv_cache.KV_BLOCK * per_token
    if block_bytes <= 0:
        return None, 0
    per_block = kv_cache.KV_BLOCK * dcp
    longest = config.scheduler.max_model_len
    need_blocks = -(-longest // per_block)
    if free_without_pool - need_blocks * block_bytes >= needed_after and natural_tokens >= longest:
        return need_blocks, longest
    blocks = (free_without_pool - needed_after) // block_bytes
    if blocks <= 0 or natural_tokens <= 0:
        return None, 0
    context = min(int(blocks) * per_block, natural_tokens, longest)
    return -(-context // per_block), context


def _recommend_gmu(
    f0: int, x: int, total: int, needed_after: int, fixed: int, least_pool: int
) -> float | None:
    """The highest GMU (3 decimals) whose natural pool leaves ``needed_after`` bytes: F0 - ceil(GMU*T) - X;
    None unless that pool, ``ceil(GMU*T) - fixed`` (W + P + N + G_e), holds one block (``least_pool``): a
    GMU whose pool is empty is a refusal, not advice."""
    gmu = math.floor((f0 - x - needed_after) / total * 1000) / 1000
    while gmu > 0 and f0 - gate_bytes(gmu, total) - x < needed_after:
        gmu = round(gmu - 0.001, 3)
    if gmu <= 0 or gate_bytes(gmu, total) - fixed < max(least_pool, 1):
        return None
    return gmu
