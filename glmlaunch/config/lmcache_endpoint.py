"""Where the LMCache server listens, and the connector vLLM is handed: one derivation for both.

The server command (:mod:`glmlaunch.lmcache.command`) and vLLM's ``--kv-transfer-config``
(:func:`glmlaunch.config.render_args.kv_transfer_config`) both read :func:`endpoint`, so vLLM connects to
the port the server was started on, whatever overrides or API port the configuration has.

Two upstream wrappers, ``lmcache_config.wrapper``:

* ``appliance``: malaiwah/glm52-exl3-vast@eba43a5:scripts/glm52_lmcache_wrapper.sh (the appliance's
  profiles: turnkey, exl3-tr3-*);
* ``release``: local-inference-lab/blackwell-llm-docker@3dd078a:launchers/lmcache-mp-wrapper.sh (the
  release line's generic wrapper, for its own presets).

Both offset every port by the API port's distance above 8000 (appliance L19-24; release L49-59), put the
chunk at 384 tokens at DCP 3 or 6 (appliance L25-28; release L60-69) and append the same connector with
their own timings (appliance L75-82; release L177-253).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from glmlaunch.config.schema import DeploymentConfig

APPLIANCE_SOURCE = "malaiwah/glm52-exl3-vast@eba43a5:scripts/glm52_lmcache_wrapper.sh"
RELEASE_SOURCE = "local-inference-lab/blackwell-llm-docker@3dd078a:launchers/lmcache-mp-wrapper.sh"


@dataclass(frozen=True)
class WrapperFacts:
    """What one wrapper fixes: its bases and timings, each from the lines named."""

    source: str
    http_base: int
    #: None: the wrapper passes no --prometheus-port
    prometheus_base: int | None
    mq_timeout: int | float
    heartbeat_interval: int | float
    #: the release wrapper's connector also names these (L234-246); the appliance's does not
    load_failure_policy: str | None
    transfer_mode: str | None


WRAPPERS: dict[str, WrapperFacts] = {
    # L23-24 (8089/9090 + offset); L79-80 (mq_timeout 60, heartbeat 5: integers in the JSON)
    "appliance": WrapperFacts(APPLIANCE_SOURCE, 8089, 9090, 60, 5, None, None),
    # L59 (8099 + offset, no Prometheus flag); L78 transfer mode auto, L88 recompute, L98-99 60 s and 10 s,
    # written as floats (L191-192)
    "release": WrapperFacts(RELEASE_SOURCE, 8099, None, 60.0, 10.0, "recompute", "auto"),
}

#: the LMCache port both wrappers start from (appliance L22; release L58)
BASE_PORT = 5555
#: the API port the offsets are measured from (appliance L20; release L51-53)
API_BASE_PORT = 8000


def port_offset(api_port: int) -> int:
    """The API port's distance above 8000; 0 below it (appliance L20, release L50-53)."""
    return api_port - API_BASE_PORT if api_port >= API_BASE_PORT else 0


def default_chunk(dcp: int) -> int:
    """LMCache chunks align to every DCP block: 384 tokens at DCP 3 or 6, else 512 (release L62-68)."""
    return 384 if dcp in (3, 6) else 512


@dataclass(frozen=True)
class Endpoint:
    """The server's addresses and chunk size, as the wrapper derives them from the configuration."""

    wrapper: str
    host: str
    port: int
    http_port: int
    prometheus_port: int | None
    chunk_size: int
    derived: tuple[str, ...]  # the settings left null, so derived

    @property
    def facts(self) -> WrapperFacts:
        return WRAPPERS[self.wrapper]

    @property
    def health_url(self) -> str:
        # both wrappers probe 127.0.0.1 whatever --host is (appliance L105, release L310)
        return f"http://127.0.0.1:{self.http_port}/healthcheck"

    def to_json(self) -> dict[str, Any]:
        return {
            "wrapper": self.wrapper,
            "source": self.facts.source,
            "host": self.host,
            "port": self.port,
            "http_port": self.http_port,
            "prometheus_port": self.prometheus_port,
            "chunk_size": self.chunk_size,
            "derived": list(self.derived),
        }


def endpoint(config: DeploymentConfig) -> Endpoint:
    """The server's endpoint: each null setting derived as ``lmcache_config.wrapper`` derives it."""
    lm = config.lmcache_config
    facts = WRAPPERS[lm.wrapper]
    offset = port_offset(config.server.port)
    derived: list[str] = []

    def pick(name: str, given: int | None, base: int | None) -> int | None:
        if given is not None:
            return given
        if base is None:
            return None
        derived.append(f"lmcache_config.{name}")
        return base + offset

    port = pick("port", lm.port, BASE_PORT)
    http_port = pick("http_port", lm.http_port, facts.http_base)
    prometheus = pick("prometheus_port", lm.prometheus_port, facts.prometheus_base)
    if facts.prometheus_base is None:
        prometheus = None  # the release wrapper has no Prometheus flag: a set value has nowhere to go
    chunk = lm.chunk_size
    if chunk is None:
        chunk = default_chunk(config.parallel.dcp)
        derived.append("lmcache_config.chunk_size")
    assert port is not None and http_port is not None
    return Endpoint(lm.wrapper, lm.host, port, http_port, prometheus, chunk, tuple(derived))


def connector(config: DeploymentConfig) -> dict[str, Any]:
    """vLLM's ``--kv-transfer-config``: the wrapper's connector, pointed at :func:`endpoint`'s port."""
    ep = endpoint(config)
    facts = ep.facts
    extra: dict[str, Any] = {
        "lmcache.mp.host": f"tcp://{ep.host}",
        "lmcache.mp.port": ep.port,
        "lmcache.mp.mq_timeout": facts.mq_timeout,
        "lmcache.mp.heartbeat_interval": facts.heartbeat_interval,
    }
    if facts.transfer_mode is not None:
        extra["lmcache.mp.mp_transfer_mode"] = facts.transfer_mode
    out: dict[str, Any] = {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both"}
    if facts.load_failure_policy is not None:
        out["kv_load_failure_policy"] = facts.load_failure_policy
    out["kv_connector_extra_config"] = extra
    return out
