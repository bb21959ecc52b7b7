"""The LMCache server command and vLLM's connector: upstream's derivation, from one endpoint.

The appliance's profiles are compared with what upstream's own wrapper ran for them
(tests/fixtures/upstream/*.json ``lmcache_wrapper.server_argv``: malaiwah/glm52-exl3-vast@eba43a5
scripts/glm52_lmcache_wrapper.sh in CONFIG_SMOKE mode); the release line's wrapper
(blackwell-llm-docker@3dd078a launchers/lmcache-mp-wrapper.sh) by the lines the code cites. The probes run
against real servers on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from glmlaunch.config.lmcache_endpoint import default_chunk, endpoint
from glmlaunch.config.render_args import full_argv, kv_transfer_config
from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.units import GIB
from glmlaunch.errors import ConfigError, ConfigErrors
from glmlaunch.lmcache.command import derive, host_memory_bytes, locate_lmcache
from glmlaunch.lmcache.probe import LogScan, healthy, port_answers, root_cause

UPSTREAM = FIXTURES / "upstream"
APPLIANCE = {
    "turnkey": "exl3-tr3",
    "exl3-tr3-3.25bpw": "exl3-tr3-3.25bpw",
    "exl3-tr3-3.36bpw": "exl3-tr3-3.36bpw",
    "exl3-tr3-3.42bpw": "exl3-tr3-3.42bpw",
}


def _derive(profile: str, overrides: tuple[str, ...] = (), **kw: Any) -> Any:
    config = resolve_config(profile, overrides, environ={}).config
    launch_env = kw.pop("launch_env", {})
    args = {"binary": "lmcache", "cache_root": Path("/c"), "host_memory": 22 * GIB, **kw}
    return config, derive(config, launch_env, **args)


@pytest.mark.parametrize("profile", list(APPLIANCE))
def test_the_appliance_profiles_run_the_server_upstream_ran(profile: str) -> None:
    fx = json.loads((UPSTREAM / f"{APPLIANCE[profile]}.json").read_text())["lmcache_wrapper"]
    theirs = list(fx["server_argv"])
    # host-derived: the DRAM tier (the smoke host had 22 GiB for 0.5: 11) and the disk tier's MODEL_ROOT
    _, cmd = _derive(profile)
    ours = list(cmd.argv[1:])
    if "--l2-adapter" in theirs:
        i = theirs.index("--l2-adapter")
        t, o = json.loads(theirs[i + 1]), json.loads(ours[i + 1])
        assert t.pop("base_path") == "/tmp/model-turnkey-smoke/.lmcache/l2"
        assert o.pop("base_path") == "/c/lmcache/l2"
        assert t == o
        theirs[i + 1] = ours[i + 1] = ""
    assert ours == theirs
    assert cmd.argv[0] == "lmcache"
    # and the connector upstream appended to vLLM's argv is glmlaunch's, to the same port
    config = resolve_config(profile, (), environ={}).config
    argv = full_argv(config)
    assert argv[argv.index("--kv-transfer-config") :][:2] == fx["vllm_argv_appended"]


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        ("server.port=8003",),
        ("server.port=7000",),
        ("lmcache_config.port=6000",),
        ("lmcache_config.wrapper=release", "server.port=8010"),
        ("lmcache_config.host=10.0.0.5", "server.port=9000"),
    ],
)
def test_the_connector_points_at_the_port_the_server_is_started_on(overrides: tuple[str, ...]) -> None:
    config, cmd = _derive("turnkey", overrides)
    extra = kv_transfer_config(config)["kv_connector_extra_config"]  # type: ignore[index]
    argv = list(cmd.argv)
    assert extra["lmcache.mp.port"] == int(argv[argv.index("--port") + 1]) == cmd.endpoint.port
    assert extra["lmcache.mp.host"] == "tcp://" + argv[argv.index("--host") + 1]


def test_ports_follow_the_api_port_as_upstream_offsets_them() -> None:
    # appliance L19-24: offset = PORT - 8000 (0 below 8000)
    _, cmd = _derive("turnkey", ("server.port=8003",))
    ep = cmd.endpoint
    assert (ep.port, ep.http_port, ep.prometheus_port) == (5558, 8092, 9093)
    assert ep.health_url == "http://127.0.0.1:8092/healthcheck"
    _, low = _derive("turnkey", ("server.port=7000",))
    assert (low.endpoint.port, low.endpoint.http_port) == (5555, 8089)
    _, given = _derive("turnkey", ("lmcache_config.port=6000", "lmcache_config.http_port=6001"))
    assert (given.endpoint.port, given.endpoint.http_port) == (6000, 6001)
    assert "lmcache_config.port" not in given.endpoint.derived
    assert "lmcache_config.prometheus_port" in given.endpoint.derived


def test_the_release_wrapper_derives_its_own_arguments_and_connector() -> None:
    config, cmd = _derive("turnkey", ("lmcache_config.wrapper=release", "server.port=8001"))
    argv = list(cmd.argv)
    # L114-134: transfer mode, 24 GiB L1 starting whole, 8099 + offset, the worker timeouts, no Prometheus
    assert argv[argv.index("--supported-transfer-mode") + 1] == "auto"
    assert argv[argv.index("--l1-size-gb") + 1] == argv[argv.index("--l1-init-size-gb") + 1] == "24"
    assert argv[argv.index("--http-port") + 1] == "8100"
    assert argv[argv.index("--worker-reap-timeout-seconds") + 1] == "120"
    assert argv[argv.index("--worker-registration-grace-seconds") + 1] == "3600"
    assert "--prometheus-port" not in argv
    assert argv[argv.index("--max-gpu-workers") + 1] == str(config.parallel.tp)
    # L177-253: recompute on a load failure, heartbeat 10 s, the transfer mode the server supports
    assert kv_transfer_config(config) == {
        "kv_connector": "LMCacheMPConnector",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {
            "lmcache.mp.host": "tcp://127.0.0.1",
            "lmcache.mp.port": 5556,
            "lmcache.mp.mq_timeout": 60.0,
            "lmcache.mp.heartbeat_interval": 10.0,
            "lmcache.mp.mp_transfer_mode": "auto",
        },
    }
    _, disk = _derive("turnkey", ("lmcache_config.wrapper=release", "lmcache_config.disk_gb=256"))
    adapter = json.loads(disk.argv[disk.argv.index("--l2-adapter") + 1])
    assert adapter["base_path"] == "/c/lmcache/8000" and adapter["max_capacity_gb"] == 256.0  # L148


def test_chunk_by_dcp_workers_by_tp_and_the_dram_tier() -> None:
    assert [default_chunk(d) for d in (1, 2, 3, 4, 6, 8)] == [512, 512, 384, 512, 384, 512]
    _, cmd = _derive("turnkey", ("lmcache_config.chunk_size=256",))
    assert cmd.argv[cmd.argv.index("--chunk-size") + 1] == "256"
    # entrypoint L1295-1325: 0.5 of 250 GiB is 125 GiB; the wrapper starts a tier above 20 GiB at 20 (L37-41)
    _, big = _derive("turnkey", host_memory=250 * GIB)
    assert (big.l1_gb, big.l1_init_gb) == (125, 20)
    _, tiny = _derive("turnkey", ("lmcache_config.offload_fraction=0.01",), host_memory=4 * GIB)
    assert tiny.l1_gb == 1  # at least 1 GiB (L1325)
    _, fixed = _derive("turnkey", ("lmcache_config.l1_gb=8",), host_memory=None)
    assert (fixed.l1_gb, fixed.l1_init_gb, fixed.l1_from) == (8, 8, "lmcache_config.l1_gb")


def test_host_memory_is_the_smaller_of_memtotal_and_the_cgroup_limit(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text("MemTotal:       263921664 kB\nMemFree: 1 kB\n")
    assert host_memory_bytes(tmp_path) == 263921664 * 1024
    cg = tmp_path / "sys" / "fs" / "cgroup"
    cg.mkdir(parents=True)
    (cg / "memory.max").write_text("max\n")
    assert host_memory_bytes(tmp_path) == 263921664 * 1024
    (cg / "memory.max").write_text(str(64 * GIB) + "\n")
    assert host_memory_bytes(tmp_path) == 64 * GIB
    assert host_memory_bytes(tmp_path / "nowhere") is None


def test_the_server_environment_forces_expandable_segments_off() -> None:
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:512", "KEEP": "1"}
    _, cmd = _derive("turnkey", launch_env=env)
    assert cmd.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False,max_split_size_mb:512"
    assert cmd.env["LMCACHE_DISABLE_BANNER"] == "1" and cmd.env["KEEP"] == "1"
    _, bare = _derive("turnkey", launch_env={})
    assert bare.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False"


def test_colliding_or_impossible_ports_are_configuration_errors() -> None:
    with pytest.raises((ConfigError, ConfigErrors)) as info:
        resolve_config("turnkey", ("lmcache_config.http_port=8000",), environ={})
    assert "lmcache_config.http_port: is the same port as server.port" in info.value.one_line()
    with pytest.raises((ConfigError, ConfigErrors)) as info:
        resolve_config("turnkey", ("server.port=65000",), environ={})
    assert "is not a TCP port (derived from server.port" in info.value.one_line()
    assert endpoint(resolve_config("turnkey", ("lmcache=false", "server.port=65000"), environ={}).config)


def test_the_executable_is_found_as_vllm_is(tmp_path: Path) -> None:
    exe = tmp_path / "bin" / "lmcache"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    assert locate_lmcache(None, {"PATH": str(exe.parent)}).problem is not None  # not executable
    exe.chmod(0o755)
    found = locate_lmcache(None, {"PATH": str(exe.parent)})
    assert (found.path, found.source) == (str(exe), "PATH")
    env = {"GLMLAUNCH_LMCACHE_BIN": str(exe), "PATH": ""}
    assert locate_lmcache(None, env).source == "GLMLAUNCH_LMCACHE_BIN"
    assert locate_lmcache(str(tmp_path / "none"), env).problem == f"{tmp_path / 'none'} does not exist"


# --- the probes, against real servers ----------------------------------------------------------------


@pytest.fixture
def http_server() -> Iterator[tuple[str, list[int]]]:
    status = [200]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status[0] if self.path == "/healthcheck" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", status
    server.shutdown()
    server.server_close()


def test_healthcheck_is_a_2xx_and_never_goes_through_a_proxy(
    http_server: tuple[str, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, status = http_server
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # a proxy that is not there
    assert healthy(base + "/healthcheck")
    status[0] = 503
    assert not healthy(base + "/healthcheck")
    assert not healthy(base + "/elsewhere")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    assert not healthy(f"http://127.0.0.1:{closed}/healthcheck")


def test_port_answers_and_the_ready_line_split_over_writes(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        assert port_answers("127.0.0.1", port) is None
    assert port_answers("127.0.0.1", port) is not None
    log = tmp_path / "lmcache.log"
    log.write_bytes(b"starting\n[server] LMCache ZMQ cache ")
    scan = LogScan(log, "LMCache ZMQ cache server is running")
    assert not scan.seen()
    with log.open("ab") as fh:
        fh.write(b"server is running on 127.0.0.1:5555\n")
    assert scan.seen() and scan.seen()
    assert not LogScan(tmp_path / "missing.log", "x").seen()


def test_root_cause_is_the_exception_line_else_the_last_error() -> None:
    tb = [
        "INFO starting",
        "Traceback (most recent call last):",
        '  File "server.py", line 3, in <module>',
        "OSError: [Errno 98] Address already in use",
        "INFO shutting down",
    ]
    assert root_cause(tb) == "OSError: [Errno 98] Address already in use"
    assert root_cause(["INFO a", "ERROR cannot pin 125 GiB", "INFO b"]) == "ERROR cannot pin 125 GiB"
    assert root_cause(["INFO all fine"]) is None


def test_root_cause_reads_a_hostile_line_in_linear_time() -> None:
    """A long ``A.A.A.…`` line (what a crashing server can print: a repr, a path) costs 4x at 4x the
    length, not 16x: an exception name starts only where a dotted name can (the log grammar's
    :func:`glmlaunch.vllmlog.events.exception_name_re`), not at every part of the chain again."""

    def cost(size: int) -> float:
        line = ("A." * size)[:size]
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            assert root_cause([line]) is None
            best = min(best, time.perf_counter() - started)
        return best

    small, large = cost(16_384), cost(65_536)
    # linear is ~4x; the search from every ``A`` (the pattern this replaced) was ~16x and seconds
    assert large / small < 8, f"4x the line cost {large / small:.1f}x ({small:.4f} s, {large:.4f} s)"
    assert root_cause(["x.y.SystemExit: 3"]) == "x.y.SystemExit: 3"
    assert root_cause(["a.b.c.RuntimeError boom"]) == "a.b.c.RuntimeError boom"
