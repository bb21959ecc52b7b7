"""Hostile input on the watch and boots surfaces (issue 31): endpoints, boot stores, traces.

* hostile HTTP endpoints on 127.0.0.1 (tests/hostile_http.py): random bytes, real pages mutated (NaN and
  infinities among the values), every status, redirects on and off the host, replies cut or trickled.
  The scraper never raises and never dies; what it reports is up with finite-or-Prometheus values, or
  down with an error in glmlaunch's words (bounded, no control character, no byte of the reply); and the
  watch with such an endpoint keeps the contract (fuzzkit.assert_contract: a documented exit code, no
  traceback, no secret, under the deadline), its URL's password and token never shown;
* boot stores: a real supervised boot's files (the fake vLLM replaying a real log) mutated field by
  field and byte by byte: ``boots`` keeps the contract, exits 0 listing the intact boot, and warns about
  the bad one;
* hostile traces: a recorded NVML trace mutated: ``watch --replay`` keeps the contract.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzzkit import (
    FIXTURES,
    HF_SECRET,
    Outcome,
    assert_contract,
    base_environ,
    fuzz_settings,
    json_mutations,
    run_inprocess,
    seeded,
    text_mutations,
    write,
)
from fuzzkit import cases as fuzzkit_cases
from hostile_http import HostileServer, http_reply, vllm_page
from hypothesis import given
from hypothesis import strategies as st

from glmlaunch.watch.vllm import Scraper

WATCH = FIXTURES / "watch"
PROFILE = str(WATCH / "h200.yaml")
MARK = b"ZQX\x1b[31mREPLY"
PASSWORD = "pw_fuzz_7781"


class Case:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="glmfuzz-wb-"))
        (self.root / "home").mkdir()
        self.env = base_environ(self.root)

    def run(self, *args: str, secrets: tuple[str, ...] = ()) -> Outcome:
        o = run_inprocess(args, self.env, self.root)
        if args[0] == "watch" and "--json" in args:
            # a stream of documents, one per line, each strict JSON (the contract's check is for one)
            assert_contract(dataclasses.replace(o, argv=tuple(a for a in args if a != "--json")),
                            secrets=(HF_SECRET, *secrets))  # fmt: skip
            for line in o.stdout.splitlines() if o.code == 0 else []:
                json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in the JSON lines"))
            return o
        assert_contract(o, secrets=(HF_SECRET, *secrets))
        return o

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def case() -> Iterator[Any]:
    yield from fuzzkit_cases(Case)


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    """One endpoint for the module; each example sets its reply script."""
    s = HostileServer(lambda _head: [http_reply(vllm_page())]).start()
    try:
        yield s
    finally:
        s.stop()


# --- replies ---------------------------------------------------------------------------------------

_VALUES = st.sampled_from(["NaN", "+Inf", "-Inf", "0", "-0", "1e308", "1e-320", "7", "0.5", "x", "", "1e400"])
_STATUSES = st.sampled_from(
    ["200 OK", "204 No Content", "301 Moved", "302 Found", "307 Temporary", "404 Not Found", "500 Oops",
     "999 Odd", "2x0 Bad", "200 " + MARK.decode("latin-1")]
)  # fmt: skip


@st.composite
def reply(draw: st.DrawFn, port: int, pauses: tuple[float, ...] = (0.02, 0.2, 0.8)) -> list[bytes | float]:
    kind = draw(st.sampled_from(["page", "page", "bytes", "status", "redirect", "cut", "trickle"]))
    facts = ("kv_cache_usage_perc", "num_requests_running", "num_requests_waiting", "num_preemptions_total")
    page = vllm_page(**{f: draw(_VALUES) for f in draw(st.sets(st.sampled_from(facts)))})
    if draw(st.booleans()):
        page = draw(text_mutations(page))
    body = page.encode("utf-8", "surrogateescape") + (MARK if draw(st.booleans()) else b"")
    if kind == "page":
        return [http_reply(body)]
    if kind == "bytes":
        return [draw(st.binary(max_size=300)) + MARK]
    if kind == "status":
        return [http_reply(body, status=draw(_STATUSES))]
    if kind == "redirect":
        target = draw(
            st.sampled_from(
                ["/metrics2", f"http://127.0.0.1:{port}/m", f"http://localhost:{port}/m", "http://10.255.255.1/",
                 "file:///etc/passwd", "ftp://x/", "//evil.example/m", MARK.decode("latin-1")]
            )
        )  # fmt: skip
        return [http_reply(b"", status=draw(st.sampled_from(["301 Moved", "302 Found", "308 P"])),
                           headers=[f"Location: {target}"])]  # fmt: skip
    full = http_reply(body)
    if kind == "cut":
        return [full[: draw(st.integers(0, len(full)))]]
    cut = draw(st.integers(0, len(full)))
    return [full[:cut], draw(st.sampled_from(pauses)), full[cut:]]


def _check_facts(facts: Any) -> None:
    doc = facts.to_json()
    json.dumps(doc, allow_nan=False)  # valid JSON whatever the values
    if facts.up:
        assert facts.error is None
        return
    assert facts.error and len(facts.error) <= 200
    assert "ZQX" not in facts.error and not re.search(r"[\x00-\x1f\x7f-\x9f]", facts.error), facts.error


@seeded
@fuzz_settings(60)
@given(data=st.data())
def test_hostile_replies_are_a_state_never_a_crash(server: HostileServer, data: st.DataObject) -> None:
    script = data.draw(reply(server.port), label="reply")
    server.script = lambda head: (
        script if not head.startswith(b"GET /metrics2") else [http_reply(vllm_page())]
    )
    scraper = Scraper(server.url + "/metrics", timeout_s=0.3)
    _check_facts(scraper.poll_once())
    _check_facts(scraper.poll_once())  # a read still trickling: the state says so, no second connection


@seeded
@fuzz_settings(25)
@given(data=st.data())
def test_the_watch_with_a_hostile_endpoint(case: Any, server: HostileServer, data: st.DataObject) -> None:
    c = case()
    script = data.draw(reply(server.port, pauses=(0.02, 0.2)), label="reply")
    server.script = lambda _head: script
    query = data.draw(st.sampled_from(["", f"?token={HF_SECRET}", f"?x=1&api_key={PASSWORD}", "?q=%ff"]))
    endpoint = server.url.replace("http://", f"http://u:{PASSWORD}@") + query
    args = ["watch", "-p", PROFILE, "--replay", str(WATCH / "oom.json"), "--samples", "8", "--speed", "20",
            "--endpoint", endpoint]  # fmt: skip
    if data.draw(st.booleans()):
        args.append("--json")
    c.run(*args, secrets=(PASSWORD,))


# --- boot stores -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_boot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real supervised boot (the fake vLLM replaying a real log), as serve --supervise keeps it."""
    from glmlaunch.plan.profile_import import build_profile

    tmp = tmp_path_factory.mktemp("fuzz-boot")
    log = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp0-v1-server.log"
    profile = tmp / "ok.yaml"
    profile.write_text(build_profile(log, environ={}).text, encoding="utf-8")
    (tmp / "home").mkdir()
    (tmp / "record").mkdir()
    env = dict(
        base_environ(tmp),
        GLMLAUNCH_VLLM_BIN=str(FIXTURES.parent / "supervise" / "fake_vllm.py"),
        GLMLAUNCH_INVENTORY=str(FIXTURES / "inventories" / "rtxpro6000x4.json"),
        GLMLAUNCH_SKIP_PREFLIGHT="1",
        FAKE_VLLM_RECORD=str(tmp / "record"),
        FAKE_VLLM_LOG=str(log),
        FAKE_VLLM_THEN="exit:0",
    )
    exe = Path(sys.executable).parent / "glmlaunch"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "glmlaunch"]
    done = subprocess.run(
        [*argv, "serve", "-p", str(profile), "--supervise"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [boot] = list((tmp / "glmlaunch-cache" / "boots").iterdir())
    return boot


GOOD, BAD = "20260101T000000Z-aaaaaa", "20260102T000000Z-bbbbbb"


@seeded
@fuzz_settings(200)
@given(
    data=st.data(),
    name=st.sampled_from(["outcome.json", "outcome.json", "launch.json"]),
    command=st.sampled_from(
        [("boots",), ("boots", "--json"), ("boots", "last"), ("boots", "last", "--json")]
    ),
)
def test_corrupt_boot_stores(
    case: Any, real_boot: Path, data: st.DataObject, name: str, command: tuple[str, ...]
) -> None:
    c = case()
    root = c.root / "glmlaunch-cache" / "boots"
    shutil.copytree(real_boot, root / GOOD)
    shutil.copytree(real_boot, root / BAD)
    doc = json.loads((real_boot / name).read_text())
    mode = data.draw(st.sampled_from(["json", "json", "text", "raw"]), label="mode")
    if mode == "json":
        text = json.dumps(data.draw(json_mutations(doc), label="mutated"), default=str)
    elif mode == "text":
        text = data.draw(text_mutations(json.dumps(doc, indent=1)), label="mutated text")
    else:
        text = data.draw(st.sampled_from(["", "{", "null", "[]", "1e400", "NaN", '{"schema_version": 2}']))
    write(root / BAD / name, text)
    o = c.run(*command)
    assert o.code == 0, o.describe()
    if command == ("boots",):
        assert GOOD in o.stdout, o.describe()
    if command == ("boots", "--json"):
        assert GOOD in [b["boot_id"] for b in json.loads(o.stdout)["boots"]]
    # a boot left out is said, once, naming it
    listed_bad = BAD in o.stdout
    warned = [line for line in o.stderr.splitlines() if f"skipped boot {BAD}" in line]
    if command in (("boots",), ("boots", "--json")):
        assert listed_bad or len(warned) == 1, o.describe()
    c.run("boots", BAD)  # exit 0 or 2 with the reason: the contract


# --- traces ----------------------------------------------------------------------------------------

_TRACE = json.loads((WATCH / "clean.json").read_text())


@seeded
@fuzz_settings(80)
@given(data=st.data(), speed=st.sampled_from([None, None, "1e-300", "nan", "1e6"]))
def test_hostile_traces(case: Any, data: st.DataObject, speed: str | None) -> None:
    c = case()
    mode = data.draw(st.sampled_from(["json", "json", "text"]), label="mode")
    if mode == "json":
        text = json.dumps(data.draw(json_mutations(_TRACE), label="mutated"), default=str)
    else:
        text = data.draw(text_mutations((WATCH / "clean.json").read_text()), label="mutated text")
    path = write(c.root / "trace.json", text)
    args = ["watch", "-p", PROFILE, "--replay", str(path), "--samples", "30", "--json"]
    if speed is not None:
        args += ["--speed", speed]
    c.run(*args)
