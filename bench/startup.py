"""Wall time of the light commands in a fresh process, next to the bash launcher chain they replace.

Usage: .venv/bin/python bench/startup.py [--runs N] [--bash-chain DIR] [--before TREE] [--torch] [--json]

``--before TREE`` (a checkout of an earlier commit, e.g. from ``git archive``) also runs ``env``, ``args``
and ``plan`` from that tree (``PYTHONPATH=TREE``) in the same rounds, so a change is measured side by side.

Each command runs N times as a new process (so every run pays interpreter start and imports), after one
untimed warm-up run each. Runs are interleaved (round r runs every command once), so a load change on a
shared machine shifts every command alike; the table gives min / median / max in milliseconds and, what
the targets are about, each median as a ratio to two baselines measured in the same rounds: the bash chain
and ``python -c pass`` (the interpreter's own start). Absolute times on a shared 2-core VM move by 2x with
its load; the ratios of one run do not. Under a load that changes within a run, the verdict lines also give
each command's ratio paired by round (the median over rounds of that round's command / baseline time), and
with ``--before`` each command's after / before ratio paired the same way.

Targets (issues 11 and 22, "Start-up"): `glmlaunch env -p r12-exl3` and `glmlaunch args -p r12-exl3` (the
preset the chain runs) at most 10x the old chain's full ``DRY_RUN=1``; `glmlaunch plan` at most 14x it
(issue 11's 200 ms, set next to a 14-15 ms chain). Medians, same run.

The old chain is ``serve-gilded-gnosis.sh -> serve-glm52-v19.sh -> serve-glm52-v16.sh`` from
local-inference-lab/blackwell-llm-docker, ``launchers/`` at commit 513bd84 (the chain the r12-exl3
profile was taken from). It is not part of this repository; give its ``launchers/`` directory with
``--bash-chain`` (or ``GLMLAUNCH_BENCH_BASH_CHAIN``)::

    git clone https://github.com/local-inference-lab/blackwell-llm-docker
    git -C blackwell-llm-docker checkout 513bd84
    .venv/bin/python bench/startup.py --bash-chain blackwell-llm-docker/launchers

The scripts exec each other by their path in the image (v19 ends in ``exec
/usr/local/bin/serve-glm52-v16.sh``; gnosis takes ``GLM52_SERVER``), so the benchmark copies them to a
temporary directory and points that one path at the copy; nothing else is changed. It then runs
``MODEL_FAMILY=glm52-exl3 DRY_RUN=1 serve-gilded-gnosis.sh`` (the r12 EXL3 preset; GPU-free: the
dry run skips the calibrator, and nvidia-smi is not needed) and checks that the argv it prints is the one
``glmlaunch args -p r12-exl3`` prints, so both sides do the same job.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
GLMLAUNCH = str(BIN / "glmlaunch")
CHAIN_COMMIT = "513bd84"
CHAIN_ENTRY = "serve-gilded-gnosis.sh"
CHAIN_FILES = (
    CHAIN_ENTRY,
    "serve-glm52-v19.sh",
    "serve-glm52-v16.sh",
    "glm52-dcp-prefill-policy.sh",
    "glm52-pcie-runtime-env.sh",
)
CHAIN_LABEL = "bash chain: MODEL_FAMILY=glm52-exl3 DRY_RUN=1 serve-gilded-gnosis.sh"
RATIO_TARGETS = {"env": 10.0, "args": 10.0, "plan": 14.0}
PYTHON_LABEL = "python -c pass"
# What every glmlaunch command pays before it reads a profile: the interpreter, Typer, PyYAML and the
# configuration models (pydantic's import, its schema machinery and the DeploymentConfig sections), under
# the console script's collector settings and plugin stand-in. A target below this row is out of reach
# without giving up pydantic models for the configuration.
FLOOR_LABEL = "floor: python + typer + pyyaml + the configuration models"
FLOOR_CODE = (
    "import gc; gc.set_threshold(200_000, 30, 30); import glmlaunch; glmlaunch.without_plugin_loader(); "
    "import typer, yaml, glmlaunch.config.schema"
)

# env and args on the preset the chain runs (r12-exl3), so both sides do the same job; turnkey as well.
COMMANDS: dict[str, list[str]] = {
    "env": [GLMLAUNCH, "env", "-p", "r12-exl3", "--shell", "bash"],
    "args": [GLMLAUNCH, "args", "-p", "r12-exl3"],
    "env-turnkey": [GLMLAUNCH, "env", "-p", "turnkey", "--shell", "bash"],
    "config": [GLMLAUNCH, "config", "-p", "turnkey", "--json"],
    "plan": [GLMLAUNCH, "plan", "-p", "turnkey"],
    "profiles": [GLMLAUNCH, "profiles", "list"],
}


def _environ(home: Path) -> dict[str, str]:
    # A user's install keeps bytecode caches; this sandbox exports PYTHONDONTWRITEBYTECODE=1, which would
    # charge compiling glmlaunch's sources to every run. HOME and the cache point at an empty directory,
    # so no calibration record of this machine changes what `plan` reads.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GLMLAUNCH_", "VLLM_", "NCCL_", "B12X_", "SPARKINFER_"))
        and k not in {"PYTHONDONTWRITEBYTECODE", "CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF"}
    }
    env.update({"HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"), "NO_COLOR": "1"})
    return env


def prepare_chain(source: Path, into: Path) -> tuple[list[str], dict[str, str]]:
    """Copy the launchers and point the chain's one install path at the copy; the argv and variables
    that run its full dry run."""
    missing = [name for name in CHAIN_FILES if not (source / name).is_file()]
    if missing:
        raise SystemExit(
            f"--bash-chain {source}: missing {', '.join(missing)} (launchers/ at {CHAIN_COMMIT})"
        )
    for name in CHAIN_FILES:
        shutil.copy2(source / name, into / name)
    v19 = into / "serve-glm52-v19.sh"
    text = v19.read_text(encoding="utf-8")
    if "/usr/local/bin/serve-glm52-v16.sh" not in text:
        raise SystemExit(
            f"{source / v19.name}: no exec of /usr/local/bin/serve-glm52-v16.sh (not {CHAIN_COMMIT}?)"
        )
    v19.write_text(text.replace("/usr/local/bin/serve-glm52-v16.sh", str(into / "serve-glm52-v16.sh")))
    for name in CHAIN_FILES:
        (into / name).chmod(0o755)
    variables = {"MODEL_FAMILY": "glm52-exl3", "DRY_RUN": "1", "GLM52_SERVER": str(v19)}
    return ["bash", str(into / CHAIN_ENTRY)], variables


def check_same_job(chain: list[str], env: dict[str, str]) -> None:
    """The chain's dry-run argv must equal `glmlaunch args -p r12-exl3`: the same preset, the same output."""
    out = subprocess.run(chain, env=env, capture_output=True, text=True, check=True).stdout
    line = next((x for x in out.splitlines() if x.startswith("Command:")), None)
    if line is None:
        raise SystemExit("the bash chain printed no 'Command:' line; is DRY_RUN honoured?")
    theirs = shlex.split(line[len("Command:") :])
    ours = subprocess.run(
        [GLMLAUNCH, "args", "-p", "r12-exl3"], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    if theirs != ours:
        raise SystemExit("the bash chain's argv differs from `glmlaunch args -p r12-exl3`; not comparable")


def measure(commands: dict[str, tuple[list[str], dict[str, str]]], runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in commands}
    for argv, env in commands.values():  # warm the page cache and the .pyc files alike
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    for _ in range(runs):
        for name, (argv, env) in commands.items():
            start = time.perf_counter()
            subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            times[name].append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument(
        "--bash-chain",
        type=Path,
        default=os.environ.get("GLMLAUNCH_BENCH_BASH_CHAIN") or None,
        help=f"launchers/ of local-inference-lab/blackwell-llm-docker at {CHAIN_COMMIT}",
    )
    parser.add_argument(
        "--before", type=Path, default=None, help="an earlier tree whose env, args and plan run alongside"
    )
    parser.add_argument("--torch", action="store_true", help='also time python -c "import torch"')
    parser.add_argument("--json", action="store_true", help="print the raw times as JSON as well")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="glmlaunch-bench-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        env = _environ(home)
        commands: dict[str, tuple[list[str], dict[str, str]]] = {}
        if args.bash_chain is not None:
            chain_dir = Path(tmp) / "launchers"
            chain_dir.mkdir()
            chain, variables = prepare_chain(args.bash_chain, chain_dir)
            check_same_job(chain, {**env, **variables})
            commands["chain"] = (chain, {**env, **variables})
        commands["python"] = ([sys.executable, "-c", "pass"], env)
        commands["floor"] = ([sys.executable, "-c", FLOOR_CODE], env)
        for name, argv in COMMANDS.items():
            commands[name] = (argv, env)
        if args.before is not None:
            before_env = {**env, "PYTHONPATH": str(args.before.resolve())}
            for name in ("env", "args", "plan"):
                commands[f"{name} (before)"] = (COMMANDS[name], before_env)
        if args.torch:
            commands["torch"] = ([sys.executable, "-c", "import torch"], env)
        times = measure(commands, args.runs)

    cpu = platform.processor() or platform.machine()
    print(f"machine: {platform.node()} {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    shown = " ".join(shlex.quote(a) for a in sys.argv[1:])
    print(f"command: {sys.executable} bench/startup.py {shown}".rstrip())
    print()
    chain_median = statistics.median(times["chain"]) if "chain" in times else None
    python_median = statistics.median(times["python"])
    print("| command | min ms | median ms | max ms | median / bash chain | median / python -c pass |")
    print("|---|---|---|---|---|---|")
    labels = {
        "chain": CHAIN_LABEL,
        "torch": 'python -c "import torch"',
        "python": PYTHON_LABEL,
        "floor": FLOOR_LABEL,
    }
    for name, t in times.items():
        argv = commands[name][0]
        label = labels.get(name) or "glmlaunch " + " ".join(argv[1:])
        if name.endswith("(before)"):
            label += f" (PYTHONPATH={args.before})"
        median = statistics.median(t)
        to_chain = f"{median / chain_median:.1f}x" if chain_median else "-"
        print(
            f"| `{label}` | {min(t):.0f} | {median:.0f} | {max(t):.0f} | {to_chain} "
            f"| {median / python_median:.1f}x |"
        )
    print()
    verdicts: list[str] = []
    for name, limit in RATIO_TARGETS.items():
        median = statistics.median(times[name])
        against_python = f"; {median / python_median:.1f}x python -c pass"
        if f"{name} (before)" in times:
            against_python += f"; {paired(times[name], times[f'{name} (before)']):.2f}x before, paired"
        if chain_median:
            ratio = median / chain_median
            verdicts.append(
                f"{name} {ratio:.1f}x the bash chain (target <= {limit:g}x): {_met(ratio <= limit)}"
                f" ({paired(times[name], times['chain']):.1f}x paired by round)"
                + against_python
            )
        else:
            verdicts.append(f"{name} against the bash chain: not measured (--bash-chain){against_python}")
    if chain_median:
        floor = statistics.median(times["floor"])
        floor_paired = paired(times["floor"], times["chain"])
        verdicts.append(
            f"floor {floor / chain_median:.1f}x the bash chain ({floor_paired:.1f}x paired by round): "
            "what any command costs before it reads a profile"
        )
    for line in verdicts:
        print(f"- {line}")
    if args.json:
        print(json.dumps({name: [round(x, 2) for x in t] for name, t in times.items()}))


def paired(times: list[float], baseline: list[float]) -> float:
    """The median over rounds of one round's time over the baseline's in the same round."""
    return statistics.median(t / b for t, b in zip(times, baseline, strict=True))


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


if __name__ == "__main__":
    main()
