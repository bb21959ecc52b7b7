"""Probe the GPUs through NVML into an :class:`~glmlaunch.hardware.inventory.Inventory`.

The only module that imports ``pynvml`` (the ``nvidia-ml-py`` bindings), and only inside
:func:`probe`, so light commands never load it.

Contract:

- Devices are ordered by PCI bus id; ``Gpu.index`` is the position in that order (the meaning of
  ``CUDA_VISIBLE_DEVICES`` integers under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, which glmlaunch always sets).
- ``CUDA_VISIBLE_DEVICES`` is honoured the way CUDA reads it: integers or (prefixes of) GPU UUIDs,
  comma separated, in the listed order; the first entry that names no GPU ends the list. The inventory
  holds only the visible GPUs; ``host_gpu_count`` keeps the total.
- An NVML failure on one query or one device is recorded in that device's ``errors`` and probing goes
  on; only "no NVML / no driver / no visible GPU" raises, as :class:`~glmlaunch.errors.NoGpuError`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import math
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from glmlaunch import __version__
from glmlaunch.config.registry import CUDA_VISIBLE_DEVICES
from glmlaunch.errors import NoGpuError
from glmlaunch.hardware.inventory import (
    Gpu,
    GpuPair,
    GpuProcess,
    Inventory,
    P2PCaps,
    P2PState,
    PcieLink,
    ProbeError,
    TopologyLevel,
    cpu_list,
    load_inventory,
    now_utc,
)
from glmlaunch.hardware.memory import Device, DeviceMemory, Holder, MemorySample

T = TypeVar("T")

_NO_GPU_HINT = (
    "run on the GPU host, or pass --inventory FILE with an inventory saved by `glmlaunch hw --save`"
)

# nvmlGpuP2PCapsIndex_t. Literal ints: pynvml spells NVML_P2P_CAPS_INDEX_READ as the tuple ``(0,)``.
_P2P_CAPS: tuple[tuple[str, int], ...] = (
    ("read", 0),
    ("write", 1),
    ("nvlink", 2),
    ("atomics", 3),
    ("pci", 4),
)

_P2P_STATES: dict[int, P2PState] = {
    0: "ok",
    1: "chipset_not_supported",
    2: "gpu_not_supported",
    3: "topology_not_supported",
    4: "disabled_by_regkey",
    5: "not_supported",
    6: "unknown",
}

_TOPOLOGY: dict[int, TopologyLevel] = {
    0: "internal",
    10: "single",
    20: "multiple",
    30: "hostbridge",
    40: "node",
    50: "system",
}

_NVLINK_MAX_LINKS = 36


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def cuda_version_text(value: int) -> str:
    """NVML's CUDA driver version integer (13020) as CUDA writes it (13.2)."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML writes an 8-digit PCI domain (00000000:17:00.0); sysfs uses 4 (0000:17:00.0), lower case."""
    domain, _, rest = nvml_bus_id.partition(":")
    if len(domain) > 4 and set(domain[:-4]) <= {"0"}:
        domain = domain[-4:]
    return f"{domain}:{rest}".lower()


@dataclass
class _Errors:
    """Collects the failed queries of one device or pair while probing."""

    items: list[ProbeError] = field(default_factory=list)

    def add(self, what: str, exc: BaseException) -> None:
        self.items.append(ProbeError(field=what, error=_text(exc) or type(exc).__name__))

    def read(self, what: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except Exception as exc:  # one NVML query failing never stops the probe
            self.add(what, exc)
            return None


@dataclass(frozen=True)
class VisibleSelection:
    """Which physical GPUs CUDA_VISIBLE_DEVICES leaves visible, in CUDA order, and why it stopped early."""

    indices: tuple[int, ...]
    problem: str | None = None


def select_visible(value: str | None, uuids: Sequence[str | None]) -> VisibleSelection:
    """Apply CUDA's reading of ``CUDA_VISIBLE_DEVICES`` to GPUs whose PCI-order UUIDs are ``uuids``.

    ``None`` (unset) shows every GPU. Integers index the PCI-ordered list; other entries match a GPU
    UUID, or a unique prefix of one (CUDA accepts ``GPU-8a2f`` for ``GPU-8a2f…``). Like CUDA, parsing
    stops at the first entry that names no GPU, a repeated GPU, or a MIG instance.
    """
    count = len(uuids)
    if value is None:
        return VisibleSelection(tuple(range(count)))
    chosen: list[int] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            return VisibleSelection(tuple(chosen), f"empty entry in {value!r} ends the list")
        index: int | None = None
        if entry.lstrip("+-").isdigit():
            n = int(entry)
            if 0 <= n < count:
                index = n
        elif entry.upper().startswith("MIG-"):
            return VisibleSelection(tuple(chosen), f"{entry!r} is a MIG instance; glmlaunch needs whole GPUs")
        else:
            wanted = entry if entry.upper().startswith("GPU-") else f"GPU-{entry}"
            matches = [
                i for i, u in enumerate(uuids) if u is not None and u.lower().startswith(wanted.lower())
            ]
            if len(matches) == 1:
                index = matches[0]
            elif len(matches) > 1:
                return VisibleSelection(tuple(chosen), f"{entry!r} matches {len(matches)} GPUs")
        if index is None:
            return VisibleSelection(
                tuple(chosen), f"{entry!r} names no GPU; CUDA ignores it and every later entry"
            )
        if index in chosen:
            return VisibleSelection(tuple(chosen), f"GPU {index} is listed twice")
        chosen.append(index)
    return VisibleSelection(tuple(chosen))


def _nvml_init_error(nvml: Any, exc: Exception) -> NoGpuError:
    code = getattr(exc, "value", None)
    if code == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", -1):
        msg = "no NVIDIA driver: NVML (libnvidia-ml.so.1) is not installed on this machine"
    elif code == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", -1):
        msg = "the NVIDIA driver is not loaded (NVML: Driver Not Loaded)"
    elif code == getattr(nvml, "NVML_ERROR_NO_PERMISSION", -1):
        msg = "no permission to talk to the NVIDIA driver (NVML: Insufficient Permissions)"
    else:
        msg = f"NVML could not start: {_text(exc)}"
    return NoGpuError(msg, hint=_NO_GPU_HINT)


def _source() -> str:
    try:
        binding = importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        binding = "unknown"
    return f"glmlaunch {__version__} hw (nvidia-ml-py {binding})"


def _cpu_affinity(nvml: Any, handle: Any) -> str:
    words = max(1, math.ceil((os.cpu_count() or 64) / 64))
    mask = nvml.nvmlDeviceGetCpuAffinity(handle, words)
    cpus = [w * 64 + bit for w in range(words) for bit in range(64) if (int(mask[w]) >> bit) & 1]
    return cpu_list(cpus)


def _numa_node(nvml: Any, handle: Any, bus_id: str | None, errs: _Errors) -> int | None:
    try:
        node = int(nvml.nvmlDeviceGetNumaNodeId(handle))
        return node if node >= 0 else None
    except Exception as exc:
        # Older drivers lack the query; the kernel knows the node of every PCI device.
        if bus_id is not None:
            path = Path("/sys/bus/pci/devices") / sysfs_bus_id(bus_id) / "numa_node"
            try:
                node = int(path.read_text().strip())
                return node if node >= 0 else None
            except (OSError, ValueError):
                pass
        errs.add("numa_node", exc)
        return None


def _call_list(fn: Callable[..., Any], *args: Any) -> list[Any]:
    return list(fn(*args))


def _call_int(fn: Callable[..., Any], *args: Any) -> int:
    return int(fn(*args))


def _processes(nvml: Any, handle: Any, errs: _Errors) -> tuple[GpuProcess, ...]:
    found: dict[int, GpuProcess] = {}
    kinds: tuple[tuple[Literal["compute", "graphics"], str], ...] = (
        ("compute", "nvmlDeviceGetComputeRunningProcesses"),
        ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
    )
    for kind, fn_name in kinds:
        procs = errs.read(f"processes.{kind}", functools.partial(_call_list, getattr(nvml, fn_name), handle))
        for p in procs or ():
            pid = int(p.pid)
            used = p.usedGpuMemory
            used_bytes = int(used) if used is not None else None
            if pid in found:
                prev = found[pid]
                if used_bytes is not None and (prev.used_bytes or 0) < used_bytes:
                    found[pid] = prev.model_copy(update={"used_bytes": used_bytes})
                continue
            try:
                name: str | None = _text(nvml.nvmlSystemGetProcessName(pid))
            except Exception:
                # A pid of another container or VM: NVML sees its memory but not its name.
                name = None
            found[pid] = GpuProcess(pid=pid, name=name, used_bytes=used_bytes, kind=kind)
    return tuple(sorted(found.values(), key=lambda p: p.pid))


def _nvlink_active(nvml: Any, handle: Any) -> int | None:
    active = 0
    for link in range(_NVLINK_MAX_LINKS):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except Exception:
            # NOT_SUPPORTED on the first link: no NVLink; INVALID_ARGUMENT: past the last link.
            return None if link == 0 else active
        if state:
            active += 1
    return active


def _probe_gpu(nvml: Any, index: int, nvml_index: int, handle: Any, bus_id: str | None) -> Gpu:
    errs = _Errors()
    name = errs.read("name", lambda: _text(nvml.nvmlDeviceGetName(handle)))
    uuid = errs.read("uuid", lambda: _text(nvml.nvmlDeviceGetUUID(handle)))
    total = reserved = free = used = None
    try:
        mem2 = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
        total, reserved, free, used = int(mem2.total), int(mem2.reserved), int(mem2.free), int(mem2.used)
    except Exception as exc_v2:
        # v1 has no separate reserve: its "used" includes the driver's reserved memory.
        mem1 = errs.read("memory", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        if mem1 is not None:
            total, free, used = int(mem1.total), int(mem1.free), int(mem1.used)
            errs.add("memory_reserved", exc_v2)
    cc = errs.read("compute_capability", lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle))
    attrs = errs.read("multiprocessor_count", lambda: nvml.nvmlDeviceGetAttributes_v2(handle))
    cores = errs.read("cuda_cores", lambda: int(nvml.nvmlDeviceGetNumGpuCores(handle)))
    pcie = PcieLink(
        current_generation=errs.read(
            "pcie.current_generation", lambda: int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle))
        ),
        max_generation=errs.read(
            "pcie.max_generation", lambda: int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))
        ),
        gpu_max_generation=errs.read(
            "pcie.gpu_max_generation", lambda: int(nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(handle))
        ),
        current_width=errs.read(
            "pcie.current_width", lambda: int(nvml.nvmlDeviceGetCurrPcieLinkWidth(handle))
        ),
        max_width=errs.read("pcie.max_width", lambda: int(nvml.nvmlDeviceGetMaxPcieLinkWidth(handle))),
    )
    bar1 = errs.read("bar1_total", lambda: int(nvml.nvmlDeviceGetBAR1MemoryInfo(handle).bar1Total))
    mig = errs.read("mig_enabled", lambda: bool(nvml.nvmlDeviceGetMigMode(handle)[0]))
    return Gpu(
        index=index,
        nvml_index=nvml_index,
        name=name,
        uuid=uuid,
        pci_bus_id=bus_id,
        memory_total=total,
        memory_reserved=reserved,
        memory_free=free,
        memory_used=used,
        compute_capability=f"{cc[0]}.{cc[1]}" if cc is not None else None,
        multiprocessor_count=int(attrs.multiprocessorCount) if attrs is not None else None,
        cuda_cores=cores,
        pcie=pcie,
        bar1_total=bar1,
        numa_node=_numa_node(nvml, handle, bus_id, errs),
        cpu_affinity=errs.read("cpu_affinity", lambda: _cpu_affinity(nvml, handle)),
        performance_state=errs.read(
            "performance_state", lambda: int(nvml.nvmlDeviceGetPerformanceState(handle))
        ),
        persistence_mode=errs.read(
            "persistence_mode", lambda: bool(nvml.nvmlDeviceGetPersistenceMode(handle))
        ),
        mig_enabled=mig,
        nvlink_active=_nvlink_active(nvml, handle),
        processes=_processes(nvml, handle, errs),
        errors=tuple(errs.items),
    )


def _p2p(nvml: Any, src: Any, dst: Any, errs: _Errors, direction: str) -> P2PCaps:
    values: dict[str, P2PState | None] = {}
    for cap, idx in _P2P_CAPS:
        query = functools.partial(_call_int, nvml.nvmlDeviceGetP2PStatus, src, dst, idx)
        raw = errs.read(f"p2p.{direction}.{cap}", query)
        values[cap] = _P2P_STATES.get(raw, "unknown") if raw is not None else None
    return P2PCaps(**values)


def _probe_pair(nvml: Any, a: int, b: int, ha: Any, hb: Any) -> GpuPair:
    errs = _Errors()
    level = errs.read("topology", lambda: int(nvml.nvmlDeviceGetTopologyCommonAncestor(ha, hb)))
    return GpuPair(
        a=a,
        b=b,
        topology=_TOPOLOGY.get(level) if level is not None else None,
        forward=_p2p(nvml, ha, hb, errs, "forward"),
        reverse=_p2p(nvml, hb, ha, errs, "reverse"),
        errors=tuple(errs.items),
    )


def _import_nvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise NoGpuError(
            "the NVML bindings are not installed (pip package nvidia-ml-py)", hint=_NO_GPU_HINT
        ) from None
    return pynvml


def probe(*, environ: Mapping[str, str] | None = None, host: str | None = None) -> Inventory:
    """Read every visible GPU through NVML. Raises NoGpuError when there is no driver or no GPU."""
    env = os.environ if environ is None else environ
    nvml = _import_nvml()
    try:
        nvml.nvmlInit()
    except Exception as exc:
        raise _nvml_init_error(nvml, exc) from None
    try:
        return _probe_initialised(nvml, env, host or socket.gethostname())
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _gpu_count(nvml: Any) -> int:
    """The GPUs NVML sees; none is the same failure as no driver (exit 8)."""
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except Exception as exc:
        raise NoGpuError(f"NVML cannot count the GPUs: {_text(exc)}", hint=_NO_GPU_HINT) from None
    if count == 0:
        raise NoGpuError("the NVIDIA driver is loaded but sees no GPU", hint=_NO_GPU_HINT)
    return count


def _probe_initialised(nvml: Any, env: Mapping[str, str], host: str) -> Inventory:
    sys_errs = _Errors()
    driver = sys_errs.read("driver_version", lambda: _text(nvml.nvmlSystemGetDriverVersion()))
    cuda = sys_errs.read(
        "cuda_driver_version", lambda: cuda_version_text(int(nvml.nvmlSystemGetCudaDriverVersion()))
    )
    nvml_version = sys_errs.read("nvml_version", lambda: _text(nvml.nvmlSystemGetNVMLVersion()))
    count = _gpu_count(nvml)

    # (nvml_index, handle or None, bus id or None, error)
    found: list[tuple[int, Any, str | None, Exception | None]] = []
    for i in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
        except Exception as exc:
            found.append((i, None, None, exc))
            continue
        try:
            bus = _text(nvml.nvmlDeviceGetPciInfo(handle).busId).upper()
        except Exception as exc:
            found.append((i, handle, None, exc))
            continue
        found.append((i, handle, bus, None))
    # PCI bus order; a device whose bus id is unreadable keeps its NVML position at the end.
    found.sort(key=lambda f: (f[2] is None, f[2] or "", f[0]))

    uuids: list[str | None] = []
    for _, handle, _, _ in found:
        try:
            uuids.append(_text(nvml.nvmlDeviceGetUUID(handle)) if handle is not None else None)
        except Exception:
            uuids.append(None)
    cvd = env.get(CUDA_VISIBLE_DEVICES)
    selection = select_visible(cvd, uuids)
    if selection.problem:
        sys_errs.items.append(ProbeError(field=CUDA_VISIBLE_DEVICES, error=selection.problem))
    if not selection.indices:
        detail = f"; {selection.problem}" if selection.problem else ""
        raise NoGpuError(
            f"{CUDA_VISIBLE_DEVICES}={cvd!r} hides every GPU (host has {count}){detail}",
            hint=f"unset {CUDA_VISIBLE_DEVICES} or list GPUs by index or UUID",
        )

    gpus: list[Gpu] = []
    handles: dict[int, Any] = {}
    for index in selection.indices:
        nvml_index, handle, bus_id, err = found[index]
        if handle is None or err is not None:
            errs = _Errors()
            errs.add("device" if handle is None else "pci_bus_id", err or RuntimeError("unreadable"))
            if handle is None:
                gpus.append(Gpu(index=index, nvml_index=nvml_index, errors=tuple(errs.items)))
                continue
            gpu = _probe_gpu(nvml, index, nvml_index, handle, None)
            gpus.append(gpu.model_copy(update={"errors": (*errs.items, *gpu.errors)}))
        else:
            gpus.append(_probe_gpu(nvml, index, nvml_index, handle, bus_id))
        handles[index] = handle

    pairs: list[GpuPair] = []
    ordered = sorted(handles)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            pairs.append(_probe_pair(nvml, a, b, handles[a], handles[b]))

    return Inventory(
        provenance="captured",
        captured_at=now_utc(),
        host=host,
        source=_source(),
        driver_version=driver,
        cuda_driver_version=cuda,
        nvml_version=nvml_version,
        cuda_visible_devices=cvd,
        host_gpu_count=count,
        gpus=tuple(gpus),
        pairs=tuple(pairs),
        errors=tuple(sys_errs.items),
    )


def get_inventory(
    inventory_file: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> Inventory:
    """The inventory a command works on: ``inventory_file``, else ``$GLMLAUNCH_INVENTORY``, else NVML."""
    from glmlaunch.config.settings import ToolSettings

    env = os.environ if environ is None else environ
    chosen: str | os.PathLike[str] | None = inventory_file
    if chosen is None:
        chosen = ToolSettings.from_environ(env).inventory
    if chosen is not None:
        return load_inventory(chosen)
    return probe(environ=env)


class NvmlMemorySource:
    """Live NVML for ``glmlaunch watch``: every GPU the driver sees, in PCI bus order, sampled cheaply.

    NVML stays initialised between reads (a read is two queries per GPU: memory info and the compute
    processes, ~0.04 ms on the captured H200), and ``CUDA_VISIBLE_DEVICES`` is not applied: the watch maps
    the deployment's ranks to GPUs by UUID itself (:mod:`glmlaunch.watch.ranks`), since the deployment's
    visible devices need not be the watcher's.
    """

    def __init__(self, *, clock: Callable[[], float] | None = None) -> None:
        import time

        self._clock = clock or time.monotonic
        nvml = _import_nvml()
        try:
            nvml.nvmlInit()
        except Exception as exc:
            raise _nvml_init_error(nvml, exc) from None
        self._nvml = nvml
        self.driver_version: str | None = None
        with contextlib.suppress(Exception):
            self.driver_version = _text(nvml.nvmlSystemGetDriverVersion())
        try:
            self._devices, self._handles = self._open(nvml)
        except BaseException:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
            raise

    @staticmethod
    def _open(nvml: Any) -> tuple[tuple[Device, ...], tuple[Any, ...]]:
        count = _gpu_count(nvml)
        found: list[tuple[str, int, Any, str, str | None, int, int]] = []
        for i in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            except Exception as exc:
                raise NoGpuError(
                    f"NVML cannot read GPU {i} (handle, UUID): {_text(exc)}", hint=_NO_GPU_HINT
                ) from None
            bus: str = ""
            with contextlib.suppress(Exception):
                bus = _text(nvml.nvmlDeviceGetPciInfo(handle).busId).upper()
            name: str | None = None
            with contextlib.suppress(Exception):
                name = _text(nvml.nvmlDeviceGetName(handle))
            total, reserved = _memory_totals(nvml, handle)
            found.append((bus, i, handle, uuid, name, total, reserved))
        # PCI bus order, as the probe orders them; an unreadable bus id keeps NVML's position at the end
        found.sort(key=lambda f: (not f[0], f[0], f[1]))
        devices = tuple(
            Device(
                index=pos,
                nvml_index=nvml_index,
                uuid=uuid,
                pci_bus_id=bus or None,
                name=name,
                total_bytes=total,
                reserved_bytes=reserved,
            )
            for pos, (bus, nvml_index, _, uuid, name, total, reserved) in enumerate(found)
        )
        return devices, tuple(f[2] for f in found)

    @property
    def devices(self) -> tuple[Device, ...]:
        return self._devices

    def read(self) -> MemorySample:
        nvml = self._nvml
        t = self._clock()
        out: list[DeviceMemory] = []
        for handle in self._handles:
            try:
                mem = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
            except Exception:
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            holders: tuple[Holder, ...] | None
            try:
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                holders = tuple(
                    Holder(int(p.pid), int(p.usedGpuMemory) if p.usedGpuMemory is not None else None)
                    for p in procs
                )
            except Exception:
                holders = None  # another container's processes, or no such query: unseen, not absent
            out.append(DeviceMemory(used_bytes=int(mem.used), free_bytes=int(mem.free), holders=holders))
        return MemorySample(t=t, devices=tuple(out))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()


def nvml_binding() -> str:
    """The NVML binding's version (nvidia-ml-py), for what a recording says it was read with."""
    try:
        return importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _memory_totals(nvml: Any, handle: Any) -> tuple[int, int]:
    """(total, reserved): memory info v2, else v1 (whose ``used`` then includes the reserve)."""
    try:
        mem2 = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
        return int(mem2.total), int(mem2.reserved)
    except Exception:
        try:
            mem1 = nvml.nvmlDeviceGetMemoryInfo(handle)
        except Exception as exc:
            raise NoGpuError(
                f"NVML cannot read the memory of a GPU: {_text(exc)}", hint=_NO_GPU_HINT
            ) from None
        return int(mem1.total), 0
