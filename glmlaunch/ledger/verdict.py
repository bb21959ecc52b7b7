"""The one memory verdict: its status, what blocks it, and how well the figures behind it are known.

:mod:`.budget` computes vLLM's numbers and decisions (start gate, KV size, margin, one request's fit).
This module turns one budget into the verdict every command prints, ``plan``, ``check`` (the
``memory_verdict`` row), ``serve`` (its plan stage) and ``calibrate search``, in text and JSON, so they
cannot disagree on the same figures:

* **status**: the budget's (``ok``, ``below-margin``, ``runtime-oom``, ``oom-risk``, ``refused``), or
  ``caution``: ``ok`` at the figures, but no boot covered the shape and a margin fails at the band's
  pessimistic edge (:mod:`.band`); ``ok`` stays true, ``--strict`` exits 7;
  ``runtime-oom``: vLLM boots, then the promised load (one max_model_len prefill beside max_num_seqs - 1
  decodes) needs more than the memory left after startup (the runtime demand, :mod:`.demand`);
* **blockers**: every constraint that fails, in vLLM's order (start gate, no KV memory, one
  ``max_model_len`` request, the margin), each with its own message: a message names the constraint that
  really fails, never "the margin" when the request fit is what stops it; one declared check per
  :data:`BlockerId` in :data:`BLOCKERS`, as :mod:`glmlaunch.config.rules` declares validation;
* **confidence**: ``confirmed`` when every term that decides the verdict comes from calibration records
  (the term model fitted on boot logs of this rig shape), the profile or an exact formula;
  ``rig-defaults`` when one rests on the rig defaults (fitted on the shipped field logs, not on a boot
  of this configuration); ``estimate`` when one is a built-in default or an estimate. The terms that
  decide: the start gate rests on U_pre; the margin on U_pre (a GMU-sized KV cache absorbs W, P, N and
  G_e), on every term when the KV size is pinned; the request fit on W, P, N, G_e and the KV bytes per
  token. X is itemized by the ledger's formulas and no boot log states it, so it never lowers confidence.

It lives beside the budget (not in ``plan``) because ``hardware`` and ``calibrate`` sit below ``plan`` in
the pipeline and print the same verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import format_size
from glmlaunch.ledger.budget import Budget
from glmlaunch.ledger.inputs import LedgerInputs
from glmlaunch.ledger.model import Ledger

Confidence = Literal["confirmed", "rig-defaults", "estimate"]
#: Where one budget term's figure comes from.
Source = Literal["record", "exact", "profile", "rig-defaults", "estimate", "default"]
BlockerId = Literal["load", "start-gate", "no-kv", "request-fit", "oom-risk", "runtime", "margin"]

TERMS: tuple[str, ...] = ("U_pre", "W", "P", "N", "G_e", "KV bytes/token")
CONFIRMED_SOURCES: frozenset[str] = frozenset({"record", "exact", "profile"})
_ESTIMATED_SOURCES: frozenset[str] = frozenset({"estimate", "default"})
_MODELLED = (("u_pre", "U_pre"), ("p", "P"), ("n", "N"), ("g_e", "G_e"))
_KV_RECORD_SOURCE: dict[str, Source] = {"exact": "exact", "library": "exact", "calibrated": "record"}
#: How each source is said in a sentence: (singular, plural).
_SAID: dict[str, tuple[str, str]] = {
    "estimate": ("is an estimate", "are estimates"),
    "default": ("is a built-in default", "are built-in defaults"),
    "rig-defaults": ("comes from the rig defaults", "come from the rig defaults"),
}
CONFIRM_HINT = "ingest a vLLM boot log of this configuration to confirm: glmlaunch calibrate ingest LOG"


@dataclass(frozen=True)
class Blocker:
    """One constraint that stops the launch, with the terms it rests on."""

    id: BlockerId
    message: str  # starts with the constraint's name: "the margin: …"
    terms: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "message": self.message, "terms": list(self.terms)}


@dataclass(frozen=True)
class Verdict:
    """The verdict of one budget; build it with :func:`judge`."""

    status: str
    budget: Budget
    max_model_len: int
    blockers: tuple[Blocker, ...]
    sources: tuple[tuple[str, Source], ...]  # (term, source) for every term of TERMS
    deciding: tuple[str, ...]  # the terms the status rests on

    @property
    def ok(self) -> bool:
        """The launch is not blocked (``ok``, or a ``caution`` that holds at the figures)."""
        return self.status in ("ok", "caution")

    @property
    def caution(self) -> bool:
        return self.status == "caution"

    @property
    def blocker(self) -> Blocker | None:
        return self.blockers[0] if self.blockers else None

    @property
    def unconfirmed(self) -> tuple[str, ...]:
        """The deciding terms that do not come from records, the profile or an exact formula."""
        src = dict(self.sources)
        return tuple(t for t in self.deciding if src[t] not in CONFIRMED_SOURCES)

    @property
    def confidence(self) -> Confidence:
        src = dict(self.sources)
        kinds = {src[t] for t in self.deciding}
        if kinds & _ESTIMATED_SOURCES:
            return "estimate"
        if "rig-defaults" in kinds:
            return "rig-defaults"
        return "confirmed"

    def confidence_text(self) -> str:
        """``estimate (W is an estimate; U_pre, P, N and G_e come from the rig defaults)``."""
        if self.confidence == "confirmed":
            return (
                f"confirmed (every term it rests on, {_join(self.deciding)}, comes from calibration records, "
                "the profile or an exact formula)"
            )
        return f"{self.confidence} ({self.sources_text(self.unconfirmed)})"

    def sources_text(self, terms: tuple[str, ...]) -> str:
        """``W is an estimate; P and N come from the rig defaults`` for the unconfirmed of ``terms``."""
        src = dict(self.sources)
        parts = []
        for kind in ("estimate", "default", "rig-defaults"):
            picked = [t for t in terms if src[t] == kind]
            if picked:
                one, many = _SAID[kind]
                parts.append(f"{_join(picked)} {one if len(picked) == 1 else many}")
        return "; ".join(parts)

    def request_fit_terms(self) -> tuple[str, ...]:
        """The terms one request's fit rests on (the KV record alone when the KV size is pinned)."""
        return ("KV bytes/token",) if self.budget.kv_pinned else ("W", "P", "N", "G_e", "KV bytes/token")

    def confidence_line(self) -> str:
        """``confidence: …``, with how to confirm it when it is not confirmed yet, and the band."""
        hint = "" if self.confidence == "confirmed" else f"; {CONFIRM_HINT}"
        return f"confidence: {self.confidence_text()}{hint}; {self.band_text()}"

    def band_text(self) -> str:
        """Which terms make the band wide and which one boot would narrow it."""
        b = self.budget
        band = b.band
        lo, hi = b.kv_tokens_range
        head = f"band: KV {lo:,}..{hi:,} tokens"
        if band.covered:
            text = f"{head}, covered by {', '.join(band.covered_by[:3])} (a boot of this release and shape)"
            thin = [
                f"{what} {format_size(low)}"
                for what, low, floor in (
                    ("the margin", b.margin_range[0], b.min_margin),
                    ("the runtime margin", b.runtime_margin_range[0], b.min_runtime_margin),
                )
                if low < floor
            ]
            if thin:
                # the boot vouches for the shape; what its record does not state still widens the band
                widening = ", ".join(f"{t.term} +/- {format_size(t.high)} ({t.kind})" for t in band.wide)
                low = " and ".join(thin)
                text += f"; at the low edge {low} (widened by {widening}): the boot's figures decide"
            return text
        wide = [t for t in band.wide if t.kind != "calibrated"]
        if not wide:
            return head
        terms = "; ".join(f"{t.term} +/- {format_size(max(t.low, t.high))} ({t.kind})" for t in wide)
        short = ""
        if lo < self.max_model_len <= b.kv_tokens:
            short = f"; at the low edge one {self.max_model_len:,}-token request may not fit"
        return (
            f"{head}, wide by {terms}{short}; one boot of {band.shape} narrows it "
            "(glmlaunch serve --supervise learns it, or calibrate ingest its log)"
        )

    def runtime_facts(self) -> str:
        """The runtime margin and the transient that decides it: ``runtime margin 16.50 MiB after …``."""
        b = self.budget
        who = f"; deciding: {b.runtime_deciding}" if b.runtime_deciding else ""
        return (
            f"runtime margin {format_size(b.runtime_margin)} after the {b.runtime_phase} demand "
            f"{format_size(b.runtime_demand)}{who}"
        )

    def recommendation(self) -> str:
        """The computed fix: the pool pin and the highest GMU that keep the runtime margin."""
        b = self.budget
        parts = []
        if b.recommended_num_gpu_blocks is not None:
            pin = f"memory.num_gpu_blocks_override={b.recommended_num_gpu_blocks}"
            if b.recommended_context_tokens < self.max_model_len:
                # vLLM refuses a pool smaller than the context: the pin comes with the context it holds
                pin += (
                    f" with scheduler.max_model_len={b.recommended_context_tokens} (the longest request it "
                    f"holds; max_model_len is {self.max_model_len:,})"
                )
            parts.append(pin)
        else:
            parts.append("no pool pin keeps the plan")
        if b.recommended_gpu_memory_utilization is not None:
            holds = b.recommended_gmu_kv_tokens
            short = "" if holds >= self.max_model_len else ", too small for one max_model_len request"
            parts.append(
                f"natural pool up to memory.gpu_memory_utilization={b.recommended_gpu_memory_utilization} "
                f"(holds {holds:,} tokens{short})"
            )
        return "; ".join(parts)

    def facts(self) -> str:
        """Margin, KV and one request's fit: the figures every verdict line shows."""
        b = self.budget
        if b.request_fits:
            fit = "fits"
        elif b.request_fit_confirmed:
            fit = "does not fit"
        else:
            fit = "may not fit (unconfirmed)"
        return (
            f"margin {format_size(b.margin)} (minimum {format_size(b.min_margin)}); "
            f"KV {format_size(b.kv)} holds {b.kv_tokens:,} tokens "
            f"({b.kv_bytes_per_token:,} B/token/rank, {b.kv_bytes_per_token_origin}); "
            f"one {self.max_model_len:,}-token request needs {format_size(b.request_bytes)} per rank: {fit}; "
            + self.runtime_facts()
        )

    def blocked_text(self) -> str:
        """``blocked by the margin: …; and by the request fit: …`` (empty when ok)."""
        if not self.blockers:
            return ""
        first, *rest = self.blockers
        return "blocked by " + first.message + "".join(f"; and by {b.message}" for b in rest)

    def summary(self) -> str:
        """One line: status, the blocker (or the figures when ok), the confidence."""
        head = self.blocked_text() if self.blockers else self.facts()
        if self.caution:
            head = "; ".join(self.budget.band_cautions) + "; " + head
        return f"{self.status}: {head}; confidence {self.confidence_text()}"

    def to_json(self) -> dict[str, Any]:
        b = self.budget
        return {
            "status": self.status,
            "ok": self.ok,
            "confidence": self.confidence,
            "blocker": self.blocker.id if self.blocker is not None else None,
            "blockers": [x.to_json() for x in self.blockers],
            "deciding_terms": list(self.deciding),
            "unconfirmed_terms": list(self.unconfirmed),
            "term_sources": dict(self.sources),
            "reasons": list(b.reasons),
            "cautions": list(b.cautions),
            "request_fit_confirmed": b.request_fit_confirmed,
            "runtime": {
                "phase": b.runtime_phase,
                "demand_bytes": b.runtime_demand,
                "margin_bytes": b.runtime_margin,
                "min_margin_bytes": b.min_runtime_margin,
                "deciding": b.runtime_deciding or None,
            },
            "summary": self.summary(),
            "band_cautions": list(b.band_cautions),
            "covered_by": list(b.band.covered_by),
            "band": self.band_text(),
        }


def _join(items: tuple[str, ...] | list[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def term_sources(budget: Budget, inputs: LedgerInputs) -> tuple[tuple[str, Source], ...]:
    """Where U_pre, W, P, N, G_e and the KV bytes per token of ``budget`` come from."""
    fitted: Source = "record" if inputs.origin == "calibrated" else "rig-defaults"
    # Every modelled term is fitted on the same records (calibrate.model: the rig defaults corrected by
    # least squares over every record of this rig shape), so one origin speaks for all of them.
    modelled = {k for k, _ in inputs.term_bytes}
    # a record vouches for a term only where a boot of this release ran this setting (apply.covered_terms);
    # fitted across other settings or releases, the term is an estimate
    covered = inputs.covered_terms
    out: list[tuple[str, Source]] = []
    for key, label in _MODELLED:
        source: Source = fitted if key in modelled else "default"
        if source == "record" and covered is not None and key not in covered:
            source = "estimate"
        out.append((label, source))
    # the weights entry decided W and where it came from (ledger/weights.py); a documented figure of this
    # release is shipped knowledge, as the rig defaults are
    w: Source = {"documented": "rig-defaults"}.get(budget.w_source, budget.w_source)  # type: ignore[assignment]
    out.insert(1, ("W", w))
    kv_origin = budget.kv_bytes_per_token_origin
    kv: Source = _KV_RECORD_SOURCE.get(kv_origin, "default" if kv_origin == "default" else "estimate")
    out.append(("KV bytes/token", kv))
    return tuple(out)


# --- the blockers: one declared check per BlockerId -------------------------------------------------

#: A blocker's check: the :class:`Blocker` it raises over one budget of ``config``, or None where it holds.
BlockerCheck = Callable[[DeploymentConfig, Budget], Blocker | None]


@dataclass(frozen=True)
class BlockerRule:
    id: BlockerId
    summary: str
    check: BlockerCheck


#: Every blocker, in the order a verdict reports them (vLLM's order: loading, the start gate, the KV
#: cache, one request, then what is left after startup).
BLOCKERS: list[BlockerRule] = []


def blocker(id: BlockerId, summary: str) -> Callable[[BlockerCheck], BlockerCheck]:
    def register(fn: BlockerCheck) -> BlockerCheck:
        BLOCKERS.append(BlockerRule(id, summary, fn))
        return fn

    return register


def blockers(config: DeploymentConfig, budget: Budget) -> tuple[Blocker, ...]:
    """Every constraint ``budget`` fails, in :data:`BLOCKERS`' order."""
    found = (r.check(config, budget) for r in BLOCKERS)
    return tuple(x for x in found if x is not None)


def _margin_terms(b: Budget) -> tuple[str, ...]:
    # a pool of fixed size (bytes or blocks) no longer absorbs W, P, N and G_e: the margin rests on all
    fixed = b.kv_pinned or b.kv_blocks_override is not None
    return ("U_pre", "W", "P", "N", "G_e") if fixed else ("U_pre",)


@blocker("load", "the load-time peak exceeds F0")
def _load(config: DeploymentConfig, b: Budget) -> Blocker | None:
    if b.load_margin is None or b.load_margin >= 0:
        return None
    return Blocker(
        "load",
        f"the load: the load-time peak {format_size(b.load_peak)} (W and what loading holds beside "
        f"it) > F0 {format_size(b.f0)}, so loading runs out of memory",
        ("U_pre", "W"),
    )


@blocker("start-gate", "free memory at startup is below GMU x T")
def _start_gate(config: DeploymentConfig, b: Budget) -> Blocker | None:
    if b.start_gate_ok:
        return None
    return Blocker(
        "start-gate",
        f"the start gate: free memory at startup F0 {format_size(b.f0)} < R = GMU x T "
        f"{format_size(b.gate)}, so vLLM refuses to start",
        ("U_pre",),
    )


@blocker("no-kv", "nothing of R is left for the KV cache")
def _no_kv(config: DeploymentConfig, b: Budget) -> Blocker | None:
    rest = b.w + b.p + b.n + b.g_e
    if b.kv_pinned or b.gate - rest > 0:
        return None
    return Blocker(
        "no-kv",
        f"the KV cache: no memory is left for it (R {format_size(b.gate)} <= W + P + N + G_e "
        f"{format_size(rest)})",
        ("W", "P", "N", "G_e"),
    )


@blocker("request-fit", "one max_model_len request does not fit the KV cache")
def _request_fit(config: DeploymentConfig, b: Budget) -> Blocker | None:
    if b.request_fits or not b.request_fit_confirmed:
        return None
    short_pool = b.kv_blocks_override is not None and b.kv < b.request_bytes <= b.kv_natural
    where = (
        f"the pinned pool ({b.kv_blocks_override:,} blocks, memory.num_gpu_blocks_override) is "
        f"{format_size(b.kv)}"
        if short_pool
        else f"the KV cache is {format_size(b.kv_natural)}"
    )
    return Blocker(
        "request-fit",
        f"the request fit: one {config.scheduler.max_model_len:,}-token request needs "
        f"{format_size(b.request_bytes)} of KV per rank, {where}",
        ("KV bytes/token",) if b.kv_pinned else ("W", "P", "N", "G_e", "KV bytes/token"),
    )


@blocker("runtime", "the runtime demand leaves less than memory.min_runtime_margin")
def _runtime(config: DeploymentConfig, b: Budget) -> Blocker | None:
    # a negative margin is the oom-risk blocker's: the runtime margin is not blamed beside it
    if b.margin < 0 or b.runtime_margin >= b.min_runtime_margin:
        return None
    return Blocker(
        "runtime",
        f"the runtime margin: {format_size(b.runtime_margin)} < memory.min_runtime_margin "
        f"{format_size(b.min_runtime_margin)}: after startup {format_size(b.margin)} is free and the "
        f"{b.runtime_phase} phase needs {format_size(b.runtime_demand)}; {b.runtime_deciding} runs "
        "out of memory",
        _margin_terms(b),
    )


@blocker("oom-risk", "the margin is negative")
def _oom_risk(config: DeploymentConfig, b: Budget) -> Blocker | None:
    if b.margin >= 0:
        return None
    return Blocker(
        "oom-risk",
        f"the margin: {format_size(b.margin)} is negative, so unbudgeted allocations "
        f"(X {format_size(b.x)}) can run out of memory",
        _margin_terms(b),
    )


@blocker("margin", "the margin is below memory.min_margin")
def _margin(config: DeploymentConfig, b: Budget) -> Blocker | None:
    # a negative margin is oom-risk, said once
    if b.margin < 0 or b.margin >= b.min_margin:
        return None
    return Blocker(
        "margin",
        f"the margin: {format_size(b.margin)} < memory.min_margin {format_size(b.min_margin)}",
        _margin_terms(b),
    )


def deciding_terms(blockers: tuple[Blocker, ...] | list[Blocker]) -> tuple[str, ...]:
    """The terms a status rests on: a failure's own terms, or, for ``ok``, every constraint's."""
    # `ok` says that every constraint holds: the start gate and the margin (U_pre, and every term when KV
    # is pinned) and the request fit (W, P, N, G_e and the KV record), so it rests on every term.
    wanted = {t for x in blockers for t in x.terms} if blockers else set(TERMS)
    return tuple(t for t in TERMS if t in wanted)


def judge(config: DeploymentConfig, ledger: Ledger, budget: Budget) -> Verdict:
    """The verdict of ``budget``, computed for ``config`` over ``ledger`` (whose inputs say how well each
    term is known)."""
    found = blockers(config, budget)
    return Verdict(
        status="caution" if budget.caution else budget.verdict,
        budget=budget,
        max_model_len=config.scheduler.max_model_len,
        blockers=found,
        sources=term_sources(budget, ledger.inputs),
        deciding=deciding_terms(found),
    )
