"""Stage 5 — the plan: the ledger and budget of a configuration, with calibration, as people read it.

* :mod:`.plan`: :class:`~.plan.Plan`, built by :func:`~.plan.make_plan` (calibrate, ledger, budget,
  verdict): the one object every command, the preflight, serve and watch use.
* :mod:`.planner`: :func:`~.planner.plan_profile` (resolve, then plan) and the JSON document.
* :mod:`.render`: tables, ``--explain``; :mod:`.memmap`: the terminal and SVG memory maps.
* :mod:`.audit`: the findings of the memory review and what each would recover; :mod:`.diff`: two plans.
"""
