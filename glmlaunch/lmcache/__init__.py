"""The LMCache server a deployment with ``lmcache: true`` needs: its command, and whether it is ready.

vLLM's ``LMCacheMPConnector`` (``--kv-transfer-config``, :mod:`glmlaunch.config.render_args`) connects to
an LMCache server at start-up; upstream runs every such deployment through a wrapper that starts that
server first. This stage is that wrapper's derivation, as data:

* :mod:`.command`: the ``lmcache server`` argument vector, environment and tiers upstream's wrapper
  derives from the deployment (``lmcache_config.wrapper``: the appliance's or the release line's), the
  executable (``--lmcache-bin``, ``GLMLAUNCH_LMCACHE_BIN``, ``lmcache`` on PATH) and the host memory the
  appliance sizes the DRAM tier from;
* :mod:`.probe`: the ready probes both wrappers use (``/healthcheck`` on the HTTP port, or the ready line in
  the server's log), the external server's port check, and the root cause read from a server's log.

Its place in the pipeline (``tests/test_layout.py``): it reads the configuration only (the endpoint it
shares with vLLM's connector lives in :mod:`glmlaunch.config.lmcache_endpoint`), so it could sit anywhere
above ``config``; it sits just below ``supervise``, which starts, probes and stops the server with its
existing process code (:mod:`glmlaunch.supervise.cache_server`), and ``launch``, which decides whether a
launch has a managed server, an external one, or none.
"""
