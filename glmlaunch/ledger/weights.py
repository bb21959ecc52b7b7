"""Weights per rank (W, vLLM's "Model loading took X GiB"): the one place that decides W and says how.

In order of how well W is known:

1. ``model.weights_per_rank`` — final: the budget uses exactly that figure (no MTP share, online-quant
   saving or TP scaling is added). A calibration record that disagrees by more than 1 % is named.
2. a calibration record of this checkpoint, online quantization, MTP on/off and release (the term model's
   W, :mod:`glmlaunch.calibrate.model`) — a record of another release only informs an estimate;
3. the documented table (``weights_facts.json``: the appliance's qualification records, each row with
   its source) for this checkpoint, online quantization, MTP on/off and release;
4. estimates, each labelled: another release's figure; the other MTP setting ± the MTP layer's share
   (measured pairs: 1.64 GiB for 3.25 bpw at r14); native weights minus an online quantization's measured
   saving (K6: 4.60 GiB at 3.36 and 3.42 bpw); another TP from TP4 as the checkpoint splits (the
   replicated BF16 tensors stay whole on every rank); then the checkpoint's own safetensors payload on
   disk / TP plus the measured payload-to-loaded offset (a fetch verified by its stamp, in the hub cache or
   a local ``model.path``, or a local directory as the operator left it); then another EXL3 bit rate of
   the same model (routed experts scale).

Steps 2 and 3 compete on quality, not on tier: a record of another release does not beat a documented
figure of this release, and any figure built on a real boot of this checkpoint beats the payload estimate
(the payload is the weights' bytes on disk, not what vLLM holds after loading). The ledger reads no file:
the payload is read where the plan is asked for (``glmlaunch.fetch.status.checkpoint_on_disk``) and comes
in the inputs (:attr:`LedgerInputs.checkpoint`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import Literal, NamedTuple

from glmlaunch.config.releases import CROSS_LINE_DISTANCE, release_distance, release_number
from glmlaunch.config.schema import DeploymentConfig, ModelGeometry
from glmlaunch.ledger.context import Context, Draft, fmt_int
from glmlaunch.ledger.inputs import CheckpointOnDisk, LedgerInputs

GIB = 1024**3
FACTS_FILE = "weights_facts.json"
#: how far a calibrated W may be from an explicit model.weights_per_rank before the plan says so
DISAGREEMENT = 0.01

#: where a W figure comes from (the verdict maps these to its term sources)
WeightsSource = Literal["profile", "record", "rig-defaults", "documented", "estimate", "default"]


class Fact(NamedTuple):
    checkpoint: str
    revision: str | None
    release: str | None
    mtp: int
    online_quant: str
    tp: int
    gib: float
    source: str

    @property
    def bytes(self) -> int:
        return round(self.gib * GIB)


@lru_cache(maxsize=1)
def _document() -> dict[str, object]:
    text = resources.files("glmlaunch.ledger").joinpath(FACTS_FILE).read_text(encoding="utf-8")
    doc: dict[str, object] = json.loads(text)
    return doc


def facts() -> tuple[Fact, ...]:
    rows = _document()["facts"]
    assert isinstance(rows, list)
    return tuple(Fact(r[0], r[1], r[2], int(r[3]), r[4], int(r[5]), float(r[6]), r[7]) for r in rows)


def payloads() -> tuple[tuple[str, float, str], ...]:
    rows = _document()["payload_gib"]
    assert isinstance(rows, list)
    return tuple((r[0], float(r[1]), r[2]) for r in rows)


def checkpoint_name(path: str | None) -> str:
    """The checkpoint's directory or hub name (its last path part), as facts and records are matched."""
    return (path or "").rstrip("/").rsplit("/", 1)[-1].lower()


def same_checkpoint(fact_checkpoint: str, cfg: DeploymentConfig) -> bool:
    """Whether a fact is of ``cfg``'s checkpoint: the same directory or hub name. Revisions are not
    compared: the appliance's records name revisions whose weight objects are identical (the 3.25 bpw
    61d2b6b7 and d7d79c2d, docs/glm52-r14-maintenance-plan.md), and the boot logs name none."""
    return checkpoint_name(fact_checkpoint) == checkpoint_name(cfg.model.path)


# --- how the checkpoint splits over TP -----------------------------------------------------------------


def replicated_bytes(g: ModelGeometry, mtp_on: bool) -> tuple[int, str]:
    """BF16 tensors every TP rank holds whole (vLLM builds them replicated), and how they were counted.

    Per layer: the fused q_a / kv_a down-projection (hidden x (q_lora + kv_lora + rope)) and the MoE router
    (hidden x experts, MoE layers only); per full-indexer layer (F in the pattern): the indexer's wq_b
    (q_lora x heads x head dim), wk (hidden x head dim) and weights_proj (hidden x heads); with MTP, the
    draft layer's eh_proj (2 hidden x hidden) and its own down-projection and router. Norms are omitted
    (a few MiB). Everything else (attention up/out projections, experts, embeddings) is split over TP.
    """
    h = g.hidden_size
    down = h * (g.q_lora_rank + g.kv_lora_rank + g.qk_rope_head_dim)
    router = h * g.n_routed_experts
    indexer = g.q_lora_rank * g.index_n_heads * g.index_head_dim + h * g.index_head_dim + h * g.index_n_heads
    moe_layers = g.num_hidden_layers - g.first_k_dense_replace
    full = g.index_topk_pattern.count("F")
    params = g.num_hidden_layers * down + moe_layers * router + full * indexer
    formula = (
        f"2 B x ({g.num_hidden_layers} layers x {fmt_int(down)} q/kv down-projection + {moe_layers} x "
        f"{fmt_int(router)} router + {full} indexer layers x {fmt_int(indexer)}"
    )
    if mtp_on and g.num_mtp_layers:
        mtp = g.num_mtp_layers * (2 * h * h + down + router + indexer)
        params += mtp
        formula += f" + MTP {fmt_int(mtp)}"
    return 2 * params, formula + ")"


def scale_tp(value: int, from_tp: int, cfg: DeploymentConfig) -> tuple[int, str]:
    """W at ``cfg``'s TP from W at ``from_tp``: the replicated part stays, the rest splits."""
    tp = cfg.parallel.tp
    if tp == from_tp:
        return value, ""
    rep, how = replicated_bytes(cfg.model.geometry, cfg.mtp > 0)
    rep = min(rep, value)
    scaled = rep + (value - rep) * from_tp // tp
    return scaled, (
        f"; TP{from_tp} -> TP{tp}: replicated {fmt_int(rep)} B ({how}) + the rest x {from_tp}/{tp}"
    )


def expert_params_per_rank(cfg: DeploymentConfig) -> int:
    """Routed-expert parameters one TP rank holds: MoE layers x experts x 3 matrices (gate, up, down)."""
    g = cfg.model.geometry
    moe_layers = g.num_hidden_layers - g.first_k_dense_replace
    per_expert = 3 * g.hidden_size * g.moe_intermediate_size
    return moe_layers * g.n_routed_experts * per_expert // cfg.parallel.tp


# --- the documented table -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One W decision: bytes, where it came from, how it was computed."""

    value: int
    source: WeightsSource
    formula: str
    note: str = ""

    @property
    def origin(self) -> Literal["exact", "calibrated", "estimate", "default"]:
        return {
            "profile": "exact",
            "record": "calibrated",
            "rig-defaults": "calibrated",
            "documented": "calibrated",
            "estimate": "estimate",
        }.get(self.source, "default")  # type: ignore[return-value]


def _release_distance(fact: Fact, target: str | None) -> int:
    """How far a fact's release is from the deployment's: on one line their number difference, across the
    Gilded Gnosis and Infernal Invocation lines further than any one-line difference; 1000 when either is
    unknown or of the v image line (and they differ)."""
    d = release_distance(fact.release, target)
    if d is None:
        return 0 if fact.release == target else CROSS_LINE_DISTANCE
    return d


def _mtp_shares() -> list[tuple[str, str, int, str]]:
    """(checkpoint, online quant, MTP layer bytes, how): pairs of facts that differ only in MTP on/off.

    A pair of one release is preferred; without one, the nearest releases of the same checkpoint."""
    out: list[tuple[str, str, int, str]] = []
    rows = facts()
    keys = sorted({(f.checkpoint, f.online_quant, f.tp) for f in rows})
    for ck, q, tp in keys:
        on = [f for f in rows if (f.checkpoint, f.online_quant, f.tp) == (ck, q, tp) and f.mtp > 0]
        off = [f for f in rows if (f.checkpoint, f.online_quant, f.tp) == (ck, q, tp) and f.mtp == 0]
        if not on or not off:
            continue
        pairs = sorted(
            (
                (abs((release_number(a.release) or 0) - (release_number(b.release) or 0)), a, b)
                for a in on
                for b in off
            ),
            key=lambda t: (t[0], t[1].release or "", t[2].release or ""),
        )
        _, a, b = pairs[0]
        how = (
            f"{checkpoint_name(ck)} {q}: {a.gib:.2f} GiB MTP{a.mtp} ({a.release}) - "
            f"{b.gib:.2f} GiB MTP0 ({b.release})"
        )
        out.append((ck, q, a.bytes - b.bytes, how))
    return out


def _quant_savings() -> list[tuple[str, str, int, str]]:
    """(checkpoint, online quant, bytes saved against native, how): facts that differ only in the quant."""
    out: list[tuple[str, str, int, str]] = []
    rows = facts()
    for q in ("exl3-b6", "mxfp8"):
        for f in sorted(
            (f for f in rows if f.online_quant == q), key=lambda f: (f.checkpoint, f.release or "")
        ):
            native = [
                n
                for n in rows
                if (n.checkpoint, n.release, n.mtp, n.tp) == (f.checkpoint, f.release, f.mtp, f.tp)
                and n.online_quant == "none"
            ]
            if native:
                out.append(
                    (
                        f.checkpoint,
                        q,
                        native[0].bytes - f.bytes,
                        f"{checkpoint_name(f.checkpoint)} {f.release}: native {native[0].gib:.2f} - "
                        f"{q} {f.gib:.2f} GiB",
                    )
                )
    return out


def _pick(items: list[tuple[str, str, int, str]], cfg: DeploymentConfig, q: str) -> tuple[int, str] | None:
    """The measured adjustment for this checkpoint, else the mean over the others (deterministic)."""
    same = [i for i in items if i[1] == q and checkpoint_name(i[0]) == checkpoint_name(cfg.model.path)]
    pool = same or [i for i in items if i[1] == q] or items
    if not pool:
        return None
    value = round(sum(i[2] for i in pool) / len(pool))
    return value, "; ".join(i[3] for i in pool)


def documented(cfg: DeploymentConfig) -> Figure | None:
    """W from the documented table: exact for this setting and release, else the nearest, adjusted."""
    q = cfg.model.online_quant
    mtp_on = cfg.mtp > 0
    target = cfg.release_effective
    mine = [f for f in facts() if same_checkpoint(f.checkpoint, cfg)]
    if not mine:
        return None

    def rank(f: Fact) -> tuple[int, int, int, int, str]:
        return (
            int(f.online_quant != q),
            int((f.mtp > 0) != mtp_on),
            int(f.tp != cfg.parallel.tp),
            _release_distance(f, target),
            f.release or "",
        )

    best = min(rank(f) for f in mine)
    chosen = sorted((f for f in mine if rank(f) == best), key=lambda f: (f.release or "", f.mtp))
    base = round(sum(f.bytes for f in chosen) / len(chosen))
    f0 = chosen[0]
    srcs = "; ".join(f"{f.gib:.2f} GiB {f.release} MTP{f.mtp} {f.online_quant} ({f.source})" for f in chosen)
    parts = [f"{checkpoint_name(f0.checkpoint)}: {srcs}"]
    exact = best[:3] == (0, 0, 0) and (target is not None and best[3] == 0)
    value = base
    if f0.online_quant != q:
        if f0.online_quant == "none":
            saving = _pick(_quant_savings(), cfg, q)
            if saving is None:
                return None
            value -= saving[0]
            parts.append(f"- {q} saving {saving[0] / GIB:.2f} GiB ({saving[1]})")
        else:
            return None  # no measured way from one online quantization to another
    if (f0.mtp > 0) != mtp_on:
        share = _pick(_mtp_shares(), cfg, q) or _pick(_mtp_shares(), cfg, "none")
        if share is None:
            return None
        value += share[0] if mtp_on else -share[0]
        parts.append(f"{'+' if mtp_on else '-'} MTP layer {share[0] / GIB:.2f} GiB ({share[1]})")
    value, tp_how = scale_tp(value, f0.tp, cfg)
    formula = " ".join(parts) + tp_how + f" = {fmt_int(value)}"
    if exact:
        return Figure(value, "documented", formula)
    why = []
    if best[0]:
        why.append(f"measured without {q}, its measured saving applied")
    if best[1]:
        why.append(f"measured with MTP {'off' if mtp_on else 'on'}, the MTP layer's share applied")
    if best[2]:
        why.append(f"measured at TP{f0.tp}, split to TP{cfg.parallel.tp}")
    if target is None:
        why.append("the deployment's release is unknown (set `release`)")
    elif best[3]:
        why.append(f"measured on {', '.join(sorted({f.release or '?' for f in chosen}))}, not {target}")
    return Figure(value, "estimate", formula, "estimate: " + "; ".join(why))


# --- the payload on disk and other bit rates ---------------------------------------------------------


def payload_offset() -> tuple[int, str] | None:
    """Measured loaded-minus-payload/4 per rank at TP4, MTP0, native (mean over the documented pairs)."""
    pairs = []
    for ck, gib, src in payloads():
        native = [
            f for f in facts() if f.checkpoint == ck and f.mtp == 0 and f.online_quant == "none" and f.tp == 4
        ]
        if native:
            pairs.append(
                (
                    native[0].bytes - round(gib * GIB / 4),
                    f"{checkpoint_name(ck)}: {native[0].gib:.2f} - {gib:.3f}/4 ({src})",
                )
            )
    if not pairs:
        return None
    return round(sum(p[0] for p in pairs) / len(pairs)), "; ".join(p[1] for p in pairs)


def checkpoint_of(ctx: Context) -> CheckpointOnDisk | None:
    """The checkpoint on disk the inputs carry, when it is of this configuration's ``model.path``."""
    found = ctx.inputs.checkpoint
    if found is None or found.model_path != (ctx.config.model.path or ""):
        return None
    return found


def _from_payload(ctx: Context) -> Figure | None:
    found = checkpoint_of(ctx)
    if found is None or found.safetensors_bytes is None:
        return None
    return payload_figure(ctx.config, found.safetensors_bytes, found.files, found.directory, how=found.detail)


def payload_figure(cfg: DeploymentConfig, total: int, nfiles: int, where: str, *, how: str = "") -> Figure:
    """W estimated from a checkpoint's safetensors payload (``total`` tensor bytes in ``nfiles`` files, as
    their headers declare): the payload / 4 plus the measured payload-to-loaded offset at TP4, the online
    quantization's saving and the MTP layer's share, split to the deployment's TP. The headers are read by
    :mod:`glmlaunch.fetch.payload` (``fetch --json`` and the plan's inputs); ``how`` says how the files were
    verified."""
    off = payload_offset()
    base = -(-total // 4)
    formula = f"safetensors headers of {where}: {fmt_int(total)} B in {nfiles} files / 4"
    value = base
    if off is not None:
        value += off[0]
        formula += f" + measured payload-to-loaded offset {off[0] / GIB:+.2f} GiB ({off[1]})"
    q = cfg.model.online_quant
    if q != "none":
        saving = _pick(_quant_savings(), cfg, q)
        if saving is not None:
            value -= saving[0]
            formula += f" - {q} saving {saving[0] / GIB:.2f} GiB"
    if cfg.mtp > 0:
        share = _pick(_mtp_shares(), cfg, "none")
        if share is not None:
            value += share[0]
            formula += f" + MTP layer {share[0] / GIB:.2f} GiB"
    value, tp_how = scale_tp(value, 4, cfg)
    note = "estimate from the safetensors payload" + (f": {how}" if how else "")
    return Figure(value, "estimate", formula + tp_how + f" = {fmt_int(value)}", note)


def _bits(name: str) -> float | None:
    import re

    m = re.search(r"([0-9]+(?:\.[0-9]+)?)bpw", name, re.IGNORECASE)
    return float(m.group(1)) if m else None


def _other_bit_rate(cfg: DeploymentConfig) -> Figure | None:
    """Another EXL3 bit rate of the same model: the nearest documented one, routed experts rescaled."""
    bpw = _bits(checkpoint_name(cfg.model.path))
    if bpw is None:
        return None
    known = sorted(
        {
            (abs((_bits(checkpoint_name(f.checkpoint)) or 99) - bpw), f.checkpoint)
            for f in facts()
            if _bits(checkpoint_name(f.checkpoint)) is not None
        }
    )
    base = None
    for _distance, ref in known:
        # the nearest documented bit rate whose table reaches this setting (the R7 checkpoint's one K6
        # figure, for one, does not reach a native load)
        model = cfg.model.model_copy(update={"path": ref, "revision": None})
        ref_cfg = cfg.model_copy(update={"model": model})
        base = documented(ref_cfg)
        if base is not None:
            break
    if base is None:
        return None
    ref_bpw = _bits(checkpoint_name(ref)) or bpw
    delta = round(expert_params_per_rank(cfg) * (bpw - ref_bpw) / 8)
    value = base.value + delta
    return Figure(
        value,
        "estimate",
        f"{base.formula}; routed experts at {bpw:g} instead of {ref_bpw:g} bits: "
        f"{fmt_int(expert_params_per_rank(cfg))} params/rank x {bpw - ref_bpw:+g}/8 B = {fmt_int(value)}",
        f"estimate from {checkpoint_name(ref)} (another bit rate)",
    )


# --- the decision ---------------------------------------------------------------------------------------


def _calibrated(ctx: Context) -> Figure | None:
    cal = ctx.inputs.weights_bytes
    if cal is None:
        return None
    w_origin = ctx.inputs.weights_origin or "calibrated"
    model_origin = ctx.inputs.origin
    why = ctx.inputs.note_for("w")
    formula = f"calibration.weights_bytes = {fmt_int(cal)}" + (f" ({why})" if why else "")
    if w_origin != "calibrated":
        return Figure(cal, "estimate", formula, "estimate from boots of another setting or release")
    return Figure(cal, "record" if model_origin == "calibrated" else "rig-defaults", formula)


_QUALITY: dict[str, int] = {
    "profile": 0,
    "record": 1,
    "rig-defaults": 2,
    "documented": 2,
    "estimate": 3,
    "default": 4,
}


def decide_for(config: DeploymentConfig, inputs: LedgerInputs) -> Figure:
    """:func:`decide` without a ledger context (the budget asks where its W came from)."""
    from glmlaunch.ledger.constants import for_stack

    k = for_stack(config.stack)
    return decide(Context(config=config, k=k, inputs=inputs, lib=None, capture_sizes=()))


def decide(ctx: Context) -> Figure:
    """The W of ``ctx``'s configuration and calibration, with its source and formula."""
    cfg = ctx.config
    explicit = cfg.model.weights_per_rank
    cal = _calibrated(ctx)
    if explicit is not None:
        note = ""
        if cal is not None and abs(cal.value - explicit) > DISAGREEMENT * explicit:
            note = (
                f"model.weights_per_rank {explicit / GIB:.2f} GiB differs from the calibrated "
                f"{cal.value / GIB:.2f} GiB by {(explicit - cal.value) / cal.value:+.1%}; "
                "the explicit figure is used"
            )
        return Figure(
            explicit,
            "profile",
            f"model.weights_per_rank = {fmt_int(explicit)} (explicit: used as given)",
            note,
        )
    candidates = [f for f in (cal, documented(cfg)) if f is not None]
    if candidates:
        # records and the documented table compete on quality: a record of another release is an estimate
        # and does not beat a documented figure of this release
        return min(candidates, key=lambda f: _QUALITY[f.source])
    payload = _from_payload(ctx)
    if payload is not None:
        return payload
    lesser = _other_bit_rate(cfg)
    if lesser is None:
        fallback = facts()[0]
        value, tp_how = scale_tp(fallback.bytes, fallback.tp, cfg)
        lesser = Figure(
            value,
            "default",
            f"{fallback.gib:.2f} GiB ({checkpoint_name(fallback.checkpoint)}, {fallback.source}){tp_how} "
            f"= {fmt_int(value)}",
            "a built-in default: nothing is known of this checkpoint "
            "(set model.weights_per_rank or calibrate)",
        )
    unpriced = checkpoint_of(ctx)
    if unpriced is not None and not unpriced.priced:
        # a checkpoint on disk that could have priced W, and why it did not
        lesser = replace(lesser, note=f"{lesser.note}; {unpriced_note(unpriced)}")
    return lesser


def unpriced_note(found: CheckpointOnDisk) -> str:
    return (
        f"the checkpoint at {found.directory} is ignored (W is not priced from its payload): {found.detail}"
    )


def payload_note(ctx: Context) -> str | None:
    """The plan's note on the checkpoint on disk: W priced from its payload, or why it was not; None when
    none was found or W is known better (a documented, calibrated or explicit figure)."""
    found = checkpoint_of(ctx)
    if found is None:
        return None
    if not found.priced:
        return f"weights: {unpriced_note(found)}"
    fig = decide(ctx)
    if fig != _from_payload(ctx):
        return None
    payload = f"{fmt_int(found.safetensors_bytes or 0)} B of tensors in {found.files} files; {found.detail}"
    return (
        f"weights: W {fig.value / GIB:.2f} GiB per rank estimated from the safetensors payload of "
        f"{found.directory} ({payload}): set model.weights_per_rank or calibrate from a boot log to "
        "confirm it"
    )


def entries(ctx: Context) -> list[Draft]:
    fig = decide(ctx)
    return [
        Draft(
            name="weights",
            subsystem="weights",
            requested_bytes=fig.value,
            count=1,
            kind="torch",
            lifetime="budget-term",
            condition="always",
            reader="the model",
            formula=fig.formula,
            origin=fig.origin,
            alloc="fixed",
            note=fig.note,
            residual=True,
        )
    ]
