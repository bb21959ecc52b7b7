"""A real HTTP endpoint on 127.0.0.1 that answers whatever bytes a test scripts: the hostile vLLM
``/metrics`` of the watch tests (tests/watch/test_endpoint.py) and the fuzz suite (tests/fuzz).

Each connection reads the request head, keeps it in :attr:`HostileServer.requests`, and plays the
script's reply: ``bytes`` are sent as they are, a ``float`` is a pause of that many seconds (cut short
when the server stops), and the connection closes at the end. Nothing is parsed or repaired: a reply
that is not HTTP is sent as it is, which is the point.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

Reply = Iterable[bytes | float]
Script = Callable[[bytes], Reply]


def http_reply(
    body: bytes | str,
    *,
    status: str = "200 OK",
    headers: Iterable[str] = ("Content-Type: text/plain; version=0.0.4; charset=utf-8",),
) -> bytes:
    """A well-formed HTTP/1.1 reply (Content-Length set), for the parts of a script that are not hostile."""
    data = body.encode() if isinstance(body, str) else body
    head = [f"HTTP/1.1 {status}", *headers, f"Content-Length: {len(data)}", "Connection: close"]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1", "replace") + data


#: vLLM's scheduler metrics in the text format, as prometheus_client writes them (two engines)
VLLM_PAGE = """\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="glm-5.2"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="glm-5.2"} 0.75
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="glm-5.2"} 3.0
vllm:num_requests_running{engine="1",model_name="glm-5.2"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="glm-5.2"} 1.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="glm-5.2"} 2.0
vllm:num_preemptions_total{engine="1",model_name="glm-5.2"} 5.0
"""


def vllm_page(**values: str) -> str:
    """:data:`VLLM_PAGE`, engine 0's sample of each named fact replaced (``kv_cache_usage_perc="NaN"``)."""
    lines = []
    for line in VLLM_PAGE.splitlines():
        for name, value in values.items():
            if line.startswith(f"vllm:{name}") and 'engine="0"' in line:
                line = line.rsplit(" ", 1)[0] + " " + value
        lines.append(line)
    return "\n".join(lines) + "\n"


@dataclass
class HostileServer:
    script: Script
    requests: list[bytes] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _server: socketserver.ThreadingTCPServer | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> HostileServer:
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                conn: socket.socket = self.request
                conn.settimeout(5)
                head = b""
                with contextlib.suppress(OSError):
                    while b"\r\n\r\n" not in head and len(head) < 65536:
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        head += chunk
                outer.requests.append(head)
                with contextlib.suppress(OSError):
                    for part in outer.script(head):
                        if isinstance(part, float):
                            if outer._stopping.wait(part):
                                return
                        else:
                            conn.sendall(part)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        threading.Thread(target=self._server.serve_forever, name="hostile-http", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@contextlib.contextmanager
def hostile_server(script: Script) -> Iterator[HostileServer]:
    server = HostileServer(script).start()
    try:
        yield server
    finally:
        server.stop()


def always(reply: Reply | bytes) -> Script:
    """A script that answers every request with the same reply."""
    parts: list[bytes | float] = [reply] if isinstance(reply, bytes) else list(reply)
    return lambda _head: parts
