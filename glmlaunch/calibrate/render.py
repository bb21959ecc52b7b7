"""Tables and JSON documents for the calibrate commands (data only; messages go to stderr elsewhere)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from glmlaunch.calibrate.model import FEATURE_DOC, TERM_DOC, TermModel
from glmlaunch.calibrate.records import NOT_REACHED_KV, TRUNCATED_NOTE, Calibration
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import GIB, format_size


def _sz(n: int | None) -> str:
    return "—" if n is None else format_size(n)


def terms_table(record: Calibration) -> Table:
    boot = record.boot
    title = f"calibration {record.record_id}: {boot.source}"
    caption = (
        "W weights, P peak activation, N non-torch, G_e graph estimate, G graph actual, T-F0 before snapshot"
    )
    table = Table(title=title, caption=caption, expand=False)
    for col in ("rank", "W", "P", "N", "G_e", "G", "T-F0", "KV", "found", "missing"):
        table.add_column(col, no_wrap=col not in ("found", "missing"))
    for obs, t in zip(boot.ranks, record.ranks, strict=True):
        table.add_row(
            obs.rank,
            _sz(t.weights_bytes),
            _sz(t.activation_peak_bytes),
            _sz(t.non_torch_bytes),
            _sz(t.graph_estimate_bytes),
            _sz(t.graph_actual_bytes),
            _sz(t.pre_snapshot_bytes),
            _sz(t.kv_cache_bytes),
            f"{len(obs.found)} lines",
            ", ".join(obs.missing + [f"unparsed {u.split(':', 1)[0]}" for u in obs.unparsed]) or "—",
        )
    return table


def _gib(n: int | None) -> str:
    """A figure vLLM printed as ``%.2f GiB``, in its own unit (not a finer one it never gave)."""
    return "?" if n is None else f"{n / GIB:.2f} GiB"


def record_report(record: Calibration) -> list[str]:
    """What ``ingest`` and ``show`` say of one record on stderr: each fact once, one line each.

    A refusal is said in vLLM's figures with what the record still serves for; a truncated log in one line
    with the terms it lacks. The record's notes follow, less the ones these lines already say.
    """
    boot = record.boot
    lines: list[str] = []
    if record.supervised is not None:
        sup = record.supervised
        line = f"supervised boot {sup.boot_id} (glmlaunch boots {sup.boot_id}): {sup.outcome}"
        if sup.exit_status:
            line += f", {sup.exit_status}"
        if sup.diagnosis:
            line += f"; {sup.diagnosis}"
        lines.append(line)
    eng = boot.engine
    if eng.kv_cache_tokens is not None:
        lines.append(f"GPU KV cache size: {eng.kv_cache_tokens:,} tokens")
    if eng.vllm_version:
        lines.append(f"vLLM {eng.vllm_version}")
    refusals: list[str] = []
    for ref in [*eng.refusals, *boot.unattributed_refusals, *(x for r in boot.ranks for x in r.refusals)]:
        if ref.kind == "kv-too-small":
            refusals.append(
                f"REFUSED: one {ref.max_model_len or '?'}-token request needs {_gib(ref.kv_needed_bytes)} "
                f"of KV, {_gib(ref.kv_available_bytes)} available; "
                f"estimated max model length {ref.estimated_max_model_len}"
            )
        elif ref.kind == "start-gate":
            refusals.append(
                f"REFUSED at the start gate: free {_gib(ref.free_bytes)} < "
                f"GMU {ref.gpu_memory_utilization} x T = {_gib(ref.requested_bytes)}"
            )
        else:
            refusals.append(f"REFUSED: {ref.message[:200]}")
    refusals = list(dict.fromkeys(refusals))  # every rank may write the same refusal
    if boot.refused and refusals:
        refusals[-1] += (
            "; not usable on its own, but its W, G_e and P + N still calibrate the term model"
            if record.ranks
            else "; the log has no worker rank lines"
        )
    lines += refusals
    cut = "the log ends in the middle of a line" if boot.ends_mid_line else ""
    if not boot.complete and not boot.refused:
        cut = NOT_REACHED_KV + (f" ({cut})" if cut else "")
    if not record.usable and not boot.refused:
        if cut and record.ranks:
            lines.append(
                f"truncated: {cut}, so it lacks {', '.join(record.missing_terms())}; not usable on its own, "
                "but the terms it has still calibrate the term model"
            )
        else:
            lines.append(f"not usable on its own: {record.unusable_reason()}")
    elif cut:
        lines.append(f"truncated: {cut}")
    said = {TRUNCATED_NOTE}  # said above, with the terms it lacks
    lines += [n for n in record.notes if n not in said]
    return lines


def _exl3_section(obs: Any) -> dict[str, Any] | None:
    """What the rank said of its EXL3 runtime: the mixed-Trellis plan, the R7 arenas (one per owner and
    geometry), the fallback's runtime, the fused layers and the route-pack warm-up; None without any."""
    parts = {
        "plan": obs.exl3,
        "draft_plan": obs.exl3_draft,
        "r7_arenas": obs.r7_arenas,
        "r7_graph_runtime": obs.r7_graph_runtime,
        "r7_fused_layers": obs.r7_fused_layers,
        "route_pack_warmup": obs.route_pack_warmup,
    }
    if not any(v for v in parts.values()):
        return None
    out: dict[str, Any] = {}
    for key, value in parts.items():
        if isinstance(value, list):
            out[key] = [v.model_dump(mode="json") for v in value]
        elif hasattr(value, "model_dump"):
            out[key] = value.model_dump(mode="json")
        else:
            out[key] = value
    return out


def record_document(record: Calibration, *, residuals: Any = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "record_id": record.record_id,
        "created_at": record.created_at.isoformat(),
        "profile": record.profile,
        "usable": record.usable,
        "unusable_reason": record.unusable_reason(),
        "fingerprint_digest": record.fingerprint_digest,
        "total_bytes_exact": record.total_bytes_exact,
        "notes": record.notes,
        "supervised": record.supervised.model_dump(mode="json") if record.supervised is not None else None,
        "log": {
            "source": record.boot.source,
            "sha256": record.boot.sha256,
            "size_bytes": record.boot.size_bytes,
            "complete": record.boot.complete,
            "ends_mid_line": record.boot.ends_mid_line,
            "refused": record.boot.refused,
        },
        "ranks": [
            {
                **{k: v for k, v in vars(t).items()},
                "found": obs.found,
                "missing": obs.missing,
                "unparsed": obs.unparsed,
                "exl3": _exl3_section(obs),
            }
            for obs, t in zip(record.boot.ranks, record.ranks, strict=True)
        ],
        "engine": record.boot.engine.model_dump(mode="json"),
        "unattributed_refusals": [r.model_dump(mode="json") for r in record.boot.unattributed_refusals],
    }
    if residuals is not None:
        doc["residuals"] = residuals
    return doc


def list_table(records: list[Calibration]) -> Table:
    table = Table(title="calibration records (newest first)", expand=False)
    # Ids and dates are what a reader copies and sorts by: whole at any width (output.fit stacks the table
    # where they do not fit in one row). The long texts (why a record is not usable, the log) wrap; a
    # supervised boot is said after its log, not in a column of its own, so the table reads at 120 columns.
    for col in ("id", "created", "profile", "usable", "ranks", "W", "log"):
        table.add_column(col, no_wrap=col not in ("usable", "log"))
    for r in records:
        worst = r.worst() if r.ranks else None
        table.add_row(
            r.record_id,
            r.created_at.strftime("%Y-%m-%d %H:%M"),
            r.profile or "—",
            "yes" if r.usable else f"no: {r.unusable_reason()}",
            str(len(r.ranks)),
            _sz(worst.weights_bytes if worst else None),
            r.boot.source
            if r.supervised is None
            else f"{r.boot.source} (serve --supervise boot {supervised_text(r)})",
        )
    return table


def supervised_text(record: Calibration) -> str:
    """``boot ID: outcome (exit status)`` for a record ``serve --supervise`` wrote; ``ingested`` otherwise."""
    sup = record.supervised
    if sup is None:
        return "ingested"
    status = f" ({sup.exit_status})" if sup.exit_status else ""
    return f"{sup.boot_id}: {sup.outcome}{status}"


def model_document(model: TermModel, config: DeploymentConfig, *, version: str | None) -> dict[str, Any]:
    """A term model as JSON: per term its features, coefficients, sources, residuals, what is unidentified."""
    pred = model.predict(config, version)
    terms: dict[str, Any] = {}
    for term, fit in model.fits.items():
        terms[term] = {
            "meaning": TERM_DOC[term],
            "features": {f: FEATURE_DOC[f] for f in fit.features},
            "coefficients_bytes": {f: round(v) for f, v in fit.coefficients.items()},
            "prior": fit.prior_source,
            "records": list(fit.sources),
            "residuals_bytes": {label: r for label, r in fit.residuals},
            "unidentified": list(fit.unidentified),
            "predicted_bytes": pred.terms.get(term),
        }
    build = model.n_build(version, config)
    if build is not None and "n" in terms:
        # The plan's N is the residual of this vLLM build (its records' mean), not the fit over every build:
        # the table, the JSON and the explanation say the same records and figure.
        terms["n"].update(
            features={},
            coefficients_bytes={f"vLLM build {build[0]}": build[1]},
            records=list(build[2]),
            residuals_bytes={},
            unidentified=[],
        )
    terms["w"] = {"meaning": TERM_DOC["w"], "predicted_bytes": pred.terms.get("w"), "origin": pred.w_origin}
    return {
        "origin": model.origin,
        "description": model.description,
        "records": list(model.points),
        "vllm_version": version,
        "n_by_vllm_build": {v: r for v, r, _ in model.n_by_version},
        "terms": terms,
        "explain": pred.explain,
    }


def model_table(doc: dict[str, Any]) -> Table:
    table = Table(title=f"term model ({doc['origin']}): {doc['description']}", expand=False)
    for col in ("term", "predicted", "coefficients", "records", "max |residual|", "kept from the prior"):
        table.add_column(col, no_wrap=col in ("term", "predicted", "records", "max |residual|"))
    for term, t in doc["terms"].items():
        coef = t.get("coefficients_bytes", {})
        res = t.get("residuals_bytes", {})
        table.add_row(
            term,
            _sz(t.get("predicted_bytes")),
            ", ".join(f"{f} {v / 2**20:+,.1f} MiB" for f, v in coef.items()) or t.get("origin", "—"),
            str(len(t.get("records", []))) if "records" in t else "—",
            _sz(max((abs(v) for v in res.values()), default=0)) if res else "—",
            ", ".join(t.get("unidentified", [])) or "—",
        )
    return table
