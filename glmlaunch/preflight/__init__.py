"""Stage 6 — GPU preflight: build the real pools and plans on the TP group, measure them, fail fast.

``run_preflight`` (:mod:`.api`), the process launcher (:mod:`.launcher`), the one torch worker
(:mod:`.worker`), the backends, the report (:mod:`.report`) and the ``preflight`` command (:mod:`.command`).
"""
