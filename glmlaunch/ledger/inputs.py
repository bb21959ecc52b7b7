"""What calibration supplies to the ledger, and what is on disk: the one typed object into the ledger.

The ledger is pure arithmetic over the configuration and these inputs. A term model (``glmlaunch.calibrate``)
produces the calibrated fields; :data:`UNCALIBRATED` (every field empty) plans on the ledger's own defaults.
The checkpoint's safetensors payload (:class:`CheckpointOnDisk`) is read at the plan's edge
(``glmlaunch.fetch.status.checkpoint_on_disk``, called by the commands) and carried here, so the ledger
reads no file. The types live here, below calibration, so every signature that carries them names them and
mypy checks each read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class CheckpointOnDisk:
    """The configuration's checkpoint as it was found on disk: its safetensors payload when its files are
    verified (or a local directory the operator selected, read as it is), else why it is not priced."""

    #: the ``model.path`` it was looked up for: the ledger does not price another checkpoint from it
    model_path: str
    #: the directory vLLM loads
    directory: str
    #: tensor bytes the safetensors headers declare (None: not priced, ``detail`` says why)
    safetensors_bytes: int | None
    #: how many safetensors files they are in
    files: int
    #: how the files were verified ("fetched and verified by its stamp"), or why they are not priced
    detail: str
    #: where the figures come from: the files on disk, or the hub's file metadata (nothing downloaded)
    origin: str = "disk"
    #: tensor bytes outside the MTP layer that every TP rank holds whole, as the headers' tensor names say
    #: (``glmlaunch.ledger.weights.tensor_role``); None: the headers were not read (file sizes only)
    replicated_bytes: int | None = None
    #: tensor bytes of the MTP layer that split over TP, and that every rank holds whole (None: not read)
    mtp_bytes: int | None = None
    mtp_replicated_bytes: int | None = None

    @property
    def priced(self) -> bool:
        return self.safetensors_bytes is not None


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
    #: the ingested boots of this release that ran this very shape (ledger/band.py's coverage key): the
    #: band is then the precision of their logs
    covering_records: tuple[str, ...] = ()
    #: the checkpoint on disk (None: not looked up, or nothing of it there); not calibration: it travels
    #: with the inputs so a fix or a search step of the same checkpoint prices W as the plan did
    checkpoint: CheckpointOnDisk | None = None

    @property
    def calibrated(self) -> bool:
        """Whether any calibration is in these inputs (the checkpoint on disk aside)."""
        return replace(self, checkpoint=None) != UNCALIBRATED

    def note_for(self, term: str) -> str | None:
        """How the term model arrived at a whole budget term; None without one."""
        return dict(self.explain).get(term) if self.explain else None


#: no calibration: the ledger's defaults stand for every residual entry
UNCALIBRATED = LedgerInputs()
