"""The preflight worker: one process per GPU of the TP group.

Run as ``python -m glmlaunch.preflight.worker SPEC.json`` by the launcher, in a fresh interpreter and its
own session (so the parent can kill the rank and anything it started, nvcc included, as one process
group). It is the only place torch is imported, and only inside :func:`run_worker`.

Phases: imports -> context -> process_group -> baseline -> build -> allocations -> teardown. After each
phase the rank's :class:`~glmlaunch.preflight.types.RankResult` is rewritten atomically to
``spec.result_path``; a failure records phase, message and traceback, then the process exits 1.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from glmlaunch.preflight.types import RankResult, WorkerSpec, write_json_atomic


class Worker:
    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.result = RankResult(rank=spec.rank, pid=os.getpid())
        self.path = Path(spec.result_path)
        self._phase_t0 = time.monotonic()

    def write(self) -> None:
        write_json_atomic(self.path, self.result.to_dict())

    def enter(self, phase: str) -> None:
        now = time.monotonic()
        if self.result.phase != "spawn" and self.result.phase not in self.result.timings:
            self.result.timings[self.result.phase] = round(now - self._phase_t0, 4)
        self._phase_t0 = now
        self.result.phase = phase
        self.result.phase_started = time.time()
        self.write()
        self._inject(phase)

    def _inject(self, phase: str) -> None:
        fault = self.spec.fault
        if fault is None or fault.rank != self.spec.rank or fault.phase != phase:
            return
        if fault.action == "raise":
            raise RuntimeError(f"injected fault: rank {fault.rank} raised in {phase}")
        if fault.action == "exit":
            os._exit(3)
        if fault.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        while True:  # "hang": only the parent's phase limit ends this
            time.sleep(3600)

    def finish(self) -> None:
        self.result.timings[self.result.phase] = round(time.monotonic() - self._phase_t0, 4)
        self.result.status = "ok"
        self.write()

    def fail(self, exc: BaseException) -> None:
        self.result.timings.setdefault(self.result.phase, round(time.monotonic() - self._phase_t0, 4))
        self.result.status = "failed"
        self.result.error_type = type(exc).__name__
        self.result.error_message = str(exc) or type(exc).__name__
        self.result.error_traceback = "".join(traceback.format_exception(exc))
        self.result.error_time = time.time()
        self.write()


def _die_with_parent(parent_pid: int | None) -> None:
    """If the parent is killed outright (SIGKILL), its ranks must not live on holding GPU memory."""
    if parent_pid is None or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def run_worker(spec: WorkerSpec) -> int:
    # Library and allocator settings must be in the environment before torch initialises CUDA.
    os.environ.update(spec.env)
    worker = Worker(spec)
    try:
        worker.enter("imports")
        import torch
        import torch.distributed as dist

        from glmlaunch.preflight.runtime import Runtime

        worker.result.device["torch"] = str(torch.__version__)
        worker.result.device["torch_cuda"] = str(torch.version.cuda)

        worker.enter("context")
        rt = Runtime.create(spec, worker.result, torch, dist)

        worker.enter("process_group")
        rt.init_process_groups()

        worker.enter("baseline")
        rt.take_baseline()

        from glmlaunch.preflight.backends import make_backend

        backend = make_backend(spec.backend, rt)
        worker.enter("build")
        backend.build()

        worker.enter("allocations")
        try:
            backend.allocate()
        finally:
            rt.mark("free_after_allocations")
        worker.enter("teardown")
        backend.close()
        rt.finish()
        worker.finish()
        return 0
    except BaseException as exc:
        worker.fail(exc)
        return 1


def main(argv: list[str] | None = None) -> Any:
    args = sys.argv[1:] if argv is None else argv
    spec = WorkerSpec.from_json(Path(args[0]).read_text())
    _die_with_parent(spec.parent_pid)
    code = run_worker(spec)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: library finalizers (IPC handles, NCCL) were already run in order.
    os._exit(code)


if __name__ == "__main__":
    main()
