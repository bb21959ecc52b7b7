"""Stage 7 — the launch: check, plan, preflight, then ``exec vllm serve`` with exactly the resolved setup.

* :mod:`.serve`: :func:`~.serve.serve` — the stages in order, ``--dry-run``, the container entrypoint.
* :mod:`.handoff`: the ``vllm`` executable, the final argv and environment, the ``exec``.
"""
