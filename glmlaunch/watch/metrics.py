"""The Prometheus endpoint: the latest snapshot in the text exposition format, labelled like DCGM's.

Every per-GPU series carries DCGM exporter's labels (``gpu``: NVML's index, ``UUID``, ``pci_bus_id``,
``device``: ``nvidia<gpu>``, ``modelName``, ``Hostname``) plus ``profile`` and ``rank``, so a dashboard
joins ``DCGM_FI_DEV_FB_USED`` and these on ``UUID``. Sizes are bytes (Prometheus' base unit), where
DCGM's framebuffer series are MiB.

``prometheus_client`` (the ecosystem's own library) renders the page and serves it: a collector reads
the watcher's latest snapshot at each scrape, so a scrape never waits for a sample and a sample never
waits for a scrape. The server binds ``127.0.0.1`` unless ``--metrics-host`` says otherwise: the page
names processes and GPUs, which is nothing to publish by default. The host is always named
(:func:`metrics_host`): an empty one, which the socket layer takes for every interface, is refused, and
every interface (``0.0.0.0``, ``::``) is said on stderr when asked for.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any

from glmlaunch.errors import ConfigError
from glmlaunch.output import note
from glmlaunch.watch.snapshot import Snapshot
from glmlaunch.watch.states import STATES
from glmlaunch.watch.vllm import FACTS

PREFIX = "glmlaunch_watch_"
LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "profile", "rank")

#: (name, help, reading -> value or None to leave the series out)
_GAUGES: tuple[tuple[str, str, Callable[[Any], float | None]], ...] = (
    (
        "used_bytes",
        "NVML used memory (memory info v2: the driver's reserve excluded)",
        lambda r: r.used_bytes,
    ),
    ("free_bytes", "NVML free memory", lambda r: r.free_bytes),
    (
        "resident_bytes",
        "the deployment's memory: used, less what processes outside the deployment hold",
        lambda r: r.resident_bytes,
    ),
    (
        "planned_resident_bytes",
        "what the plan says the deployment holds after startup: T - U_oth - margin",
        lambda r: r.expect.planned_resident_bytes,
    ),
    (
        "baseline_resident_bytes",
        "the resident memory measured right after ready (absent before)",
        lambda r: r.baseline_resident_bytes,
    ),
    ("margin_bytes", "the plan's free memory after startup (its margin)", lambda r: r.expect.margin_bytes),
    (
        "min_margin_bytes",
        "memory.min_margin: the free memory the deployment keeps",
        lambda r: r.expect.min_margin_bytes,
    ),
    (
        "largest_pending_transient_bytes",
        "the largest runtime transient of the plan that can still fire (0: none)",
        lambda r: r.largest_pending_bytes if r.pending is not None else None,
    ),
    (
        "pending_demand_bytes",
        "the runtime demand still to come: the largest phase sum not yet covered by growth since ready",
        lambda r: r.pending.demand_bytes if r.pending is not None else None,
    ),
    (
        "realized_demand_bytes",
        "growth of the resident memory since ready",
        lambda r: r.realized_bytes if r.baseline_resident_bytes is not None else None,
    ),
    (
        "unexplained_growth_bytes",
        "growth since ready beyond the plan's runtime demand",
        lambda r: r.unexplained_bytes if r.baseline_resident_bytes is not None else None,
    ),
    ("foreign_bytes", "memory held by processes outside the deployment", lambda r: r.foreign_bytes),
    (
        "drift_bytes_per_second",
        "the steady growth rate while the drift state holds (0 otherwise)",
        lambda r: r.drift_bytes_per_s or 0.0,
    ),
)


def _labels(snap: Snapshot, r: Any) -> list[str]:
    d = r.rank_gpu.device
    return [
        str(d.nvml_index),
        d.uuid,
        d.pci_bus_id or "",
        f"nvidia{d.nvml_index}",
        d.name or "",
        snap.host,
        snap.profile,
        str(r.rank),
    ]


def families(snap: Snapshot | None) -> Iterator[Any]:
    """The metric families of one snapshot (none before the first sample)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    if snap is None:
        return
    for name, text, get in _GAUGES:
        fam = GaugeMetricFamily(PREFIX + name, text, labels=LABELS)
        for r in snap.readings:
            value = get(r)
            if value is not None:
                fam.add_metric(_labels(snap, r), float(value))
        yield fam
    state = GaugeMetricFamily(
        PREFIX + "state",
        "1 for the rank's state (the most urgent condition that holds), 0 for the others",
        labels=(*LABELS, "state"),
    )
    cond = GaugeMetricFamily(
        PREFIX + "condition", "1 for every condition that holds on the rank", labels=(*LABELS, "condition")
    )
    for r in snap.readings:
        for s in STATES:
            state.add_metric([*_labels(snap, r), s], 1.0 if r.state == s else 0.0)
            if s not in ("starting", "ok"):
                cond.add_metric([*_labels(snap, r), s], 1.0 if s in r.conditions else 0.0)
    yield state
    yield cond
    ooms = CounterMetricFamily(PREFIX + "oom_events", "CUDA OOMs seen in vLLM's log per rank", labels=LABELS)
    for r in snap.readings:
        ooms.add_metric(_labels(snap, r), float(snap.ooms.get(r.rank, 0)))
    yield ooms
    samples = CounterMetricFamily(PREFIX + "samples", "samples taken", labels=("profile",))
    samples.add_metric([snap.profile], float(snap.seq))
    yield samples
    stamp = GaugeMetricFamily(
        PREFIX + "last_sample_timestamp_seconds", "when the last sample was taken", labels=("profile",)
    )
    stamp.add_metric([snap.profile], snap.wall)
    yield stamp
    if snap.vllm is not None:
        v = snap.vllm
        up = GaugeMetricFamily(
            PREFIX + "vllm_up", "1 when vLLM's /metrics answered", labels=("profile", "url")
        )
        up.add_metric([snap.profile, v.url], 1.0 if v.up else 0.0)
        yield up
        for ours, names in FACTS.items():
            if ours not in v.values:
                continue
            help_text = (
                f"{names[0]} read from vLLM's /metrics (summed over engines; the KV usage at its fullest)"
            )
            fact: Any
            if ours == "num_preemptions":
                fact = CounterMetricFamily(PREFIX + "vllm_" + ours, help_text, labels=("profile", "url"))
            else:
                fact = GaugeMetricFamily(PREFIX + "vllm_" + ours, help_text, labels=("profile", "url"))
            fact.add_metric([snap.profile, v.url], v.values[ours])
            yield fact


class _Collector:
    def __init__(self, latest: Callable[[], Snapshot | None]) -> None:
        self._latest = latest

    def collect(self) -> Iterator[Any]:
        yield from families(self._latest())


def exposition(snap: Snapshot | None) -> str:
    """The page a scrape gets for ``snap`` (tests and ``bench/`` read it without a server too)."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(lambda: snap))
    return generate_latest(registry).decode("utf-8")


#: the addresses that mean every interface of the host
WILDCARDS = frozenset({"0.0.0.0", "::"})


def metrics_host(host: str, *, key: str = "--metrics-host") -> str:
    """The address to bind, as given (``[::1]`` taken as ``::1``); an empty one is refused: the socket
    layer binds it to every interface, which must be asked for by name."""
    name = host.strip()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if not name:
        raise ConfigError(
            "an empty host would listen on every interface",
            key=key,
            value=host,
            hint="name the address: 127.0.0.1 (this machine only, the default), or 0.0.0.0 to publish the "
            "page on every interface",
        )
    return name


@dataclass
class MetricsServer:
    """``GET /metrics`` (any path, as prometheus_client serves it) on ``host:port``, on a daemon thread."""

    host: str
    port: int
    latest: Callable[[], Snapshot | None]
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def start(self) -> None:
        from prometheus_client import CollectorRegistry
        from prometheus_client.exposition import MetricsHandler

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self.latest))
        handler = MetricsHandler.factory(registry)
        server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer
        if ":" in self.host:
            server_class = type("_V6Server", (ThreadingHTTPServer,), {"address_family": socket.AF_INET6})
        try:
            server = server_class((self.host, self.port), handler)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on {self.host}:{self.port}: {exc.strerror or exc}",
                key="--metrics-port",
                value=self.port,
                hint="pick a free port (0 lets the system choose one), or another --metrics-host",
            ) from None
        server.daemon_threads = True
        self._server = server
        if self.host in WILDCARDS:
            note(
                f"watch: the metrics listen on every interface ({self.host}, as --metrics-host asks): "
                "anyone who reaches this host can read which processes hold which GPU"
            )
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever, name="glmlaunch-watch-metrics", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
