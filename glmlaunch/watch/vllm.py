"""vLLM's own ``/metrics``: the scheduler facts the watch reads alongside the memory.

vLLM exports no GPU memory metric (vllm issue 26850), but its scheduler says how full the KV cache is and
whether requests wait or are preempted, which is what the memory does next. Read with
``prometheus_client``'s text parser, summed over vLLM's label sets (one per engine), the KV usage taken at
its fullest engine:

* ``vllm:kv_cache_usage_perc`` (``vllm:gpu_cache_usage_perc`` before vLLM 0.10),
* ``vllm:num_preemptions`` (a counter: ``vllm:num_preemptions_total`` on the wire),
* ``vllm:num_requests_running``, ``vllm:num_requests_waiting``.

``NaN``, ``+Inf`` and ``-Inf`` are sample values like any other in the text format: a sum holding one is
what IEEE arithmetic makes of it (PromQL's ``sum``), the fullest engine is the largest value that is not
NaN (PromQL's ``max``), and the JSON documents write a non-finite value as the string ``"NaN"``,
``"+Inf"`` or ``"-Inf"``, as Prometheus' own HTTP API writes every sample value (JSON has no such
numbers); the metrics page republishes it as the text format writes it.

:class:`Scraper` reads on its own thread every ``interval_s`` (a slow or dead server never delays a
sample); the endpoint answering is also a ready signal for a sidecar that follows no log. The endpoint is
untrusted as any input: a reply is read for at most ``timeout_s`` in all and ``MAX_BYTES``, a redirect
is followed only on the same scheme, host and port (a redirect elsewhere would take the credentials of
the URL with it), a reply that is not HTTP or not the text format is the error state, never the end of
the thread, and the error says what went wrong in glmlaunch's words (the status code, the exception's
kind), never the reply's own bytes. The URL itself is shown only masked (:func:`glmlaunch.output.
mask_secrets`: a password in it, a token-like query parameter, a registered secret), in the metrics
labels as in the JSON and the messages; credentials in the URL's userinfo are sent as HTTP basic auth.
"""

from __future__ import annotations

import base64
import http.client
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from glmlaunch.errors import ConfigError
from glmlaunch.output import debug_enabled, escape, mask_secrets

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
#: the longest error text kept (it goes into every JSON line and the metrics page's caption)
MAX_ERROR_CHARS = 200
_SCHEMES = ("http", "https")
_CHUNK = 64 * 1024


def json_number(value: float) -> float | str:
    """A sample value for a JSON document: finite as it is; NaN and the infinities as Prometheus' HTTP API
    writes them (``"NaN"``, ``"+Inf"``, ``"-Inf"``), since JSON has no such numbers."""
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


@dataclass(frozen=True)
class VllmFacts:
    """One read of the endpoint: ``up`` and the facts found (absent ones are not in ``values``).

    ``url`` is the URL as it may be shown: masked (module docstring)."""

    url: str
    up: bool
    values: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    at: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "url": self.url,
            "up": self.up,
            "error": self.error,
            **{k: (json_number(self.values[k]) if k in self.values else None) for k in FACTS},
        }


def parse_facts(text: str) -> dict[str, float]:
    """The facts in a Prometheus text page (what vLLM serves at /metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {name: ours for ours, names in FACTS.items() for name in names}
    found: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        ours = wanted.get(family.name)
        if ours is None:
            continue
        found.setdefault(ours, []).extend(
            float(s.value) for s in family.samples if s.name in (family.name, family.name + "_total")
        )
    out: dict[str, float] = {}
    for ours, values in found.items():
        if not values:
            continue
        if ours in _MAX:
            # PromQL's max: NaN only when every engine says NaN
            numbers = [v for v in values if not math.isnan(v)]
            out[ours] = max(numbers) if numbers else math.nan
        else:
            out[ours] = math.fsum(values) if all(math.isfinite(v) for v in values) else sum(values)
    return out


def metrics_url(endpoint: str, *, key: str = "--endpoint") -> str:
    """``http://host:port`` (or a URL ending in /metrics) -> the metrics URL: ``/metrics`` joined to the
    URL's path, its query kept (``http://h:8000/v?x=1`` -> ``http://h:8000/v/metrics?x=1``)."""
    shown = mask_secrets(endpoint)
    hint = "give vLLM's server as http://HOST:PORT, e.g. http://127.0.0.1:8000"
    try:
        parts = urllib.parse.urlsplit(endpoint.strip())
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"not a URL: {exc}", key=key, value=shown, hint=hint) from None
    if parts.scheme.lower() not in _SCHEMES:
        raise ConfigError(
            "not an http(s) URL",
            key=key,
            value=shown,
            allowed=[f"{s}://HOST:PORT" for s in _SCHEMES],
            hint=hint,
        )
    if not parts.hostname:
        raise ConfigError("the URL names no host", key=key, value=shown, hint=hint)
    del port
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        path += "/metrics"
    return urllib.parse.urlunsplit((parts.scheme.lower(), parts.netloc, path, parts.query, ""))


def _origin(parts: urllib.parse.SplitResult) -> tuple[str, str, int | None]:
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1
    return scheme, (parts.hostname or "").lower(), port or (443 if scheme == "https" else 80)


class RedirectOffHost(Exception):
    """The endpoint redirected to another scheme, host or port: not followed."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.target = target


class _SameOrigin(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        target = urllib.parse.urljoin(req.full_url, newurl)
        if _origin(urllib.parse.urlsplit(target)) != _origin(urllib.parse.urlsplit(req.full_url)):
            fp.close()
            raise RedirectOffHost(target)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_SameOrigin)


def _request(url: str) -> urllib.request.Request:
    """The request for ``url``; userinfo (``http://user:pass@host``) becomes basic auth: urllib would
    take it for part of the host name."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return urllib.request.Request(url)
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    bare = urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, ""))
    token = base64.b64encode(
        f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()
    ).decode("ascii")
    return urllib.request.Request(bare, headers={"Authorization": f"Basic {token}"})


def _reason(text: str) -> str:
    """Error text fit to show: masked, escaped to one line, bounded."""
    shown = escape(mask_secrets(text))
    return shown if len(shown) <= MAX_ERROR_CHARS else shown[: MAX_ERROR_CHARS - 1] + "…"


def _failure(exc: BaseException) -> str:
    """Why a read failed, in our words: the reply's own bytes (an HTTP reason phrase, a header, a body)
    never reach the output."""
    if isinstance(exc, RedirectOffHost):
        target = urllib.parse.urlsplit(exc.target)
        return _reason(f"redirected off the host (to {target.scheme}://{target.hostname}): not followed")
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP status {int(exc.code)}"
    if isinstance(exc, urllib.error.URLError):
        inner = exc.reason
        if isinstance(inner, TimeoutError):
            return "no reply in time (TimeoutError)"
        if isinstance(inner, OSError):
            return _reason(f"{type(inner).__name__}: {inner.strerror or type(inner).__name__}")
        return _reason(f"URLError: {type(inner).__name__ if not isinstance(inner, str) else inner}")
    if isinstance(exc, http.client.HTTPException):
        return f"not an HTTP reply ({type(exc).__name__})"
    if isinstance(exc, TimeoutError):
        return "no reply in time (TimeoutError)"
    if isinstance(exc, OSError):
        return _reason(f"{type(exc).__name__}: {exc.strerror or type(exc).__name__}")
    return f"{type(exc).__name__}"


def _read_body(resp: Any, deadline: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_BYTES:
        if time.monotonic() > deadline:
            raise TimeoutError
        chunk = resp.read1(_CHUNK) if hasattr(resp, "read1") else resp.read(_CHUNK)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_facts(url: str, *, timeout_s: float = 2.0) -> VllmFacts:
    """One read of ``url``; every failure is a :class:`VllmFacts` that is not up, with its reason."""
    now = time.monotonic()
    shown = mask_secrets(url)
    try:
        with _OPENER.open(_request(url), timeout=timeout_s) as resp:
            raw = _read_body(resp, now + timeout_s)
    except TimeoutError:
        return VllmFacts(shown, False, error=f"no full reply within {timeout_s:g} s", at=now)
    except (RedirectOffHost, urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        return VllmFacts(shown, False, error=_failure(exc), at=now)
    if len(raw) > MAX_BYTES:
        return VllmFacts(shown, False, error=f"more than {MAX_BYTES} bytes: not a metrics page", at=now)
    try:
        values = parse_facts(raw.decode("utf-8", "replace"))
    except Exception as exc:  # the parser raises ValueError and friends on text that is not exposition
        return VllmFacts(shown, False, error=f"not Prometheus text ({type(exc).__name__})", at=now)
    return VllmFacts(shown, True, values, at=now)


@dataclass
class Scraper:
    """Reads ``url`` every ``interval_s`` on a daemon thread; :attr:`latest` is the last read.

    Each read runs on a thread of its own, and the scraper waits for it ``timeout_s`` (plus a little) in
    all: a server that trickles its headers a byte at a time defeats every socket timeout, so the read
    that outlasts its time is the error state, and no other read starts until it has ended (one stuck
    connection at most)."""

    url: str
    interval_s: float = 2.0
    timeout_s: float = 2.0
    latest: VllmFacts | None = None
    #: how many times the endpoint went from not answering to answering (the watch's ready signal)
    ups: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _inflight: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="glmlaunch-watch-vllm", daemon=True)
        self._thread.start()

    def _read(self) -> VllmFacts:
        try:
            return read_facts(self.url, timeout_s=self.timeout_s)
        except Exception as exc:  # whatever a hostile reply finds: the error state, never a dead thread
            if debug_enabled():
                raise
            return VllmFacts(mask_secrets(self.url), False, error=_failure(exc), at=time.monotonic())

    def _record(self, facts: VllmFacts) -> VllmFacts:
        was_up = self.latest is not None and self.latest.up
        if facts.up and not was_up:
            self.ups += 1
        self.latest = facts
        return facts

    def poll_once(self) -> VllmFacts:
        """One read, bounded in time (class docstring)."""
        if self._inflight is not None and self._inflight.is_alive():
            return self._record(self._late())
        got: list[VllmFacts] = []
        reader = threading.Thread(
            target=lambda: got.append(self._read()), name="glmlaunch-watch-vllm-read", daemon=True
        )
        reader.start()
        reader.join(self.timeout_s + 0.5)
        if not got:
            self._inflight = reader
            return self._record(self._late())
        self._inflight = None
        return self._record(got[0])

    def _late(self) -> VllmFacts:
        return VllmFacts(
            mask_secrets(self.url),
            False,
            error=f"no full reply within {self.timeout_s:g} s",
            at=time.monotonic(),
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + 1.0)
