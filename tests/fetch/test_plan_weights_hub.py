"""W of a checkpoint glmlaunch does not know, from the hub's file metadata (issue 29, item 4), against the
real HTTP hub on 127.0.0.1 of the fetch tests (tests/fetch/fetch_hub.py), through huggingface_hub.

Every plan is a real ``glmlaunch`` process (huggingface_hub reads ``HF_HUB_OFFLINE`` once, as it is
imported). What is checked: W from the revision's safetensors headers and sizes with nothing downloaded
(each file read is a ranged GET of its header), the TP split keeping the replicated tensors whole, the
warning on stderr and in ``--json``, the cache (a second plan asks nothing), ``HF_HUB_OFFLINE``, a hub
that has no such repository, a file whose header does not parse (the sizes stand), and the token
never shown.
"""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clirunner import run_cli_process
from fetch_hub import Hub, Repo, safetensors_blob

from glmlaunch.config.resolve import resolve_config
from glmlaunch.fetch.payload import TensorSplit
from glmlaunch.ledger.inputs import CheckpointOnDisk
from glmlaunch.ledger.weights import payload_figure, payload_offset

REPO_ID = "test-org/GLM-5.2-Unknown"
COMMIT = "7a" * 20
TOKEN = "hf_TestTokenNeverShown5678"
#: GLM-5.2 tensor names (the checkpoint's module paths), placed as vLLM's loader places them
TENSORS = {
    "model-00001-of-00002.safetensors": {
        "model.embed_tokens.weight": 60_000,  # split (VocabParallelEmbedding)
        "model.layers.0.self_attn.q_a_proj.weight": 9_000,  # replicated (fused q_a / kv_a)
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight": 3_000,  # replicated
        "model.layers.0.self_attn.q_b_proj.weight": 20_000,  # split
        "model.layers.0.input_layernorm.weight": 512,  # replicated (a norm)
        "model.layers.3.mlp.gate.weight": 1_500,  # replicated (the router)
        "model.layers.3.mlp.experts.0.gate_proj.weight": 80_000,  # split
    },
    "model-00002-of-00002.safetensors": {
        "model.layers.78.eh_proj.weight": 4_000,  # the MTP layer, replicated (nn.Linear)
        "model.layers.78.mlp.experts.0.up_proj.weight": 16_000,  # the MTP layer, split
        "model.layers.78.embed_tokens.weight": 60_000,  # shared with the target: not loaded again
        "lm_head.weight": 60_000,  # split (ParallelLMHead)
    },
}
REPLICATED = 9_000 + 3_000 + 512 + 1_500
MTP_SPLIT, MTP_REPLICATED = 16_000, 4_000


def files() -> dict[str, bytes]:
    out = {name: safetensors_blob(t) for name, t in TENSORS.items()}
    out["config.json"] = b'{"architectures": ["GlmMoeDsaForCausalLM"]}\n'
    return out


@pytest.fixture
def hub() -> Iterator[Hub]:
    h = Hub().start()
    yield h
    h.stop()


@pytest.fixture
def env(clean_env: dict[str, str], hub: Hub, tmp_path: Path) -> dict[str, str]:
    out = {k: v for k, v in clean_env.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    out.update(HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(tmp_path / "hub"), HF_HUB_DISABLE_TELEMETRY="1")
    return out


def plan(env: dict[str, str], *sets: str, repo: str = REPO_ID) -> tuple[dict[str, Any], str]:
    args = [a for s in (f"model.path={repo}", f"model.revision={COMMIT}", *sets) for a in ("--set", s)]
    done = run_cli_process("plan", "-p", "turnkey", *args, "--json", env=env, timeout=120)
    assert done.returncode in (0, 4), done.stderr
    assert "Traceback" not in done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc, done.stderr


def weights(doc: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = next(e for e in doc["ranks"][0]["entries"] if e["name"] == "weights")
    return entry


def unknown_warning(doc: dict[str, Any], stderr: str, repo: str = REPO_ID) -> str:
    (line,) = [w for w in doc["warnings"] if w.startswith("weights:")]
    assert f"{repo} is not a checkpoint glmlaunch knows" in line and f"warning: {line}" in stderr
    return line


def expected(*sets: str) -> tuple[int, tuple[int, int]]:
    config = resolve_config("turnkey", [f"model.path={REPO_ID}", f"model.revision={COMMIT}", *sets]).config
    split = TensorSplit.of(((n, b) for t in TENSORS.values() for n, b in t.items()), config.model.geometry)
    found = CheckpointOnDisk(
        REPO_ID, "hub", split.total, 2, "", origin="hub", replicated_bytes=split.replicated,
        mtp_bytes=split.mtp, mtp_replicated_bytes=split.mtp_replicated,
    )  # fmt: skip
    fig = payload_figure(config, split.total, 2, "hub", tensors=found)
    return fig.value, fig.range


def test_an_unknown_hub_checkpoint_plans_w_from_its_headers_with_nothing_downloaded(
    hub: Hub, env: dict[str, str]
) -> None:
    hub.add(Repo(REPO_ID, COMMIT, files()))
    doc, said = plan(env)
    entry = weights(doc)
    total = sum(sum(t.values()) for t in TENSORS.values())
    offset = payload_offset()
    assert offset is not None
    # turnkey runs MTP5: the MTP layer's own tensors per rank (split / 4 + replicated) are added
    mtp = -(-MTP_SPLIT // 4) + MTP_REPLICATED
    assert doc["budget"]["weights_bytes"] == entry["requested_bytes"] == -(-total // 4) + offset[0] + mtp
    assert (entry["requested_bytes"], None) == (expected()[0], None)
    assert entry["origin"] == "estimate" and doc["verdict"]["term_sources"]["W"] == "estimate"
    assert entry["formula"].startswith(
        f"the hub's safetensors headers of {hub.url}/{REPO_ID}@{COMMIT[:12]}: {total:,} B in 2 files / 4"
    )
    line = unknown_warning(doc, said)
    low, high = expected()[1]
    assert f"[{low / 2**30:.2f}, {high / 2**30:.2f}]" in line and "the hub's file metadata" in line
    # nothing downloaded: one metadata request, then each safetensors file's header by a ranged GET
    gets = hub.gets()
    assert sorted(r.path.rsplit("/", 1)[-1] for r in gets) == sorted(TENSORS)
    assert all(r.range == "bytes=0-100000" for r in gets)
    assert not any(r.path.endswith("config.json") for r in hub.requests)

    # again: from glmlaunch's cache, the hub not asked at all
    before = len(hub.requests)
    again, _ = plan(env)
    assert len(hub.requests) == before
    assert weights(again)["requested_bytes"] == entry["requested_bytes"]


def test_the_tp_split_keeps_the_replicated_tensors_whole(hub: Hub, env: dict[str, str]) -> None:
    hub.add(Repo(REPO_ID, COMMIT, files()))
    tp4 = weights(plan(env)[0])["requested_bytes"]
    sets = ("parallel.tp=2", "parallel.dcp=2")
    tp2_doc, _ = plan(env, *sets)
    tp2 = weights(tp2_doc)["requested_bytes"]
    whole = REPLICATED + MTP_REPLICATED
    assert tp2 == whole + (tp4 - whole) * 2 == expected(*sets)[0]
    assert "replicated 18,012 B (the headers' replicated tensors)" in weights(tp2_doc)["formula"]


def test_offline_the_hub_is_not_asked_and_the_warning_says_so(hub: Hub, env: dict[str, str]) -> None:
    hub.add(Repo(REPO_ID, COMMIT, files()))
    doc, said = plan({**env, "HF_HUB_OFFLINE": "1"})
    assert hub.requests == []
    assert weights(doc)["origin"] == "default"
    line = unknown_warning(doc, said)
    assert f"HF_HUB_OFFLINE is set: the hub at {hub.url} was not asked" in line


def test_a_name_that_states_fp8_is_priced_offline_as_fp8_and_refused(env: dict[str, str]) -> None:
    # the case: zai-org/GLM-5.2-FP8 planned as the 3.0 bpw figure (77.66 GiB) and `ok`
    doc, said = plan({**env, "HF_HUB_OFFLINE": "1"}, repo="zai-org/GLM-5.2-FP8")
    entry = weights(doc)
    w = doc["budget"]["weights_bytes"]
    # ~750 GB over 4 ranks: far beyond a 96 GB card, and not the 3.0 bpw figure
    assert 165 * 2**30 < w < 195 * 2**30 and entry["origin"] == "estimate"
    assert "routed experts at 8.002 instead of" in entry["formula"]
    line = unknown_warning(doc, said, "zai-org/GLM-5.2-FP8")
    assert "rescaled to the FP8 its name states" in line and "HF_HUB_OFFLINE is set" in line
    assert doc["verdict"]["ok"] is False


def test_a_hub_without_the_repository_is_a_warning_asked_once(hub: Hub, env: dict[str, str]) -> None:
    doc, said = plan(env)
    assert weights(doc)["origin"] == "default"
    line = unknown_warning(doc, said)
    assert f"the hub at {hub.url} has no repository {REPO_ID}" in line
    asked = len(hub.requests)
    assert asked >= 1
    again, _ = plan(env)
    assert len(hub.requests) == asked  # the failure is kept for a while: planning twice waits once
    assert unknown_warning(again, _) == line


def test_headers_that_do_not_parse_leave_the_file_sizes(hub: Hub, env: dict[str, str]) -> None:
    broken = {"model.safetensors": b"\xff" * 64 + b"not a safetensors file" * 100, "config.json": b"{}"}
    hub.add(Repo(REPO_ID, COMMIT, broken))
    doc, said = plan(env)
    entry = weights(doc)
    size = len(broken["model.safetensors"])
    offset = payload_offset()
    assert offset is not None
    assert entry["formula"].startswith(f"the hub's safetensors file sizes of {hub.url}/{REPO_ID}@")
    assert f"{size:,} B in 1 files / 4" in entry["formula"]
    unknown_warning(doc, said)


def test_the_token_is_sent_and_never_shown(hub: Hub, env: dict[str, str], tmp_path: Path) -> None:
    hub.add(Repo(REPO_ID, COMMIT, files(), gated="manual", token=TOKEN))
    doc, said = plan({**env, "HF_TOKEN": TOKEN})
    assert weights(doc)["formula"].startswith("the hub's safetensors headers of")
    assert all(r.token for r in hub.requests)
    assert TOKEN not in said and TOKEN not in json.dumps(doc)
    cached = list((tmp_path / "glmlaunch-cache" / "hub-metadata").rglob("*.json"))
    assert cached and all(TOKEN not in p.read_text() for p in cached)


def test_a_hub_that_does_not_answer_stops_the_plan_for_a_few_seconds_at_most(env: dict[str, str]) -> None:
    # a port that accepts the connection and never answers: the lookup's timeout, then the warning
    quiet = socket.socket()
    quiet.bind(("127.0.0.1", 0))
    quiet.listen(8)
    try:
        url = f"http://127.0.0.1:{quiet.getsockname()[1]}"
        args = ["--set", f"model.path={REPO_ID}", "--set", f"model.revision={COMMIT}"]
        done = run_cli_process("plan", "-p", "turnkey", *args, env={**env, "HF_ENDPOINT": url}, timeout=60)
    except subprocess.TimeoutExpired:  # pragma: no cover - the failure this test is for
        pytest.fail("the plan waited on a hub that does not answer")
    finally:
        quiet.close()
    assert done.returncode == 0, done.stderr
    assert f"{REPO_ID} is not a checkpoint glmlaunch knows" in done.stderr
    assert "cannot be reached" in done.stderr


def test_a_header_that_stalls_leaves_the_file_sizes_within_the_timeout(hub: Hub, env: dict[str, str]) -> None:
    import threading
    import time

    from fetch_hub import Throttle

    hub.add(Repo(REPO_ID, COMMIT, files()))
    never = threading.Event()
    # one byte of the second file's header, then nothing: its read times out, the sizes stand
    hub.throttle["model-00002-of-00002.safetensors"] = Throttle(chunk=1, hold=never)
    try:
        started = time.monotonic()
        doc, said = plan(env)
        took = time.monotonic() - started
    finally:
        never.set()
    entry = weights(doc)
    size = sum(len(d) for n, d in files().items() if n.endswith(".safetensors"))
    assert entry["formula"].startswith(f"the hub's safetensors file sizes of {hub.url}/{REPO_ID}@")
    assert f"{size:,} B in 2 files / 4" in entry["formula"]
    unknown_warning(doc, said)
    assert took < 30
