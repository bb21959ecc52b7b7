"""The band: how far each budget term may be from its figure, and so the range of KV tokens and margins.

Every term's uncertainty comes from how the figure was obtained (docs/memory-model.md §11):

* **exact**: from code (a formula, the profile's explicit figure): no width;
* **calibrated**: a boot of this release and shape is on record (``covered``): the residual the shipped
  fit leaves on that boot (``band_facts.json``), or, for the operator's own ingested boot, the precision
  vLLM prints its terms with;
* **transferred**: fitted on boots of other shapes of this release, or of other releases: the largest
  error that transfer made on the leave-one-shape-out / leave-one-release-out of every allowed boot
  (``scripts/derive_band.py`` measures it and writes ``band_facts.json`` with its provenance);
* **estimated**: nothing measured the transfer (another GPU, a term no allowed boot states at this
  shape): the largest error of the nearest measured kind, said so.

A shape is *covered* when a boot or documented capacity of the same release with the same TP, DCP, MTP,
KV dtype, online quantization, batched tokens and capture sizes is on record (:func:`shape_key`): the
release names its generation (the stack it composes). The band is on W, on the profiled overhead
``P + N + G_e`` (a documented capacity states their sum only: R - W - KV) and on U_pre; the runtime demand
and X are the ledger's formulas (exact). Pure data and arithmetic: the facts are package data, read once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

from glmlaunch.config.schema import DeploymentConfig

FACTS_FILE = "band_facts.json"
MIB = 1024 * 1024
#: vLLM prints its budget terms in GiB with two decimals ("Model loading took 83.28 GiB"): a figure read
#: from a log is known to half of 0.01 GiB
LOG_HALF_STEP = round(0.005 * 1024**3)

BandKind = Literal["exact", "calibrated", "transferred", "estimated"]
#: the rows of a band, in the order they are said
BAND_TERMS = ("W", "P+N+G_e", "U_pre")


@dataclass(frozen=True)
class TermBand:
    """How far one term may be below (``low``) or above (``high``) its figure, in bytes (both >= 0)."""

    term: str  # W, P+N+G_e or U_pre
    low: int
    high: int
    kind: BandKind
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "low_bytes": self.low, "high_bytes": self.high, "why": self.why}


@dataclass(frozen=True)
class Band:
    """The band of one configuration's budget terms."""

    terms: tuple[TermBand, ...]
    #: the boots (documented capacities, shared logs, ingested records) that cover this shape
    covered_by: tuple[str, ...]
    #: the shape a boot would have to run to narrow the band (``shape_text``)
    shape: str

    @property
    def covered(self) -> bool:
        return bool(self.covered_by)

    def term(self, name: str) -> TermBand:
        return next(t for t in self.terms if t.term == name)

    @property
    def wide(self) -> tuple[TermBand, ...]:
        """The terms that widen the band, widest first."""
        return tuple(sorted((t for t in self.terms if t.low or t.high), key=lambda t: -(t.low + t.high)))


#: no band: every term exact (a budget built by hand, a test)
EXACT = Band(terms=tuple(TermBand(t, 0, 0, "exact", "exact") for t in BAND_TERMS), covered_by=(), shape="")


def shape_key(cfg: DeploymentConfig) -> tuple[object, ...]:
    """What a boot must share with a plan to cover it (the issue's coverage rule)."""
    return (
        cfg.release_effective,
        cfg.parallel.tp,
        cfg.parallel.dcp,
        cfg.mtp,
        cfg.memory.kv_cache_dtype,
        cfg.model.online_quant,
        cfg.scheduler.max_num_batched_tokens,
        tuple(cfg.capture_sizes()),
    )


def shape_text(cfg: DeploymentConfig) -> str:
    sizes = cfg.capture_sizes()
    caps = f"{min(sizes)}..{max(sizes)}" if sizes else "none"
    return (
        f"release {cfg.release_effective or 'unnamed'} TP{cfg.parallel.tp} DCP{cfg.parallel.dcp} "
        f"MTP{cfg.mtp} {cfg.memory.kv_cache_dtype} online quant {cfg.model.online_quant} "
        f"{cfg.scheduler.max_num_batched_tokens} batched tokens, capture sizes {caps}"
    )


def key_json(cfg: DeploymentConfig) -> list[Any]:
    """:func:`shape_key` as the facts file stores it."""
    return [*shape_key(cfg)[:-1], list(cfg.capture_sizes())]


@lru_cache(maxsize=1)
def facts() -> dict[str, Any]:
    text = resources.files("glmlaunch.ledger").joinpath(FACTS_FILE).read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def documented_cover(cfg: DeploymentConfig) -> list[dict[str, Any]]:
    """The allowed boots on record (documented capacities, the shared logs) of ``cfg``'s shape."""
    want = key_json(cfg)
    return [b for b in facts()["boots"] if b["shape"] == want]


def _transfer(kind: str) -> dict[str, Any]:
    """One measured transfer: its cases and half-width (none measured: no cases, no width)."""
    t: dict[str, Any] = {"cases": [], "half_width_bytes": 0, "spread_bytes": 0}
    t.update(facts()["transfer"].get(kind, {}))
    return t


def _mib(v: int) -> str:
    return f"{v / MIB:,.0f} MiB"


def _symmetric(term: str, half: int, kind: BandKind, why: str) -> TermBand:
    return TermBand(term, half, half, kind, why)


def overhead_band(
    cfg: DeploymentConfig, *, rig: bool, records: tuple[str, ...], cover: list[dict[str, Any]]
) -> TermBand:
    """P + N + G_e: the covering boots' residual, else the measured error of the transfer."""
    term = "P+N+G_e"
    if records:
        # the term model reproduces an ingested boot of this shape to the precision vLLM logs its terms
        half = 3 * LOG_HALF_STEP
        return _symmetric(
            term,
            half,
            "calibrated",
            f"a boot of this shape is on record ({records[0][:12]}): P, N and "
            f"G_e are read from it to 0.01 GiB each (+/- {_mib(half)})",
        )
    sized = [b for b in cover if b.get("kv_residual_bytes") is not None]
    if sized:
        half = max(abs(int(b["kv_residual_bytes"])) for b in sized) + LOG_HALF_STEP
        names = ", ".join(b["id"] for b in sized)
        return _symmetric(
            term,
            half,
            "calibrated",
            f"calibrated by {names} of this release and shape: the fit's residual there, +/- {_mib(half)}",
        )
    from glmlaunch.config.checkpoints import checkpoint_name

    # a checkpoint with offsets of its own transfers with errors of its own (band_facts.json)
    own = checkpoint_name(cfg.model.path) in facts().get("offset_checkpoints", [])
    prefix = "own_offsets_" if own else ""
    releases = {b["release"] for b in facts()["boots"] if b.get("kv_residual_bytes") is not None}
    if rig and cfg.release_effective in releases:
        t = _transfer(prefix + "shape")
        return _symmetric(
            term,
            int(t["half_width_bytes"]),
            "transferred",
            f"fitted on other shapes of "
            f"{cfg.release_effective}: the largest error of that transfer on the leave-one-shape-out, "
            f"+/- {_mib(int(t['half_width_bytes']))} ({len(t['cases'])} cases)",
        )
    t = _transfer(prefix + "release")
    half = int(t["half_width_bytes"])
    if rig:
        return _symmetric(
            term,
            half,
            "transferred",
            f"no boot of {cfg.release_effective or 'this release'} is on record: "
            f"the largest error of the transfer from other releases on the leave-one-release-out, "
            f"+/- {_mib(half)} ({len(t['cases'])} cases)",
        )
    return _symmetric(
        term,
        half,
        "estimated",
        f"no boot of this GPU is on record (built-in defaults): the largest "
        f"transfer error measured on the rig's boots, +/- {_mib(half)}, unmeasured here",
    )


def u_pre_band(cfg: DeploymentConfig, *, records: tuple[str, ...], rig: bool) -> TermBand:
    """U_pre (T - F0): only the shared logs and ingested boots state it."""
    term = "U_pre"
    if records:
        return _symmetric(
            term,
            LOG_HALF_STEP,
            "calibrated",
            f"read from the boot on record ({records[0][:12]}) to 0.01 GiB (+/- {_mib(LOG_HALF_STEP)})",
        )
    t = _transfer("u_pre")
    same = [c for c in t["cases"] if c["release"] == cfg.release_effective and c["dcp"] == cfg.parallel.dcp]
    if rig and same:
        half = int(t["half_width_bytes"]) + LOG_HALF_STEP
        return _symmetric(
            term,
            half,
            "transferred",
            f"fitted on the logs of {cfg.release_effective} DCP{cfg.parallel.dcp}"
            f" that state T - F0: the largest leave-one-out error, +/- {_mib(half)}",
        )
    # nothing measured T - F0 here: the difference the logs that state it show between two builds and
    # shapes is the only measured variation of it
    half = int(t["spread_bytes"]) + LOG_HALF_STEP
    stated = sorted({f"{c['release'] or 'an unnamed build'} DCP{c['dcp']}" for c in t["cases"]})
    return _symmetric(
        term,
        half,
        "estimated",
        f"no allowed boot states T - F0 at {cfg.release_effective or 'this release'}"
        f" DCP{cfg.parallel.dcp} (only {', '.join(stated)}): their spread across builds, +/- {_mib(half)}, "
        "stands in unmeasured",
    )


def weights_band(
    w_source: str, *, absorbed_by: str | None = None, figure_range: tuple[int, int] | None = None
) -> TermBand:
    """W by where the weights entry took it from (ledger/weights.py); ``figure_range`` is the figure's own
    ``(below, above)`` uncertainty (an unknown checkpoint's payload, storage guessed from its name), which
    widens the band and never narrows it."""
    band = _weights_band(w_source, absorbed_by=absorbed_by)
    if figure_range is None or band.kind == "exact":
        return band
    below, above = figure_range
    if below <= band.low and above <= band.high:
        return band
    return TermBand(
        "W",
        max(band.low, below),
        max(band.high, above),
        "estimated",
        "W of a checkpoint glmlaunch does not know: its payload or bit rate, +/- the spread of how that "
        f"figure was obtained (-{_mib(below)} / +{_mib(above)})",
    )


def _weights_band(w_source: str, *, absorbed_by: str | None = None) -> TermBand:
    if w_source == "profile":
        return TermBand("W", 0, 0, "exact", "model.weights_per_rank, used as given")
    if absorbed_by is not None:
        return TermBand(
            "W", 0, 0, "calibrated", f"in the residual of {absorbed_by} (the same checkpoint at this shape)"
        )
    if w_source in ("record", "rig-defaults", "documented"):
        return _symmetric(
            "W", LOG_HALF_STEP, "calibrated", f"a logged W (to 0.01 GiB, +/- {_mib(LOG_HALF_STEP)})"
        )
    if w_source == "estimate":
        t = _transfer("w_release")
        half = int(t["half_width_bytes"])
        return _symmetric(
            "W",
            half,
            "transferred",
            f"W is an estimate built on another release's or setting's figure: "
            f"one checkpoint's documented W differs across releases and builds by up to {_mib(half)}",
        )
    t = _transfer("w_estimate")
    half = int(t["half_width_bytes"])
    return _symmetric(
        "W",
        half,
        "estimated",
        f"W is a built-in default: a documented W predicted from the nearest other "
        f"documented bit rate is off by up to {_mib(half)}",
    )


def band_for(
    cfg: DeploymentConfig,
    *,
    w_source: str,
    rig: bool,
    records: tuple[str, ...] = (),
    w_range: tuple[int, int] | None = None,
) -> Band:
    """The band of ``cfg``'s terms: ``rig`` says the rig's fitted model applies (its GPU), ``records`` the
    ingested boots of this very shape (``LedgerInputs.covering_records``), ``w_range`` how far W may lie
    below and above its figure as the weights entry obtained it."""
    from glmlaunch.config.checkpoints import checkpoint_name

    cover = documented_cover(cfg) if rig else []
    covered_by = tuple(records) + tuple(b["id"] for b in cover)
    # a covering boot of this checkpoint was planned with the same W: its residual holds W's error too
    own = checkpoint_name(cfg.model.path)
    absorbed = next(
        (b["id"] for b in cover if b.get("kv_residual_bytes") is not None and b.get("checkpoint") == own),
        records[0][:12] if records else None,
    )
    return Band(
        terms=(
            weights_band(w_source, absorbed_by=absorbed, figure_range=w_range),
            overhead_band(cfg, rig=rig, records=records, cover=cover),
            u_pre_band(cfg, records=records, rig=rig),
        ),
        covered_by=covered_by,
        shape=shape_text(cfg),
    )
