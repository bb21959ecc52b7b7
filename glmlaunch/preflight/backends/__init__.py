"""Preflight backends: what a worker allocates, and how.

* ``replay``: every ledger entry with its real memory kind (IPC slabs through the CUDA runtime, torch
  entries through the torch allocator), no library needed.
* ``sparkinfer``: the r12 library's real pools through its public API (nvcc JIT build).
* ``b12x``: the same call sequence against b12x's classes.

A backend gets the worker's :class:`~glmlaunch.preflight.runtime.Runtime` and runs ``build``,
``allocate`` and ``close`` in that order; it records one step per allocation through ``rt.step`` and
calls ``rt.mark("f0_free")`` once everything vLLM allocates before its init snapshot exists.
"""

from __future__ import annotations

from typing import Protocol

from glmlaunch.preflight.runtime import Runtime


class Backend(Protocol):
    def build(self) -> None: ...

    def allocate(self) -> None: ...

    def close(self) -> None: ...


def make_backend(name: str, rt: Runtime) -> Backend:
    if name == "replay":
        from glmlaunch.preflight.backends.replay import ReplayBackend

        return ReplayBackend(rt)
    if name == "sparkinfer":
        from glmlaunch.preflight.backends.sparkinfer import SparkinferBackend

        return SparkinferBackend(rt)
    if name == "b12x":
        from glmlaunch.preflight.backends.b12x import B12xBackend

        return B12xBackend(rt)
    raise ValueError(f"unknown preflight backend {name!r}")
