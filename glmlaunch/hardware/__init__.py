"""Stage 3 — the GPUs: what is there and whether the configuration fits it.

* :mod:`.inventory`: a frozen, recorded inventory (no NVML needed to read one).
* :mod:`.probe`: :func:`~.probe.get_inventory` — the one place that talks to NVML (``pynvml``).
* :mod:`.checks`: :func:`~.checks.hardware_checks` — every hardware check as data — and the memory facts
  of the TP group's tightest GPU (:func:`~.checks.memory_inputs`) a plan budgets with; the memory verdict
  row and ``check`` itself are the plan's (``glmlaunch.plan.check``).
* :mod:`.commands`: ``hw``, and the tables of ``hw`` and ``check``.
"""
