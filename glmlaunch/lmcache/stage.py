"""What ``serve`` does about LMCache: nothing (``lmcache: false``), start a server, or use a running one.

:func:`plan_server` is called by :mod:`glmlaunch.launch.serve` once the launch environment is composed:

* ``lmcache_config.server: managed`` (the default): the server command (:mod:`.command`) the supervisor
  starts before vLLM; the executable is looked up as ``--vllm-bin``'s is, and a missing one stops a real
  launch with exit 6 before anything starts (a dry run says so and goes on);
* ``external``: nothing to start; :func:`check_external` asks the server's port before vLLM is launched, and
  a port that does not answer stops the launch with exit 12 and one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from glmlaunch.calibrate.store import cache_dir
from glmlaunch.config.executables import Executable
from glmlaunch.config.lmcache_endpoint import Endpoint, endpoint
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.settings import ToolSettings
from glmlaunch.errors import LmcacheError
from glmlaunch.lmcache.command import (
    DEFAULT_START_TIMEOUT_S,
    ServerCommand,
    derive,
    host_memory_bytes,
    locate_lmcache,
    require_lmcache,
)
from glmlaunch.lmcache.probe import port_answers


@dataclass(frozen=True)
class LmcachePlan:
    """The LMCache side of a launch."""

    server: Literal["managed", "external"]
    endpoint: Endpoint
    binary: Executable | None = None
    command: ServerCommand | None = None

    @property
    def problem(self) -> str | None:
        return self.binary.problem if self.binary is not None else None

    def require(self) -> ServerCommand | None:
        """The command a real launch starts (None: external); raises (exit 6) without the executable."""
        if self.binary is not None:
            require_lmcache(self.binary)
        return self.command

    def line(self) -> str:
        ep = self.endpoint
        if self.server == "external":
            return (
                f"external: a running server on {ep.host}:{ep.port} is expected (checked before vLLM "
                "starts); glmlaunch starts none"
            )
        assert self.command is not None
        return f"managed: started before vLLM, drained after it: {self.command.summary()}"

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "endpoint": self.endpoint.to_json(),
            "binary": None
            if self.binary is None
            else {
                "requested": self.binary.requested,
                "source": self.binary.source,
                "path": self.binary.path,
                "problem": self.binary.problem,
            },
            "command": self.command.to_json() if self.command is not None else None,
        }


def plan_server(
    config: DeploymentConfig,
    launch_env: Mapping[str, str],
    *,
    lmcache_bin: str | None,
    environ: Mapping[str, str],
) -> LmcachePlan | None:
    """The LMCache side of the launch of ``config``; None without LMCache."""
    if not config.lmcache:
        return None
    ep = endpoint(config)
    if config.lmcache_config.server == "external":
        return LmcachePlan("external", ep)
    binary = locate_lmcache(lmcache_bin, environ)
    tool = ToolSettings.from_environ(environ)
    command = derive(
        config,
        launch_env,
        binary=binary.path or binary.requested,
        cache_root=cache_dir(environ),
        host_memory=host_memory_bytes(),
        start_timeout_s=tool.lmcache_start_timeout or DEFAULT_START_TIMEOUT_S,
    )
    return LmcachePlan("managed", ep, binary, command)


def check_external(plan: LmcachePlan) -> None:
    """An external server's port must answer before vLLM, which connects to it at start-up, is launched."""
    ep = plan.endpoint
    why = port_answers(ep.host, ep.port)
    if why is not None:
        raise LmcacheError(
            f"the external LMCache server on {ep.host}:{ep.port} does not answer ({why}); vLLM was not "
            "started",
            key="lmcache_config.server",
            value="external",
            hint="start the server first, fix lmcache_config.host/port, or set lmcache_config.server=managed",
        )
