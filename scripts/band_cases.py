"""Every allowed boot as a case, and the leave-one-shape-out / leave-one-release-out over them.

The allowed boots: the shared logs (tests/fixtures/boot-logs, the same files as ../shared/boot-logs), the
appliance's documented capacities (data/upstream/capacities.json, terms.json: TEST_RESULTS.md and docs/,
scripts/documented_boots.py) and the release repository's README figures (readme_capacities.json).

A case is held out by re-deriving the rig defaults without it (``derive_rig_defaults.derive_document`` on
the remaining logs and a copy of data/upstream without its rows) and planning its configuration with that
model, in process. Used by ``scripts/derive_band.py`` (the measured transfer errors the band ships with,
glmlaunch/ledger/band_facts.json) and ``bench/calibration_accuracy.py --band`` (the table in
bench/RESULTS.md). Build-time code: import it with scripts/ on the path.

Caveat: the documented W table (glmlaunch/ledger/weights_facts.json) is package data fitted on the same
documents and stays in; a held-out documented boot's W is in sample.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from glmlaunch.config.schema import DeploymentConfig

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "fixtures" / "boot-logs"
DOCUMENTED = ROOT / "data" / "upstream"


@dataclass(frozen=True)
class Case:
    id: str
    origin: str  # log | documented | readme
    release: str | None
    config: DeploymentConfig
    version: str | None
    #: logged KV tokens of a pool vLLM sized from memory (None: pinned, refused or not stated)
    kv_tokens: int | None
    #: a boot that served (covers its shape); a refused one does not
    complete: bool
    #: vLLM refused to start it (the KV budget could not hold one request)
    refused: bool
    u_pre: int | None
    log_path: str | None
    source: str

    @property
    def sized(self) -> bool:
        return self.kv_tokens is not None


@lru_cache(maxsize=1)
def cases() -> tuple[Case, ...]:
    from documented_boots import documented_boots, readme_boots, sized_pool

    from glmlaunch.calibrate.ingest import ingest_logs
    from glmlaunch.calibrate.learn import record_point

    out: list[Case] = []
    paths = sorted(LOGS.glob("*.log"))
    records = [i.record for i in ingest_logs(paths, config=None, profile=None, inventory=None, store=None)]
    for path, rec in zip(paths, records, strict=True):
        pt = record_point(rec)
        if pt is None:
            continue
        boot = rec.boot
        tokens = boot.engine.kv_cache_tokens
        pinned = pt.config.memory.num_gpu_blocks_override is not None
        out.append(
            Case(
                id=path.stem,
                origin="log",
                release=pt.config.release_effective,
                config=pt.config,
                version=pt.vllm_version,
                kv_tokens=tokens if tokens and not pinned and not boot.refused else None,
                complete=bool(boot.complete and not boot.refused),
                refused=bool(boot.refused),
                u_pre=pt.u_pre,
                log_path=str(path),
                source=f"tests/fixtures/boot-logs/{path.name}",
            )
        )
    for origin, boots in (("documented", documented_boots(DOCUMENTED)), ("readme", readme_boots(DOCUMENTED))):
        for b in boots:
            out.append(
                Case(
                    id=b.id,
                    origin=origin,
                    release=b.release,
                    config=b.config,
                    version=None,
                    kv_tokens=b.kv_tokens if sized_pool(b) else None,
                    complete=b.status == "complete",
                    refused=b.status == "refused",
                    u_pre=None,
                    log_path=None,
                    source=b.source,
                )
            )
    return tuple(out)


def shape_of(case: Case) -> tuple[object, ...]:
    from glmlaunch.ledger.band import shape_key

    return shape_key(case.config)


def _filtered_root(excluded: set[str], into: Path) -> Path:
    for f in DOCUMENTED.iterdir():
        if f.suffix != ".json":
            continue
        doc = json.loads(f.read_text(encoding="utf-8"))
        if f.name in ("capacities.json", "readme_capacities.json"):
            doc["rows"] = [r for r in doc["rows"] if str(r["id"]) not in excluded]
        elif f.name == "terms.json":
            doc["rows"] = [r for r in doc["rows"] if str(r.get("capacity_ref")) not in excluded]
        else:
            shutil.copy(f, into / f.name)
            continue
        (into / f.name).write_text(json.dumps(doc), encoding="utf-8")
    return into


def model_without(excluded: Iterable[str]) -> Any:
    """The rig defaults' term model derived without the ``excluded`` cases (ids)."""
    from derive_rig_defaults import derive_document

    from glmlaunch.calibrate.rigdefaults import model_from_document

    gone = set(excluded)
    logs = [c.log_path for c in cases() if c.origin == "log" and c.id not in gone and c.log_path]
    with tempfile.TemporaryDirectory() as tmp:
        doc = derive_document(logs, _filtered_root(gone, Path(tmp)))
    return model_from_document(doc)


def predict(model: Any, case: Case) -> Any:
    """The budget of ``case``'s configuration planned with ``model`` (a Budget)."""
    from glmlaunch.calibrate.apply import model_calibration
    from glmlaunch.plan.plan import make_plan

    cal = model_calibration(case.config, model, version=case.version)
    return make_plan(case.config, inputs=cal).budget


@dataclass(frozen=True)
class Row:
    case: Case
    mode: str  # fitted | shape | release
    #: what the held-out case's release still had on record: shape (other shapes of it), release (none)
    transfer: str
    predicted: int
    error: float  # relative, (predicted - logged) / logged
    error_bytes: int  # KV bytes per rank, predicted - logged
    budget: Any

    def to_json(self) -> dict[str, Any]:
        c = self.case
        return {
            "id": c.id,
            "origin": c.origin,
            "release": c.release,
            "mode": self.mode,
            "transfer": self.transfer,
            "logged": c.kv_tokens,
            "predicted": self.predicted,
            "error": self.error,
            "error_bytes": self.error_bytes,
            "band": list(self.budget.kv_tokens_range),
            "source": c.source,
        }


def _row(case: Case, mode: str, transfer: str, budget: Any) -> Row:
    assert case.kv_tokens is not None
    dcp = case.config.parallel.dcp
    err_tokens = budget.kv_tokens - case.kv_tokens
    return Row(
        case=case,
        mode=mode,
        transfer=transfer,
        predicted=budget.kv_tokens,
        error=err_tokens / case.kv_tokens,
        error_bytes=err_tokens // dcp * budget.kv_bytes_per_token,
        budget=budget,
    )


def leave_out(mode: str) -> list[Row]:
    """``fitted`` (every case in), ``shape`` (every case of the held-out case's shape out) or ``release``
    (every case of its release out), over every case whose pool vLLM sized from memory."""
    every = cases()
    targets = [c for c in every if c.sized]
    if mode == "fitted":
        model = model_without(())
        return [_row(c, mode, "none", predict(model, c)) for c in targets]
    group = shape_of if mode == "shape" else (lambda c: c.release)
    rows: list[Row] = []
    by_group: dict[object, list[Case]] = {}
    for c in targets:
        by_group.setdefault(group(c), []).append(c)
    for key, members in by_group.items():
        out = {c.id for c in every if group(c) == key}
        model = model_without(out)
        for c in members:
            left = [o for o in every if o.id not in out and o.sized and o.release == c.release]
            transfer = "shape" if left else "release"
            rows.append(_row(c, mode, transfer, predict(model, c)))
    return rows


def u_pre_rows() -> list[dict[str, Any]]:
    """Leave-one-out of T - F0 over the logs that state it."""
    out = []
    for c in cases():
        if c.u_pre is None:
            continue
        model = model_without({c.id})
        b = predict(model, c)
        out.append(
            {
                "id": c.id,
                "release": c.release,
                "dcp": c.config.parallel.dcp,
                "logged_bytes": c.u_pre,
                "predicted_bytes": b.u_pre,
                "error_bytes": b.u_pre - c.u_pre,
            }
        )
    return out


def w_release_rows() -> list[dict[str, Any]]:
    """The documented W of one checkpoint (bit rate, online quantization, MTP k) across releases and builds
    (data/upstream/weights.json, TP4): what taking another release's figure can be off by."""
    rows = json.loads((DOCUMENTED / "weights.json").read_text(encoding="utf-8"))["rows"]
    groups: dict[tuple[object, ...], list[dict[str, Any]]] = {}
    for r in rows:
        bpw = (r.get("checkpoint") or {}).get("bpw")
        if bpw is None or r.get("vision") or r.get("flags") or r.get("max_num_batched_tokens"):
            continue
        key = (bpw, r.get("online_quant"), (r.get("mtp") or {}).get("k"))
        groups.setdefault(key, []).append(r)
    out = []
    for members in groups.values():
        gibs = sorted(float(m["weights_gib_per_rank"]) for m in members)
        if len({str((m.get("release") or {}).get("label")) for m in members}) < 2:
            continue
        lo = min(members, key=lambda m: float(m["weights_gib_per_rank"]))
        hi = max(members, key=lambda m: float(m["weights_gib_per_rank"]))
        out.append({"id": hi["id"], "from": lo["id"], "error_bytes": round((gibs[-1] - gibs[0]) * 1024**3)})
    return sorted(out, key=lambda r: str(r["id"]))


def w_estimate_rows() -> list[dict[str, Any]]:
    """Each documented W (data/upstream/weights.json, TP4) against the nearest other bit rate's of the same
    online quantization and MTP setting: the error of the fallback an unknown checkpoint gets."""
    rows = json.loads((DOCUMENTED / "weights.json").read_text(encoding="utf-8"))["rows"]
    usable = [
        r
        for r in rows
        if (r.get("checkpoint") or {}).get("bpw") is not None
        and r.get("tp") in (4, None)
        and not r.get("vision")
        and not r.get("flags")
    ]

    def mtp_on(r: dict[str, Any]) -> bool:
        return bool((r.get("mtp") or {}).get("k"))

    out = []
    for r in usable:
        bpw = float(r["checkpoint"]["bpw"])
        others = [
            o
            for o in usable
            if float(o["checkpoint"]["bpw"]) != bpw
            and o.get("online_quant") == r.get("online_quant")
            and mtp_on(o) == mtp_on(r)
        ]
        if not others:
            continue
        near = min(others, key=lambda o: (abs(float(o["checkpoint"]["bpw"]) - bpw), o["id"]))
        err = round((float(near["weights_gib_per_rank"]) - float(r["weights_gib_per_rank"])) * 1024**3)
        out.append({"id": r["id"], "from": near["id"], "error_bytes": err})
    return out
