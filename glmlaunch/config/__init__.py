"""Stage 1 — configuration: a profile layered with the environment and ``--set``, typed and validated.

* :mod:`.schema`: the frozen :class:`~.schema.DeploymentConfig` model (every setting, typed and described).
* :mod:`.profiles`: profile files, ``extends:`` chains, the built-in profiles.
* :mod:`.resolve`: :func:`~.resolve.resolve_config` — defaults < profiles < ``GLMLAUNCH_*`` < ``--set``,
  with the source of every value; :mod:`.diagnostics` holds the types it and validation share.
* :mod:`.validate`: rules across settings (divisibility, windows, opt-ins), declared in :mod:`.rules`;
  :mod:`.worldsizes`: the world sizes each library generation's pools accept (the ledger reads them too).
* :mod:`.registry`: every environment variable name, declared once; :mod:`.settings`: glmlaunch's own.
* :mod:`.environment`, :mod:`.render_args`, :mod:`.shells`: the environment, ``vllm serve`` argv and shell
  ``export`` lines a configuration produces.
* :mod:`.units`: byte sizes as people write them.
* :mod:`.limits`: the resource limits every parser enforces; :mod:`.safeload`: the one bounded reader of
  files, JSON and YAML (profiles, ``--set``, inventories, calibration records, boot logs).
* :mod:`.commands`: ``config``, ``env``, ``args``, ``profiles``, and ``resolve`` (every command starts there).
"""
