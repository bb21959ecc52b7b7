"""Rebuild each kernel-library generation's tree in a git-ignored folder, verified, never committed.

Usage::

    python scripts/fetch_generations.py [--dest third_party/generations] \\
        [--sparkinfer-git DIR] [--b12x-git DIR] [--docker-git DIR] [--wheels] [--stack STACK]…

* ``--docker-git``: a clone (or bare mirror) of local-inference-lab/blackwell-llm-docker holding commit
  3dd078a: the release integration locks and patches (``patches/releases/gilded-gnosis-v20-r*/``).
* ``--sparkinfer-git`` / ``--b12x-git``: clones of local-inference-lab/sparkinfer and
  local-inference-lab/b12x.
  A generation's tree is ``git archive`` of its base commit plus its release's ``integration.patch`` (its
  sha256 checked against the lock), accepted only when ``git write-tree`` equals the lock's result tree
  (the tree glmlaunch/ledger/constants.py cites). The release's vLLM ``integration.patch`` is saved beside
  it as ``<stack>.vllm.patch`` (and, for b12x-ii, the patch whose context shows the vLLM base's channel
  code as ``<stack>.vllm-context.patch``). Gilded Gnosis locks are under
  ``patches/releases/gilded-gnosis-v20-r*/``, Infernal Invocation's under ``infernal-invocation-r*/``.
* ``--wheels``: ``pip download`` the PyPI releases equal to the B12X generations in their memory modules
  (b12x 1.2.1 = b12x-r29, 1.2.4 = b12x-r32), checked by sha256, unzipped to ``<stack>-wheel/``.

Nothing is installed. ``scripts/record_generation.py`` records a tree's answers;
``tests/ledger/test_generations.py`` re-records every tree it finds here and compares.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCKER_COMMIT = "3dd078a7047800cf132e6e4b834d9d96b781af5f"


@dataclass(frozen=True)
class Generation:
    stack: str
    library: str  # sparkinfer | b12x
    #: the release whose lock and patches define the tree; None: the base commit is the tree itself
    release: str | None
    #: the base commit when there is no release lock
    commit: str | None
    #: the tree hash the result must have
    tree: str
    vllm_release: str
    wheel: tuple[str, str] | None = None  # (version, sha256)
    #: the folder of patches/releases/ holding the release's locks (the Gilded Gnosis name by default)
    release_dir: str | None = None
    #: a patch of the same vLLM branch whose context lines show the channel code of the release's base
    #: (saved as ``<stack>.vllm-context.patch``), where the release's own patch does not show it
    vllm_context: str | None = None

    def folder(self, release: str) -> str:
        return self.release_dir or f"gilded-gnosis-v20-{release}"


GENERATIONS = {
    g.stack: g
    for g in (
        Generation(
            "sparkinfer-r14",
            "sparkinfer",
            None,
            "de04125508c75e748016493f851e6bd4513b515b",
            "35aebc6d46a0d3d4f7275b81251211864f410269",
            "r14",
        ),
        Generation(
            "sparkinfer-r28", "sparkinfer", "r28", None, "200c1db7ef98ff8bbfd4f621555326e20f42282e", "r28"
        ),
        Generation(
            "b12x-r29",
            "b12x",
            "r29",
            None,
            "6bc35fdb76b6f9d11601009fe413720b461fb444",
            "r29",
            ("1.2.1", "29b02544202fc7e0e188f1dbbd5bcb4088e36dc8fd994ba941a637da33495be3"),
        ),
        Generation(
            "b12x-r32",
            "b12x",
            "r34",
            None,
            "cd3ce190f0f1917402cdfd5773724267cc9a63f8",
            "r34",
            ("1.2.4", "6192de0b6ff51611ba7f0f42dff326e4f3fb9db36002ed1f3f2a76b155581e27"),
        ),
        Generation(
            "b12x-ii",
            "b12x",
            "ii-r18",
            None,
            "75787c7a7431b3bea414d2ebf5f2b8671b23eb33",
            "ii-r18",
            release_dir="infernal-invocation-r18",
            vllm_context="patches/releases/kimi-k3-qsrt-ii-r3/vllm/integration.patch",
        ),
    )
}


def git(*args: str, cwd: Path | None = None, git_dir: Path | None = None) -> bytes:
    cmd = ["git"] + ([f"--git-dir={git_dir}"] if git_dir is not None else []) + list(args)
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True).stdout


def docker_file(docker: Path, path: str) -> bytes:
    return git("show", f"{DOCKER_COMMIT}:{path}", git_dir=_git_dir(docker))


def _git_dir(path: Path) -> Path:
    return path / ".git" if (path / ".git").exists() else path


def build_tree(g: Generation, source: Path, docker: Path, dest: Path) -> str:
    """git archive of the base (+ the release's integration patch), checked against the tree hash."""
    lock = None
    if g.release is not None:
        prefix = f"patches/releases/{g.folder(g.release)}/{g.library}"
        lock = json.loads(docker_file(docker, f"{prefix}/integration.lock.json"))
        base = lock["base"]["commit"]
    else:
        base = g.commit or ""
    out = dest / g.stack
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    archive = git("archive", base, git_dir=_git_dir(source))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    git("init", "-q", cwd=out)
    git("add", "-A", cwd=out)
    git(
        "-c",
        "user.name=glmlaunch",
        "-c",
        "user.email=glmlaunch@localhost",
        "commit",
        "-qm",
        f"base {base}",
        cwd=out,
    )
    if lock is not None:
        patch = docker_file(
            docker, f"patches/releases/{g.folder(g.release)}/{g.library}/integration.patch"
        )
        if hashlib.sha256(patch).hexdigest() != lock["result"]["patch_sha256"]:
            raise SystemExit(f"{g.stack}: integration.patch does not match the lock's sha256")
        with tempfile.NamedTemporaryFile(suffix=".patch") as f:
            f.write(patch)
            f.flush()
            git("apply", "--index", "--whitespace=nowarn", f.name, cwd=out)
    got = git("write-tree", cwd=out).decode().strip()
    if got != g.tree:
        raise SystemExit(f"{g.stack}: built tree {got}, expected {g.tree}")
    return got


def save_vllm_patch(g: Generation, docker: Path, dest: Path) -> Path:
    patch = docker_file(docker, f"patches/releases/{g.folder(g.vllm_release)}/vllm/integration.patch")
    path = dest / f"{g.stack}.vllm.patch"
    path.write_bytes(patch)
    if g.vllm_context is not None:
        (dest / f"{g.stack}.vllm-context.patch").write_bytes(docker_file(docker, g.vllm_context))
    return path


def fetch_wheel(g: Generation, dest: Path) -> Path:
    assert g.wheel is not None
    version, sha = g.wheel
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                f"b12x=={version}",
                "-d",
                tmp,
            ],
            check=True,
        )
        wheel = next(Path(tmp).glob(f"b12x-{version}-*.whl"))
        if hashlib.sha256(wheel.read_bytes()).hexdigest() != sha:
            raise SystemExit(f"{wheel.name}: sha256 differs from the one recorded for {g.stack}")
        kept = dest / wheel.name
        shutil.copy(wheel, kept)
    out = dest / f"{g.stack}-wheel"
    if out.exists():
        shutil.rmtree(out)
    with zipfile.ZipFile(kept) as z:
        z.extractall(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", type=Path, default=REPO / "third_party" / "generations")
    ap.add_argument("--sparkinfer-git", type=Path)
    ap.add_argument("--b12x-git", type=Path)
    ap.add_argument("--docker-git", type=Path)
    ap.add_argument("--wheels", action="store_true", help="also pip download b12x 1.2.1 and 1.2.4")
    ap.add_argument("--stack", action="append", choices=sorted(GENERATIONS), help="only these (repeatable)")
    args = ap.parse_args(argv)
    args.dest.mkdir(parents=True, exist_ok=True)
    sources = {"sparkinfer": args.sparkinfer_git, "b12x": args.b12x_git}
    for stack in args.stack or sorted(GENERATIONS):
        g = GENERATIONS[stack]
        source = sources[g.library]
        if source is not None and args.docker_git is not None:
            tree = build_tree(g, source, args.docker_git, args.dest)
            patch = save_vllm_patch(g, args.docker_git, args.dest)
            print(
                f"{stack}: tree {tree} (matches) in {args.dest / stack}; vLLM patch {patch.name}",
                file=sys.stderr,
            )
        else:
            print(f"{stack}: no --{g.library}-git and --docker-git: tree skipped", file=sys.stderr)
        if args.wheels and g.wheel is not None:
            out = fetch_wheel(g, args.dest)
            print(f"{stack}: b12x {g.wheel[0]} (sha256 matches) unzipped to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
