"""``glmlaunch fetch`` against a real HTTP hub on 127.0.0.1 (tests/fetch/fetch_hub.py), through
huggingface_hub's own endpoint setting (``HF_ENDPOINT``): a complete fetch and its verification, a download
killed with SIGKILL mid-file and resumed, a wrong revision, a gated repository, another model in the
directory, a full disk, and the dry runs with and without a hub. Every run is the real ``glmlaunch``
executable in its own process; nothing here reaches any other address.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from conftest import REPO, glmlaunch_exe
from fetch_hub import Hub, Repo, Throttle, safetensors_blob

from glmlaunch.config.environment import compose
from glmlaunch.config.resolve import resolve_config
from glmlaunch.config.units import format_size
from glmlaunch.fetch.status import find_checkpoint
from glmlaunch.ledger.weights import payload_figure

SCHEMA = json.loads((REPO / "docs" / "schemas" / "fetch.schema.json").read_text())
COMMIT = "1f" * 20
TOKEN = "hf_TestTokenNeverShown1234"
TENSORS = {
    "model-00001-of-00002.safetensors": {"a": 40_000, "b": 8_192},
    "model-00002-of-00002.safetensors": {"c": 4_096},
}


def tiny_files() -> dict[str, bytes]:
    files = {name: safetensors_blob(t) for name, t in TENSORS.items()}
    files["config.json"] = b'{"architectures": ["GlmMoeDsaForCausalLM"]}\n'
    files["tokenizer/tokenizer.json"] = b'{"version": "1.0"}\n'
    return files


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


def profile(tmp_path: Path, path: str, revision: str | None = COMMIT, name: str = "tiny") -> Path:
    prof = tmp_path / f"{name}.yaml"
    rev = f'  revision: "{revision}"\n' if revision else ""
    prof.write_text(f"extends: turnkey\ndescription: a small checkpoint\nmodel:\n  path: {path}\n{rev}")
    return prof


def fetch(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*glmlaunch_exe(), "fetch", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def snapshot(env: dict[str, str], repo: str = "test-org/tiny", commit: str = COMMIT) -> Path:
    return Path(env["HF_HUB_CACHE"]) / ("models--" + repo.replace("/", "--")) / "snapshots" / commit


def stamp_of(env: dict[str, str], repo: str = "test-org/tiny", commit: str = COMMIT) -> dict[str, object]:
    path = Path(env["HF_HUB_CACHE"]) / ("models--" + repo.replace("/", "--")) / "glmlaunch" / f"{commit}.json"
    doc: dict[str, object] = json.loads(path.read_text())
    return doc


def one_error(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, (done.returncode, done.stderr)
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and done.stderr.rstrip().splitlines()[-1] == errors[0], done.stderr
    assert "Traceback" not in done.stderr
    return errors[0]


def validate(doc: dict[str, object]) -> None:
    assert next(iter(doc)) == "schema_version"
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)


# --- a complete fetch ---------------------------------------------------------------------------------


def test_a_fetch_downloads_the_pinned_revision_verifies_and_stamps_it(
    hub: Hub, env: dict[str, str], tmp_path: Path
) -> None:
    files = tiny_files()
    hub.add(Repo("test-org/tiny", COMMIT, files))
    prof = profile(tmp_path, "test-org/tiny")
    done = fetch("-p", str(prof), env=env)
    assert done.returncode == 0, done.stderr
    where = snapshot(env)
    assert done.stdout == f"{where}\n"  # the data: the directory vLLM loads
    for name, data in files.items():
        assert (where / name).read_bytes() == data
    stamp = stamp_of(env)
    assert stamp["complete"] is True and stamp["repository"] == "test-org/tiny" and stamp["commit"] == COMMIT
    assert {(f["path"], f["size"]) for f in stamp["files"]} == {(n, len(d)) for n, d in files.items()}  # type: ignore[attr-defined]
    assert stamp["safetensors_bytes"] == sum(sum(t.values()) for t in TENSORS.values())
    assert "downloaded and verified: 4 files" in done.stderr
    assert len(hub.gets()) == len(files)

    # again: verified against the hub's metadata, nothing downloaded twice
    again = fetch("-p", str(prof), "--json", env=env)
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    validate(doc)
    assert doc["action"] == "already complete" and doc["state"] == "complete" and doc["needed_bytes"] == 0
    assert doc["payload"]["safetensors_bytes"] == stamp["safetensors_bytes"]
    assert doc["payload"]["per_rank"]["origin"] == "estimate"
    assert len(hub.gets()) == len(files)

    # the plan's seam: the checkpoint found on disk (no hub), its payload priced by the ledger's own rule
    config = resolve_config(str(prof), [], env).config
    found = find_checkpoint(config, compose(config, env).full)
    assert found is not None and found.directory == where and found.commit == COMMIT
    assert found.payload is not None and found.payload.safetensors_bytes == stamp["safetensors_bytes"]
    figure = found.payload.per_rank(config)
    assert figure.value == doc["payload"]["per_rank"]["bytes"]
    assert figure == payload_figure(config, found.payload.safetensors_bytes, 2, str(where))

    # a file that changed on disk (its blob, through the snapshot's link) no longer verifies: the next
    # fetch fetches that one back, and only that one
    os.truncate(where / "config.json", 2)
    fixed = fetch("-p", str(prof), env=env)
    assert fixed.returncode == 0, fixed.stderr
    assert (where / "config.json").read_bytes() == files["config.json"]
    assert [r.path.rsplit("/", 1)[-1] for r in hub.gets()[len(files) :]] == ["config.json"]


def test_a_local_model_path_directory_is_fetched_into_it_and_remembers_its_repository(
    hub: Hub, env: dict[str, str], tmp_path: Path
) -> None:
    files = tiny_files()
    hub.add(Repo("test-org/tiny", COMMIT, files))
    target = tmp_path / "models" / "tiny"
    prof = profile(tmp_path, str(target))
    unknown = fetch("-p", str(prof), env=env)
    assert "--repo OWNER/NAME" in one_error(unknown, 2)
    done = fetch("-p", str(prof), "--repo", "test-org/tiny", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{target}\n"
    assert {n: (target / n).read_bytes() for n in files} == files
    stamp = json.loads((target / ".glmlaunch-checkpoint.json").read_text())
    assert stamp["complete"] is True and stamp["repository"] == "test-org/tiny"
    # the stamp remembers the repository: no --repo needed, and nothing is downloaded again
    again = fetch("-p", str(prof), env=env)
    assert again.returncode == 0, again.stderr
    assert len(hub.gets()) == len(files)


# --- dry runs -------------------------------------------------------------------------------------------


def test_a_dry_run_with_a_hub_states_the_size_from_the_file_metadata_and_downloads_nothing(
    hub: Hub, env: dict[str, str], tmp_path: Path
) -> None:
    files = tiny_files()
    hub.add(Repo("test-org/tiny", COMMIT, files))
    prof = profile(tmp_path, "test-org/tiny")
    text = fetch("-p", str(prof), "--dry-run", env=env)
    assert text.returncode == 0, text.stderr
    total = sum(len(d) for d in files.values())
    assert f"revision     {COMMIT} (commit {COMMIT})" in text.stdout
    assert f"destination  {snapshot(env)} (hub cache, from HF_HUB_CACHE)" in text.stdout
    assert "(4 files, the hub's file metadata)" in text.stdout
    doc_run = fetch("-p", str(prof), "--dry-run", "--json", env=env)
    doc = json.loads(doc_run.stdout)
    validate(doc)
    assert doc["size"] == {"bytes": total, "source": "hub", "detail": "4 files, the hub's file metadata"}
    assert doc["needed_bytes"] == total and doc["would_fetch"] is True and doc["state"] == "absent"
    assert hub.gets() == [] and not snapshot(env).exists()


def test_an_offline_dry_run_states_revision_destination_and_the_documented_size(
    env: dict[str, str], tmp_path: Path
) -> None:
    offline = dict(env, HF_HUB_OFFLINE="1")
    done = fetch("-p", "turnkey", "--dry-run", "--json", env=offline)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    validate(doc)
    assert doc["revision"] == "9297b9f1d53af5c67cffa01e30cc071a1ff7144b"
    assert doc["hub"]["offline"] == "HF_HUB_OFFLINE=1 in the environment"
    assert doc["size"]["source"] == "documented" and doc["size"]["bytes"] == 309 * 1024**3
    assert "glm_config.py L250-251 (repo, revision), L330 '\"download_gib\": 309'" in doc["size"]["detail"]
    assert doc["destination"]["checkpoint_dir"] == str(
        snapshot(env, "brandonmusic/GLM-5.2-EXL3-TR3-3.0bpw", doc["revision"])
    )
    # a checkpoint nobody documented
    prof = profile(tmp_path, "test-org/undocumented")
    text = fetch("-p", str(prof), "--dry-run", "--offline", env=env)
    assert text.returncode == 0, text.stderr
    assert "size         size unknown offline" in text.stdout
    # no hub answering (a closed port on this machine): the same, with a warning saying so
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    gone = fetch("-p", "turnkey", "--dry-run", env=dict(env, HF_ENDPOINT=dead))
    assert gone.returncode == 0, gone.stderr
    assert f"the hub at {dead} cannot be reached" in gone.stderr
    assert "309.00 GiB (documented, not from the hub" in gone.stdout
    # a real fetch without a hub stops, naming it
    assert "cannot be reached" in one_error(fetch("-p", "turnkey", env=dict(env, HF_ENDPOINT=dead)), 10)


# --- killed and resumed ----------------------------------------------------------------------------------


def test_a_download_killed_mid_file_resumes_without_fetching_the_finished_files_again(
    hub: Hub, env: dict[str, str], tmp_path: Path
) -> None:
    files = tiny_files()
    big = "model-00003-of-00003.safetensors"
    files[big] = safetensors_blob({"experts": 1_000_000})
    hub.add(Repo("test-org/tiny", COMMIT, files))
    held = threading.Event()
    hub.throttle[big] = Throttle(chunk=16_384, hold=held)  # the first 16 KiB, then it waits: mid-file
    prof = profile(tmp_path, "test-org/tiny")
    proc = subprocess.Popen(
        [*glmlaunch_exe(), "fetch", "-p", str(prof)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    small = [n for n in files if n != big]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done_small = {r.path.split(f"/{COMMIT}/", 1)[1] for r in hub.gets()} >= set(small)
        if done_small and hub.sent.get(big, 0) > 0 and all((snapshot(env) / n).is_file() for n in small):
            break
        time.sleep(0.02)
    else:
        proc.kill()
        held.set()
        pytest.fail(f"the download never got under way: {proc.communicate()[1]}")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)
    held.set()
    assert proc.returncode == -signal.SIGKILL
    killed_at = hub.sent[big]
    assert 0 < killed_at < len(files[big])
    # what the kill left: the identity stamp, incomplete; the finished files; one partial file
    assert stamp_of(env)["complete"] is False
    assert not (snapshot(env) / big).exists()
    blobs = Path(env["HF_HUB_CACHE"]) / "models--test-org--tiny" / "blobs"
    assert len(list(blobs.glob("*.incomplete"))) == 1

    hub.throttle.clear()
    before = len(hub.gets())
    again = fetch("-p", str(prof), env=env)
    assert again.returncode == 0, again.stderr
    assert "removed 1 partial file(s) a killed download left" in again.stderr
    fetched_again = [r.path.rsplit("/", 1)[-1] for r in hub.gets()[before:]]
    assert fetched_again == [big], "the finished files are not fetched again"
    assert list(blobs.glob("*.incomplete")) == []
    assert (snapshot(env) / big).read_bytes() == files[big]
    assert stamp_of(env)["complete"] is True


# --- refusals ----------------------------------------------------------------------------------------------


def test_a_wrong_revision_is_one_error_naming_the_setting(
    hub: Hub, env: dict[str, str], tmp_path: Path
) -> None:
    hub.add(Repo("test-org/tiny", COMMIT, tiny_files()))
    wrong = "0" * 40
    line = one_error(fetch("-p", str(profile(tmp_path, "test-org/tiny", wrong)), env=env), 10)
    assert line.startswith(f"error: model.revision: test-org/tiny has no revision '{wrong}'"), line
    assert "hint: pin a commit" in line
    dry = fetch("-p", str(profile(tmp_path, "test-org/tiny", wrong)), "--dry-run", "--json", env=env)
    assert dry.returncode == 10
    doc = json.loads(dry.stdout)
    validate(doc)
    assert doc["exit_code"] == 10 and doc["would_fetch"] is False and "has no revision" in doc["error"]
    missing = one_error(fetch("-p", str(profile(tmp_path, "test-org/nothing-here")), env=env), 10)
    assert "has no repository test-org/nothing-here" in missing
    assert hub.gets() == []


def test_a_gated_repository_needs_the_token_which_is_never_shown(
    hub: Hub, env: dict[str, str], tmp_path: Path
) -> None:
    files = tiny_files()
    hub.add(Repo("test-org/gated", COMMIT, files, gated="manual", token=TOKEN))
    prof = profile(tmp_path, "test-org/gated")
    line = one_error(fetch("-p", str(prof), env=env), 10)
    assert "test-org/gated is a gated repository and the hub refused the download (401)" in line
    assert "no token was sent" in line and "set HF_TOKEN" in line
    wrong = one_error(fetch("-p", str(prof), env=dict(env, HF_TOKEN="hf_NotTheRightOne999")), 10)
    assert "(403)" in wrong and "the token has no access" in wrong and "hf_NotTheRightOne999" not in wrong
    assert hub.gets() == [], "refused before any byte"

    ok_env = dict(env, HF_TOKEN=TOKEN)
    done = fetch("-p", str(prof), "--json", env=ok_env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    validate(doc)
    assert doc["hub"]["token"] == "HF_TOKEN" and doc["action"] == "downloaded"
    assert all(r.token for r in hub.gets())
    dry = fetch("-p", str(prof), "--dry-run", env=ok_env)
    for text in (done.stdout, done.stderr, dry.stdout, dry.stderr):
        assert TOKEN not in text
    for path in Path(env["HF_HUB_CACHE"]).rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_another_model_in_the_directory_is_refused(hub: Hub, env: dict[str, str], tmp_path: Path) -> None:
    hub.add(Repo("test-org/tiny", COMMIT, tiny_files()))
    hub.add(Repo("test-org/other", COMMIT, {"config.json": b"{}"}))
    target = tmp_path / "model"
    prof = profile(tmp_path, str(target))
    assert fetch("-p", str(prof), "--repo", "test-org/tiny", env=env).returncode == 0
    before = len(hub.gets())
    line = one_error(fetch("-p", str(prof), "--repo", "test-org/other", env=env), 10)
    assert f"{target} already holds test-org/tiny, not test-org/other" in line
    assert "on top of another" in line and "hint: point model.path at another directory" in line
    # a directory upstream's entrypoint downloaded is recognised by its markers (entrypoint.sh L766-783)
    theirs = tmp_path / "appliance"
    theirs.mkdir()
    (theirs / ".download-repo").write_text("brandonmusic/GLM-5.2-EXL3-TR3-3.0bpw")
    line = one_error(
        fetch("-p", str(profile(tmp_path, str(theirs), name="theirs")), "--repo", "test-org/tiny", env=env),
        10,
    )
    assert "already holds brandonmusic/GLM-5.2-EXL3-TR3-3.0bpw, not test-org/tiny" in line
    assert len(hub.gets()) == before, "nothing downloaded on top"


@pytest.fixture(scope="module")
def small_filesystems() -> bool:
    """Whether this machine lets a test mount a 1 MiB tmpfs in its own user and mount namespace."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", "mount -t tmpfs -o size=1m t /mnt"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def test_a_checkpoint_that_does_not_fit_is_refused_before_any_byte(
    hub: Hub, env: dict[str, str], tmp_path: Path, small_filesystems: bool
) -> None:
    if not small_filesystems:
        pytest.skip("no unprivileged mount namespaces here (unshare --user --mount) for a 1 MiB tmpfs")
    files = tiny_files()
    files["model-00003-of-00003.safetensors"] = safetensors_blob({"experts": 2_000_000})
    hub.add(Repo("test-org/tiny", COMMIT, files))
    prof = profile(tmp_path, "test-org/tiny")
    small = tmp_path / "small"
    small.mkdir()
    script = f'mount -t tmpfs -o size=1m glmlaunch-test "{small}" && exec "$@"'
    done = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            script,
            "sh",
            *glmlaunch_exe(),
            "fetch",
            "-p",
            str(prof),
        ],
        env=dict(env, HF_HUB_CACHE=str(small / "hub")),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    line = one_error(done, 11)
    assert f"test-org/tiny@{COMMIT} needs {format_size(sum(map(len, files.values())))} more, and" in line
    assert f"{small} has " in line and "hint: free " in line and "HF_HOME (or HF_HUB_CACHE)" in line
    assert hub.gets() == [], "refused before any byte"


def test_the_caller_offline_refuses_a_fetch_but_verifies_what_is_there(
    hub: Hub, env: dict[str, str], tmp_path: Path
) -> None:
    hub.add(Repo("test-org/tiny", COMMIT, tiny_files()))
    prof = profile(tmp_path, "test-org/tiny")
    absent = one_error(fetch("-p", str(prof), env=dict(env, HF_HUB_OFFLINE="1")), 10)
    assert "not to be reached (HF_HUB_OFFLINE=1 in the environment)" in absent
    assert fetch("-p", str(prof), env=env).returncode == 0
    requests = len(hub.requests)
    verified = fetch("-p", str(prof), "--offline", env=env)
    assert verified.returncode == 0, verified.stderr
    assert "verified on disk (--offline)" in verified.stderr
    assert len(hub.requests) == requests, "--offline reaches no hub"
    os.truncate(snapshot(env) / "config.json", 1)
    broken = one_error(fetch("-p", str(prof), "--offline", env=env), 10)
    assert "is not complete" in broken and "3 of 4 files complete" in broken
