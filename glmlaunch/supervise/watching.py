"""``serve --supervise --watch``: the watch (:mod:`glmlaunch.watch`) on a thread of the supervisor.

Started once vLLM is: it samples NVML against the plan the serve stage judged (the same budget, so the
same T and margin), maps the ranks to GPUs by UUID through the launch's own ``CUDA_VISIBLE_DEVICES``,
counts as the deployment every process under glmlaunch (vLLM and whatever it started: glmlaunch is their
subreaper), falling back to the holders at ready where NVML's pids are another namespace's, and reads
vLLM's scheduler facts from the server the configuration names. vLLM's own log says when it is ready:
the stream parser hands over the ready line and every OOM line.

At vLLM's exit it is stopped; its summary goes into ``outcome.json`` (``watch``) and ``watch.json``, its
readings into ``watch.log`` (``GPU N: X MiB free``), and its runtime events (each rank's lowest free memory
after ready, the OOMs after ready) into the boot's calibration record, so the next plan of this
configuration learns the runtime peak (:func:`glmlaunch.calibrate.apply.raise_by_evidence`).

Nothing here may touch vLLM: a watch that cannot start (no NVML, fewer GPUs than ranks) is a note, a
failure while it runs a warning, and neither changes how glmlaunch ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from glmlaunch.config.registry import CUDA_VISIBLE_DEVICES
from glmlaunch.errors import GlmlaunchError
from glmlaunch.output import debug_enabled, note, warn

if TYPE_CHECKING:
    from glmlaunch.config.schema import DeploymentConfig
    from glmlaunch.plan.plan import Plan
    from glmlaunch.vllmlog.events import RuntimeEvent
    from glmlaunch.watch.follow import QueueLines
    from glmlaunch.watch.metrics import MetricsServer
    from glmlaunch.watch.session import Watcher

#: how long the supervisor waits for the watch thread after vLLM exited
JOIN_S = 5.0


@dataclass(frozen=True)
class WatchSetup:
    """What ``serve`` hands over for the watch: the plan it judged, and the endpoint options."""

    plan: Plan
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    #: a recorded trace to replay instead of live NVML (the tests'; it brings its own log lines)
    replay: Path | None = None
    replay_speed: float = 1.0
    interval_s: float = 0.5


def vllm_url(config: DeploymentConfig) -> str:
    host = config.server.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{config.server.port}/metrics"


@dataclass
class Watching:
    """A started watch: its thread, its line queue, its endpoint."""

    watcher: Watcher
    lines: QueueLines | None
    server: MetricsServer | None
    thread: threading.Thread
    readings: Path

    def feed(self, line: str) -> None:
        """A line of vLLM's log that matters to the watch (the ready line, an OOM): from the stream thread."""
        if self.lines is not None:
            self.lines.put(line)

    def finish(self) -> tuple[dict[str, Any], list[RuntimeEvent]]:
        """Stop the watch; its summary (for outcome.json) and the runtime events for the record."""
        self.watcher.stop()
        self.thread.join(JOIN_S)
        if self.server is not None:
            self.server.stop()
        self.watcher.close()
        summary = self.watcher.summary()
        summary["metrics"] = self.server.url if self.server is not None else None
        summary["readings"] = str(self.readings) if self.readings.exists() else None
        return summary, self.watcher.runtime_events()


def start(
    setup: WatchSetup,
    *,
    profile: str,
    config: DeploymentConfig,
    env: dict[str, str] | Any,
    boot_dir: Path,
    known_pids: Callable[[], frozenset[int]],
) -> Watching | None:
    """The watch thread, started; None (said as a note) when it cannot watch here."""
    import socket

    from glmlaunch.watch.follow import QueueLines
    from glmlaunch.watch.metrics import MetricsServer
    from glmlaunch.watch.ranks import map_ranks
    from glmlaunch.watch.session import Options, Watcher
    from glmlaunch.watch.vllm import Scraper

    try:
        if setup.replay is not None:
            from glmlaunch.watch.trace import TracePlayer, load_trace

            player = TracePlayer(load_trace(setup.replay), realtime=True, speed=setup.replay_speed)
            source: Any = player
            lines: Any = player
            queue = None
            name = "replay"
        else:
            from glmlaunch.hardware.probe import NvmlMemorySource

            source = NvmlMemorySource()
            queue = QueueLines()
            lines = queue
            name = "nvml"
        ranks = map_ranks(
            source.devices, env.get(CUDA_VISIBLE_DEVICES), config.parallel.tp, key=CUDA_VISIBLE_DEVICES
        )
    except GlmlaunchError as exc:
        note(f"supervise: no watch: {exc.one_line()}")
        return None
    readings = boot_dir / "watch.log"
    watcher = Watcher(
        setup.plan,
        source,
        ranks,
        profile=profile,
        options=Options(interval_s=setup.interval_s, strict_ready=True, readings=readings),
        lines=lines,
        has_ready_signal=True,
        known_pids=known_pids,
        scraper=Scraper(vllm_url(config)),
        source_name=name,
        host=socket.gethostname(),
        paced=setup.replay is None,
    )
    server = None
    if setup.metrics_port is not None:
        server = MetricsServer(setup.metrics_host, setup.metrics_port, lambda: watcher.latest)
        try:
            server.start()
        except GlmlaunchError as exc:
            warn(f"supervise: watch without its endpoint: {exc.one_line()}")
            server = None
        else:
            note(f"supervise: watch: metrics on {server.url}")
    assert watcher.scraper is not None
    watcher.scraper.start()

    def run() -> None:
        try:
            watcher.run()
        except Exception as exc:  # the watch dies alone; vLLM runs on
            if debug_enabled():
                raise
            warn(f"supervise: the watch stopped: {type(exc).__name__}: {exc}")

    thread = threading.Thread(target=run, name="glmlaunch-watch", daemon=True)
    thread.start()
    note(
        f"supervise: watching {len(ranks)} rank(s) against the plan ("
        + ", ".join(f"rank {g.rank}: {g.device.uuid}" for g in ranks)
        + f"); readings in {readings}"
    )
    return Watching(watcher, queue, server, thread, readings)
