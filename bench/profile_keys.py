"""Time `glmlaunch config` on generated profiles with many keys (issue 13, item 17: linear, capped).

Usage: .venv/bin/python bench/profile_keys.py [COUNT ...]   (default: 1000 5000 10000 19000 30000)

Writes each profile (``extends: turnkey`` plus COUNT ``env:`` entries) to a temporary directory and times
`glmlaunch config -p FILE --json` and the table form in a subprocess; 30000 is over
``glmlaunch.config.limits.MAX_KEYS`` and is refused (exit 2).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(counts: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for count in counts:
            path = Path(tmp) / f"env{count}.yaml"
            lines = ["extends: turnkey", "env:"] + [f'  MY_VAR_{i}: "v{i}"' for i in range(count)]
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            for extra in (["--json"], []):
                start = time.perf_counter()
                proc = subprocess.run(
                    [sys.executable, "-m", "glmlaunch", "config", "-p", str(path), *extra],
                    capture_output=True,
                    check=False,
                )
                took = time.perf_counter() - start
                form = "json " if extra else "table"
                print(f"{count:>6} keys  {form}  exit {proc.returncode}  {took:6.2f} s")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1000, 5000, 10000, 19000, 30000])
