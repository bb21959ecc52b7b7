"""glmlaunch: launcher preflight and config calibrator for GLM-5.2 on vLLM."""

import os
from collections.abc import Iterator
from contextlib import contextmanager

__version__ = "0.1.0"

# glmlaunch uses no pydantic plugin, and pydantic looks plugins up by scanning the metadata of every
# installed distribution (importlib.metadata.entry_points) the first time it builds a validator: ~4-8 ms
# of every start-up with the test extra's packages installed, paid by whichever comes first, glmlaunch's
# models or Typer's parameter adapters (typer builds pydantic TypeAdapters while it parses arguments).
# Both are built inside `no_plugin_scan`. The caller's setting is put back as soon as they are built, so
# nothing glmlaunch starts (vLLM) inherits it.
_PLUGINS_VAR = "PYDANTIC_DISABLE_PLUGINS"


@contextmanager
def no_plugin_scan() -> Iterator[None]:
    """Build pydantic models or adapters (or validate a deferred model first) without the plugin scan."""
    before = os.environ.get(_PLUGINS_VAR)
    os.environ[_PLUGINS_VAR] = "__all__"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_PLUGINS_VAR, None)
        else:
            os.environ[_PLUGINS_VAR] = before


def without_plugin_loader() -> None:
    """For the CLI process only: pydantic's plugin loader module is a stand-in that finds no plugins.

    ``no_plugin_scan`` already makes the real loader return no plugins; but merely importing it, at the
    first validator pydantic builds, imports ``importlib.metadata``, which pulls in email, zipfile, csv,
    calendar and socket: 10-17 ms of every start-up (bench/RESULTS.md, issue 22) for a lookup whose
    answer is known. The stand-in gives that answer. Not done on ``import glmlaunch``: a program that
    imports glmlaunch as a library keeps its own plugins.
    """
    import sys
    import types

    name = "pydantic.plugin._loader"
    if name in sys.modules:
        return
    loader = types.ModuleType(name)
    loader.get_plugins = lambda: ()  # type: ignore[attr-defined]
    sys.modules[name] = loader
