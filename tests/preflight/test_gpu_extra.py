"""The ``gpu`` extra installs what the preflight workers import: torch, and numpy beside it.

torch does not declare numpy, but the workers' object collectives need it: with torch alone,
``glmlaunch preflight --device cpu`` failed with exit 5 ("Numpy is not available"). Checked here on the
metadata here; bench/SUPERVISE.md records the end-to-end check (a fresh venv with `pip install '.[gpu]'`,
then the CPU preflight).
"""

from __future__ import annotations

import re
import tomllib

from conftest import REPO


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}


def test_gpu_extra_brings_numpy_with_torch() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    gpu = _names(extras["gpu"])
    assert {"torch", "numpy"} <= gpu
