"""The console script (``glmlaunch``, pyproject ``[project.scripts]``) and ``python -m glmlaunch``.

The process-wide start-up settings live here, not in ``glmlaunch/__init__.py``: importing glmlaunch as a
library (a test, a notebook, another tool) leaves the interpreter's collector and exit handlers as they
were. They are set before the CLI is imported, since those imports are a third of what start-up builds.
"""

import atexit
import gc
from typing import NoReturn


def tune_process() -> None:
    """Collector settings for a process that ends moments after it starts (bench/RESULTS.md, "Start-up").

    A glmlaunch process ends holding the few hundred thousand objects Typer, pydantic and the
    configuration models were built from. At exit CPython's last collections would walk and free every one
    of them just before the OS takes the memory back: ~13 ms of `glmlaunch args` and ~28 ms of `glmlaunch
    plan` on the 2-core CI VM. Freezing them in the last exit handler skips that walk. Handlers run in
    reverse order of registration, so every handler registered later (weakref finalizers,
    temporary-directory cleanup, logging) still runs first, and modules are still torn down; only
    reference cycles left uncollected are handed to the OS as they are.

    For the same reason the cyclic collector runs rarely while the process lives: at CPython's default (a
    young-generation pass every 700 net allocations) start-up pays ~10 ms of passes that find almost
    nothing, since building the models, the Typer app and the ledger creates few reference cycles. mypy
    raises the threshold the same way for its runs. Long commands (a preflight's parent, a search) still
    collect, every 200,000 allocations.
    """
    atexit.register(gc.freeze)
    gc.set_threshold(200_000, 30, 30)


def main() -> NoReturn:
    tune_process()
    from glmlaunch.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
