"""Stage 3 — the GPUs: what is there and whether the configuration fits it.

* :mod:`.inventory`: a frozen, recorded inventory (no NVML needed to read one).
* :mod:`.probe`: :func:`~.probe.get_inventory` — the one place that talks to NVML (``pynvml``).
* :mod:`.checks`: :func:`~.checks.run_checks` — every hardware check as data, and the memory verdict.
* :mod:`.commands`: ``hw`` and ``check``.
"""
