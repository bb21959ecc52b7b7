"""A hub on 127.0.0.1 that serves small repositories the way the Hugging Face hub does, for huggingface_hub.

It answers exactly the requests ``huggingface_hub`` (2.x) makes for ``model_info``, ``snapshot_download``
and ``hf_hub_download``, with the headers it relies on:

* ``GET /api/models/{repo}[/revision/{rev}][?blobs=true]``: the model info (``sha``, ``gated``,
  ``siblings`` with ``size``/``blobId``/``lfs`` when ``blobs`` is asked for);
* ``GET /api/models/{repo}/tree/{rev}?recursive=…``: the file listing (one page, no ``Link`` header);
* ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: ``X-Repo-Commit``, ``ETag`` (the content's sha256, as the
  hub gives LFS files), ``Content-Length``, ``Accept-Ranges``; ``Range: bytes=N-`` answered ``206`` with
  ``Content-Range`` (``bytes=N-M`` too, as a safetensors header read asks); a file can be throttled
  (chunks with a pause between them) to be caught mid-download.

Errors carry ``X-Error-Code`` as the hub sends it, which is how huggingface_hub tells them apart:
``RepoNotFound`` (404), ``RevisionNotFound`` (404), ``EntryNotFound`` (404), ``GatedRepo`` (401 without a
token, 403 with a token that has no access). Every request is recorded (method, path, range, whether a
token came) so a test can say what was and was not downloaded.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse


def safetensors_blob(tensors: dict[str, int]) -> bytes:
    """A real safetensors file: 8-byte little-endian header length, the JSON header, then the data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, nbytes in tensors.items():
        header[name] = {"dtype": "U8", "shape": [nbytes], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    data = bytes((i * 7 + 3) % 251 for i in range(offset))
    return struct.pack("<Q", len(raw)) + raw + data


@dataclass
class Repo:
    repo_id: str
    commit: str
    files: dict[str, bytes]
    #: "manual" for a gated repository
    gated: str | None = None
    #: the one token with access (gated repositories)
    token: str | None = None
    branches: dict[str, str] = field(default_factory=dict)

    def sha(self, path: str) -> str:
        return hashlib.sha256(self.files[path]).hexdigest()


@dataclass
class Throttle:
    """How slowly a file is sent: ``chunk`` bytes, then ``pause_s``; with ``hold``, after the first chunk the
    rest waits until the event is set (a download caught mid-file, deterministically)."""

    chunk: int
    pause_s: float = 0.0
    hold: threading.Event | None = None


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    token: bool


class Hub:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.throttle: dict[str, Throttle] = {}  # repository path -> how slowly it is sent
        self.requests: list[Request] = []
        self.sent: dict[str, int] = {}  # repository path -> body bytes sent
        self.lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._handle(self, head=True)

            def do_GET(self) -> None:
                hub._handle(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="hub", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Hub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, repo: Repo) -> Repo:
        self.repos[repo.repo_id] = repo
        return repo

    def gets(self, path: str | None = None) -> list[Request]:
        """The file downloads (GET on resolve), of one repository path or of all."""
        with self.lock:
            return [
                r
                for r in self.requests
                if r.method == "GET"
                and "/resolve/" in r.path
                and (path is None or r.path.endswith("/" + path))
            ]

    def downloads(self, path: str | None = None) -> list[Request]:
        """The file downloads less the safetensors header reads (a GET of a bounded range, ``bytes=N-M``,
        as ``parse_safetensors_file_metadata`` asks for a file's first 100 kB: metadata, not weights)."""
        return [r for r in self.gets(path) if not re.fullmatch(r"bytes=[0-9]+-[0-9]+", r.range or "")]

    # --- the handler -----------------------------------------------------------------------------------

    def _send(self, h: BaseHTTPRequestHandler, code: int, headers: dict[str, str], body: bytes = b"") -> None:
        h.send_response(code)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", headers.get("Content-Length", str(len(body))))
        h.end_headers()
        if body and h.command != "HEAD":
            h.wfile.write(body)

    def _error(
        self, h: BaseHTTPRequestHandler, code: int, error: str, message: str, commit: str = ""
    ) -> None:
        body = json.dumps({"error": message}).encode()
        headers = {"Content-Type": "application/json", "X-Error-Code": error, "X-Error-Message": message}
        if commit:
            headers["X-Repo-Commit"] = commit
        self._send(h, code, headers, body)

    def _repo(self, h: BaseHTTPRequestHandler, parts: list[str]) -> Repo | None:
        repo = self.repos.get("/".join(parts[:2]))
        if repo is None:
            self._error(h, 404, "RepoNotFound", "Repository not found")
        return repo

    def _commit(self, repo: Repo, rev: str) -> str | None:
        if rev == repo.commit:
            return rev
        return repo.branches.get(rev)

    def _handle(self, h: BaseHTTPRequestHandler, *, head: bool) -> None:
        url = urlparse(h.path)
        auth = h.headers.get("authorization") or ""
        token = auth.removeprefix("Bearer ").strip() or None
        with self.lock:
            self.requests.append(Request(h.command, url.path, h.headers.get("Range"), token is not None))
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        query = parse_qs(url.query)
        if parts[:2] == ["api", "models"]:
            self._api(h, parts[2:], query)
            return
        if len(parts) >= 5 and parts[2] == "resolve":
            self._resolve(h, parts, token, head=head)
            return
        self._error(h, 404, "NotFound", f"no route for {url.path}")

    def _api(self, h: BaseHTTPRequestHandler, parts: list[str], query: dict[str, list[str]]) -> None:
        repo = self._repo(h, parts)
        if repo is None:
            return
        rest = parts[2:]
        if not rest or rest[0] == "revision":
            rev = rest[1] if len(rest) > 1 else "main"
            commit = self._commit(repo, rev)
            if commit is None:
                self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
                return
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            siblings = []
            for path, data in sorted(repo.files.items()):
                sib: dict[str, object] = {"rfilename": path}
                if blobs:
                    sib["size"] = len(data)
                    sib["blobId"] = hashlib.sha1(data).hexdigest()
                    sib["lfs"] = {"size": len(data), "sha256": repo.sha(path), "pointerSize": 134}
                siblings.append(sib)
            doc = {
                "id": repo.repo_id,
                "sha": commit,
                "private": False,
                "gated": repo.gated or False,
                "siblings": siblings,
            }
            self._send(h, 200, {"Content-Type": "application/json"}, json.dumps(doc).encode())
            return
        if rest[0] == "tree" and len(rest) >= 2:
            commit = self._commit(repo, rest[1])
            if commit is None:
                self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {rest[1]}")
                return
            listing = [
                {
                    "type": "file",
                    "path": path,
                    "size": len(data),
                    "oid": hashlib.sha1(data).hexdigest(),
                    "lfs": {"oid": repo.sha(path), "size": len(data), "pointerSize": 134},
                }
                for path, data in sorted(repo.files.items())
            ]
            self._send(h, 200, {"Content-Type": "application/json"}, json.dumps(listing).encode())
            return
        self._error(h, 404, "NotFound", "no such api route")

    def _resolve(self, h: BaseHTTPRequestHandler, parts: list[str], token: str | None, *, head: bool) -> None:
        repo = self._repo(h, parts)
        if repo is None:
            return
        rev, path = parts[3], "/".join(parts[4:])
        if repo.gated is not None and token != repo.token:
            code = 401 if token is None else 403
            self._error(h, code, "GatedRepo", f"Access to model {repo.repo_id} is restricted.")
            return
        commit = self._commit(repo, rev)
        if commit is None:
            self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return
        if path not in repo.files:
            self._error(h, 404, "EntryNotFound", f"{path} does not exist", commit)
            return
        data = repo.files[path]
        headers = {
            "X-Repo-Commit": commit,
            "ETag": f'"{repo.sha(path)}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        start, stop, code = 0, len(data), 200
        wanted = h.headers.get("Range")
        if wanted and wanted.startswith("bytes=") and not head:
            first, _, last = wanted[6:].partition("-")
            start = int(first or 0)
            # "bytes=N-M" is inclusive and may run past the end (a header read asks for 100 kB)
            stop = min(len(data), int(last) + 1) if last else len(data)
            code = 206
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{len(data)}"
        body = data[start:stop]
        headers["Content-Length"] = str(len(body))
        h.send_response(code)
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        if head:
            return
        throttle = self.throttle.get(path)
        step = throttle.chunk if throttle else 1 << 20
        try:
            for i in range(0, len(body), step):
                h.wfile.write(body[i : i + step])
                h.wfile.flush()
                with self.lock:
                    self.sent[path] = self.sent.get(path, 0) + len(body[i : i + step])
                if throttle and throttle.hold is not None:
                    throttle.hold.wait(timeout=60)
                elif throttle:
                    time.sleep(throttle.pause_s)
        except (BrokenPipeError, ConnectionResetError):
            pass
