"""The appliance's documented boots as calibration evidence: shapes and figures from ``data/upstream``.

``data/upstream/capacities.json`` and ``terms.json`` hold every KV capacity and budget-term set the
appliance's records state (malaiwah/glm52-exl3-vast at eba43a5: TEST_RESULTS.md and docs/, each row with
its file, lines and a verbatim quote; a shape field the record does not state is null, an inference is
listed under ``assumed``). This module turns a row into the configuration that booted — the shipped
profile of its checkpoint with the row's shape on top — and the budget figures it logged. Rows flagged as
overlapping held-out material, vision grafts, other model families and shapes the record leaves too open
(no DCP, MTP or GMU) are not used.

Used by ``scripts/derive_rig_defaults.py`` (the release overheads of the rig defaults) and by
``bench/calibration_accuracy.py`` (predicted against logged capacities); never at plan time, so it is not
part of the package: import it with scripts/ on the path.
``readme_capacities.json`` holds the same kind of rows from local-inference-lab/blackwell-llm-docker's README
(the R7 checkpoint's KV pools on Gilded Gnosis r34): the checkpoint offsets of the rig defaults.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import GIB

#: the shipped profile of each documented checkpoint (by bit rate)
PROFILE_OF_BPW: dict[float, str] = {
    3.0: "turnkey",
    3.25: "exl3-tr3-3.25bpw",
    3.36: "exl3-tr3-3.36bpw",
    3.42: "exl3-tr3-3.42bpw",
    # the R7 mixed-K3/K4/K5 checkpoint of blackwell-llm-docker's README (readme_capacities.json)
    3.5: "r34-exl3-r7",
}
#: the release repository's README figures (blackwell-llm-docker@3dd078a), in the same row format
README_CAPACITIES = "readme_capacities.json"
_LMCACHE = {"lmcache": True, "native": False, "none": False}


@dataclass(frozen=True)
class DocumentedBoot:
    id: str
    release: str | None  # as glmlaunch names releases (r9, r28, v31)
    config: DeploymentConfig
    status: str  # complete | refused
    kv_tokens: int | None
    available_kv: int | None  # bytes, from "x.xx GiB" (two decimals)
    w: int | None  # logged W, bytes
    p: int | None
    n: int | None
    pinned: bool
    source: str
    assumed: tuple[str, ...]


def release_label(key: str | None) -> str | None:
    """The evidence tables' release key as glmlaunch names releases (r14-field and r14+210/219 are r14)."""
    if not key:
        return None
    m = re.match(r"^(r[0-9]+)", key) or re.match(r"^(v[0-9]+)", key)
    return m.group(1) if m else key


def _assumed(row: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in row.get("assumed") or []:
        field = str(a.get("field", ""))
        if field.startswith("shape.") and not field.endswith("*"):
            out[field.removeprefix("shape.")] = a.get("value")
    return out


def _bytes(gib: float | None) -> int | None:
    return None if gib is None else round(float(gib) * GIB)


def settings_for(row: Mapping[str, Any]) -> tuple[list[str], tuple[str, ...]] | None:
    """``--set`` overrides that put a row's shape on its checkpoint's profile, and what was assumed."""
    shape = dict(row["shape"])
    assumed = _assumed(row)
    used: list[str] = []
    for key, value in assumed.items():
        if shape.get(key) is None and value is not None:
            shape[key] = value
            used.append(f"{key}={value}")
    if row.get("flags") or shape.get("vision"):
        return None
    if shape.get("dcp") is None or shape.get("mtp") is None or shape.get("gpu_memory_utilization") is None:
        return None
    sets = [
        f"parallel.dcp={shape['dcp']}",
        f"speculative.num_speculative_tokens={shape['mtp']}",
        f"memory.gpu_memory_utilization={shape['gpu_memory_utilization']}",
        f"memory.num_gpu_blocks_override={shape['num_gpu_blocks_override'] or 'null'}",
    ]
    mnbt = shape.get("max_num_batched_tokens")
    if mnbt is not None:
        sets.append(f"scheduler.max_num_batched_tokens={mnbt}")
    cap = shape.get("exl3_prefill_capacity")
    if cap is not None:
        sets.append(f"exl3.prefill_capacity={cap}")
    elif mnbt is not None:
        # the launchers' default: the arena follows the scheduler chunk
        sets.append("exl3.prefill_capacity=null")
    for key, setting in (
        ("max_num_seqs", "scheduler.max_num_seqs"),
        ("max_model_len", "scheduler.max_model_len"),
        ("kv_cache_dtype", "memory.kv_cache_dtype"),
        ("kv_scale_mode", "memory.kv_scale_mode"),
        ("online_quant", "model.online_quant"),
        ("load_format", "model.load_format"),
        ("trellis_max", "exl3_trellis_max_m"),
        ("fold_max_mib", "indexer.fold_max_mib"),
        ("ckv_gather_max_tokens", "dcp_policy.ckv_gather_max_tokens"),
        ("interleave", "server.dcp_kv_cache_interleave_size"),
        ("indexer_shards", "dcp_policy.indexer_shards"),
    ):
        if shape.get(key) is not None:
            sets.append(f"{setting}={shape[key]}")
    if shape.get("kv_cache_dtype") not in (None, "nvfp4_ds_mla"):
        sets.append("memory.kv_scale_mode=null")
    if shape.get("capture_max") is not None:
        top = int(shape["capture_max"])
        sets += [f"cudagraph.capture_rule={{step: 4, max: {top}}}", f"cudagraph.max_capture_size={top}"]
        if shape.get("trellis_max") is None:
            sets.append(f"exl3_trellis_max_m={max(top, 32)}")
    offload = shape.get("offload")
    if offload in _LMCACHE:
        sets.append(f"lmcache={'true' if _LMCACHE[offload] else 'false'}")
    release = release_label((row.get("release") or {}).get("key"))
    if shape.get("indexer_shards") is None and int(shape["dcp"]) > 1 and _before_two_shards(release):
        # The profiles carry r26's two-shard indexer policy; every earlier release ran the indexer
        # DCP-sharded (0): "Its second exact indexer shard reduced the auto-sized logical pool from 771,584
        # to 717,312 tokens" (r26, TEST_RESULTS.md L1293-1295), "bypassing r26's two-shard policy" (L1305-
        # 1310), and the r14 boot logs print indexer-shards=0.
        sets.append("dcp_policy.indexer_shards=0")
        used.append("indexer_shards=0 (before r26's two-shard policy: TEST_RESULTS.md L1293-1310)")
    sets.append(f"release={release}" if release and re.fullmatch(r"[rv][0-9]+", release) else "release=null")
    return sets, tuple(used)


def _before_two_shards(release: str | None) -> bool:
    """Whether a release predates the appliance's r26 indexer policy (the v-numbered images all do)."""
    if release is None:
        return False
    if release.startswith("v"):
        return True
    m = re.fullmatch(r"r([0-9]+)", release)
    return m is not None and int(m.group(1)) < 26


def boot_of(row: Mapping[str, Any], terms: Mapping[str, Any] | None = None) -> DocumentedBoot | None:
    """One documented boot as a configuration and its figures; None when it cannot be one."""
    from glmlaunch.config.resolve import resolve_config
    from glmlaunch.errors import GlmlaunchError

    bpw = (row.get("checkpoint") or {}).get("bpw")
    profile = PROFILE_OF_BPW.get(float(bpw)) if bpw is not None else None
    made = settings_for(row)
    if profile is None or made is None:
        return None
    sets, assumed = made
    try:
        config = resolve_config(profile, sets, environ={}).config
    except GlmlaunchError:
        return None
    logged = row.get("logged") or {}
    t = dict(terms or {})
    src = row["source"][0] if row.get("source") else {}
    return DocumentedBoot(
        id=str(row["id"]),
        release=release_label((row.get("release") or {}).get("key")),
        config=config,
        status=str(row.get("status", "complete")),
        kv_tokens=logged.get("kv_tokens"),
        available_kv=_bytes(logged.get("available_kv_gib") or t.get("available_kv_gib")),
        w=_bytes(logged.get("W_gib") or t.get("W_gib")),
        p=_bytes(t.get("P_gib")),
        n=_bytes(t.get("N_gib")),
        pinned=bool(config.memory.num_gpu_blocks_override),
        source=f"{src.get('file', '?')} L{(src.get('lines') or ['?'])[0]}",
        assumed=assumed,
    )


def load(root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    caps = json.loads((root / "capacities.json").read_text(encoding="utf-8"))
    terms = json.loads((root / "terms.json").read_text(encoding="utf-8"))
    return caps, terms


def documented_boots(root: Path) -> list[DocumentedBoot]:
    """Every usable documented boot, capacity rows joined with their term rows (by ``capacity_ref``)."""
    caps, terms = load(root)
    by_ref = {str(t.get("capacity_ref")): t.get("terms") for t in terms["rows"] if t.get("capacity_ref")}
    out = []
    for row in caps["rows"]:
        boot = boot_of(row, by_ref.get(str(row["id"])))
        if boot is not None:
            out.append(boot)
    return out


def readme_boots(root: Path) -> list[DocumentedBoot]:
    """The README's documented boots (``readme_capacities.json``): each names one checkpoint's shape."""
    path = root / README_CAPACITIES
    if not path.exists():
        return []
    rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
    return [b for b in (boot_of(row) for row in rows) if b is not None]


def sized_pool(boot: DocumentedBoot) -> bool:
    """Whether vLLM sized this boot's pool from memory (its KV tokens then measure the budget)."""
    return boot.status == "complete" and not boot.pinned and boot.kv_tokens is not None


def observed_overhead(boot: DocumentedBoot, w: int, bytes_per_token: int) -> int | None:
    """P + N + G_e the boot's pool implies: R - W - KV, with KV the middle of its last 64-token block."""
    if not sized_pool(boot) or boot.kv_tokens is None:
        return None
    from glmlaunch.ledger.terms import gate_bytes

    cfg = boot.config
    per_rank = boot.kv_tokens // cfg.parallel.dcp
    kv = per_rank * bytes_per_token + 32 * bytes_per_token
    return gate_bytes(cfg.memory.gpu_memory_utilization, cfg.hardware.memory_per_gpu) - w - kv


def ids(boots: Iterable[DocumentedBoot]) -> list[str]:
    return [b.id for b in boots]
