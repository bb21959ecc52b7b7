"""Activations (P) and the CUDA-graph estimate (G_e): calibrated, or conservative defaults from r14 logs.

Activation default: the r14 TP4/DCP4 boot log shows 1.32 GiB peak activation at 3072 batched tokens,
which includes the indexer prefill arena (~0.53 GiB, listed on its own); the rest, ~0.79 GiB, is scaled
per batched token and rounded up to 270 KiB/token.
Graph default: ``Estimated MRV2 CUDA graph memory: 0.49 GiB`` on the same boots; 512 MiB is charged.
When ``memory.estimate_cudagraphs`` is off vLLM subtracts nothing, so the graph pool is unbudgeted.
"""

from __future__ import annotations

from glmlaunch.ledger.context import Context, Draft, fmt_int

KIB = 1024
MIB = 1024 * KIB
ACTIVATION_PER_TOKEN = 270 * KIB
GRAPH_DEFAULT = 512 * MIB


def entries(ctx: Context) -> list[Draft]:
    cfg = ctx.config
    t = cfg.scheduler.max_num_batched_tokens
    cal = ctx.inputs.activation_bytes
    if cal is not None:
        v, o, f = cal, "calibrated", f"calibration.activation_bytes = {fmt_int(cal)}"
        why = ctx.inputs.note_for("p")
        if why:
            f += f"; the whole term: {why}"
    else:
        v, o = t * ACTIVATION_PER_TOKEN, "default"
        f = (
            f"max_num_batched_tokens * 270 KiB = {t} * {fmt_int(ACTIVATION_PER_TOKEN)} = {fmt_int(v)}"
            " (r14 log)"
        )
    out = [
        Draft(
            name="activations",
            subsystem="activations",
            requested_bytes=v,
            count=1,
            kind="torch",
            lifetime="profiled",
            condition="always (profile run at max_num_batched_tokens)",
            reader="the model's forward pass",
            formula=f,
            origin=o,  # type: ignore[arg-type]
            alloc="fixed",
            residual=True,
        )
    ]
    if ctx.capture_sizes:
        cal = ctx.inputs.graph_bytes
        if cal is not None:
            v, o, f = cal, "calibrated", f"calibration.graph_bytes = {fmt_int(cal)}"
            why = ctx.inputs.note_for("g_e")
            if why:
                f += f"; the whole term: {why}"
        else:
            v, o, f = GRAPH_DEFAULT, "default", "512 * 1024 * 1024 (r14 log: estimated 0.49 GiB)"
        sizes = ctx.capture_sizes
        out.append(
            Draft(
                name="cudagraph.pool",
                subsystem="activations",
                requested_bytes=v,
                count=1,
                kind="torch",
                lifetime="graph-estimated" if cfg.memory.estimate_cudagraphs else "unbudgeted",
                condition=(
                    f"cudagraph mode {cfg.cudagraph.mode}, {len(sizes)} capture sizes up to {max(sizes)}"
                ),
                reader="CUDA graph replays",
                formula=f,
                origin=o,  # type: ignore[arg-type]
                alloc="fixed",
                residual=True,
            )
        )
    return out
