"""Term models: what a boot of configuration A says about a plan of configuration B.

A boot log states vLLM's budget terms whole (docs/memory-model.md §6): W, P, N, G_e and T - F0. The ledger
itemizes what it can compute exactly for any configuration (pools, channels, DMA slab, indexer plans, EXL3
arenas, the DCP transient). What is left of each term, the *residual* ``observed - itemized``, is modelled
as a small linear function of the knobs that plausibly move it:

=========  =============================================  ==========================================
term       residual features                              why
=========  =============================================  ==========================================
``u_pre``  1                                              context + NCCL at a fixed world size / DCP
``n``      1                                              NCCL lazies, cuBLAS workspaces
``p``      1, batched tokens / 1024, MTP on               activations of the profile pass (the
                                                          drafter runs its own)
``g_e``    1, MTP on, largest capture size / 8            graph pools of target and drafter passes
=========  =============================================  ==========================================

Fitting: each term's coefficients start at a *prior* (the rig defaults of :mod:`.rigdefaults`, or zero) and
take the minimum-norm least-squares correction that explains the records:
``β = β0 + Xᵀ(XXᵀ + λI)⁻¹(y - Xβ0)``.
One record moves the coefficients only along its own feature vector (it is reproduced exactly); several
records give least squares; a direction no record varies keeps its prior, and the fit says so
(``unidentified``). Every fit keeps the records it came from and its residual on each of them.

Weights are not a residual: ``W`` = the checkpoint's weights + the MTP layer when k > 0, looked up per
checkpoint and vLLM build (two builds of the same checkpoint logged different W), with the MTP layer's size
taken from a pair of boots that differ only in k, and an explicit estimate across checkpoints of another
EXL3 bit rate.

Pure functions; the ledger is imported lazily (the ledger imports :mod:`.terms`, not this module).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from glmlaunch.config.checkpoints import checkpoint_name
from glmlaunch.config.releases import release_of
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import GIB

TERMS: tuple[str, ...] = ("u_pre", "n", "p", "g_e")
TERM_FEATURES: dict[str, tuple[str, ...]] = {
    "u_pre": ("const",),
    "n": ("const",),
    "p": ("const", "tokens", "mtp"),
    "g_e": ("const", "mtp", "capture"),
}
FEATURE_DOC: dict[str, str] = {
    "const": "1",
    "tokens": "max_num_batched_tokens / 1024",
    "mtp": "1 when MTP k > 0",
    "capture": "largest CUDA-graph capture size / 8",
}
TERM_DOC: dict[str, str] = {
    "u_pre": "T - F0 (context, NCCL, eager one-shot channel, DMA slab)",
    "n": "N (non-torch increase during profiling)",
    "p": "P (torch peak of the profile passes)",
    "g_e": "G_e (CUDA-graph estimate)",
    "w": "W (weights per rank)",
}
_RIDGE = 1e-9  # relative: keeps XXᵀ invertible when two records share a feature vector (they are averaged)


def features(cfg: DeploymentConfig) -> dict[str, float]:
    sizes = cfg.capture_sizes()
    return {
        "const": 1.0,
        "tokens": cfg.scheduler.max_num_batched_tokens / 1024,
        "mtp": 1.0 if cfg.mtp > 0 else 0.0,
        "capture": (max(sizes) if sizes else 0) / 8,
    }


def itemized(cfg: DeploymentConfig) -> dict[str, int]:
    """The ledger's exactly itemized part of each term for ``cfg`` (the residual entries left out)."""
    from glmlaunch.ledger import itemize

    return itemize(cfg)


# --- observations --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """What one boot says: its configuration and the terms of its worst rank (bytes; None when unknown).

    ``pn`` is P + N when the boot was refused before the free-memory line (only their sum is known then:
    ``R - W - G_e - KV``).
    """

    label: str  # record id or log name
    source: str  # the log file
    config: DeploymentConfig
    vllm_version: str | None
    checkpoint: str
    w: int | None = None
    u_pre: int | None = None
    p: int | None = None
    n: int | None = None
    g_e: int | None = None
    pn: int | None = None
    kv: int | None = None


def checkpoint_key(cfg: DeploymentConfig) -> str:
    """The checkpoint's identity for W: its directory or hub name (last path part), revision, online
    quantization (it changes what is loaded) and TP."""
    path = (cfg.model.path or "unknown").rstrip("/").rsplit("/", 1)[-1]
    rev = f"@{cfg.model.revision[:12]}" if cfg.model.revision else ""
    quant = f" {cfg.model.online_quant}" if cfg.model.online_quant != "none" else ""
    return f"{path}{rev}{quant} tp{cfg.parallel.tp}"


def build_key(version: str | None, cfg: DeploymentConfig) -> str:
    """A vLLM build's identity for the terms a build changes (N): the version string it reports, the
    kernel-library generation it runs (the tree its constants were read from: ``stack``) and its release on
    its line. The version string alone does not identify a build: a repair build reporting the same string
    (or the bare ``dev`` of a source build) runs other trees and has another N."""
    from glmlaunch.config.releases import parse_release

    rel = parse_release(cfg.release_effective)
    line = f"{rel.line} line {rel.label}" if rel is not None else "no release"
    return f"{version or 'unknown'} | {cfg.stack} | {line}"


# --- fitting ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TermFit:
    term: str
    features: tuple[str, ...]
    coefficients: dict[str, float]  # bytes per unit of each feature
    prior: dict[str, float]
    prior_source: str
    sources: tuple[str, ...]  # labels of the points that moved the fit
    residuals: tuple[tuple[str, int], ...]  # (label, observed - fitted) on each point
    unidentified: tuple[str, ...]  # features no two points varied: they keep their prior

    def residual_bytes(self, cfg: DeploymentConfig) -> int:
        x = features(cfg)
        return round(sum(self.coefficients[f] * x[f] for f in self.features))

    def formula(self, cfg: DeploymentConfig) -> str:
        x = features(cfg)
        parts = [
            f"{self.coefficients[f] / 2**20:+,.1f} MiB x {FEATURE_DOC[f]} ({x[f]:g})" for f in self.features
        ]
        return " ".join(parts)


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (a is small and symmetric positive definite)."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[piv] = m[piv], m[col]
        if m[col][col] == 0:
            continue
        for r in range(n):
            if r != col and m[r][col] != 0:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] if m[i][i] else 0.0 for i in range(n)]


def fit_term(
    term: str,
    rows: Sequence[tuple[str, Mapping[str, float], float]],
    prior: Mapping[str, float] | None = None,
    *,
    prior_source: str = "zero",
) -> TermFit:
    """Minimum-norm correction of ``prior`` that fits ``rows`` = (label, features, residual bytes)."""
    feats = TERM_FEATURES[term]
    beta0 = [float((prior or {}).get(f, 0.0)) for f in feats]
    # Work in GiB so the system is well conditioned; features are O(1) by construction.
    x = [[r[1][f] for f in feats] for r in rows]
    y = [r[2] / GIB for r in rows]
    b0 = [v / GIB for v in beta0]
    beta = list(b0)
    if rows:
        resid = [yi - sum(a * c for a, c in zip(xi, b0, strict=True)) for xi, yi in zip(x, y, strict=True)]
        gram = [[sum(a * c for a, c in zip(xi, xj, strict=True)) for xj in x] for xi in x]
        scale = max(1.0, max(gram[i][i] for i in range(len(x))))
        for i in range(len(x)):
            gram[i][i] += _RIDGE * scale
        alpha = _solve(gram, resid)
        beta = [b0[k] + sum(alpha[i] * x[i][k] for i in range(len(x))) for k in range(len(feats))]
    coef = {f: beta[k] * GIB for k, f in enumerate(feats)}
    unidentified = tuple(
        f for k, f in enumerate(feats) if f != "const" and len({round(xi[k], 9) for xi in x}) <= 1
    )
    if not rows:
        unidentified = tuple(feats)
    residuals = tuple(
        (label, round(y_bytes - sum(coef[f] * fx[f] for f in feats))) for label, fx, y_bytes in rows
    )
    return TermFit(
        term=term,
        features=feats,
        coefficients=coef,
        prior={f: float((prior or {}).get(f, 0.0)) for f in feats},
        prior_source=prior_source,
        sources=tuple(r[0] for r in rows),
        residuals=residuals,
        unidentified=unidentified,
    )


@dataclass(frozen=True)
class WeightsModel:
    """W per (checkpoint, vLLM build, MTP on), and the MTP layer's size per checkpoint.

    Only boots of the same checkpoint (directory or hub name, revision, online quantization and TP) speak
    for W here; another checkpoint, another TP or a bit rate no boot ran is the weights entry's estimate
    (ledger/weights.py), which knows how a checkpoint splits over TP. A boot of another release, or of the
    other MTP setting, only informs an estimate.
    """

    table: tuple[tuple[str, str, bool, int, str], ...]  # (checkpoint, version, mtp, bytes, source)
    mtp_layer: tuple[tuple[str, int, str], ...]  # (checkpoint, bytes, how)

    def predict(self, cfg: DeploymentConfig, version: str | None = None) -> tuple[int, str, str] | None:
        """(bytes, origin, explanation) or None when no boot of this checkpoint is known."""
        ck = checkpoint_key(cfg)
        mtp = cfg.mtp > 0
        release = cfg.release_effective or release_of(version)

        def mean(rows: list[tuple[str, str, bool, int, str]]) -> int:
            return round(sum(r[3] for r in rows) / len(rows))

        def this_release(r: tuple[str, str, bool, int, str]) -> bool:
            return (version is not None and r[1] == version) or (
                release is not None and release_of(r[1]) == release
            )

        same = sorted(r for r in self.table if r[0] == ck and r[2] == mtp)
        exact = [r for r in same if this_release(r)]
        if exact:
            return mean(exact), "calibrated", f"logged by {_logs(exact)}"
        if same:
            builds = sorted({r[1] for r in same})
            spread = max(r[3] for r in same) - min(r[3] for r in same)
            why = f"logged by {_logs(same)} on vLLM {', '.join(builds)}"
            if len(builds) > 1:
                why += f" (they differ by {spread / GIB:.2f} GiB)"
            want = release or version or "an unknown release"
            return mean(same), "estimate", f"{why}; no boot of {want} ran it"
        other = sorted(r for r in self.table if r[0] == ck and r[2] != mtp)
        if not other:
            return None
        layer = next((m for m in sorted(self.mtp_layer) if m[0] == ck), None) or (
            min(self.mtp_layer) if self.mtp_layer else None
        )
        base = mean(other)
        if layer is not None:
            value = base + layer[1] if mtp else base - layer[1]
            sign = "+" if mtp else "-"
            return (
                value,
                "estimate",
                f"W with MTP {'off' if mtp else 'on'} ({base / GIB:.2f} GiB, {_logs(other)})"
                f" {sign} the MTP layer {layer[1] / GIB:.2f} GiB ({layer[2]})",
            )
        # No pair of boots that differ only in k: the MTP layer is one more decoder layer's share of W.
        g = cfg.model.geometry
        layers = g.num_hidden_layers + (0 if mtp else g.num_mtp_layers)
        per_layer = base // max(1, layers)
        value = base + per_layer * g.num_mtp_layers if mtp else base - per_layer * g.num_mtp_layers
        return (
            value,
            "estimate",
            f"W with MTP {'off' if mtp else 'on'} ({base / GIB:.2f} GiB, {_logs(other)})"
            f" {'+' if mtp else '-'} one layer's average share ({per_layer / GIB:.2f} GiB): no pair of boots "
            "differing only in MTP identifies the MTP layer (the real one may be larger: its own head)",
        )


def _logs(rows: Iterable[tuple[str, str, bool, int, str]]) -> str:
    return ", ".join(sorted({r[4] for r in rows}))


def fit_weights(points: Iterable[Point]) -> WeightsModel:
    table = tuple(
        (p.checkpoint, p.vllm_version or "unknown", p.config.mtp > 0, p.w, p.label)
        for p in points
        if p.w is not None
    )
    layers: list[tuple[str, int, str]] = []
    for ck in sorted({r[0] for r in table}):
        for version in sorted({r[1] for r in table if r[0] == ck}):
            on = [r for r in table if r[0] == ck and r[1] == version and r[2]]
            off = [r for r in table if r[0] == ck and r[1] == version and not r[2]]
            if on and off:
                w_on = sum(r[3] for r in on) / len(on)
                w_off = sum(r[3] for r in off) / len(off)
                layers.append(
                    (
                        ck,
                        round(w_on - w_off),
                        f"{on[0][4]} minus {off[0][4]}, vLLM {version}",
                    )
                )
                break
    return WeightsModel(table=table, mtp_layer=tuple(layers))


@dataclass(frozen=True)
class ReleaseOffset:
    """A release's P overhead beyond the fitted residual, from documented boots.

    The appliance's offsets hold for every checkpoint of their release and DCP; a checkpoint offset (its
    ``checkpoint`` set, and ``mtp`` when the boots differ in MTP on/off) is what one checkpoint's documented
    boots imply beyond everything derived for it, and applies to that checkpoint only."""

    release: str
    dcp: int
    bytes: int
    boots: tuple[str, ...]
    checkpoint: str | None = None
    mtp: bool | None = None

    def describe(self, own: bool, dcp: int | None = None) -> str:
        where = f"{self.release} at DCP{self.dcp}"
        if self.mtp is not None:
            where += f" with MTP {'on' if self.mtp else 'off'}"
        if self.checkpoint is not None:
            where += (
                f" of {self.checkpoint} (a residual: what its documented KV pool implies beyond the terms "
                "derived for it)"
            )
        if own:
            how = ""
        elif dcp is not None and dcp != self.dcp:
            how = f" (transferred to DCP{dcp} from another shape: an estimate)"
        else:
            how = " (another release's: an estimate)"
        return (
            f"release overhead {self.bytes / 2**20:+,.1f} MiB{how}, fitted on the documented boots of {where}"
            f" ({', '.join(self.boots)})"
        )


def pick_offset(
    offsets: Iterable[ReleaseOffset],
    release: str | None,
    dcp: int,
    checkpoint: str | None = None,
    mtp: bool | None = None,
) -> tuple[ReleaseOffset | None, bool]:
    """The offset of ``release`` at ``dcp``, and whether it is that release's own at that shape.

    In order: the release's own at this DCP; the nearest numbered release's at this DCP (its own line
    first, else the other line through the release whose memory code it shares:
    :func:`glmlaunch.config.releases.release_distance`); where no release has one at this DCP, the
    release's own at the nearest DCP, else the nearest release's at the nearest DCP. Every offset but the
    first is an estimate transferred from another release or shape. A DCP no documented boot ran
    (DCP 1 for every checkpoint but the README's R7) used to get no offset at all, which is the r14 TP4/DCP4
    fit alone: the later releases' measured overhead (0.7-2.6 GiB beyond it) was dropped there, and their
    KV pools over-predicted."""
    from glmlaunch.config.releases import release_distance, release_line

    usable = [
        o
        for o in offsets
        if (o.checkpoint is None or o.checkpoint == checkpoint) and (o.mtp is None or o.mtp == mtp)
    ]
    # a checkpoint's own offsets stand for it alone: where it has any, the generic ones do not apply
    own_checkpoint = [o for o in usable if o.checkpoint is not None]
    pool = sorted(own_checkpoint or usable, key=lambda o: (o.release, o.dcp))
    same_dcp = [o for o in pool if o.dcp == dcp]
    exact = next((o for o in same_dcp if o.release == release), None)
    if exact is not None:
        return exact, True
    if release_line(release) is None:
        # an unknown release (or an image of the v line): the fit alone (the release the rig's own boot
        # logs ran)
        return None, False
    candidates = same_dcp or pool

    def shape_gap(o: ReleaseOffset) -> float:
        return abs(math.log2(max(1, o.dcp)) - math.log2(max(1, dcp)))

    ranked = [
        (0 if o.release == release else 1, d, shape_gap(o), o.release, o)
        for o in candidates
        if (d := (0 if o.release == release else release_distance(o.release, release))) is not None
    ]
    if not ranked:
        return None, False
    return min(ranked, key=lambda t: t[:4])[4], False


@dataclass(frozen=True)
class TermModel:
    """Every term's fit, for one rig (GPU model), stack and parallel shape."""

    fits: dict[str, TermFit]
    weights: WeightsModel
    origin: str  # "calibrated" (records) or "rig-default"
    description: str
    points: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    # N's residual per vLLM build (two builds of the same stack logged 0.23 and 0.45 GiB), keyed by
    # :func:`build_key` (version string, library generation, release and line): used when the plan's build
    # is one of them, the fit over every build otherwise.
    n_by_version: tuple[tuple[str, int, tuple[str, ...]], ...] = ()
    # A release's overhead on P beyond the fit (release, DCP, bytes, the documented boots it came from):
    # later releases profile more than the r14 logs the residual coefficients come from (the appliance's
    # documented capacities: about 1.5 GiB more at r9-r11 DCP2, 0.8-1.7 GiB at r20-r28 DCP4).
    release_offsets: tuple[ReleaseOffset, ...] = ()

    def release_offset(self, cfg: DeploymentConfig) -> tuple[ReleaseOffset | None, bool]:
        """The offset for ``cfg``'s release and DCP, and whether it is that release's own.

        Another release's (the nearest numbered one at the same DCP) stands in, as an estimate, when this
        release has none; a plan that names no release takes none (the fit of the rig's own logs)."""
        return pick_offset(
            self.release_offsets,
            cfg.release_effective,
            cfg.parallel.dcp,
            checkpoint_name(cfg.model.path),
            cfg.mtp > 0,
        )

    def coefficients(self) -> dict[str, dict[str, float]]:
        return {t: dict(f.coefficients) for t, f in self.fits.items()}

    def n_build(
        self, version: str | None, cfg: DeploymentConfig
    ) -> tuple[str, int, tuple[str, ...]] | None:
        """N's residual of the plan's vLLM build (``version`` with ``cfg``'s library generation and
        release: :func:`build_key`; its records' mean), when records of that build exist: what
        :meth:`predict` uses for N, and so what every account of N must show."""
        if version is None:
            return None
        key = build_key(version, cfg)
        return next((b for b in self.n_by_version if b[0] == key), None)

    def predict(self, cfg: DeploymentConfig, version: str | None = None) -> Prediction:
        items = itemized(cfg)
        terms: dict[str, int] = {}
        residuals: dict[str, int] = {}
        explain: dict[str, str] = {}
        offset, own = self.release_offset(cfg)
        n_build = self.n_build(version, cfg)
        for term, fit in self.fits.items():
            r = fit.residual_bytes(cfg)
            if term == "n" and n_build is not None:
                r = n_build[1]
            if term == "p" and offset is not None:
                r += offset.bytes
            residuals[term] = r
            terms[term] = items[term] + r
            worst = max((abs(v) for _, v in fit.residuals), default=0)
            src = f"records {', '.join(fit.sources)}" if fit.sources else f"prior ({fit.prior_source})"
            unid = (
                f"; not identified by the records, kept from the prior: {', '.join(fit.unidentified)}"
                if (fit.sources and fit.unidentified)
                else ""
            )
            if term == "n" and n_build is not None:
                explain[term] = (
                    f"{TERM_DOC[term]} = itemized {items[term] / 2**20:,.1f} MiB + residual of vLLM build "
                    f"{n_build[0]} {r / 2**20:,.1f} MiB = {terms[term] / GIB:.3f} GiB; "
                    f"from {', '.join(n_build[2])}"
                )
                continue
            release_part = ""
            if term == "p" and offset is not None:
                release_part = f" + {offset.describe(own, cfg.parallel.dcp)}"
            explain[term] = (
                f"{TERM_DOC[term]} = itemized {items[term] / 2**20:,.1f} MiB + residual {fit.formula(cfg)}"
                f"{release_part} = {terms[term] / GIB:.3f} GiB; from {src}; max |residual| on them "
                f"{worst / 2**20:,.1f} MiB{unid}"
            )
        w = self.weights.predict(cfg, version)
        w_origin = "default"
        if w is not None:
            terms["w"], w_origin, why = w
            explain["w"] = f"{TERM_DOC['w']} = {terms['w'] / GIB:.2f} GiB: {why}"
        return Prediction(terms=terms, residuals=residuals, explain=explain, w_origin=w_origin, model=self)


@dataclass(frozen=True)
class Prediction:
    terms: dict[str, int]  # whole terms: u_pre, n, p, g_e and w when known
    residuals: dict[str, int]  # the modelled (non-itemized) part of u_pre, n, p, g_e
    explain: dict[str, str]
    w_origin: str
    model: TermModel


def fit_model(
    points: Sequence[Point],
    prior: Mapping[str, Mapping[str, float]] | None = None,
    *,
    prior_source: str = "zero",
    origin: str = "calibrated",
    description: str = "",
    prior_weights: WeightsModel | None = None,
    prior_n_by_version: tuple[tuple[str, int, tuple[str, ...]], ...] = (),
    release_offsets: tuple[ReleaseOffset, ...] = (),
) -> TermModel:
    """Fit every term from ``points`` (each with its itemized part computed for its own configuration).

    ``release_offsets`` (the rig defaults' release overheads) stay part of the model: a point's P residual
    is taken past its release's offset, so a record corrects the prior it is compared with."""

    def p_offset(cfg: DeploymentConfig) -> int:
        off, _own = pick_offset(
            release_offsets,
            cfg.release_effective,
            cfg.parallel.dcp,
            checkpoint_name(cfg.model.path),
            cfg.mtp > 0,
        )
        return off.bytes if off is not None else 0

    rows: dict[str, list[tuple[str, Mapping[str, float], float]]] = {t: [] for t in TERMS}
    n_rows: dict[str, tuple[Mapping[str, float], float]] = {}
    for p in points:
        x = features(p.config)
        items = itemized(p.config)
        for term in ("u_pre", "n", "g_e"):
            v = getattr(p, term)
            if v is not None:
                rows[term].append((p.label, x, float(v - items[term])))
        if p.p is not None:
            rows["p"].append((p.label, x, float(p.p - items["p"] - p_offset(p.config))))
        if p.n is not None:
            n_rows[p.label] = (x, float(p.n - items["n"]))
    fits = {
        t: fit_term(t, rows[t], (prior or {}).get(t), prior_source=prior_source)
        for t in ("u_pre", "n", "g_e")
    }
    # A refused boot tells P + N only: its P is that sum less N (of its own vLLM build when known).
    n_of_build: dict[str, list[float]] = {}
    for p in points:
        if p.label in n_rows:
            n_of_build.setdefault(build_key(p.vllm_version, p.config), []).append(n_rows[p.label][1])
    for p in points:
        if p.p is None and p.pn is not None:
            items = itemized(p.config)
            same = n_of_build.get(build_key(p.vllm_version, p.config))
            n_resid = sum(same) / len(same) if same else fits["n"].residual_bytes(p.config)
            n_fit = items["n"] + n_resid
            rows["p"].append(
                (
                    f"{p.label} (P = P+N - fitted N)",
                    features(p.config),
                    float(p.pn - n_fit - items["p"] - p_offset(p.config)),
                )
            )
    fits["p"] = fit_term("p", rows["p"], (prior or {}).get("p"), prior_source=prior_source)
    weights = fit_weights(points)
    if prior_weights is not None:
        # a record of a log the rig defaults were fitted on stands for that log: keep one of the two
        logs = {r[4].rsplit(" ", 1)[-1] for r in weights.table}
        weights = WeightsModel(
            table=weights.table
            + tuple(r for r in prior_weights.table if r[4].rsplit(" ", 1)[-1] not in logs),
            mtp_layer=weights.mtp_layer
            + tuple(m for m in prior_weights.mtp_layer if m[0] not in {x[0] for x in weights.mtp_layer}),
        )
    by_version: dict[str, list[tuple[str, float]]] = {}
    for p in points:
        if p.label in n_rows:
            by_version.setdefault(build_key(p.vllm_version, p.config), []).append(
                (p.label, n_rows[p.label][1])
            )
    n_versions = tuple(
        (v, round(sum(x for _, x in rows_) / len(rows_)), tuple(lb for lb, _ in rows_))
        for v, rows_ in sorted(by_version.items())
    )
    if prior_n_by_version:
        known = {v[0] for v in n_versions}
        n_versions += tuple(v for v in prior_n_by_version if v[0] not in known)
    return TermModel(
        fits={t: fits[t] for t in TERMS},
        weights=weights,
        origin=origin,
        description=description,
        points=tuple(p.label for p in points),
        n_by_version=n_versions,
        release_offsets=tuple(release_offsets),
    )
