"""The calibrated memory terms of one GPU rank, as the ledger and the budget consume them.

Standard library only, so ``glmlaunch.ledger`` can import it without pulling in the log parser or the store.
Every field is bytes (``None`` when the boot did not tell us). Names follow docs/memory-model.md §6:

* ``weights_bytes`` W: "Model loading took X GiB".
* ``activation_peak_bytes`` P: torch peak increase during the profile passes.
* ``non_torch_bytes`` N: non-torch increase since the init snapshot.
* ``graph_estimate_bytes`` G_e: the CUDA-graph estimate vLLM subtracted from the KV budget.
* ``graph_actual_bytes``: what the production capture really took (the free-memory line's CUDAGraph term).
* ``pre_snapshot_bytes`` T - F0 at startup: CUDA context, NCCL, the TP eager channel, the DMA slab, and
  whatever other processes held on that GPU when vLLM started (a boot log cannot tell those apart).
* ``cuda_context_bytes`` / ``nccl_bytes``: measured separately by a preflight; a boot log leaves them None.
* ``kv_cache_bytes``: the KV budget vLLM arrived at; ``total_bytes`` T as vLLM saw it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class CalibratedTerms:
    """Measured per-rank terms; the ledger uses each non-None field instead of its default."""

    rank: str
    source: str
    weights_bytes: int | None = None
    activation_peak_bytes: int | None = None
    non_torch_bytes: int | None = None
    graph_estimate_bytes: int | None = None
    graph_actual_bytes: int | None = None
    pre_snapshot_bytes: int | None = None
    cuda_context_bytes: int | None = None
    nccl_bytes: int | None = None
    kv_cache_bytes: int | None = None
    total_bytes: int | None = None
    dcp_transient_bytes: int | None = None

    def byte_fields(self) -> dict[str, int | None]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name.endswith("_bytes")}

    @staticmethod
    def worst(ranks: list[CalibratedTerms], *, source: str) -> CalibratedTerms:
        """The per-field maximum over ranks: one conservative rank for a budget that treats ranks alike.

        ``kv_cache_bytes`` and ``total_bytes`` take the minimum instead (less is worse for them).
        """
        if not ranks:
            raise ValueError("no ranks to combine")
        out = CalibratedTerms(rank="worst", source=source)
        for name in out.byte_fields():
            values = [v for v in (getattr(r, name) for r in ranks) if v is not None]
            if not values:
                continue
            pick = min if name in {"kv_cache_bytes", "total_bytes"} else max
            out = replace(out, **{name: pick(values)})
        return out
