"""Replay every ledger entry on the device with its real memory kind.

* ``ipc``: ``cudaMalloc`` through ctypes libcudart (zero-filled like the libraries do), handle exported with
  ``cudaIpcGetMemHandle``, handles exchanged over the entry's process group with
  ``broadcast_object_list``, and every peer's slab opened with ``cudaIpcOpenMemHandle``: page rounding,
  driver sub-allocation and the 0-byte cost of opening are measured, not assumed.
* ``torch`` / ``workspace``: ``torch.empty`` uint8 tensors through the caching allocator, under the
  ``PYTORCH_CUDA_ALLOC_CONF`` the deployment sets (segment rounding and packing are measured).
* ``transient``: allocated, measured at its peak, freed (what one op call costs at most).
* streams: an entry of a capture stream family (``PlannedAllocation.stream``) is made the way vLLM's
  ``graph_capture`` makes it: instance ``i`` of every entry of the family inside pass ``i``, on a fresh stream
  made current for that pass, so torch's per-stream pools pack (or do not) as they do in the deployment.
  The IPC-handle exchange runs on that stream too, as the libraries' does. The rolled-back V2 profiling
  pass's torch entries are freed after the step (what ``rollback_channels`` leaves: cached segments).

CPU device mode (tests): IPC slabs are files under the run directory, mmapped by the owner and by every
peer after the same exchange; torch entries are CPU tensors. No device bytes are measured there.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from glmlaunch.ledger.channels import ROLLED_BACK_ROLE
from glmlaunch.preflight.backends.sequence import workspace_arenas
from glmlaunch.preflight.runtime import Runtime
from glmlaunch.preflight.types import PlannedAllocation

_LIFETIME_ORDER = {"pre-snapshot": 0, "profiled": 1, "graph-estimated": 2, "unbudgeted": 3}


class _IpcHandle(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 64)]


class CudaRuntime:
    """The few CUDA runtime calls the IPC replay needs, from the libcudart torch already loaded."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL(self._find())
        self.lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        self.lib.cudaFree.argtypes = [ctypes.c_void_p]
        self.lib.cudaMemset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
        self.lib.cudaIpcGetMemHandle.argtypes = [ctypes.POINTER(_IpcHandle), ctypes.c_void_p]
        self.lib.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), _IpcHandle, ctypes.c_uint]
        self.lib.cudaIpcCloseMemHandle.argtypes = [ctypes.c_void_p]
        self.lib.cudaGetErrorString.restype = ctypes.c_char_p

    @staticmethod
    def _find() -> str:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "libcudart" in line and "/" in line:
                    return line[line.index("/") :].strip()
        for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
            with suppress(OSError):
                ctypes.CDLL(name)
                return name
        raise RuntimeError("libcudart is not loaded and cannot be found; the IPC replay needs it")

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what}: {self.lib.cudaGetErrorString(code).decode()} (error {code})")

    def malloc(self, size: int) -> int:
        ptr = ctypes.c_void_p()
        self._check(self.lib.cudaMalloc(ctypes.byref(ptr), size), f"cudaMalloc({size})")
        return int(ptr.value or 0)

    def memset(self, ptr: int, size: int) -> None:
        self._check(self.lib.cudaMemset(ctypes.c_void_p(ptr), 0, size), "cudaMemset")

    def free(self, ptr: int) -> None:
        self._check(self.lib.cudaFree(ctypes.c_void_p(ptr)), "cudaFree")

    def export(self, ptr: int) -> bytes:
        handle = _IpcHandle()
        code = self.lib.cudaIpcGetMemHandle(ctypes.byref(handle), ctypes.c_void_p(ptr))
        self._check(code, "cudaIpcGetMemHandle")
        return bytes(handle)

    def open(self, handle: bytes) -> int:
        ptr = ctypes.c_void_p()
        lazy_enable_peer_access = 1
        raw = _IpcHandle.from_buffer_copy(handle)
        self._check(
            self.lib.cudaIpcOpenMemHandle(ctypes.byref(ptr), raw, lazy_enable_peer_access),
            "cudaIpcOpenMemHandle",
        )
        return int(ptr.value or 0)

    def close(self, ptr: int) -> None:
        self._check(self.lib.cudaIpcCloseMemHandle(ctypes.c_void_p(ptr)), "cudaIpcCloseMemHandle")


@dataclass
class _Slab:
    owner_ptr: int = 0
    opened: list[int] = field(default_factory=list)
    path: Path | None = None
    maps: list[mmap.mmap] = field(default_factory=list)


class ReplayBackend:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.cudart: CudaRuntime | None = None
        self.slabs: list[tuple[Any, _Slab]] = []
        self.tensors: list[Any] = []
        self.streams: list[Any] = []
        self.entries = sorted(rt.spec.allocations, key=lambda a: _LIFETIME_ORDER.get(a.lifetime, 9))

    def build(self) -> None:
        if self.rt.cuda:
            self.cudart = CudaRuntime()
        self.rt.result.build.update(backend="replay", cold=False, seconds=0.0)

    def _group(self, entry: PlannedAllocation) -> Any:
        if entry.group == "dcp" and self.rt.dcp_group is not None:
            return self.rt.dcp_group
        return self.rt.tp_group

    def allocate(self) -> None:
        if not self.entries:
            self.rt.note("the ledger has no entries to replay for this configuration")
        persistent = [e for e in self.entries if e.kind not in ("workspace", "transient")]
        pre = [e for e in persistent if e.lifetime == "pre-snapshot"]
        profiled = [e for e in persistent if e.lifetime == "profiled"]
        later = [e for e in persistent if e.lifetime not in ("pre-snapshot", "profiled")]
        self._replay_in_order(pre)
        self.rt.mark("f0_free")
        self._replay_in_order(profiled)
        # The profile run reserves the workspace arenas before any capture pass.
        for arena, names, size, lifetime in workspace_arenas(self.entries):
            self.tensors.append(
                self.rt.step(arena, kind="workspace", lifetime=lifetime, covers=names, requested=size,
                             fn=partial(self.rt.torch.empty, size, dtype=self.rt.torch.uint8,
                                        device=self.rt.device),
                             note="one grow-only arena per lane: the largest plan")
            )
        self._replay_in_order(later)
        # Transients last: measured on their own, no cached segment of theirs is reused by another entry.
        for entry in self.entries:
            if entry.kind == "transient":
                self._replay(entry)

    def _replay_in_order(self, entries: list[PlannedAllocation]) -> None:
        """Default-stream entries one by one; a stream family pass by pass where its first entry stands."""
        done: set[str] = set()
        for entry in entries:
            if not entry.stream:
                self._replay(entry)
            elif entry.stream not in done:
                done.add(entry.stream)
                self._replay_passes([e for e in entries if e.stream == entry.stream])

    def _replay_passes(self, family: list[PlannedAllocation]) -> None:
        for i in range(max(e.count for e in family)):
            stream = self.rt.torch.cuda.Stream(device=self.rt.device) if self.rt.cuda else None
            self.streams.append(stream)
            for entry in family:
                if i < entry.count:
                    self._replay_instance(entry, i, stream)

    def _replay(self, entry: PlannedAllocation) -> None:
        for i in range(entry.count):
            self._replay_instance(entry, i, None)

    def _replay_instance(self, entry: PlannedAllocation, i: int, stream: Any) -> None:
        name = entry.name if entry.count == 1 else f"{entry.name}#{i + 1}"
        rolled_back = entry.stream == ROLLED_BACK_ROLE and entry.kind != "ipc"
        if entry.kind == "transient":
            note = "allocated and freed; the cached segment stays"
        elif rolled_back:
            note = "freed as the rollback frees it; the segment stays cached for the pass's stream"
        else:
            note = f"on capture stream {entry.stream}#{i}" if entry.stream else ""
        fn = partial(self._allocate_one, entry, i, free=rolled_back)
        if stream is not None:
            fn = partial(self._on_stream, stream, fn)
        self.rt.step(
            name,
            kind=entry.kind,
            lifetime=entry.lifetime,
            covers=[entry.name],
            requested=entry.requested_bytes,
            fn=fn,
            note=note,
        )

    def _on_stream(self, stream: Any, fn: Any) -> None:
        with self.rt.torch.cuda.stream(stream):
            fn()

    def _allocate_one(self, entry: PlannedAllocation, index: int, *, free: bool = False) -> None:
        if entry.kind == "ipc":
            group = self._group(entry)
            slab = self._ipc_cuda(entry, group) if self.rt.cuda else self._ipc_cpu(entry, index, group)
            self.slabs.append((group, slab))
            return
        tensor = self.rt.torch.empty(entry.requested_bytes, dtype=self.rt.torch.uint8, device=self.rt.device)
        if entry.kind == "transient" or free:
            # Freed at once: the caching allocator keeps the segment, which is what one op call (or a
            # rollback) leaves.
            del tensor
            return
        self.tensors.append(tensor)

    def _exchange(self, group: Any, local: object) -> list[object]:
        dist = self.rt.dist
        ranks = dist.get_process_group_ranks(group)
        gathered: list[list[object]] = [[None] for _ in ranks]
        gathered[ranks.index(self.rt.rank)][0] = local
        for index, src in enumerate(ranks):
            dist.broadcast_object_list(
                gathered[index], src=src, group=group, device=self.rt.device if self.rt.cuda else None
            )
        return [g[0] for g in gathered]

    def _ipc_cuda(self, entry: PlannedAllocation, group: Any) -> _Slab:
        assert self.cudart is not None
        ptr = self.cudart.malloc(entry.requested_bytes)
        self.cudart.memset(ptr, entry.requested_bytes)
        slab = _Slab(owner_ptr=ptr)
        handles = self._exchange(group, self.cudart.export(ptr))
        my_index = self.rt.dist.get_process_group_ranks(group).index(self.rt.rank)
        for index, handle in enumerate(handles):
            if index != my_index:
                assert isinstance(handle, bytes)
                slab.opened.append(self.cudart.open(handle))
        return slab

    def _ipc_cpu(self, entry: PlannedAllocation, index: int, group: Any) -> _Slab:
        run_dir = Path(self.rt.spec.init_file).parent
        path = run_dir / f"ipc-r{self.rt.rank}-{entry.name.replace('/', '_')}-{index}"
        with open(path, "wb") as fh:
            fh.truncate(entry.requested_bytes)
        slab = _Slab(path=path)
        with open(path, "r+b") as fh:
            slab.maps.append(mmap.mmap(fh.fileno(), entry.requested_bytes))
        paths = self._exchange(group, str(path))
        for peer in paths:
            if peer != str(path):
                with open(str(peer), "r+b") as fh:
                    slab.maps.append(mmap.mmap(fh.fileno(), entry.requested_bytes))
        return slab

    def close(self) -> None:
        """Peers unmap first, owners free after a barrier: freeing a mapped export is undefined."""
        rt = self.rt
        rt.sync()
        groups = {id(g): g for g, _ in self.slabs}
        for group in groups.values():
            rt.barrier(group)
        for _, slab in self.slabs:
            for ptr in slab.opened:
                if self.cudart is not None:
                    self.cudart.close(ptr)
            for m in slab.maps:
                m.close()
        for group in groups.values():
            rt.barrier(group)
        for _, slab in self.slabs:
            if slab.owner_ptr and self.cudart is not None:
                self.cudart.free(slab.owner_ptr)
            if slab.path is not None:
                with suppress(FileNotFoundError):
                    os.unlink(slab.path)
        self.slabs.clear()
        self.tensors.clear()
        self.streams.clear()
        if rt.cuda:
            rt.torch.cuda.empty_cache()
        rt.mark("free_after_close")
