"""Calibration: learn W, P, N, G_e and the pre-snapshot footprint from real vLLM boots, then search the knobs.

Modules, one concern each (import the one you need; this package imports nothing heavy):

* :mod:`~glmlaunch.calibrate.terms`: :class:`CalibratedTerms`, the per-rank terms (standard library only).
* :mod:`~glmlaunch.calibrate.logs`: the boot-log parser (per worker rank, every memory-model.md §6 line).
* :mod:`~glmlaunch.calibrate.fingerprint`: what a record is keyed by, and why two keys differ.
* :mod:`~glmlaunch.calibrate.records`: a record (one boot) and the terms derived from it.
* :mod:`~glmlaunch.calibrate.store`: records under the cache directory (atomic, locked) and lookup.
* :mod:`~glmlaunch.calibrate.apply`: a record as ledger inputs; ``calibration_for`` for plan/check/preflight.
* :mod:`~glmlaunch.calibrate.residuals`: predicted (uncalibrated ledger) against logged, per rank.
* :mod:`~glmlaunch.calibrate.search`: the best knob value that keeps every rank's margin, with its proof.
* :mod:`~glmlaunch.calibrate.ingest`, :mod:`~glmlaunch.calibrate.commands`,
  :mod:`~glmlaunch.calibrate.render`: the functions and tables behind ``glmlaunch calibrate …``.
"""
