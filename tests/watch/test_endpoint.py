"""``watch --endpoint`` against hostile servers on 127.0.0.1 (issue 31, items 4 and 7): the URL is shown
masked in every output, ``/metrics`` is joined to its path, a reply that is not HTTP or not the text
format is the error state (the scraper thread lives on), NaN and the infinities are Prometheus values,
redirects stay on the host, the error never carries the reply's bytes, a slow reply is bounded."""

from __future__ import annotations

import base64
import json
import math
import re
import subprocess
import time
import urllib.request
from typing import Any

import jsonschema
import pytest
from conftest import FIXTURES, REPO, glmlaunch_exe, run_cli
from hostile_http import always, hostile_server, http_reply, vllm_page
from prometheus_client.parser import text_string_to_metric_families

from glmlaunch.errors import ConfigError
from glmlaunch.output import mask_secrets, reset_secrets
from glmlaunch.watch.vllm import Scraper, metrics_url, parse_facts, read_facts

WATCH = FIXTURES / "watch"
PROFILE = str(WATCH / "h200.yaml")
SCHEMAS = REPO / "docs" / "schemas"
RAW = b"RAW\x1b]0;owned\x07BYTES"


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


# --- the URL ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/metrics"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/metrics"),
        ("http://127.0.0.1:8000/metrics", "http://127.0.0.1:8000/metrics"),
        ("http://127.0.0.1:8000/metrics/", "http://127.0.0.1:8000/metrics"),
        # the query stays a query: `/metrics` was appended after it
        ("http://127.0.0.1:8000/?x=1", "http://127.0.0.1:8000/metrics?x=1"),
        ("https://h.example/vllm/?a=1&b=2", "https://h.example/vllm/metrics?a=1&b=2"),
        ("HTTP://[::1]:8000#frag", "http://[::1]:8000/metrics"),
    ],
)
def test_metrics_is_joined_to_the_path(endpoint: str, url: str) -> None:
    assert metrics_url(endpoint) == url


@pytest.mark.parametrize(
    "endpoint", ["127.0.0.1:8000", "localhost:8000", "ftp://h/", "http://", "http://h:99999", "http://[::1"]
)
def test_what_is_not_an_http_url_is_refused(endpoint: str) -> None:
    with pytest.raises(ConfigError) as err:
        metrics_url(endpoint)
    assert err.value.key == "--endpoint"


def test_a_urls_credentials_are_masked_by_the_one_masking_path() -> None:
    reset_secrets()
    shown = mask_secrets(
        "http://vllm:hunter2@h:8000/metrics?api_key=k1&X-Amz-Signature=s1&sig=s2&page=3#x and https://a:b@c/"
    )
    assert shown == (
        "http://vllm:****@h:8000/metrics?api_key=****&X-Amz-Signature=****&sig=****&page=3#x "
        "and https://a:****@c/"
    )
    for secret in ("hunter2", "k1", "s1", "s2"):
        assert secret not in shown


def test_userinfo_is_sent_as_basic_auth_and_shown_masked() -> None:
    with hostile_server(always(http_reply(vllm_page()))) as server:
        url = server.url.replace("http://", "http://vllm:s3cr%40t@") + "/metrics"
        facts = read_facts(url, timeout_s=5)
    assert facts.up, facts.error
    (head,) = server.requests
    auth = re.search(rb"Authorization: Basic (\S+)", head)
    assert auth is not None and base64.b64decode(auth.group(1)) == b"vllm:s3cr@t"
    assert facts.url == f"http://vllm:****@127.0.0.1:{server.port}/metrics"


def test_the_url_is_masked_in_the_metrics_labels_the_json_and_the_messages(
    clean_env: dict[str, str],
) -> None:
    token = "hf_watch_TOKEN_0123456789"
    password = "pw-4e1d9c0b"
    with hostile_server(always(http_reply(vllm_page()))) as server:
        endpoint = server.url.replace("http://", f"http://vllm:{password}@") + f"/?token={token}&x=1"
        argv = [
            *glmlaunch_exe(),
            "watch",
            "-p",
            PROFILE,
            "--replay",
            str(WATCH / "oom.json"),
            "--speed",
            "10",
            "--endpoint",
            endpoint,
            "--metrics-port",
            "0",
            "--json",
        ]
        env = {**clean_env, "HF_TOKEN": token}
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stderr is not None
            err_lines: list[str] = []
            url = None
            deadline = time.monotonic() + 30
            while url is None and time.monotonic() < deadline:
                line = proc.stderr.readline()
                err_lines.append(line)
                m = re.search(r"metrics on (http://127\.0\.0\.1:[0-9]+/metrics)", line)
                url = m.group(1) if m else None
            assert url is not None, "".join(err_lines)
            page = ""
            while time.monotonic() < deadline and "glmlaunch_watch_vllm_up" not in page:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    page = resp.read().decode()
                time.sleep(0.1)
            out, rest = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, rest[-2000:]
    both = page + out + "".join(err_lines) + rest
    assert password not in both and token not in both
    up = next(
        s
        for f in text_string_to_metric_families(page)
        if f.name == "glmlaunch_watch_vllm_up"
        for s in f.samples
    )
    shown = f"http://vllm:****@127.0.0.1:{server.port}/metrics?token=****&x=1"
    assert up.labels["url"] == shown and up.value == 1.0
    docs = [_strict(line) for line in out.splitlines()]
    assert {d["vllm"]["url"] for d in docs if d["vllm"]} == {shown}
    # the path the server was asked for: /metrics joined to the path, the query kept after it
    assert all(r.startswith(b"GET /metrics?token=") for r in server.requests)


# --- hostile replies -------------------------------------------------------------------------------

MALFORMED: dict[str, bytes | list[bytes | float]] = {
    "not http": b"HELLO " + RAW + b"\r\n\r\n",
    "bad status": b"HTTP/1.1 2x0 " + RAW + b"\r\n\r\n",
    "short body": b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + RAW,
    "bad chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ" + RAW + b"\r\n",
    "huge header": b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70000 + b"\r\n\r\n",
    "many headers": b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 200 + b"\r\n",
    "closed at once": b"",
    "not exposition": http_reply(b'# TYPE x gauge\nx{a="1" 2\n' + RAW),
    "binary": http_reply(bytes(range(256)) * 16),
    "error status": http_reply(b"", status="500 " + RAW.decode("latin-1")),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_reply_is_the_error_state_and_the_scraper_lives(name: str) -> None:
    reply = MALFORMED[name]
    with hostile_server(always(reply)) as server:
        scraper = Scraper(server.url + "/metrics", interval_s=0.05, timeout_s=2.0)
        scraper.start()
        try:
            deadline = time.monotonic() + 10
            while len(server.requests) < 3 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(server.requests) >= 3, "the scraper stopped reading"
            assert scraper._thread is not None and scraper._thread.is_alive()
            latest = scraper.latest
        finally:
            scraper.stop()
    assert latest is not None and not latest.up
    assert latest.error and len(latest.error) <= 200
    # the error is glmlaunch's words: no byte of the reply, no control character
    assert "RAW" not in latest.error and "owned" not in latest.error and "a" * 50 not in latest.error
    assert not re.search(r"[\x00-\x1f\x7f]", latest.error)


def test_nan_and_infinities_are_prometheus_values() -> None:
    page = vllm_page(kv_cache_usage_perc="NaN", num_requests_running="+Inf", num_preemptions_total="-Inf")
    facts = parse_facts(page)
    assert facts["kv_cache_usage_perc"] == 0.75  # the fullest engine that says a number (PromQL's max)
    assert facts["num_requests_running"] == math.inf
    assert facts["num_preemptions"] == -math.inf
    assert math.isnan(parse_facts(vllm_page(num_requests_waiting="NaN"))["num_requests_waiting"])
    all_nan = page.replace(
        'vllm:kv_cache_usage_perc{engine="1",model_name="glm-5.2"} 0.75',
        'vllm:kv_cache_usage_perc{engine="1",model_name="glm-5.2"} NaN',
    )
    assert math.isnan(parse_facts(all_nan)["kv_cache_usage_perc"])
    with hostile_server(always(http_reply(page))) as server:
        got = read_facts(server.url + "/metrics", timeout_s=5)
    doc = got.to_json()
    assert doc["num_requests_running"] == "+Inf" and doc["num_preemptions"] == "-Inf"
    json.dumps(doc, allow_nan=False)


def test_a_nan_sample_keeps_the_json_lines_valid(clean_env: dict[str, str]) -> None:
    page = vllm_page(kv_cache_usage_perc="NaN", num_requests_waiting="NaN", num_requests_running="+Inf")
    page = page.replace('engine="1",model_name="glm-5.2"} 0.75', 'engine="1",model_name="glm-5.2"} NaN')
    with hostile_server(always(http_reply(page))) as server:
        proc = run_cli(
            "watch",
            "-p",
            PROFILE,
            "--replay",
            str(WATCH / "oom.json"),
            "--speed",
            "8",
            "--samples",
            "12",
            "--endpoint",
            server.url,
            "--json",
            env=clean_env,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    docs = [_strict(line) for line in proc.stdout.splitlines()]
    validator = jsonschema.Draft202012Validator(json.loads((SCHEMAS / "watch.schema.json").read_text()))
    for doc in docs:
        validator.validate(doc)
    facts = [d["vllm"] for d in docs if d["vllm"] and d["vllm"]["up"]]
    assert facts and facts[-1]["kv_cache_usage_perc"] == "NaN" and facts[-1]["num_requests_running"] == "+Inf"


def test_a_redirect_off_the_host_is_not_followed() -> None:
    with hostile_server(always(http_reply(vllm_page()))) as elsewhere:
        target = f"http://localhost:{elsewhere.port}/metrics"
        off = always(http_reply(b"", status="302 Found", headers=[f"Location: {target}"]))
        with hostile_server(off) as server:
            facts = read_facts(server.url + "/metrics", timeout_s=5)
        assert not elsewhere.requests
    assert not facts.up and facts.error == "redirected off the host (to http://localhost): not followed"


def test_a_redirect_on_the_host_is_followed() -> None:
    def script(head: bytes) -> list[bytes | float]:
        if head.startswith(b"GET /metrics "):
            return [http_reply(b"", status="301 Moved", headers=["Location: /real/metrics"])]
        return [http_reply(vllm_page())]

    with hostile_server(script) as server:
        facts = read_facts(server.url + "/metrics", timeout_s=5)
    assert facts.up and facts.values["num_requests_running"] == 4.0
    assert [r.split(b" ")[1] for r in server.requests] == [b"/metrics", b"/real/metrics"]


@pytest.mark.parametrize(
    "reply",
    [
        [10.0],  # nothing at all
        [b"HTTP/1.1 200 OK\r\n", *([b"X: y\r\n", 0.1] * 100)],  # the head a line at a time
        [b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", *([b"#", 0.05] * 200)],  # the body trickled
    ],
    ids=["silent", "trickled-head", "trickled-body"],
)
def test_a_slow_reply_is_bounded(reply: list[bytes | float]) -> None:
    with hostile_server(always(reply)) as server:
        scraper = Scraper(server.url + "/metrics", timeout_s=0.5)
        started = time.monotonic()
        first = scraper.poll_once()
        took = time.monotonic() - started
        second = scraper.poll_once()  # the first read may still hang on: no second connection meanwhile
    assert not first.up and first.error == "no full reply within 0.5 s" and took < 2.0
    assert not second.up and len(server.requests) <= 2
