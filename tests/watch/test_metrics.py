"""The Prometheus endpoint: valid exposition (parsed by prometheus_client's own text parser), labelled like
DCGM's, the same figures as the JSON lines; and vLLM's /metrics scheduler facts read alongside, from a
stand-in that exports vLLM's metric names and types through prometheus_client, as vLLM itself does."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import FIXTURES, glmlaunch_exe
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger.inputs import UNCALIBRATED
from glmlaunch.plan.plan import make_plan
from glmlaunch.watch.metrics import LABELS, MetricsServer, exposition
from glmlaunch.watch.ranks import map_ranks
from glmlaunch.watch.session import Options, Watcher
from glmlaunch.watch.states import Settings
from glmlaunch.watch.trace import TracePlayer, load_trace
from glmlaunch.watch.vllm import parse_facts, read_facts

WATCH = FIXTURES / "watch"
PROFILE = str(WATCH / "h200.yaml")


def snapshots(name: str) -> Iterator[Any]:
    player = TracePlayer(load_trace(WATCH / f"{name}.json"))
    config = resolve_config(PROFILE, ()).config
    ranks = map_ranks(player.devices, "0", 1)
    plan = make_plan(config, device_total=ranks[0].device.usable_bytes, inputs=UNCALIBRATED)
    watcher = Watcher(
        plan,
        player,
        ranks,
        profile="h200",
        options=Options(settings=Settings(drift_window_s=20)),
        lines=player,
        paced=False,
    )
    while (snap := watcher.step()) is not None:
        yield snap


def parse(page: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(page)}


def test_every_sample_renders_valid_exposition_with_dcgm_labels() -> None:
    seen_states = set()
    for snap in snapshots("foreign"):
        fams = parse(exposition(snap))
        doc = snap.to_json()["ranks"][0]
        for sample in fams["glmlaunch_watch_free_bytes"].samples:
            assert tuple(sample.labels) == LABELS or set(sample.labels) == set(LABELS)
            assert sample.labels["UUID"] == doc["uuid"] and sample.labels["gpu"] == str(doc["gpu"])
            assert sample.labels["device"] == f"nvidia{doc['gpu']}" and sample.labels["rank"] == "0"
            assert sample.value == doc["free_bytes"]
        (used,) = fams["glmlaunch_watch_used_bytes"].samples
        assert used.value == doc["used_bytes"]
        states = {s.labels["state"]: s.value for s in fams["glmlaunch_watch_state"].samples}
        assert sum(states.values()) == 1.0 and states[doc["state"]] == 1.0
        conds = {s.labels["condition"] for s in fams["glmlaunch_watch_condition"].samples if s.value == 1.0}
        assert conds == set(doc["conditions"])
        if doc["baseline_resident_bytes"] is None:
            assert not fams["glmlaunch_watch_baseline_resident_bytes"].samples
        else:
            (pending,) = fams["glmlaunch_watch_largest_pending_transient_bytes"].samples
            assert pending.value == (doc["largest_pending"] or {"bytes": 0})["bytes"]
        (foreign,) = fams["glmlaunch_watch_foreign_bytes"].samples
        assert foreign.value == doc["foreign_bytes"]
        seen_states.add(doc["state"])
    assert {"starting", "ok", "warn", "critical"} <= seen_states


def test_the_server_binds_loopback_and_serves_the_latest_sample() -> None:
    snaps = list(snapshots("clean"))
    latest = snaps[20]
    server = MetricsServer("127.0.0.1", 0, lambda: latest)
    server.start()
    try:
        assert server.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(server.url, timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            page = resp.read().decode()
        (samples,) = parse(page)["glmlaunch_watch_samples"].samples
        assert samples.value == latest.seq
    finally:
        server.stop()


# --- vLLM's /metrics -------------------------------------------------------------------------------


@pytest.fixture
def vllm_metrics() -> Iterator[str]:
    """vLLM's scheduler metrics as vLLM exports them (prometheus_client; v1 names, two engines)."""
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels, registry=reg)
    running = Gauge(
        "vllm:num_requests_running", "Number of requests in model execution batches.", labels, registry=reg
    )
    waiting = Gauge(
        "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, registry=reg
    )
    preempt = Counter(
        "vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels, registry=reg
    )
    ttft = Histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        labels,
        registry=reg,
    )
    for engine, (k, r, w, p) in {"0": (0.25, 3, 1, 2), "1": (0.75, 1, 0, 5)}.items():
        kv.labels("glm-5.2", engine).set(k)
        running.labels("glm-5.2", engine).set(r)
        waiting.labels("glm-5.2", engine).set(w)
        preempt.labels("glm-5.2", engine).inc(p)
        ttft.labels("glm-5.2", engine).observe(0.5)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=reg)
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_the_scheduler_facts_are_read_summed_over_engines(vllm_metrics: str) -> None:
    facts = read_facts(vllm_metrics + "/metrics")
    assert facts.up and facts.error is None
    assert facts.values == {
        "kv_cache_usage_perc": 0.75,  # the fullest engine
        "num_requests_running": 4.0,
        "num_requests_waiting": 1.0,
        "num_preemptions": 7.0,
    }
    with urllib.request.urlopen(vllm_metrics + "/metrics", timeout=5) as resp:
        assert parse_facts(resp.read().decode()) == facts.values


def test_a_server_that_does_not_answer_is_down_not_an_error() -> None:
    facts = read_facts("http://127.0.0.1:9/metrics", timeout_s=1.0)
    assert not facts.up and facts.error


def test_the_watch_reads_vllm_alongside_and_republishes_it(vllm_metrics: str) -> None:
    argv = [
        *glmlaunch_exe(),
        "watch",
        "-p",
        PROFILE,
        "--replay",
        str(WATCH / "oom.json"),
        "--speed",
        "4",
        "--endpoint",
        vllm_metrics,
        "--metrics-port",
        "0",
        "--json",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        url = None
        deadline = time.monotonic() + 30
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            m = re.search(r"metrics on (http://127\.0\.0\.1:[0-9]+/metrics)", line)
            if m:
                url = m.group(1)
        assert url is not None
        page = ""
        while time.monotonic() < deadline:
            with urllib.request.urlopen(url, timeout=5) as resp:
                page = resp.read().decode()
            if "glmlaunch_watch_vllm_kv_cache_usage_perc" in page:
                break
            time.sleep(0.2)
        fams = parse(page)
        (up,) = fams["glmlaunch_watch_vllm_up"].samples
        assert up.value == 1.0 and up.labels["url"] == vllm_metrics + "/metrics"
        (kv,) = fams["glmlaunch_watch_vllm_kv_cache_usage_perc"].samples
        assert kv.value == 0.75
        assert fams["glmlaunch_watch_vllm_num_preemptions"].type == "counter"
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    docs = [json.loads(line) for line in out.splitlines()]
    with_facts = [d["vllm"] for d in docs if d["vllm"] and d["vllm"]["up"]]
    assert with_facts and with_facts[-1]["num_requests_running"] == 4.0
