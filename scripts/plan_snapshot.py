"""Record (or compare) `plan --json` for every shipped profile and variants of it.

Why: a refactor that claims "behaviour unchanged" is judged entry by entry against
the plans the previous main produced. `--write` records them; without it the
current tree's plans are compared and every difference is printed.

    python scripts/plan_snapshot.py --write   # record into .plan-snapshots/ (or $GLMLAUNCH_PLAN_SNAPSHOTS)
    python scripts/plan_snapshot.py           # compare, exit 1 on any difference
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = Path(os.environ.get("GLMLAUNCH_PLAN_SNAPSHOTS", ROOT / ".plan-snapshots"))

# Each variant moves one input of the memory model the refactor must not change.
VARIANTS: dict[str, list[str]] = {
    "base": [],
    "gmu090": ["memory.gpu_memory_utilization=0.90"],
    "gmu098": ["memory.gpu_memory_utilization=0.98"],
    "pin2032": ["memory.num_gpu_blocks_override=2032"],
    "dcp1": ["parallel.dcp=1"],
    "dcp4": ["parallel.dcp=4"],
    "mtp0": ["speculative.num_speculative_tokens=0"],
    "mtp3": ["speculative.num_speculative_tokens=3"],
    "w80": ["model.weights_per_rank=80GiB"],
    "tp2": ["parallel.tp=2", "parallel.dcp=1"],
    "bt2048": ["scheduler.max_num_batched_tokens=2048"],
    "bt8192": ["scheduler.max_num_batched_tokens=8192"],
}


def profiles() -> list[str]:
    return sorted(p.stem for p in (ROOT / "profiles").glob("*.yaml"))


def plan(profile: str, sets: list[str], home: str) -> dict[str, object]:
    exe = Path(sys.executable).with_name("glmlaunch")
    cmd = [str(exe), "plan", "-p", profile, "--json"]
    for s in sets:
        cmd += ["--set", s]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "XDG_CACHE_HOME": f"{home}/cache",
        "XDG_CONFIG_HOME": f"{home}/config",
        "XDG_DATA_HOME": f"{home}/data",
        "XDG_STATE_HOME": f"{home}/state",
        "COLUMNS": "200",
        "LC_ALL": "C.UTF-8",
    }
    if "PYTHONPATH" in os.environ:  # the tree under test, not the editable install
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    return {
        "exit_code": proc.returncode,
        "plan": json.loads(proc.stdout) if proc.stdout.strip() else None,
        "stderr_first_line": (proc.stderr.strip().splitlines() or [""])[-1] if proc.returncode else "",
    }


def diff(a: object, b: object, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only in {'recorded' if k in a else 'current'}")
            else:
                out += diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} entries recorded, {len(b)} now"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="record instead of compare")
    ap.add_argument("--profile", action="append", help="only these profiles")
    args = ap.parse_args()
    SNAPSHOTS.mkdir(parents=True, exist_ok=True)
    failures = 0
    with tempfile.TemporaryDirectory() as home:
        for profile in args.profile or profiles():
            current = {name: plan(profile, sets, home) for name, sets in VARIANTS.items()}
            target = SNAPSHOTS / f"{profile}.json"
            if args.write:
                target.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
                print(f"recorded {target}", file=sys.stderr)
                continue
            if not target.exists():  # a profile added since the recording: nothing to compare with
                print(f"{profile}: not recorded in {SNAPSHOTS}, skipped", file=sys.stderr)
                continue
            recorded = json.loads(target.read_text())
            for d in diff(recorded, json.loads(json.dumps(current))):
                failures += 1
                print(f"{profile}{d}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
