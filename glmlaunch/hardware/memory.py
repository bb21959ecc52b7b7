"""Live device memory, sampled: what ``glmlaunch watch`` reads many times a second.

A :class:`MemorySource` names the GPUs once (:attr:`MemorySource.devices`, in PCI bus order, each with its
UUID) and then answers :meth:`MemorySource.read` with one :class:`MemorySample`: per device, NVML's used
and free memory and the processes holding memory on it. Two implementations stand behind the interface:

* :class:`glmlaunch.hardware.probe.NvmlMemorySource`, live NVML (the only one that imports pynvml);
* :class:`glmlaunch.watch.trace.TracePlayer`, a trace that ``glmlaunch watch --record`` wrote on a GPU
  machine, replayed sample by sample (the tests' and ``watch --replay``'s source).

NVML reads memory info v2 where the driver has it: ``used`` then excludes the driver's reserve, so
``used + free`` is the usable total ``T`` the plan budgets (``cudaMemGetInfo``'s total, to the byte on
the captured H200s: tests/fixtures/inventories/README.md). A process list NVML cannot read (another
container's processes, a driver without the query) is ``None``, never an empty tuple: "no process" and
"cannot see the processes" are different facts for the foreign-process state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Device:
    """One GPU as the source names it: its PCI-order index, NVML's index, UUID, bus id, name, total."""

    index: int  # position in PCI bus order: what CUDA_VISIBLE_DEVICES integers mean (PCI_BUS_ID order)
    nvml_index: int  # NVML's own index (DCGM's ``gpu`` label)
    uuid: str
    pci_bus_id: str | None
    name: str | None
    total_bytes: int  # NVML total, the driver's reserve included
    reserved_bytes: int  # the driver's reserve (0 where memory info v2 is not available)

    @property
    def usable_bytes(self) -> int:
        return self.total_bytes - self.reserved_bytes


@dataclass(frozen=True, slots=True)
class Holder:
    """A process NVML lists on a device, with the memory it holds (None: NVML does not say)."""

    pid: int
    used_bytes: int | None


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """One device at one instant."""

    used_bytes: int
    free_bytes: int
    #: None when NVML cannot list the processes (then no foreign process can be seen)
    holders: tuple[Holder, ...] | None


@dataclass(frozen=True, slots=True)
class MemorySample:
    """All devices at one instant; ``t`` in seconds on the source's own clock (monotonic, or a trace's)."""

    t: float
    devices: tuple[DeviceMemory, ...]  # in the order of MemorySource.devices


class MemorySource(Protocol):
    """What the watch samples: a live NVML session or a recorded trace."""

    @property
    def devices(self) -> tuple[Device, ...]: ...

    def read(self) -> MemorySample | None:
        """The next sample; None when the source has no more (a trace's end)."""
        ...

    def close(self) -> None: ...
