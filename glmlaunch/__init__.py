"""glmlaunch: launcher preflight and config calibrator for GLM-5.2 on vLLM."""

import atexit
import gc

__version__ = "0.1.0"

# A glmlaunch process ends moments after it starts, holding the few hundred thousand objects Typer,
# pydantic and the configuration models were built from. At exit CPython's last collections would walk
# and free every one of them just before the OS takes the memory back: ~13 ms of `glmlaunch args` and
# ~28 ms of `glmlaunch plan` on the 2-core CI VM (bench/RESULTS.md, "Start-up"). Freezing them in the
# last exit handler skips that walk. Handlers run in reverse order of registration, so every handler
# registered later (weakref finalizers, temporary-directory cleanup, logging) still runs first, and
# modules are still torn down; only reference cycles left uncollected are handed to the OS as they are.
atexit.register(gc.freeze)
