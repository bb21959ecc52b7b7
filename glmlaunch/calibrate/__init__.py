"""Stage 4 — calibration: learn W, P, N, G_e and T - F0 from real vLLM boots; the term model plans use.

Modules, one concern each (import the one you need; this package imports nothing heavy). A boot's log is
read by :mod:`glmlaunch.vllmlog` (the stage below: :mod:`~glmlaunch.vllmlog.boot` per rank,
:mod:`~glmlaunch.vllmlog.bootconfig` the configuration that booted); what it read is learned from here.

* :mod:`~glmlaunch.calibrate.terms`: :class:`CalibratedTerms`, the per-rank terms (standard library only).
* :mod:`~glmlaunch.calibrate.fingerprint`: what a record is keyed by, and why two keys differ.
* :mod:`~glmlaunch.calibrate.records`: a record (one boot) and the terms derived from it.
* :mod:`~glmlaunch.calibrate.store`: records under the cache directory (atomic, locked) and lookup.
* :mod:`~glmlaunch.calibrate.migrate`: records of schema 1 read as what they meant when written.
* :mod:`~glmlaunch.calibrate.bootconfig`: the configuration a log booted, as glmlaunch settings.
* :mod:`~glmlaunch.calibrate.model`, :mod:`~glmlaunch.calibrate.learn`: the term model and its fit from the
  records of one rig shape; :mod:`~glmlaunch.calibrate.rigdefaults`: the rig's defaults
  (``scripts/derive_rig_defaults.py`` re-derives them from the shipped logs).
* :mod:`~glmlaunch.calibrate.apply`: ``calibration_for`` — the term model as ledger inputs
  (``glmlaunch.ledger.inputs.LedgerInputs``), which every plan starts from (``glmlaunch.plan.plan``).
* :mod:`~glmlaunch.calibrate.ingest`, :mod:`~glmlaunch.calibrate.render`: ingesting a boot, and the tables
  behind ``glmlaunch calibrate …``; the commands themselves, a record's residuals, ``search`` and
  ``profiles import`` plan, so they are the plan stage's (``glmlaunch.plan.calibrate_commands``,
  ``.residuals``, ``.search``, ``.profile_import``).
"""
