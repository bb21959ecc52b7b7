"""Run an upstream launcher chain offline (``DRY_RUN=1``) and record what it resolves: the environment and
the ``vllm serve`` argv it would exec, for a compose file of local-inference-lab/blackwell-llm-docker.

Usage::

    python scripts/record_launcher_chain.py --docker-git DIR --launchers COMMIT \\
        --compose-commit COMMIT --compose examples/FILE.yml [--image-dockerfile COMMIT:PATH] \\
        --variant NAME --label TEXT --out tests/fixtures/upstream/NAME.json

The chain runs unchanged: ``git archive`` of the ``launchers`` folder only (never the whole tree) is
bind-mounted over ``/usr/local/bin`` in a private user+mount namespace (``unshare -rm``), because the
scripts exec each other by those absolute paths, as they do in the image. The caller environment is the
compose file's ``environment:`` with every ``${NAME:-default}`` at its default (an empty shell), plus
``DRY_RUN=1``; ``XDG_CACHE_HOME`` and ``TMPDIR`` point into a scratch folder because the chain creates its
cache tree before the ``DRY_RUN`` exit (those paths are recorded as host-derived, with the production
default). A ``BASH_ENV`` hook traces every script (``set -x``, for the file:line of each export) and dumps
the environment and the ``cmd`` array when the last script exits.

Two more runs check the dry run: ``DRY_RUN=0`` with a calibrator that reports a clean preflight skip and a
stand-in ``vllm`` that records what it was exec'd with (the argv and environment must equal the dry run's),
and ``DRY_RUN=0`` with a calibrator that reports distinctive measurements (the names whose values change
are the ones the PCIe calibrator decides on a real host).

Nothing of the upstream tree is kept: the archive is extracted into a temporary folder. Standard library
and PyYAML only; no glmlaunch import (what it writes is upstream's answer, not glmlaunch's).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from datetime import date
from pathlib import Path
from typing import Any

import yaml

SCHEMA_VERSION = 1
REPO = "local-inference-lab/blackwell-llm-docker"
#: names bash itself maintains in every child's environment, and the hook's own
BASH_OWN = frozenset({"_", "SHLVL", "PWD", "OLDPWD", "BASH_ENV", "GLMREC_OUT", "BASH_XTRACEFD"})
#: a calibrator line whose values no real host would measure (status, prefetch, query split, split min,
#: DMA min, cache)
SCRATCH = "<scratch>"
SENTINEL_LINE = "measured\t1\t1\t12345\t7777777\tsentinel-cache"

HOOK = r"""
__glmrec_exit() {
  local rc=$?
  env -0 > "$GLMREC_OUT/env.$$" 2>/dev/null || true
  if declare -p cmd >/dev/null 2>&1; then printf '%s\0' "${cmd[@]}" > "$GLMREC_OUT/argv.$$"; fi
  printf '%s\n' "$rc" > "$GLMREC_OUT/rc.$$"
  return $rc
}
trap __glmrec_exit EXIT
exec {__glmrec_fd}>>"$GLMREC_OUT/trace"
BASH_XTRACEFD=$__glmrec_fd
PS4='+${BASH_SOURCE[0]##*/}:${LINENO}: '
set -x
"""

FAKE_VLLM = """#!/bin/sh
env -0 > "$GLMREC_OUT/vllm.env"
for a in "$@"; do printf '%s\\0' "$a"; done > "$GLMREC_OUT/vllm.argv"
exit 0
"""


def git(docker: Path, *args: str) -> bytes:
    return subprocess.run(["git", f"--git-dir={docker}", *args], check=True, capture_output=True).stdout


_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}")


def compose_value(text: str) -> str:
    """A compose value with every ``${NAME:-default}`` / ``${NAME-default}`` / ``${NAME}`` resolved in an
    empty caller environment (what ``docker compose up`` with no .env file passes)."""

    def sub(m: re.Match[str]) -> str:
        return m.group(3) if m.group(2) is not None else ""

    return _REF.sub(sub, text)


def compose_service(doc: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    services = doc["services"]
    if len(services) != 1:
        raise SystemExit(f"expected one service, found {sorted(services)}")
    svc = next(iter(services.values()))
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    entry = svc["entrypoint"]
    entry = entry if isinstance(entry, list) else shlex.split(entry)
    return {str(k): compose_value(str(v)) for k, v in env.items()}, [str(a) for a in entry]


def image_env(dockerfile: str, path: str) -> dict[str, dict[str, Any]]:
    """Every literal ``ENV NAME=value`` of a Dockerfile's final stage (after its last ``FROM``; values that
    name a build ARG are skipped: the build decides them), with its line. The base image's own ENV is not
    in this file and is not listed."""
    out: dict[str, dict[str, Any]] = {}
    lines = dockerfile.splitlines()
    i = max((n for n, line in enumerate(lines) if line.startswith("FROM ")), default=0)
    while i < len(lines):
        if not lines[i].startswith("ENV "):
            i += 1
            continue
        start = i
        block = [lines[i][4:]]
        while block[-1].rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            block.append(lines[i])
        for n, part in enumerate(block):
            part = part.rstrip().removesuffix("\\").strip()
            for name, value in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=(\S+)", part):
                if "$" in value:
                    continue
                out[name] = {"value": value, "file": path, "line": start + n + 1}
        i += 1
    return out


def _read0(path: Path) -> list[str]:
    data = path.read_bytes()
    return [p.decode() for p in data.split(b"\0")[:-1]] if data else []


def _env0(path: Path) -> dict[str, str]:
    out = {}
    for item in _read0(path):
        k, _, v = item.partition("=")
        out[k] = v
    return out


def run_chain(
    launchers: Path, entry: list[str], env: dict[str, str], scratch: Path, extra_path: Path | None
) -> dict[str, Any]:
    """One run of the chain; ``scratch`` is emptied first, so every run sees the same paths."""
    if scratch.exists():
        shutil.rmtree(scratch)
    out = scratch / "out"
    out.mkdir(parents=True)
    (scratch / "cache").mkdir()
    (scratch / "tmp").mkdir()
    hook = scratch / "hook.sh"
    hook.write_text(HOOK)
    path = "/usr/bin:/bin"
    if extra_path is not None:
        path = f"{extra_path}:{path}"
    full = {
        "PATH": path,
        "HOME": str(scratch),
        "LANG": "C.UTF-8",
        "XDG_CACHE_HOME": str(scratch / "cache"),
        "TMPDIR": str(scratch / "tmp"),
        **env,
        "BASH_ENV": str(hook),
        "GLMREC_OUT": str(out),
    }
    inner = f"mount --bind {shlex.quote(str(launchers))} /usr/local/bin && exec " + shlex.join(entry)
    proc = subprocess.run(
        ["unshare", "-rm", "--fork", "/bin/sh", "-c", inner],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=scratch,
    )
    argv_files = sorted(out.glob("argv.*"))
    dumps = {p.name.split(".")[1]: p for p in out.glob("env.*")}
    result: dict[str, Any] = {
        "rc": proc.returncode,
        "stdout": proc.stdout.splitlines(),
        "stderr": proc.stderr.splitlines(),
        "trace": (out / "trace").read_text(errors="replace").splitlines() if (out / "trace").exists() else [],
    }
    if argv_files:
        pid = argv_files[-1].name.split(".")[1]
        result["argv"] = _read0(argv_files[-1])
        result["env"] = _env0(dumps[pid])
    if (out / "vllm.argv").exists():
        # the stand-in receives what follows its own name: the argv is `vllm` and those
        result["exec_argv"] = ["vllm", *_read0(out / "vllm.argv")]
        result["exec_env"] = _env0(out / "vllm.env")
    return result


def provenance(trace: list[str], names: list[str]) -> dict[str, dict[str, Any]]:
    """The file:line of the last traced command that exported each name."""
    out: dict[str, dict[str, Any]] = {}
    pat = re.compile(r"^\++(?P<file>[^:]+):(?P<line>\d+): (?P<cmd>.*)$")
    for raw in trace:
        m = pat.match(raw)
        if m is None:
            continue
        cmd = m.group("cmd")
        if not cmd.startswith(("export ", "declare -x ")):
            continue
        for name in names:
            if re.search(rf"(?:^|\s){re.escape(name)}(?:=|$|\s)", cmd.split(" ", 1)[1]):
                out[name] = {"file": m.group("file"), "line": int(m.group("line"))}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docker-git", type=Path, required=True, help="a clone or bare mirror of " + REPO)
    ap.add_argument("--launchers", required=True, help="the commit whose launchers/ the image was built with")
    ap.add_argument("--compose-commit", required=True)
    ap.add_argument("--compose", required=True, help="path of the compose file in the repository")
    ap.add_argument("--image-dockerfile", help="COMMIT:PATH of the image's Dockerfile (its literal ENV)")
    ap.add_argument("--variant", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    docker = args.docker_git / ".git" if (args.docker_git / ".git").exists() else args.docker_git
    launchers_commit = git(docker, "rev-parse", args.launchers).decode().strip()
    compose_commit = git(docker, "rev-parse", args.compose_commit).decode().strip()
    compose_text = git(docker, "show", f"{compose_commit}:{args.compose}").decode()
    compose_env, entry = compose_service(yaml.safe_load(compose_text))

    with tempfile.TemporaryDirectory(prefix="glmrec-") as tmp:
        root = Path(tmp)
        launchers = root / "tree"
        launchers.mkdir()
        with tarfile.open(fileobj=io.BytesIO(git(docker, "archive", launchers_commit, "launchers"))) as tar:
            tar.extractall(launchers, filter="data")
        launchers = launchers / "launchers"
        names = sorted(p.name for p in launchers.iterdir())
        for p in launchers.iterdir():
            # the image installs every launcher with mode 0755 (`install -m 0755`, the Dockerfile's COPY
            # launchers step); git keeps some at 0644
            p.chmod(0o755)

        dry = run_chain(launchers, entry, {**compose_env, "DRY_RUN": "1"}, root / "run", None)
        if dry["rc"] != 0 or "argv" not in dry:
            sys.stderr.write("\n".join(dry["stderr"][-30:]) + "\n")
            raise SystemExit(f"the dry run failed (exit {dry['rc']})")
        fake = root / "bin"
        fake.mkdir()
        (fake / "vllm").write_text(FAKE_VLLM)
        (fake / "vllm").chmod(0o755)
        skip = root / "calibrator-skip"
        skip.write_text("#!/bin/sh\necho 'calibration skipped: GPUs not available (recorder)' >&2\nexit 3\n")
        skip.chmod(0o755)
        sentinel = root / "calibrator-sentinel"
        sentinel.write_text(f"#!/bin/sh\nprintf '{SENTINEL_LINE}\\n'\n")
        sentinel.chmod(0o755)
        unavailable = run_chain(
            launchers, entry, {**compose_env, "PCIE_CALIBRATOR": str(skip)}, root / "run", fake
        )
        measured = run_chain(
            launchers, entry, {**compose_env, "PCIE_CALIBRATOR": str(sentinel)}, root / "run", fake
        )
    for name, run in (("exec", unavailable), ("sentinel", measured)):
        if run["rc"] != 0 or "exec_argv" not in run:
            sys.stderr.write("\n".join(run["stderr"][-30:]) + "\n")
            raise SystemExit(f"the {name} run failed (exit {run['rc']})")

    # the scratch folder's random name is not upstream's: recorded as <scratch>
    run_dir = str(root / "run")
    for run in (dry, unavailable, measured):
        for key in ("env", "exec_env"):
            if key in run:
                run[key] = {k: v.replace(run_dir, SCRATCH) for k, v in run[key].items()}
        run["stdout"] = [line.replace(run_dir, SCRATCH) for line in run["stdout"]]
    scratch_dirs = {
        "XDG_CACHE_HOME": ("/cache", f"{SCRATCH}/cache"),
        "TMPDIR": ("/container-tmp", f"{SCRATCH}/tmp"),
    }
    # DRY_RUN is the recorder's selection input, PATH/HOME/LANG its own process settings
    env = {
        k: v
        for k, v in dry["env"].items()
        if k not in BASH_OWN and k not in ("PATH", "HOME", "LANG", "DRY_RUN")
    }
    excluded: list[dict[str, Any]] = []
    for name in sorted(env):
        value = env[name]
        for var, (default, scratch) in scratch_dirs.items():
            if value == scratch or value.startswith(scratch + "/"):
                excluded.append(
                    {
                        "name": name,
                        "value": value,
                        "kind": "host-derived",
                        "production_default": default + value[len(scratch) :],
                        "reason": f"a path under {var} (default {default}, a volume of the compose file); "
                        "the recorder pointed it into a scratch folder because serve-glm52-v16.sh creates "
                        "the cache tree before the DRY_RUN exit",
                    }
                )
                break
    host = {e["name"] for e in excluded}
    # a host-derived value is not upstream's: it is listed under `excluded` with its production default
    env = {k: v for k, v in env.items() if k not in host}
    exec_env = {k: v for k, v in unavailable["exec_env"].items() if k not in BASH_OWN}
    exec_extra = {"DRY_RUN", "PCIE_CALIBRATOR", "PATH", "HOME", "LANG"}
    exec_diff = sorted(
        k
        for k in set(exec_env) | set(env)
        if k not in exec_extra and k not in host and k not in BASH_OWN and exec_env.get(k) != env.get(k)
    )
    sentinel_env = {k: v for k, v in measured["exec_env"].items() if k not in BASH_OWN}
    calibrated = sorted(
        k
        for k in set(sentinel_env) | set(exec_env)
        if k not in exec_extra and sentinel_env.get(k) != exec_env.get(k)
    )
    for name in calibrated:
        excluded.append(
            {
                "name": name,
                "kind": "calibrator",
                "values": {
                    "dry_run": env.get(name),
                    "calibration_unavailable": exec_env.get(name),
                    "sentinel_measurement": sentinel_env.get(name),
                },
                "reason": "measured on the host by serve-glm52-v19.sh's PCIe calibrator when DRY_RUN is "
                "unset (DRY_RUN=1 reports 'skipped:dry-run' and the fallback)",
            }
        )
    prov = provenance(dry["trace"], sorted(env))
    for name in env:
        if name not in prov and name in compose_env:
            prov[name] = {"file": None, "line": None, "layer": "compose environment (caller)"}
    unset = sorted(
        {
            n
            for raw in dry["trace"]
            if ": unset " in raw
            for n in raw.split(": unset ", 1)[1].split()
            if re.fullmatch(r"[A-Z_][A-Z0-9_]*", n)
        }
    )
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "upstream-resolution",
        "variant": args.variant,
        "label": args.label,
        "selection": {"env": compose_env, "entry": " ".join(entry)},
        "argv": dry["argv"],
        "env": dict(sorted(env.items())),
        "env_provenance": dict(sorted(prov.items())),
        "env_unset": unset,
        "excluded": excluded,
        "calibrator_measured_names": calibrated,
        "exec_check": {
            "argv_equal": unavailable["exec_argv"] == dry["argv"],
            "env_differs": exec_diff,
            "sentinel_argv_equal": measured["exec_argv"] == dry["argv"],
        },
        "dry_run_stdout": dry["stdout"],
        "dry_run_stderr": [line for line in dry["stderr"] if not line.startswith("+")],
        "image_env": image_env(*_dockerfile(docker, args.image_dockerfile)) if args.image_dockerfile else {},
        "source": {
            "repo": REPO,
            "commit": launchers_commit,
            "compose_commit": compose_commit,
            "paths": [f"launchers/{n}" for n in names] + [args.compose],
            "command": [
                f"git archive {launchers_commit[:12]} launchers",
                "python scripts/record_launcher_chain.py "
                + " ".join(
                    f"--{k.replace('_', '-')} {shlex.quote(str(v))}"
                    for k, v in vars(args).items()
                    if v is not None and k not in ("out", "docker_git")
                ),
            ],
            "recorded": date.today().isoformat(),
        },
        "notes": [
            "Run unchanged in a user+mount namespace with /usr/local/bin overlaid by the commit's launchers/ "
            "(the paths the scripts exec); the environment is the one the last script held at its DRY_RUN "
            "exit, the argv its `cmd` array.",
            "exec_check: the same chain with DRY_RUN unset, a calibrator that skips (exit 3) and a stand-in "
            "vllm received this argv and environment (env_differs lists any other name); with a calibrator "
            "reporting sentinel values only calibrator_measured_names changed.",
            "image_env: the literal ENV of the image's Dockerfile, which the container gives the chain and "
            "glmlaunch alike; the chain here ran without it, as its compose file states nothing of it.",
        ],
    }
    text = json.dumps(doc, indent=1) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _dockerfile(docker: Path, spec: str) -> tuple[str, str]:
    commit, _, path = spec.partition(":")
    return git(docker, "show", f"{commit}:{path}").decode(), f"{path}@{commit[:7]}"


if __name__ == "__main__":
    raise SystemExit(main())
