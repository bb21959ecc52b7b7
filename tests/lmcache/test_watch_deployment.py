"""The watch counts the LMCache server's processes as the deployment, not as foreign.

The supervised watch (``serve --supervise --watch``) calls a GPU holder foreign unless its pid is in the set
the supervisor hands it (:func:`glmlaunch.supervise.session.deployment_pids`). The LMCache server's GPU
workers hold CUDA memory of the deployment. Here a real stand-in server is started with the supervisor's
own start (:func:`glmlaunch.supervise.cache_server.start`), and NVML's holder list is written with its pids
and one pid outside the deployment (this test's parent).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO
from lmcache_ports import free_offset

from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.units import GIB
from glmlaunch.hardware.memory import Holder
from glmlaunch.lmcache.command import derive
from glmlaunch.lmcache.probe import healthy
from glmlaunch.supervise import cache_server
from glmlaunch.supervise.session import deployment_pids
from glmlaunch.watch.states import Deployment

FAKE_LMC = REPO / "tests" / "lmcache" / "fake_lmcache.py"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")


def test_the_lmcache_server_and_its_worker_are_the_deployment(tmp_path: Path) -> None:
    k = free_offset()
    config = resolve_config("turnkey", (f"server.port={8000 + k}",), environ={}).config
    record = tmp_path / "record"
    record.mkdir()
    env = {**os.environ, "FAKE_LMCACHE_RECORD": str(record)}
    cmd = derive(config, env, binary=str(FAKE_LMC), cache_root=tmp_path, host_memory=22 * GIB)
    server = cache_server.start(cmd, tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not (healthy(cmd.endpoint.health_url) and list(record.glob("lmcache-*.json"))):
            assert time.monotonic() < deadline, "the stand-in did not come up"
            time.sleep(0.05)
        [facts_file] = record.glob("lmcache-*.json")
        worker = json.loads(facts_file.read_text())["worker_pid"]
        pids = deployment_pids(server)
        assert {server.pid, worker} <= pids
        outsider = os.getppid()
        assert outsider not in pids
        watched = Deployment(known=lambda: deployment_pids(server))
        holders = (Holder(server.pid, 1 * GIB), Holder(worker, 2 * GIB), Holder(outsider, 3 * GIB))
        assert watched.foreign(holders) == (Holder(outsider, 3 * GIB),)
    finally:
        os.kill(server.pid, signal.SIGTERM)
        server.child.popen.wait(timeout=20)
        server.log.join(5)
    assert "LMCache ZMQ cache server is running" in (tmp_path / "lmcache.log").read_text()
