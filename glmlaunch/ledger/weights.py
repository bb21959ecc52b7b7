"""Weights per rank (W, vLLM's "Model loading took X GiB"): the one place that decides W and says how.

In order of how well W is known:

1. ``model.weights_per_rank`` — final: the budget uses exactly that figure (no MTP share, online-quant
   saving or TP scaling is added). A calibration record that disagrees by more than 1 % is named.
2. a calibration record of this checkpoint, online quantization, MTP on/off and release (the term model's
   W, :mod:`glmlaunch.calibrate.model`) — a record of another release only informs an estimate;
3. the documented table (``weights_facts.json``: the appliance's qualification records, each row with
   its source) for this checkpoint, online quantization, MTP on/off and release;
4. estimates, each labelled: another release's figure; the other MTP setting ± the MTP layer's share
   (pairs of one build that differ only in MTP: 1.64 GiB for 3.25 bpw at r14; the R7 checkpoint's from the
   README pair that bounds it); native weights minus an online quantization's measured saving (K6: 4.60 GiB
   at 3.36 and 3.42 bpw); another TP from TP4 as the checkpoint splits (the replicated BF16 tensors stay
   whole on every rank); then, for a checkpoint the table does not know, the checkpoint's own safetensors
   payload / TP plus the measured payload-to-loaded offset (on disk: a fetch verified by its stamp, in the
   hub cache or a local ``model.path``, or a local directory as the operator left it; else the hub's file
   metadata and headers, nothing downloaded), its tensors placed by name as vLLM's loader places them
   (:func:`tensor_role`); then, offline, the nearest documented bit rate rescaled to the storage the name
   states (:func:`glmlaunch.config.checkpoints.weight_format`: FP8, NVFP4, an EXL3 bit rate).

Steps 2 and 3 compete on quality, not on tier: a record of another release does not beat a documented
figure of this release, and any figure built on a real boot of this checkpoint beats the payload estimate
(the payload is the weights' bytes on disk, not what vLLM holds after loading). The ledger reads no file:
the payload is read where the plan is asked for (``glmlaunch.plan.plan.checkpoint_for``) and comes in the
inputs (:attr:`LedgerInputs.checkpoint`).

Every figure carries its band (:attr:`Figure.range`, ``[low, high]`` bytes: how it was obtained bounds
it), and a checkpoint the table does not know carries the plan's warning (:attr:`Figure.warning`): never a
silent figure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import Literal, NamedTuple

from glmlaunch.config.checkpoints import WeightFormat, weight_format
from glmlaunch.config.releases import CROSS_LINE_DISTANCE, release_distance
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
    #: the build that loaded it (release key, vLLM tree, overlay): a pair differing only in MTP or in the
    #: online quantization is of one build
    build: str = ""

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
    return tuple(
        Fact(r[0], r[1], r[2], int(r[3]), r[4], int(r[5]), float(r[6]), r[7], r[8] if len(r) > 8 else "")
        for r in rows
    )


def mtp_bounds() -> tuple[tuple[str, str, str, float, float, float, str], ...]:
    """(checkpoint, release, online quant, share, low, high GiB, how): the MTP layer's share of W a pair
    of documented boots implies that logs pools, not W (scripts/derive_weights_facts.py)."""
    rows = _document().get("mtp_bounds") or []
    assert isinstance(rows, list)
    return tuple((r[0], r[1], r[2], float(r[3]), float(r[4]), float(r[5]), r[6]) for r in rows)


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
    #: the band W lies in as far as how it was obtained tells ([low, high] bytes; None: the figure itself)
    low: int | None = None
    high: int | None = None
    #: the plan's warning when the checkpoint is not one glmlaunch knows (None: known)
    warning: str | None = None

    @property
    def range(self) -> tuple[int, int]:
        """``[low, high]`` of W per rank: the uncertainty of how the figure was obtained."""
        lo = self.value if self.low is None else min(self.low, self.value)
        hi = self.value if self.high is None else max(self.high, self.value)
        return lo, hi

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


class Adjustment(NamedTuple):
    """A measured difference in W (the MTP layer's share, an online quantization's saving): its point, its
    band, how it was measured, of which checkpoint and online quantization."""

    checkpoint: str
    quant: str
    value: int
    low: int
    high: int
    how: str


#: how far a figure the appliance rounds to two decimals may be from the loaded bytes
ROUNDING = round(0.005 * GIB)


def mtp_pairs() -> list[tuple[Fact, Fact]]:
    """Every (MTP on, MTP off) pair of facts that differ only in MTP: one checkpoint, online quantization,
    TP and build."""
    rows = facts()
    return [
        (a, b)
        for a in rows
        for b in rows
        if a.mtp > 0
        and b.mtp == 0
        and (a.checkpoint, a.online_quant, a.tp, a.build) == (b.checkpoint, b.online_quant, b.tp, b.build)
    ]


def quant_pairs() -> list[tuple[Fact, Fact]]:
    """Every (native, online-quantized) pair of facts that differ only in the online quantization."""
    rows = facts()
    return [
        (n, f)
        for f in rows
        for n in rows
        if f.online_quant != "none"
        and n.online_quant == "none"
        and (n.checkpoint, n.mtp, n.tp, n.build) == (f.checkpoint, f.mtp, f.tp, f.build)
    ]


def _mtp_shares() -> list[Adjustment]:
    """The MTP layer's share of W, per checkpoint and online quantization: the mean over its pairs of one
    build (:func:`mtp_pairs`), band their spread; then the README pairs that log pools only
    (:func:`mtp_bounds`). A difference across builds or releases is not a share (the r14 offload build and
    the r14 field build load the 3.25 bpw target with MTP at 82.81 and 83.57 GiB): it only widens the band
    of a share transferred to another checkpoint (:func:`_pick`)."""
    groups: dict[tuple[str, str], list[tuple[Fact, Fact]]] = {}
    for a, b in mtp_pairs():
        groups.setdefault((a.checkpoint, a.online_quant), []).append((a, b))
    out: list[Adjustment] = []
    for (ck, q), pairs in sorted(groups.items()):
        diffs = [a.bytes - b.bytes for a, b in pairs]
        seen = sorted({f"{a.gib:.2f} MTP{a.mtp} - {b.gib:.2f} GiB MTP0 ({a.build})" for a, b in pairs})
        out.append(
            Adjustment(
                ck,
                q,
                round(sum(diffs) / len(diffs)),
                min(diffs) - 2 * ROUNDING,
                max(diffs) + 2 * ROUNDING,
                f"{checkpoint_name(ck)} {q}: " + "; ".join(seen),
            )
        )
    for ck, _release, q, gib, low, high, how in mtp_bounds():
        if not any(o.checkpoint == ck and o.quant == q for o in out):
            out.append(Adjustment(ck, q, round(gib * GIB), round(low * GIB), round(high * GIB), how))
    return out


def _cross_build_mtp() -> list[Adjustment]:
    """MTP on minus off of one checkpoint and quantization measured on two builds or releases: not a
    share (the builds' W differ too), the evidence of last resort for a checkpoint family without a pair
    (the 3.36 bpw K6 figures: r25 MTP3 81.07 - r20 MTP0 78.83 GiB). Its band runs from zero to twice it."""
    rows = facts()
    groups: dict[tuple[str, str], list[tuple[Fact, Fact]]] = {}
    for a in rows:
        for b in rows:
            if (
                a.mtp > 0
                and b.mtp == 0
                and (a.checkpoint, a.online_quant, a.tp) == (b.checkpoint, b.online_quant, b.tp)
                and a.build != b.build
            ):
                groups.setdefault((a.checkpoint, a.online_quant), []).append((a, b))
    out = []
    for (ck, q), pairs in sorted(groups.items()):
        if any(x.build == y.build for x, y in mtp_pairs() if x.checkpoint == ck and x.online_quant == q):
            continue
        diffs = [a.bytes - b.bytes for a, b in pairs]
        value = round(sum(diffs) / len(diffs))
        seen = sorted(
            {f"{a.gib:.2f} MTP{a.mtp} ({a.release}) - {b.gib:.2f} GiB MTP0 ({b.release})" for a, b in pairs}
        )
        out.append(
            Adjustment(
                ck, q, value, 0, 2 * value, f"{checkpoint_name(ck)} {q}, across builds: " + "; ".join(seen)
            )
        )
    return out


def _quant_savings() -> list[Adjustment]:
    """(checkpoint, online quant, bytes saved against native, band, how): pairs of one build that differ
    only in the online quantization, a mean per checkpoint."""
    groups: dict[tuple[str, str], list[tuple[Fact, Fact]]] = {}
    for n, f in quant_pairs():
        groups.setdefault((f.checkpoint, f.online_quant), []).append((n, f))
    out: list[Adjustment] = []
    for (ck, q), pairs in sorted(groups.items()):
        diffs = [n.bytes - f.bytes for n, f in pairs]
        seen = sorted({f"{f.release}: native {n.gib:.2f} - {q} {f.gib:.2f} GiB" for n, f in pairs})
        out.append(
            Adjustment(
                ck,
                q,
                round(sum(diffs) / len(diffs)),
                min(diffs) - 2 * ROUNDING,
                max(diffs) + 2 * ROUNDING,
                f"{checkpoint_name(ck)} " + "; ".join(seen),
            )
        )
    return out


def _owner(checkpoint: str | None) -> str:
    """The hub owner of a checkpoint (its family: one quantizer's series shares a layout)."""
    parts = (checkpoint or "").strip("/").split("/")
    return parts[-2].lower() if len(parts) >= 2 else ""


def _pick(
    items: list[Adjustment], cfg: DeploymentConfig, q: str, *, weaker: list[Adjustment] | None = None
) -> Adjustment | None:
    """The measured adjustment for ``cfg``'s checkpoint and quantization ``q``, in order: its own (of one
    build, then ``weaker``: across builds); else its family's (one hub owner) of that quantization; else
    the mean over every checkpoint of that quantization; else over all. A transfer's band is the union of
    the bands it averages."""
    mine = checkpoint_name(cfg.model.path)
    owner = _owner(cfg.model.path)
    weak = weaker or []
    for pool in (
        [i for i in items if i.quant == q and checkpoint_name(i.checkpoint) == mine],
        [i for i in weak if i.quant == q and checkpoint_name(i.checkpoint) == mine],
        [i for i in items if i.quant == q and owner and _owner(i.checkpoint) == owner],
        [i for i in weak if i.quant == q and owner and _owner(i.checkpoint) == owner],
        [i for i in items if i.quant == q],
        items,
    ):
        if not pool:
            continue
        if len(pool) == 1 and checkpoint_name(pool[0].checkpoint) == mine:
            return pool[0]
        value = round(sum(i.value for i in pool) / len(pool))
        return Adjustment(
            mine,
            q,
            value,
            min(i.low for i in pool),
            max(i.high for i in pool),
            "transferred from " + "; ".join(i.how for i in pool),
        )
    return None


def _mtp_share(cfg: DeploymentConfig, q: str) -> Adjustment | None:
    return _pick(_mtp_shares(), cfg, q, weaker=_cross_build_mtp())


def build_spread() -> int:
    """How far the documented W of one checkpoint and setting moves from build to build: the widest
    spread over the table's groups (one checkpoint, MTP on/off, quantization, TP). The band of a figure
    measured on another release than the deployment's."""
    groups: dict[tuple[str, bool, str, int], list[int]] = {}
    for f in facts():
        groups.setdefault((f.checkpoint, f.mtp > 0, f.online_quant, f.tp), []).append(f.bytes)
    return max((max(v) - min(v) for v in groups.values()), default=0)


class _Band:
    """A point and the deviations below and above it that its adjustments carry (bytes)."""

    def __init__(self, value: int) -> None:
        self.value, self.down, self.up = value, ROUNDING, ROUNDING

    def add(self, adj: Adjustment, sign: int) -> None:
        self.value += sign * adj.value
        lo, hi = sign * (adj.low - adj.value), sign * (adj.high - adj.value)
        self.down += max(0, -min(lo, hi))
        self.up += max(0, max(lo, hi))

    def widen(self, by: int) -> None:
        self.down += by
        self.up += by


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
    band = _Band(base)
    band.widen((max(f.bytes for f in chosen) - min(f.bytes for f in chosen)) // 2)
    if f0.online_quant != q:
        if f0.online_quant == "none":
            saving = _pick(_quant_savings(), cfg, q)
            if saving is None:
                return None
            band.add(saving, -1)
            parts.append(f"- {q} saving {saving.value / GIB:.2f} GiB ({saving.how})")
        else:
            return None  # no measured way from one online quantization to another
    if (f0.mtp > 0) != mtp_on:
        share = _mtp_share(cfg, q) or _mtp_share(cfg, "none")
        if share is None:
            return None
        band.add(share, 1 if mtp_on else -1)
        parts.append(f"{'+' if mtp_on else '-'} MTP layer {share.value / GIB:.2f} GiB ({share.how})")
    if not exact and (target is None or best[3]):
        band.widen(build_spread())
    value, tp_how = scale_tp(band.value, f0.tp, cfg)
    low = scale_tp(band.value - band.down, f0.tp, cfg)[0]
    high = scale_tp(band.value + band.up, f0.tp, cfg)[0]
    formula = " ".join(parts) + tp_how + f" = {fmt_int(value)}"
    if exact:
        return Figure(value, "documented", formula, low=low, high=high)
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
    return Figure(value, "estimate", formula, "estimate: " + "; ".join(why), low=low, high=high)


def known(cfg: DeploymentConfig) -> bool:
    """Whether the documented table knows ``cfg``'s checkpoint (by its directory or hub name)."""
    return any(same_checkpoint(f.checkpoint, cfg) for f in facts())


# --- the payload (on disk or from the hub's file metadata) and other bit rates --------------------------


def payload_offset() -> tuple[int, int, int, str] | None:
    """Measured loaded-minus-payload/4 per rank at TP4, MTP0, native: (mean, lowest, highest, how) over the
    documented checkpoints whose payload and loaded W are both documented."""
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
    offs = [p[0] for p in pairs]
    return (
        round(sum(offs) / len(offs)),
        min(offs),
        max(offs),
        "; ".join(p[1] for p in pairs),
    )


def checkpoint_of(ctx: Context) -> CheckpointOnDisk | None:
    """The checkpoint the inputs carry (on disk, or the hub's metadata of it), when it is of this
    configuration's ``model.path``."""
    found = ctx.inputs.checkpoint
    if found is None or found.model_path != (ctx.config.model.path or ""):
        return None
    return found


def _from_payload(ctx: Context) -> Figure | None:
    found = checkpoint_of(ctx)
    if found is None or found.safetensors_bytes is None:
        return None
    return payload_figure(
        ctx.config, found.safetensors_bytes, found.files, found.directory, how=found.detail, tensors=found
    )


#: module names whose tensors every TP rank holds whole (:func:`tensor_role` says where vLLM builds them so)
_REPLICATED_MODULES = frozenset(
    {
        "q_a_proj",
        "kv_a_proj_with_mqa",
        "fused_qkv_a_proj",
        "gate",
        "wq_b",
        "wk",
        "weights_proj",
        "wk_weights_proj",
        "eh_proj",
    }
)


def tensor_role(
    name: str, g: ModelGeometry
) -> Literal["split", "replicated", "mtp", "mtp-replicated", "shared"]:
    """How vLLM's GLM-5.2 loader places one checkpoint tensor on the TP ranks, by its name (the module
    path; EXL3 tensors carry the same paths with their own suffixes). local-inference-lab/vllm@28be48f,
    vllm/model_executor/models/deepseek_v2.py (GlmMoeDsaForCausalLM L1818 is DeepseekV2ForCausalLM):

    * replicated, whole on every rank: the fused q_a / kv_a down-projection
      (``DeepSeekV2FusedQkvAProjLinear``, ``disable_tp=True``, L888-901; ``kv_a_proj_with_mqa``
      ``ReplicatedLinear`` L993), the router (``GateLinear(ReplicatedLinear)`` L273, its
      ``e_score_correction_bias`` L279), the indexer's ``wq_b`` (``ReplicatedLinear`` L627), ``wk`` +
      ``weights_proj`` (``MergedColumnParallelLinear(disable_tp=True)`` L636-641) and ``k_norm`` (L644),
      and every norm (``RMSNorm``);
    * split over TP: q_b / kv_b (``ColumnParallelLinear`` L1003, L1019), o_proj (``RowParallelLinear``
      L1026), the routed experts (``FusedMoE`` L327), the shared experts (``DeepseekV2MLP``: merged
      column / row parallel, L215-229), the embedding (``VocabParallelEmbedding`` L1307) and the head
      (``ParallelLMHead`` L1725);
    * the MTP layer (``model.layers.{num_hidden_layers + i}``, ``get_spec_layer_idx_from_weight_name``
      L1824-1836) is skipped by the target (L1459-1461) and loaded by the drafter only with MTP on
      (deepseek_mtp.py): its ``eh_proj`` is a plain ``nn.Linear`` (L310) and ``enorm`` / ``hnorm`` norms
      (L308-309), replicated; its ``shared_head.head`` a ``ParallelLMHead`` (L287), split; its
      ``embed_tokens`` is shared with the target (``_rewrite_spec_layer_name`` L822-838; the proposer
      keeps the target's, vllm/v1/spec_decode/llm_base_proposer.py L1351-1404): not loaded again.
    """
    parts = name.split(".")
    layer = None
    if len(parts) > 2 and parts[0] == "model" and parts[1] == "layers" and parts[2].isdigit():
        layer = int(parts[2])
    mtp = layer is not None and layer >= g.num_hidden_layers
    if mtp and "embed_tokens" in parts:
        return "shared"
    replicated = any(p in _REPLICATED_MODULES or p.endswith("norm") for p in parts)
    if mtp:
        return "mtp-replicated" if replicated else "mtp"
    return "replicated" if replicated else "split"


def payload_figure(
    cfg: DeploymentConfig,
    total: int,
    nfiles: int,
    where: str,
    *,
    how: str = "",
    tensors: CheckpointOnDisk | None = None,
) -> Figure:
    """W estimated from a checkpoint's safetensors payload (``total`` tensor bytes in ``nfiles`` files, as
    their headers or the hub's file sizes say): the payload / 4 plus the measured payload-to-loaded offset
    at TP4, the online quantization's saving and the MTP layer's share, split to the deployment's TP.
    With the tensors classified (``tensors``: the headers were read), the MTP layer's share is its own
    tensors per rank and the TP split keeps the replicated tensors whole; else the measured share and the
    geometry's replicated tensors. The band: the offsets' spread and the adjustments' bands."""
    off = payload_offset()
    base = -(-total // 4)
    if tensors is not None and tensors.origin == "hub":
        read = "headers" if tensors.replicated_bytes is not None else "file sizes"
        formula = f"the hub's safetensors {read} of {where}: {fmt_int(total)} B in {nfiles} files / 4"
    else:
        formula = f"safetensors headers of {where}: {fmt_int(total)} B in {nfiles} files / 4"
    band = _Band(base)
    if off is not None:
        mean, lo, hi, src = off
        band.value += mean
        band.down += mean - lo
        band.up += hi - mean
        formula += (
            f" + measured payload-to-loaded offset {mean / GIB:+.2f} GiB "
            f"[{lo / GIB:+.2f}, {hi / GIB:+.2f}] ({src})"
        )
    q = cfg.model.online_quant
    if q != "none":
        saving = _pick(_quant_savings(), cfg, q)
        if saving is not None:
            band.add(saving, -1)
            formula += f" - {q} saving {saving.value / GIB:.2f} GiB"
    classified = tensors is not None and tensors.replicated_bytes is not None
    own_mtp = (
        classified
        and tensors is not None
        and bool((tensors.mtp_bytes or 0) + (tensors.mtp_replicated_bytes or 0))
    )
    if cfg.mtp > 0:
        # the MTP layer's own tensors where the headers hold one; a checkpoint without it (its draft
        # elsewhere) takes the measured share
        if own_mtp:
            assert tensors is not None
            mine = -(-(tensors.mtp_bytes or 0) // 4) + (tensors.mtp_replicated_bytes or 0)
            band.value += mine
            formula += (
                f" + MTP layer {mine / GIB:.2f} GiB (its tensors: {fmt_int(tensors.mtp_bytes or 0)} B / 4 + "
                f"{fmt_int(tensors.mtp_replicated_bytes or 0)} B replicated)"
            )
        else:
            share = _mtp_share(cfg, q) or _mtp_share(cfg, "none")
            if share is not None:
                band.add(share, 1)
                formula += f" + MTP layer {share.value / GIB:.2f} GiB"
    if classified and cfg.parallel.tp != 4:
        assert tensors is not None
        rep = (tensors.replicated_bytes or 0) + ((tensors.mtp_replicated_bytes or 0) if cfg.mtp > 0 else 0)
        rep = min(rep, band.value)

        def split(v: int) -> int:
            return rep + (v - rep) * 4 // cfg.parallel.tp

        value = split(band.value)
        low, high = split(band.value - band.down), split(band.value + band.up)
        tp_how = (
            f"; TP4 -> TP{cfg.parallel.tp}: replicated {fmt_int(rep)} B (the headers' replicated tensors) "
            f"+ the rest x 4/{cfg.parallel.tp}"
        )
    else:
        value, tp_how = scale_tp(band.value, 4, cfg)
        low = scale_tp(band.value - band.down, 4, cfg)[0]
        high = scale_tp(band.value + band.up, 4, cfg)[0]
    note = "estimate from the safetensors payload" + (f": {how}" if how else "")
    return Figure(value, "estimate", formula + tp_how + f" = {fmt_int(value)}", note, low=low, high=high)


def _bits(name: str) -> float | None:
    fmt = weight_format(name)
    return fmt.expert_bits if fmt is not None and fmt.label.endswith("bpw") else None


def dense_params_per_rank(cfg: DeploymentConfig) -> int:
    """Linear parameters one TP rank holds split outside the routed experts: the attention up / out
    projections and the shared expert of every MoE layer (the dense layers' MLP is left out: the geometry
    does not carry its width)."""
    g = cfg.model.geometry
    heads = g.num_attention_heads
    attn = g.q_lora_rank * heads * (g.qk_nope_head_dim + g.qk_rope_head_dim)
    attn += g.kv_lora_rank * heads * (g.qk_nope_head_dim + g.v_head_dim)
    attn += heads * g.v_head_dim * g.hidden_size
    moe_layers = g.num_hidden_layers - g.first_k_dense_replace
    shared = 3 * g.hidden_size * g.moe_intermediate_size
    return (g.num_hidden_layers * attn + moe_layers * shared) // cfg.parallel.tp


#: the band of a W rescaled from another storage format: the unmeasured part (bytes per rank)
FORMAT_BAND = 0.10


def _other_bit_rate(cfg: DeploymentConfig, fmt: WeightFormat | None = None) -> Figure | None:
    """Another storage of the same model: the nearest documented EXL3 bit rate, the routed experts (and,
    for a format that stores them narrower than BF16, the other linear layers) rescaled to the bits the
    checkpoint's name states (or ``fmt``). Its band: 10 % of what was rescaled, on top of the base's."""
    fmt = fmt or weight_format(cfg.model.path)
    if fmt is None:
        return None
    known_bits = sorted(
        {
            (abs((_bits(checkpoint_name(f.checkpoint)) or 99) - fmt.expert_bits), f.checkpoint)
            for f in facts()
            if _bits(checkpoint_name(f.checkpoint)) is not None
        }
    )
    base = None
    ref = ""
    for _distance, ref in known_bits:
        # the nearest documented bit rate whose table reaches this setting (the R7 checkpoint's one K6
        # figure, for one, does not reach a native load)
        model = cfg.model.model_copy(update={"path": ref, "revision": None})
        ref_cfg = cfg.model_copy(update={"model": model})
        base = documented(ref_cfg)
        if base is not None:
            break
    if base is None:
        return None
    ref_bpw = _bits(checkpoint_name(ref)) or fmt.expert_bits
    experts = expert_params_per_rank(cfg)
    delta = round(experts * (fmt.expert_bits - ref_bpw) / 8)
    formula = (
        f"{base.formula}; routed experts at {fmt.expert_bits:g} instead of {ref_bpw:g} bits: "
        f"{fmt_int(experts)} params/rank x {fmt.expert_bits - ref_bpw:+g}/8 B"
    )
    if fmt.dense_bits != 16.0:
        dense = dense_params_per_rank(cfg)
        d2 = round(dense * (fmt.dense_bits - 16.0) / 8)
        delta += d2
        formula += (
            f"; attention and shared experts at {fmt.dense_bits:g} bits, not BF16: "
            f"{fmt_int(dense)} x {fmt.dense_bits - 16:+g}/8 B"
        )
    value = base.value + delta
    lo, hi = base.range
    spread = round(abs(delta) * FORMAT_BAND)
    return Figure(
        value,
        "estimate",
        f"{formula} = {fmt_int(value)}",
        f"estimate from {checkpoint_name(ref)} (another bit rate: {fmt.label} read from the name)",
        low=lo + delta - spread,
        high=hi + delta + spread,
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
        spread = build_spread()
        return Figure(
            cal,
            "estimate",
            formula,
            "estimate from boots of another setting or release",
            low=cal - spread - ROUNDING,
            high=cal + spread + ROUNDING,
        )
    return Figure(
        cal,
        "record" if model_origin == "calibrated" else "rig-defaults",
        formula,
        low=cal - ROUNDING,
        high=cal + ROUNDING,
    )


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
            low=explicit,
            high=explicit,
        )
    candidates = [f for f in (cal, documented(cfg)) if f is not None]
    if candidates:
        # records and the documented table compete on quality: a record of another release is an estimate
        # and does not beat a documented figure of this release
        return min(candidates, key=lambda f: _QUALITY[f.source])
    payload = _from_payload(ctx)
    if payload is not None:
        found = checkpoint_of(ctx)
        src = "the hub's file metadata" if found is not None and found.origin == "hub" else "disk"
        return _unknown(cfg, payload, f"from its safetensors payload ({src}) and the measured offset")
    asked = checkpoint_of(ctx)
    hub = f": {asked.detail}" if asked is not None and asked.origin == "hub" else ""
    lesser = _other_bit_rate(cfg)
    if lesser is not None:
        fmt = weight_format(cfg.model.path)
        assert fmt is not None
        lesser = _unknown(
            cfg,
            lesser,
            f"offline (no payload of it on disk or from the hub{hub}), from the nearest documented bit rate "
            f"rescaled to the {fmt.label} its name states",
        )
    else:
        fallback = facts()[0]
        value, tp_how = scale_tp(fallback.bytes, fallback.tp, cfg)
        # Nothing says how the checkpoint is stored: the band spans the narrowest documented checkpoint to
        # the whole model in BF16.
        lows = [scale_tp(f.bytes, f.tp, cfg)[0] for f in facts()]
        bf16 = _other_bit_rate(cfg, WeightFormat(16.0, 16.0, "BF16"))
        lesser = _unknown(
            cfg,
            Figure(
                value,
                "default",
                f"{fallback.gib:.2f} GiB ({checkpoint_name(fallback.checkpoint)}, {fallback.source}){tp_how} "
                f"= {fmt_int(value)}",
                "a built-in default: nothing is known of this checkpoint "
                "(set model.weights_per_rank or calibrate)",
                low=min(lows),
                high=bf16.range[1] if bf16 is not None else max(lows),
            ),
            f"a built-in default: neither its payload (on disk or from the hub{hub}) nor its storage format "
            "(from its name) is known, so the band runs from the narrowest documented checkpoint to the "
            "whole model in BF16",
        )
    unpriced = checkpoint_of(ctx)
    if unpriced is not None and not unpriced.priced and unpriced.origin != "hub":
        # a checkpoint on disk that could have priced W, and why it did not
        lesser = replace(lesser, note=f"{lesser.note}; {unpriced_note(unpriced)}")
    return lesser


def _unknown(cfg: DeploymentConfig, fig: Figure, how: str) -> Figure:
    """``fig`` with the plan's warning that the checkpoint is not one glmlaunch knows."""
    lo, hi = fig.range
    return replace(
        fig,
        warning=(
            f"weights: {cfg.model.path or 'the checkpoint'} is not a checkpoint glmlaunch knows (no "
            f"documented boot or calibration record of it): W {fig.value / GIB:.2f} GiB per rank "
            f"[{lo / GIB:.2f}, {hi / GIB:.2f}] is an estimate, {how}; set model.weights_per_rank, or "
            "calibrate from a boot log (glmlaunch calibrate ingest)"
        ),
    )


def unpriced_note(found: CheckpointOnDisk) -> str:
    return (
        f"the checkpoint at {found.directory} is ignored (W is not priced from its payload): {found.detail}"
    )


def payload_note(ctx: Context) -> str | None:
    """The plan's note on the checkpoint on disk: W priced from its payload, or why it was not; None when
    none was found or W is known better (a documented, calibrated or explicit figure)."""
    found = checkpoint_of(ctx)
    if found is None or (found.origin == "hub" and not found.priced):
        return None  # the hub's reason is in the plan's warning
    if not found.priced:
        return f"weights: {unpriced_note(found)}"
    fig = decide(ctx)
    if replace(fig, warning=None) != _from_payload(ctx):
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
