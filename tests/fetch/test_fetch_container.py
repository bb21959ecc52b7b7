"""``serve``'s weights check (part of its preflight stage) and the container's entrypoint.

* serve refuses a checkpoint that is not on disk, naming ``glmlaunch fetch``; ``--fetch`` fetches it
  first; ``--skip-preflight`` skips the check with the preflight, and says so; a dry run states it.
* The container: scripts/Dockerfile.glmlaunch's ENTRYPOINT (``tini -- glmlaunch serve --fetch``) runs in
  a PID namespace of its own, tini as PID 1 and glmlaunch its child, with the image's environment
  (GLMLAUNCH_SUPERVISE=1, every cache under /cache, here a temporary directory): the first boot fetches the
  weights from the hub on 127.0.0.1, the restart downloads nothing and reaches (the stand-in) vLLM.
* The image's ENV block is exactly the registry's CONTAINER_CACHES (the old chain's names and values).

Real processes throughout: the ``glmlaunch`` executable, ``unshare``, ``tini``, a stand-in vLLM.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO, glmlaunch_exe
from fetch_hub import Hub, Repo, safetensors_blob

from glmlaunch.config.registry import CONTAINER_CACHE_ROOT, CONTAINER_CACHES, KNOWN_PASSTHROUGH

INVENTORY = FIXTURES / "inventories" / "rtxpro6000x4.json"
DOCKERFILE = REPO / "scripts" / "Dockerfile.glmlaunch"
COMMIT = "2e" * 20
FITS = "scheduler.max_model_len=262144"
FAKE_VLLM = """#!{python}
import json, os, sys
with open(os.environ["FAKE_VLLM_RECORD"], "w") as fh:
    json.dump({{"argv": sys.argv, "pid": os.getpid(), "ppid": os.getppid(),
               "pid1": open("/proc/1/comm").read().strip(),
               "parent": open(f"/proc/{{os.getppid()}}/cmdline").read().split("\\0")[:3],
               "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE")}}, fh)
"""


def tiny() -> dict[str, bytes]:
    return {
        "config.json": b'{"architectures": ["GlmMoeDsaForCausalLM"]}\n',
        "model-00001-of-00001.safetensors": safetensors_blob({"w": 65_536}),
    }


@pytest.fixture
def hub() -> Iterator[Hub]:
    h = Hub().start()
    h.add(Repo("test-org/tiny", COMMIT, tiny()))
    yield h
    h.stop()


@pytest.fixture
def env(clean_env: dict[str, str], hub: Hub, tmp_path: Path) -> dict[str, str]:
    out = {k: v for k, v in clean_env.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    fake = tmp_path / "bin" / "vllm"
    fake.parent.mkdir()
    fake.write_text(FAKE_VLLM.format(python=sys.executable))
    fake.chmod(0o755)
    out.update(
        HF_ENDPOINT=hub.url,
        HF_HUB_CACHE=str(tmp_path / "hub"),
        GLMLAUNCH_VLLM_BIN=str(fake),
        FAKE_VLLM_RECORD=str(tmp_path / "vllm.json"),
    )
    return out


def profile(tmp_path: Path) -> Path:
    prof = tmp_path / "tiny.yaml"
    prof.write_text(
        "extends: turnkey\ndescription: a small checkpoint\nlmcache: false\n"
        f'model:\n  path: test-org/tiny\n  revision: "{COMMIT}"\n'
    )
    return prof


def serve(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*glmlaunch_exe(), "serve", *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def no_nvml() -> bool:
    from glmlaunch.errors import NoGpuError
    from glmlaunch.hardware.probe import probe

    try:
        probe()
    except NoGpuError:
        return True
    return False


def stamped(env: dict[str, str]) -> bool:
    path = Path(env["HF_HUB_CACHE"]) / "models--test-org--tiny" / "glmlaunch" / f"{COMMIT}.json"
    return path.is_file() and json.loads(path.read_text())["complete"] is True


def test_serve_refuses_missing_weights_naming_fetch_and_fetches_them_with_fetch(
    hub: Hub, env: dict[str, str], tmp_path: Path
) -> None:
    if not no_nvml():
        pytest.skip("this machine has an NVIDIA driver: the real preflight would run")
    base = ["-p", str(profile(tmp_path)), "--set", FITS, "--inventory", str(INVENTORY)]
    # the dry run states the weights check (a note, as is the GPU preflight this machine cannot run),
    # and the real launch does what it said
    dry = serve(*base, "--dry-run", "--json", env=env)
    doc = json.loads(dry.stdout)
    assert doc["exit_code"] == 10 and not doc["would_start"], dry.stderr
    assert dry.returncode == doc["dry_run_exit_code"] == 0, dry.stderr
    assert doc["blocking"][0]["stage"] == "preflight"
    hint = f"hint: fetch it first: glmlaunch fetch -p {tmp_path / 'tiny.yaml'} with the same --set options"
    assert hint in doc["blocking"][0]["error"]
    preflight = next(s for s in doc["stages"] if s["stage"] == "preflight")
    assert (
        preflight["status"] == "skipped" and "weights missing: test-org/tiny is not at" in preflight["detail"]
    )
    real = serve(*base, env=env)
    assert real.returncode == 10 and "error: model.path: the checkpoint is not on disk" in real.stderr
    # --skip-preflight skips the check too, and says so
    skipped = serve(*base, "--skip-preflight", "--dry-run", env=env)
    assert skipped.returncode == 0, skipped.stderr
    assert (
        "# preflight skipped: --skip-preflight; the weights on disk are not checked either" in skipped.stdout
    )
    # --fetch: the dry run says it would fetch; it downloads nothing
    would = serve(*base, "--fetch", "--dry-run", env=env)
    assert "--fetch: a real launch fetches it first" in would.stdout
    assert would.returncode == 0  # the GPU preflight it cannot run here is a note too
    # nothing downloaded (the plan of a checkpoint the weights table does not know reads its headers)
    assert hub.downloads() == []
    # the real launch fetches, then stops at the GPU preflight (no GPU here)
    fetched = serve(*base, "--fetch", env=env)
    assert fetched.returncode == 8, fetched.stderr
    assert "fetch: test-org/tiny@" + COMMIT + " downloaded and verified: 2 files" in fetched.stderr
    assert stamped(env) and len(hub.downloads()) == 2
    # present now: offline (no request at all), and the dry run says so
    requests = len(hub.requests)
    present = serve(*base, "--dry-run", env=env)
    assert present.returncode == 0
    assert "weights present: " in present.stdout and "2 files" in present.stdout
    assert len(hub.requests) == requests


# --- the container ------------------------------------------------------------------------------------


def dockerfile_entrypoint() -> list[str]:
    lines = [ln for ln in DOCKERFILE.read_text().splitlines() if ln.startswith("ENTRYPOINT ")]
    assert len(lines) == 1
    entry: list[str] = json.loads(lines[0].removeprefix("ENTRYPOINT "))
    return entry


def dockerfile_env() -> dict[str, str]:
    """The final stage's ENV instructions, joined across continuation lines."""
    text = DOCKERFILE.read_text().split("FROM ${VLLM_IMAGE}", 1)[1].replace("\\\n", " ")
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            out.update(dict(pair.split("=", 1) for pair in shlex.split(line.removeprefix("ENV "))))
    return out


def test_the_image_keeps_every_compile_cache_under_the_volume_as_the_old_chain_named_them() -> None:
    env = dockerfile_env()
    assert {k: env.get(k) for k in CONTAINER_CACHES} == CONTAINER_CACHES
    root = CONTAINER_CACHE_ROOT
    assert all(v == root or v.startswith(root + "/") for v in CONTAINER_CACHES.values())
    assert set(CONTAINER_CACHES) <= set(KNOWN_PASSTHROUGH)  # declared once, with why it is no setting
    # the old chain's spellings (launchers/serve-glm52-v16.sh): a few, verbatim
    assert (
        env["TRITON_CACHE_DIR"] == "/cache/triton"
        and env["TORCHINDUCTOR_CACHE_DIR"] == "/cache/torchinductor"
    )
    assert env["CUDA_CACHE_PATH"] == "/cache/cuda" and env["GLMLAUNCH_SUPERVISE"] == "1"
    assert dockerfile_entrypoint() == ["tini", "--", "glmlaunch", "serve", "--fetch"]


@pytest.fixture(scope="module")
def pid_namespaces() -> bool:
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--map-root-user", "--mount-proc", "true"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def test_the_entrypoint_boots_from_empty_volumes_as_pid_1s_child_and_restarts_without_downloading(
    hub: Hub, env: dict[str, str], tmp_path: Path, pid_namespaces: bool
) -> None:
    if shutil.which("unshare") is None or not pid_namespaces:
        pytest.skip("no unprivileged PID namespaces here (unshare --pid --map-root-user)")
    tini = shutil.which("tini")
    if tini is None:
        pytest.skip("tini is not installed here (Debian: apt-get install tini; the image installs it)")
    if not no_nvml():
        pytest.skip("this machine has an NVIDIA driver: the real preflight would run")
    volume = tmp_path / "cache"
    image_env = {k: v.replace(CONTAINER_CACHE_ROOT, str(volume), 1) for k, v in dockerfile_env().items()}
    container = {k: v for k, v in env.items() if k != "HF_HUB_CACHE"}
    container.update(image_env)
    container.update(
        GLMLAUNCH_PROFILE=str(profile(tmp_path)),
        GLMLAUNCH_SET=FITS,
        GLMLAUNCH_INVENTORY=str(INVENTORY),
        GLMLAUNCH_CACHE_DIR=str(volume / "glmlaunch"),
    )
    entry = [tini if w == "tini" else w for w in dockerfile_entrypoint()]
    entry = [*entry[: entry.index("glmlaunch")], *glmlaunch_exe(), *entry[entry.index("glmlaunch") + 1 :]]

    def boot(**more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["unshare", "--pid", "--fork", "--map-root-user", "--mount-proc", *entry],
            env={**container, **more},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    # first boot: empty volume; the weights are fetched into it, then the GPU preflight stops (no GPU
    # here), its exit status passed through tini
    first = boot()
    assert first.returncode == 8, first.stderr
    snapshot = volume / "huggingface" / "hub" / "models--test-org--tiny" / "snapshots" / COMMIT
    assert {p.name for p in snapshot.iterdir()} == set(tiny())
    assert len(hub.downloads()) == 2
    # restart: the weights are there, verified from the stamp without a single request to the hub
    requests = len(hub.requests)
    second = boot()
    assert second.returncode == 8, second.stderr
    assert "weights present: " in second.stderr and len(hub.requests) == requests
    # and past the preflight (skipped here): vLLM starts under glmlaunch, glmlaunch under tini, tini PID 1
    third = boot(GLMLAUNCH_SKIP_PREFLIGHT="1")
    assert third.returncode == 0, third.stderr
    assert len(hub.requests) == requests
    record = json.loads(Path(env["FAKE_VLLM_RECORD"]).read_text())
    assert record["pid1"] == "tini"
    assert "serve" in record["parent"] and record["ppid"] != 1  # vLLM is glmlaunch's child (supervised)
    assert record["argv"][1:3] == ["serve", "test-org/tiny"] and record["HF_HUB_OFFLINE"] == "1"
    boots = volume / "glmlaunch" / "boots"
    assert len(list(boots.iterdir())) == 1  # the supervised boot is kept on the volume
