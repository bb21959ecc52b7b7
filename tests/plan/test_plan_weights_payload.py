"""W from the checkpoint's safetensors payload on disk: a fetch verified in the hub cache, a local directory.

Real files: a hub-cache layout in a temporary ``HF_HUB_CACHE`` as huggingface_hub lays it out (blobs,
snapshot links, ``refs/main``) with glmlaunch's identity stamp beside it, and safetensors files written by
the ``safetensors`` package; real ``glmlaunch`` processes read them. The checkpoint is not in the
documented weights table, so without the payload W is the built-in default.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
from conftest import FIXTURES, run_cli
from safetensors.numpy import save_file

from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.units import format_size
from glmlaunch.fetch.stamp import Stamp, StampedFile, write_stamp
from glmlaunch.ledger.inputs import UNCALIBRATED, CheckpointOnDisk
from glmlaunch.ledger.weights import payload_figure
from glmlaunch.plan.plan import make_plan

REPO_ID = "someorg/GLM-5.2-test"
COMMIT = "5eed" * 10
SETS = (f"model.path={REPO_ID}", f"model.revision={COMMIT}")
INVENTORY = FIXTURES / "inventories" / "rtxpro6000x4.json"
GIB = 1 << 30
STAMPED = "fetched and verified by its stamp (3 files, each with its size)"
IGNORED = "is ignored (W is not priced from its payload)"


def write_checkpoint(directory: Path) -> tuple[dict[str, bytes], int]:
    """Two safetensors shards and a config, as bytes by name; and the tensor bytes they hold."""
    tensors = [
        {"model.layers.0.w": np.ones((256, 512), np.float16), "model.layers.0.b": np.ones(1000, np.int8)},
        {"lm_head.weight": np.ones((64, 64), np.float32)},
    ]
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, bytes] = {}
    for i, shard in enumerate(tensors, 1):
        path = directory / f"model-0000{i}-of-00002.safetensors"
        save_file(shard, str(path))
        files[path.name] = path.read_bytes()
    files["config.json"] = b'{"model_type": "glm_moe_dsa"}'
    (directory / "config.json").write_bytes(files["config.json"])
    return files, sum(a.nbytes for shard in tensors for a in shard.values())


def hub_checkpoint(cache: Path, *, complete: bool = True) -> tuple[Path, int]:
    """``REPO_ID``@``COMMIT`` in the hub cache ``cache`` as a fetch leaves it: (snapshot, tensor bytes)."""
    folder = cache / ("models--" + REPO_ID.replace("/", "--"))
    files, tensor_bytes = write_checkpoint(cache / "staging")
    snapshot = folder / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (folder / "blobs").mkdir()
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(COMMIT)
    for name, data in files.items():
        blob = hashlib.sha256(data).hexdigest()
        (folder / "blobs" / blob).write_bytes(data)
        (snapshot / name).symlink_to(Path("..") / ".." / "blobs" / blob)
    stamp = Stamp(
        REPO_ID,
        COMMIT,
        COMMIT,
        complete,
        tuple(StampedFile(n, len(d)) for n, d in sorted(files.items())),
        tensor_bytes if complete else None,
    )
    write_stamp(folder / "glmlaunch" / f"{COMMIT}.json", stamp)
    return snapshot, tensor_bytes


def stamp_path(cache: Path) -> Path:
    return cache / ("models--" + REPO_ID.replace("/", "--")) / "glmlaunch" / f"{COMMIT}.json"


def plan_json(env: dict[str, str], *sets: str, profile: str = "turnkey") -> tuple[dict[str, Any], str]:
    args = [a for s in sets for a in ("--set", s)]
    done = run_cli("plan", "-p", profile, *args, "--json", env=env)
    assert done.returncode in (0, 4), done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc, done.stderr


def weights_entry(doc: dict[str, Any]) -> dict[str, Any]:
    (entry,) = [e for e in doc["ranks"][0]["entries"] if e["name"] == "weights"]
    return entry


def weights_notes(doc: dict[str, Any]) -> list[str]:
    return [n for n in doc["notes"] if n.startswith("weights:")]


def test_a_fetched_hub_checkpoint_prices_w_in_plan_json_and_text(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    env = {**clean_env, "HF_HUB_CACHE": str(tmp_path / "hub")}
    snapshot, tensor_bytes = hub_checkpoint(tmp_path / "hub")
    config = resolve_config("turnkey", SETS).config
    expected = payload_figure(config, tensor_bytes, 2, str(snapshot))

    # without the checkpoint on disk (and the hub not asked: HF_HUB_OFFLINE): the built-in default, no
    # note, and the plan's warning that the checkpoint is unknown, with the band
    bare, said = plan_json({**clean_env, "HF_HUB_CACHE": str(tmp_path / "empty")}, *SETS)
    assert weights_entry(bare)["origin"] == "default" and weights_notes(bare) == []
    (warned,) = [w for w in bare["warnings"] if w.startswith("weights:")]
    assert f"{REPO_ID} is not a checkpoint glmlaunch knows" in warned and "HF_HUB_OFFLINE is set" in warned
    assert f"warning: {warned}" in said

    doc, said = plan_json(env, *SETS)
    entry = weights_entry(doc)
    assert doc["budget"]["weights_bytes"] == entry["requested_bytes"] == expected.value
    assert expected.value != bare["budget"]["weights_bytes"]
    assert entry["origin"] == "estimate" and doc["verdict"]["term_sources"]["W"] == "estimate"
    # the tensor bytes numpy wrote, as the headers declare them, in the two shards (config.json is no weight)
    assert entry["formula"].startswith(
        f"safetensors headers of {snapshot}: {tensor_bytes:,} B in 2 files / 4"
    )
    assert entry["note"] == f"estimate from the safetensors payload: {STAMPED}"
    (line,) = weights_notes(doc)
    assert line.startswith(
        f"weights: W {expected.value / GIB:.2f} GiB per rank estimated from the safetensors "
    )
    assert f"payload of {snapshot} ({tensor_bytes:,} B of tensors in 2 files; {STAMPED})" in line
    assert line in said  # stderr says it too

    text = run_cli("plan", "-p", "turnkey", *(a for s in SETS for a in ("--set", s)), env=env)
    assert text.returncode in (0, 4), text.stderr
    (row,) = [r for r in text.stdout.splitlines() if r.lstrip("│ ").startswith("weights ")]
    assert format_size(expected.value) in row and "estimate" in row
    assert line in text.stderr
    assert "W is an estimate" in text.stdout


def test_check_serve_and_explain_oom_plan_with_the_payload(tmp_path: Path, clean_env: dict[str, str]) -> None:
    env = {**clean_env, "HF_HUB_CACHE": str(tmp_path / "hub")}
    snapshot, tensor_bytes = hub_checkpoint(tmp_path / "hub")
    w = payload_figure(resolve_config("turnkey", SETS).config, tensor_bytes, 2, str(snapshot)).value
    sets = [a for s in SETS for a in ("--set", s)]

    check = run_cli("check", "-p", "turnkey", *sets, "--inventory", str(INVENTORY), "--json", env=env)
    (row,) = [r for r in json.loads(check.stdout)["results"] if r["name"] == "memory_verdict"]
    assert row["details"]["terms"]["W"] == w, check.stderr

    serve = run_cli(
        "serve", "-p", "turnkey", *sets, "--dry-run", "--json", "--inventory", str(INVENTORY), env=env
    )
    (row,) = [r for r in json.loads(serve.stdout)["checks"]["results"] if r["name"] == "memory_verdict"]
    assert row["details"]["terms"]["W"] == w, serve.stderr

    # the H200 profile on one GPU, its explicit 100 GiB unset: the payload's W fits, the default's does not
    oom = [
        "explain-oom",
        "-p",
        str(FIXTURES / "watch" / "h200.yaml"),
        *sets,
        "--set",
        "model.weights_per_rank=null",
        str(FIXTURES / "watch" / "oom.log"),
        "--json",
    ]
    with_payload = run_cli(*oom, env=env)
    without = run_cli(*oom, env={**clean_env, "HF_HUB_CACHE": str(tmp_path / "empty")})
    assert json.loads(with_payload.stdout)["plan"]["verdict"] == "ok", with_payload.stderr
    assert json.loads(without.stdout)["plan"]["verdict"] == "refused", without.stderr


def test_an_unverified_checkpoint_is_ignored_with_a_note(tmp_path: Path, clean_env: dict[str, str]) -> None:
    env = {**clean_env, "HF_HUB_CACHE": str(tmp_path / "hub")}
    bare, _ = plan_json({**clean_env, "HF_HUB_CACHE": str(tmp_path / "empty")}, *SETS)
    snapshot, _ = hub_checkpoint(tmp_path / "hub", complete=False)
    fetch_it = "glmlaunch fetch completes and verifies it"

    def ignored(why: str) -> None:
        doc, said = plan_json(env, *SETS)
        entry = weights_entry(doc)
        assert entry["requested_bytes"] == weights_entry(bare)["requested_bytes"]
        assert entry["origin"] == "default"
        reason = f"the checkpoint at {snapshot} {IGNORED}: {why}"
        assert entry["note"].endswith(f"; {reason}")
        assert weights_notes(doc) == [f"weights: {reason}"]
        assert f"weights: {reason}" in said

    # a fetch that did not finish: stamped incomplete
    ignored(f"a partial fetch of {REPO_ID} (stamped incomplete); {fetch_it}")

    # stamped complete, then a shard changed on disk (its blob, through the snapshot's link)
    stamp = json.loads(stamp_path(tmp_path / "hub").read_text())
    stamp["complete"] = True
    stamp_path(tmp_path / "hub").write_text(json.dumps(stamp))
    shard = snapshot / "model-00002-of-00002.safetensors"
    shard.resolve().write_bytes(shard.read_bytes()[:-10])
    ignored(f"its files no longer match its stamp (2 of 3 files complete); {fetch_it}")

    # no stamp, and no listing of huggingface_hub's own: nothing verifies the snapshot
    stamp_path(tmp_path / "hub").unlink()
    ignored(f"nothing verifies it (no glmlaunch stamp, no complete listing); {fetch_it}")


def test_an_explicit_weights_setting_wins_over_the_payload(tmp_path: Path, clean_env: dict[str, str]) -> None:
    env = {**clean_env, "HF_HUB_CACHE": str(tmp_path / "hub")}
    hub_checkpoint(tmp_path / "hub")
    doc, said = plan_json(env, *SETS, "model.weights_per_rank=80GiB")
    entry = weights_entry(doc)
    assert entry["requested_bytes"] == doc["budget"]["weights_bytes"] == 80 * GIB
    assert entry["origin"] == "exact" and doc["verdict"]["term_sources"]["W"] == "profile"
    assert weights_notes(doc) == [] and "safetensors" not in said


def test_a_documented_checkpoint_keeps_its_documented_w(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """The shipped turnkey's own checkpoint fetched: its documented W stays ahead of the payload."""
    config = resolve_config("turnkey").config
    assert config.model.path is not None and config.model.revision is not None
    bare, _ = plan_json({**clean_env, "HF_HUB_CACHE": str(tmp_path / "empty")})
    directory = tmp_path / "hub" / ("models--" + config.model.path.replace("/", "--"))
    snapshot = directory / "snapshots" / config.model.revision
    files, _ = write_checkpoint(snapshot)
    stamp = Stamp(
        config.model.path,
        config.model.revision,
        config.model.revision,
        True,
        tuple(StampedFile(n, len(d)) for n, d in sorted(files.items())),
    )
    write_stamp(directory / "glmlaunch" / f"{config.model.revision}.json", stamp)
    doc, _ = plan_json({**clean_env, "HF_HUB_CACHE": str(tmp_path / "hub")})
    # the documented table's 3.0 bpw row (of another release: an estimate built on a real boot) stays
    entry = weights_entry(doc)
    assert entry == weights_entry(bare) and entry["formula"].startswith("glm-5.2-exl3-tr3-3.0bpw: 77.66 GiB")
    assert weights_notes(doc) == []


def test_a_local_directory_is_priced_as_it_is_and_a_partial_one_ignored(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    directory = tmp_path / "GLM-5.2-local"
    files, tensor_bytes = write_checkpoint(directory)
    sets = (f"model.path={directory}", "model.revision=null")
    doc, _ = plan_json(clean_env, *sets)
    entry = weights_entry(doc)
    assert entry["origin"] == "estimate"
    assert entry["formula"].startswith(
        f"safetensors headers of {directory}: {tensor_bytes:,} B in 2 files / 4"
    )
    assert (
        entry["note"]
        == "estimate from the safetensors payload: a local directory with no stamp, read as it is"
    )

    partial = Stamp(REPO_ID, None, None, False, tuple(StampedFile(n, len(d)) for n, d in files.items()))
    write_stamp(directory / ".glmlaunch-checkpoint.json", partial)
    doc, _ = plan_json(clean_env, *sets)
    assert weights_entry(doc)["origin"] == "default"
    assert weights_notes(doc) == [
        f"weights: the checkpoint at {directory} {IGNORED}: a partial fetch of {REPO_ID} "
        "(stamped incomplete); glmlaunch fetch completes and verifies it"
    ]


def test_the_payload_travels_with_a_plans_inputs() -> None:
    """A fix or a search step planned from a plan's inputs prices W from the same payload, reading nothing."""
    config = resolve_config("turnkey", SETS).config
    found = CheckpointOnDisk(REPO_ID, "/nowhere/snapshot", 300 * GIB, 64, "verified by the test")
    plan = make_plan(config, inputs=UNCALIBRATED, checkpoint=found)
    w = payload_figure(config, 300 * GIB, 64, "/nowhere/snapshot", how="verified by the test").value
    assert plan.budget.w == w and plan.inputs.checkpoint == found and not plan.inputs.calibrated
    tp2 = resolve_config("turnkey", (*SETS, "parallel.tp=2", "parallel.dcp=1")).config
    step = plan.with_config(tp2)
    assert step.budget.w == payload_figure(tp2, 300 * GIB, 64, "/nowhere/snapshot").value > w
    # the calibrated plan (make_plan looks the calibration up) carries it too
    assert make_plan(config, checkpoint=found).budget.w == w
