"""Stage 5 — the plan: the ledger and budget of a configuration, with calibration, as people read it.

* :mod:`.planner`: :func:`~.planner.make_plan` (resolve, calibrate, ledger, budget) and the JSON document.
* :mod:`.render`: tables, ``--explain``; :mod:`.memmap`: the terminal and SVG memory maps.
* :mod:`.audit`: the findings of the memory review and what each would recover; :mod:`.diff`: two plans.
"""
