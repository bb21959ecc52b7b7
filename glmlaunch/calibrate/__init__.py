"""Calibration: learn W, P, N, G_e and the pre-snapshot footprint from real vLLM boots, then search the knobs.

Modules, one concern each (import the one you need; this package imports nothing heavy):

* :mod:`~glmlaunch.calibrate.terms`: :class:`CalibratedTerms`, the small frozen type the ledger consumes.
* :mod:`~glmlaunch.calibrate.logs`: the boot-log parser (per worker rank, every memory-model.md §6 line).
* :mod:`~glmlaunch.calibrate.fingerprint`: what a record is keyed by, and why two keys differ.
* :mod:`~glmlaunch.calibrate.store`: records under the cache directory (atomic, locked) and lookup.
* :mod:`~glmlaunch.calibrate.residuals`: predicted (ledger + budget) against logged, per rank.
* :mod:`~glmlaunch.calibrate.search`: the best knob value that keeps every rank's margin.
"""
