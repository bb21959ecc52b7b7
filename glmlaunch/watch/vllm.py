"""vLLM's own ``/metrics``: the scheduler facts the watch reads alongside the memory.

vLLM exports no GPU memory metric (vllm issue 26850), but its scheduler says how full the KV cache is and
whether requests wait or are preempted, which is what the memory does next. Read with
``prometheus_client``'s text parser, summed over vLLM's label sets (one per engine), the KV usage taken at
its fullest engine:

* ``vllm:kv_cache_usage_perc`` (``vllm:gpu_cache_usage_perc`` before vLLM 0.10),
* ``vllm:num_preemptions`` (a counter: ``vllm:num_preemptions_total`` on the wire),
* ``vllm:num_requests_running``, ``vllm:num_requests_waiting``.

:class:`Scraper` reads on its own thread every ``interval_s`` (a slow or dead server never delays a
sample); the endpoint answering is also a ready signal for a sidecar that follows no log.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

#: our name -> the family names vLLM has used for it
FACTS: dict[str, tuple[str, ...]] = {
    "kv_cache_usage_perc": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "num_preemptions": ("vllm:num_preemptions",),
    "num_requests_running": ("vllm:num_requests_running",),
    "num_requests_waiting": ("vllm:num_requests_waiting",),
}
#: facts whose engines are combined by the maximum (a fraction), not the sum (a count)
_MAX = frozenset({"kv_cache_usage_perc"})
#: a response larger than this is not vLLM's metrics page
MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class VllmFacts:
    """One read of the endpoint: ``up`` and the facts found (absent ones are not in ``values``)."""

    url: str
    up: bool
    values: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    at: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {"url": self.url, "up": self.up, "error": self.error, **{k: self.values.get(k) for k in FACTS}}


def parse_facts(text: str) -> dict[str, float]:
    """The facts in a Prometheus text page (what vLLM serves at /metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {name: ours for ours, names in FACTS.items() for name in names}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        ours = wanted.get(family.name)
        if ours is None:
            continue
        values = [s.value for s in family.samples if s.name in (family.name, family.name + "_total")]
        if not values:
            continue
        total = max(values) if ours in _MAX else sum(values)
        out[ours] = max(out.get(ours, total), total) if ours in _MAX else out.get(ours, 0.0) + total
    return out


def metrics_url(endpoint: str) -> str:
    """``http://host:port`` (or a URL ending in /metrics) -> the metrics URL."""
    base = endpoint.rstrip("/")
    return base if base.endswith("/metrics") else base + "/metrics"


def read_facts(url: str, *, timeout_s: float = 2.0) -> VllmFacts:
    now = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            raw = resp.read(MAX_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return VllmFacts(url, False, error=f"{type(exc).__name__}: {reason}", at=now)
    if len(raw) > MAX_BYTES:
        return VllmFacts(url, False, error=f"more than {MAX_BYTES} bytes: not a metrics page", at=now)
    try:
        values = parse_facts(raw.decode("utf-8", "replace"))
    except Exception as exc:  # the parser raises ValueError and friends on text that is not exposition
        return VllmFacts(url, False, error=f"not Prometheus text: {exc}", at=now)
    return VllmFacts(url, True, values, at=now)


@dataclass
class Scraper:
    """Reads ``url`` every ``interval_s`` on a daemon thread; :attr:`latest` is the last read."""

    url: str
    interval_s: float = 2.0
    timeout_s: float = 2.0
    latest: VllmFacts | None = None
    #: how many times the endpoint went from not answering to answering (the watch's ready signal)
    ups: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="glmlaunch-watch-vllm", daemon=True)
        self._thread.start()

    def poll_once(self) -> VllmFacts:
        was_up = self.latest is not None and self.latest.up
        facts = read_facts(self.url, timeout_s=self.timeout_s)
        if facts.up and not was_up:
            self.ups += 1
        self.latest = facts
        return facts

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + 1.0)
