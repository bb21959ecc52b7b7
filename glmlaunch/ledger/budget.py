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
leaves exactly the minimum margin (floored to 1 MiB).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger import kv_cache
from glmlaunch.ledger.model import Ledger, Origin, Terms
from glmlaunch.ledger.terms import budget_terms, gate_bytes, kv_bytes, modelled_terms, terms

MIB = 1024 * 1024

Verdict = Literal["ok", "below-margin", "oom-risk", "refused"]


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
    recommended_kv_cache_memory_bytes: int
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


_MEMO: dict[tuple[object, ...], tuple[Ledger, Budget]] = {}


def compute_budget(
    config: DeploymentConfig,
    ledger: Ledger,
    *,
    total_bytes: int | None = None,
    used_by_others: int = 0,
    calibration: object | None = None,
) -> Budget:
    total = config.hardware.memory_per_gpu if total_bytes is None else total_bytes
    m, s = config.memory, config.scheduler
    # A calibration search asks for the same (ledger, totals) many times; the ledger object is memoized,
    # so its identity (kept alive by the memo) stands for its contents.
    key = (
        id(ledger),
        total,
        used_by_others,
        _calibrated_per_token(calibration),
        tuple(sorted(modelled_terms(calibration).items())),
        m.gpu_memory_utilization,
        m.kv_cache_memory_bytes,
        m.num_gpu_blocks_override,
        m.min_margin,
        m.kv_cache_dtype,
        config.parallel.dcp,
        s.max_model_len,
        config.mtp,
        config.model.geometry,
    )
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is ledger:
        return hit[1]
    budget = _compute(config, ledger, total, used_by_others, calibration)
    if len(_MEMO) >= 20_000:
        _MEMO.clear()
    _MEMO[key] = (ledger, budget)
    return budget


def _compute(
    config: DeploymentConfig, ledger: Ledger, total: int, used_by_others: int, calibration: object | None
) -> Budget:
    # The ledger's terms already carry its calibration's whole terms; applying the same function again
    # is a no-op for that calibration and still honours one given only here (a hand-built ledger).
    base = ledger.base_terms or terms(e for e in ledger.rank0.entries if e.subsystem != "kv_cache")
    t: Terms = budget_terms(base, calibration)
    f0 = total - used_by_others - t.u_pre
    gate = gate_bytes(config.memory.gpu_memory_utilization, total)
    pinned = config.memory.kv_cache_memory_bytes
    budgeted_rest = t.w + t.p + t.n + t.g_e
    geo = kv_cache.geometry(config)
    per_token = geo.bytes_per_token
    origin: Origin = geo.origin
    cal = _calibrated_per_token(calibration)
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
    from glmlaunch.ledger.weights import decide_for

    w_source = decide_for(config, calibration).source
    # W from the profile, a boot, the documented table or an estimate built on them is good to decide with;
    # so is a formula's KV record size. A search that treated estimates as unknowable would grow
    # max_num_batched_tokens until the KV cache held a few MiB. Only the built-in fallback W is not.
    w_known = w_source != "default"
    confirmed = (pinned is not None or w_known) and origin != "default"

    recommended = (f0 - budgeted_rest - t.x - config.memory.min_margin) // MIB * MIB
    reasons: list[str] = []
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
                unknown.append(f"{per_token:,} B/token is an {origin}" if origin == "estimate" else
                               f"{per_token:,} B/token is a {origin}")
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
    elif margin < config.memory.min_margin:
        verdict = "below-margin"
        reasons.append(
            f"steady-state margin {margin:,} B is below memory.min_margin {config.memory.min_margin:,} B"
        )
    else:
        verdict = "ok"
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
        recommended_kv_cache_memory_bytes=max(0, recommended),
        request_fit_confirmed=confirmed,
        cautions=tuple(cautions),
        kv_natural=natural,
        kv_blocks_override=config.memory.num_gpu_blocks_override,
        w_source=w_source,
    )


def _calibrated_per_token(calibration: object | None) -> int | None:
    if calibration is None:
        return None
    value = (
        calibration.get("kv_bytes_per_token")
        if isinstance(calibration, dict)
        else getattr(calibration, "kv_bytes_per_token", None)
    )
    return int(value) if value is not None else None
