"""What calibration supplies to the ledger: the one typed object on the calibrate -> ledger arrow.

The ledger is pure arithmetic over the configuration and these inputs. A term model (``glmlaunch.calibrate``)
produces them; :data:`UNCALIBRATED` (every field empty) plans on the ledger's own defaults. The type lives
here, below calibration, so every signature that carries a calibration names it and mypy checks each read.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LedgerInputs:
    """The residual entries' sizes, the whole terms a term model predicted, and where they came from."""

    #: which calibration these are ("rig-defaults", "term-model", a record id); empty when uncalibrated
    record_id: str = ""
    weights_bytes: int | None = None
    activation_bytes: int | None = None
    nontorch_bytes: int | None = None
    graph_bytes: int | None = None
    cuda_context_bytes: int | None = None
    nccl_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    nccl_dcp_bytes: int | None = None
    notes: tuple[str, ...] = ()
    # Whole budget terms predicted by a term model (u_pre, p, n, g_e, w): the budget uses them as they are,
    # because the ledger's itemized entries may overlap the logged peak (a shared workspace arena).
    term_bytes: tuple[tuple[str, int], ...] = ()
    #: how the term model arrived at each whole term (``w``, ``p``, ``n``, ``g_e``, ``u_pre``)
    explain: tuple[tuple[str, str], ...] = ()
    #: "calibrated" (fitted on records) or "rig-default" (the rig defaults alone)
    origin: str = "calibrated"
    weights_origin: str | None = None
    #: the long prefill's demand learned from this configuration's serve logs (a runtime OOM after ready),
    #: replacing the fitted term (ledger/demand/prefill.py), and how it was learned
    runtime_prefill_bytes: int | None = None
    runtime_note: str | None = None
    #: the modelled terms a record of this release covered at this configuration's own setting (the
    #: verdict calls only those `record`; the others are fitted on other settings: estimates). None: not
    #: known (a hand-built calibration), every modelled term counts as recorded
    covered_terms: tuple[str, ...] | None = None

    def note_for(self, term: str) -> str | None:
        """How the term model arrived at a whole budget term; None without one."""
        return dict(self.explain).get(term) if self.explain else None


#: no calibration: the ledger's defaults stand for every residual entry
UNCALIBRATED = LedgerInputs()
