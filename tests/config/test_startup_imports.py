"""Start-up cost removed at the source (bench/startup.py measures it; these pin what was removed).

Each check runs a fresh interpreter, because what matters is what a new `glmlaunch` process imports and
builds before it prints anything.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _probe(code: str, env: dict[str, str]) -> dict[str, object]:
    res = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=env["HOME"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    probe: dict[str, object] = json.loads(res.stdout.strip().splitlines()[-1])
    return probe


RUN_ENV = """
import io, json, sys, contextlib, runpy
sys.argv = ["glmlaunch", "env", "--shell", "bash"]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_module("glmlaunch", run_name="__main__")
    except SystemExit:
        pass
import os
from pydantic.plugin import _loader
print(json.dumps({
    "modules": sorted(
        m for m in ("pydantic_settings", "asyncio", "ssl", "argparse", "importlib.metadata")
        if m in sys.modules
    ),
    "plugins_scanned": getattr(_loader, "_plugins", None) is not None,
    "plugins_var_left": "PYDANTIC_DISABLE_PLUGINS" in os.environ,
}))
"""


def test_names_and_output_do_not_build_the_configuration_models(clean_env: dict[str, str]) -> None:
    # output.py needs two variable names from the registry: that must not import pydantic and build
    # every configuration model (profiles list, hw and --help never resolve a configuration).
    code = (
        "import json, sys; import glmlaunch.output, glmlaunch.config.registry, glmlaunch.config.units;"
        "print(json.dumps({'loaded': sorted(m for m in ('pydantic', 'glmlaunch.config.schema') "
        "if m in sys.modules)}))"
    )
    assert _probe(code, clean_env) == {"loaded": []}


def test_env_with_a_tool_variable_does_not_import_pydantic_settings(clean_env: dict[str, str]) -> None:
    # pydantic-settings pulled in asyncio, ssl and argparse (~50 ms) as soon as any GLMLAUNCH_* was set;
    # pydantic's plugin loader imported importlib.metadata (email, zipfile, csv: 10-17 ms, issue 22)
    probe = _probe(RUN_ENV, dict(clean_env, GLMLAUNCH_PROFILE="gate", GLMLAUNCH_DEBUG="0"))
    assert probe["modules"] == []


def test_the_configuration_models_skip_the_plugin_scan(clean_env: dict[str, str]) -> None:
    # pydantic scans every installed distribution's entry points for plugins when the first model is
    # built; glmlaunch uses none, and the caller's environment is left as it was (vLLM inherits it)
    probe = _probe(RUN_ENV, dict(clean_env, GLMLAUNCH_PROFILE="gate"))
    assert probe["plugins_scanned"] is False and probe["plugins_var_left"] is False


def _console_entry() -> tuple[str, str]:
    # what `pip install` writes the `glmlaunch` script from: pyproject's [project.scripts]
    with (REPO / "pyproject.toml").open("rb") as fh:
        target = tomllib.load(fh)["project"]["scripts"]["glmlaunch"]
    module, _, function = target.partition(":")
    return module, function


def _exit_probe(code: str, env: dict[str, str]) -> str:
    res = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=env["HOME"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()[-1]


# Registered before glmlaunch is imported, this handler runs after every one glmlaunch registers (exit
# handlers run in reverse order): it sees whether the process's objects were frozen for exit.
AT_EXIT = (
    "import atexit, gc, json, sys\n"
    "default = gc.get_threshold()\n"
    "atexit.register(lambda: print(json.dumps({'frozen': gc.get_freeze_count() > 0, "
    "'threshold_changed': gc.get_threshold() != default})))\n"
)


def test_exit_skips_freeing_what_the_process_built(clean_env: dict[str, str]) -> None:
    # the console script: every object is frozen by exit, so CPython's final collections skip them, and
    # the collector ran rarely while it lived
    module, function = _console_entry()
    code = AT_EXIT + (
        "import io, contextlib\n"
        "sys.argv = ['glmlaunch', 'env', '-p', 'turnkey', '--shell', 'bash']\n"
        f"from {module} import {function} as entry\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        entry()\n"
        "    except SystemExit:\n"
        "        pass\n"
    )
    assert json.loads(_exit_probe(code, clean_env)) == {"frozen": True, "threshold_changed": True}


def test_importing_glmlaunch_leaves_the_interpreter_as_it_was(clean_env: dict[str, str]) -> None:
    # a library user (a test runner, a notebook) keeps its own collector settings and exit handlers;
    # glmlaunch.cli is what in-process CLI tests import
    code = AT_EXIT + (
        "import glmlaunch, glmlaunch.__main__, glmlaunch.cli, glmlaunch.ledger, glmlaunch.calibrate.store\n"
    )
    assert json.loads(_exit_probe(code, clean_env)) == {"frozen": False, "threshold_changed": False}


RUN_PLAN = """
import io, json, os, sys, contextlib, runpy
sys.argv = ["glmlaunch", "plan", "-p", "turnkey"]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_module("glmlaunch", run_name="__main__")
    except SystemExit:
        pass
from pydantic.plugin import _loader
watched = (
    "glmlaunch.calibrate.records", "glmlaunch.vllmlog.boot", "glmlaunch.vllmlog.bootconfig",
    "glmlaunch.vllmlog.events", "glmlaunch.calibrate.bootconfig",
    "glmlaunch.hardware.inventory", "glmlaunch.plan.audit", "glmlaunch.plan.diff", "rich._emoji_codes",
    "importlib.metadata", "glmlaunch.fetch.run", "glmlaunch.fetch.hub", "glmlaunch.fetch.metadata",
    "huggingface_hub", "logging",
)
from glmlaunch.plan.planner import PlanDoc
print(json.dumps({
    "modules": sorted(m for m in watched if m in sys.modules),
    "plan_doc_built": PlanDoc.__pydantic_complete__,
    "plugins_scanned": getattr(_loader, "_plugins", None) is not None,
    "plugins_var_left": "PYDANTIC_DISABLE_PLUGINS" in os.environ,
}))
"""


def test_plan_on_an_empty_store_builds_no_record_models(clean_env: dict[str, str]) -> None:
    # A fresh install has no calibration record: the records' models (boot log, fingerprint, inventory)
    # are for reading one; the JSON document models for --json; the emoji table for nothing (data is
    # printed as written); Typer's parameter adapters must not trigger pydantic's plugin scan either, nor
    # the installed-vLLM lookup import importlib.metadata where vLLM cannot be imported (issue 22). The
    # plan looks at the checkpoint on disk; the downloader and the hub client are for fetching, and the
    # hub's metadata only for a checkpoint the weights table does not know.
    probe = _probe(RUN_PLAN, clean_env)
    assert probe == {
        "modules": [],
        "plan_doc_built": False,
        "plugins_scanned": False,
        "plugins_var_left": False,
    }
