"""The GPU inventory: what NVML reported about a host, as immutable data.

``hardware.probe()`` builds an :class:`Inventory` from NVML; ``glmlaunch hw --save FILE`` writes it as
JSON and ``--inventory FILE`` loads it back, so every check can be replayed without a GPU. This module
never imports pynvml.

Conventions:

- ``Gpu.index`` is the physical index in PCI bus order (what ``parallel.gpus`` and
  ``CUDA_VISIBLE_DEVICES`` integers mean once ``CUDA_DEVICE_ORDER=PCI_BUS_ID``); ``Inventory.gpus`` is
  in CUDA order, i.e. the order ``CUDA_VISIBLE_DEVICES`` listed them.
- Every field NVML could not read is ``None`` and has a matching :class:`ProbeError`; "not supported"
  is recorded the same way, so a reader can tell "absent" from "zero".
- ``provenance`` says whether a file is a real capture, was constructed from public facts, or is an
  edited copy of another inventory (``derived_from`` names it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from glmlaunch.config.limits import MAX_INVENTORY_BYTES
from glmlaunch.config.safeload import decode_utf8, load_json, read_file, short
from glmlaunch.errors import ConfigError
from glmlaunch.files import write_text

SCHEMA_VERSION = 1

Provenance = Literal["captured", "constructed", "edited"]

#: NVML's topology common ancestor of two GPUs, nearest first (nvmlGpuTopologyLevel_t).
TopologyLevel = Literal["internal", "single", "multiple", "hostbridge", "node", "system"]

#: The labels ``nvidia-smi topo -m`` prints for each level.
TOPOLOGY_LABELS: dict[str, str] = {
    "internal": "SAME",
    "single": "PIX",
    "multiple": "PXB",
    "hostbridge": "PHB",
    "node": "NODE",
    "system": "SYS",
}

#: nvmlGpuP2PStatus_t.
P2PState = Literal[
    "ok",
    "chipset_not_supported",
    "gpu_not_supported",
    "topology_not_supported",
    "disabled_by_regkey",
    "not_supported",
    "unknown",
]


#: FP32 CUDA cores per SM by compute capability (CUDA programming guide, "Arithmetic instructions").
CORES_PER_SM: dict[str, int] = {
    "7.0": 64,
    "7.5": 64,
    "8.0": 64,
    "8.6": 128,
    "8.7": 128,
    "8.9": 128,
    "9.0": 128,
    "10.0": 128,
    "10.3": 128,
    "12.0": 128,
    "12.1": 128,
}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class ProbeError(_Frozen):
    """One NVML query that failed: which field, and NVML's own words."""

    field: str = Field(..., description="the inventory field NVML could not read")
    error: str = Field(..., description="NVML's own error text (e.g. Not Supported)")


class GpuProcess(_Frozen):
    pid: int = Field(..., description="process id on the host")
    name: str | None = Field(None, description="process name as NVML reports it")
    used_bytes: int | None = Field(None, description="None when NVML cannot attribute memory to the process")
    kind: Literal["compute", "graphics"] = Field("compute", description="NVML's process list it came from")


class PcieLink(_Frozen):
    current_generation: int | None = Field(None, description="PCIe generation the link runs at now")
    max_generation: int | None = Field(None, description="the most this GPU can train to in this slot")
    gpu_max_generation: int | None = Field(None, description="the most the GPU itself supports")
    current_width: int | None = Field(None, description="lanes the link runs at now")
    max_width: int | None = Field(None, description="the most lanes the link can train to")


class Gpu(_Frozen):
    index: int = Field(..., ge=0, description="physical index in PCI bus order")
    nvml_index: int = Field(..., ge=0, description="NVML's device index (may differ from index)")
    name: str | None = Field(
        None, description="product name, e.g. NVIDIA RTX PRO 6000 Blackwell Server Edition"
    )
    uuid: str | None = Field(None, description="GPU UUID")
    pci_bus_id: str | None = Field(None, description="PCI bus id, domain:bus:device.function")
    memory_total: int | None = Field(None, ge=0, description="NVML total (includes the driver-reserved part)")
    memory_reserved: int | None = Field(None, ge=0, description="reserved by the driver, never allocatable")
    memory_free: int | None = Field(None, ge=0, description="bytes free when the inventory was taken")
    memory_used: int | None = Field(None, ge=0, description="used by processes (reserved excluded)")
    compute_capability: str | None = Field(
        None, pattern=r"^[0-9]+\.[0-9]+$", description="major.minor, e.g. 12.0"
    )
    multiprocessor_count: int | None = Field(
        None, description="SMs as NVML reports them (often only under MIG)"
    )
    cuda_cores: int | None = Field(None, description="FP32 CUDA cores")
    pcie: PcieLink = Field(PcieLink(), description="the PCIe link: generation and width, now and at most")
    bar1_total: int | None = Field(None, description="BAR1 aperture in bytes (peer mappings go through it)")
    numa_node: int | None = Field(None, description="NUMA node of the GPU's PCIe root")
    cpu_affinity: str | None = Field(None, description="CPU list in taskset form, e.g. 0-15,32-47")
    performance_state: int | None = Field(None, description="P-state: 0 is full performance, 8 idle")
    persistence_mode: bool | None = Field(None, description="driver persistence mode")
    mig_enabled: bool | None = Field(None, description="MIG mode (glmlaunch needs it off)")
    nvlink_active: int | None = Field(None, description="active NVLink links; None when the GPU has none")
    processes: tuple[GpuProcess, ...] = Field((), description="processes holding memory on this GPU")
    errors: tuple[ProbeError, ...] = Field((), description="fields NVML could not read for this GPU")

    @property
    def label(self) -> str:
        return f"GPU {self.index}"

    @property
    def usable_total(self) -> int | None:
        """Memory a process can ever allocate: NVML total minus the driver's reserve."""
        if self.memory_total is None:
            return None
        return self.memory_total - (self.memory_reserved or 0)

    @property
    def sm_count(self) -> int | None:
        """Multiprocessors: NVML's attribute (often MIG-only), else CUDA cores / cores per SM.

        On the captured H200s NVML answers "Not Supported" for the attribute, and 16,896 cores / 128 gives
        the 132 SMs CUDA reports.
        """
        if self.multiprocessor_count is not None:
            return self.multiprocessor_count
        per_sm = CORES_PER_SM.get(self.compute_capability or "")
        if self.cuda_cores is None or per_sm is None or self.cuda_cores % per_sm:
            return None
        return self.cuda_cores // per_sm

    @property
    def readable(self) -> bool:
        """False when NVML could not even identify the device (no name, no UUID, no memory)."""
        return self.name is not None and self.uuid is not None and self.memory_total is not None

    def error_for(self, field: str) -> str | None:
        for e in self.errors:
            if e.field == field:
                return e.error
        return None


class P2PCaps(_Frozen):
    """NVML's peer-to-peer answer for one direction (src -> dst). A driver claim, not a data-path test."""

    read: P2PState | None = Field(None, description="P2P read capability")
    write: P2PState | None = Field(None, description="P2P write capability")
    atomics: P2PState | None = Field(None, description="P2P atomics capability")
    nvlink: P2PState | None = Field(None, description="P2P over NVLink")
    pci: P2PState | None = Field(None, description="P2P over PCIe")


class GpuPair(_Frozen):
    """Two GPUs (physical indices, a < b): their topology and the P2P answer in both directions."""

    a: int = Field(..., description="the lower physical index")
    b: int = Field(..., description="the higher physical index")
    topology: TopologyLevel | None = Field(
        None, description="nearest common ancestor (nvidia-smi topo -m level)"
    )
    forward: P2PCaps = Field(P2PCaps(), description="P2P capabilities from a to b")
    reverse: P2PCaps = Field(P2PCaps(), description="P2P capabilities from b to a")
    errors: tuple[ProbeError, ...] = Field((), description="topology or P2P queries that failed")

    @property
    def topology_label(self) -> str:
        return TOPOLOGY_LABELS[self.topology] if self.topology is not None else "?"


class Inventory(_Frozen):
    schema_version: Literal[1] = Field(1, description="version of this document's format")
    provenance: Provenance = Field(
        ..., description="captured from NVML, constructed from public facts, or edited"
    )
    captured_at: AwareDatetime = Field(..., description="when the inventory was taken (with time zone)")
    host: str = Field(..., description="host name")
    source: str = Field(..., description="who produced the file (tool and NVML binding versions)")
    notes: str = Field("", description="free text: what the capture shows, how an edited copy differs")
    derived_from: str | None = Field(None, description="for edited copies: the inventory it was edited from")
    driver_version: str | None = Field(None, description="NVIDIA driver version")
    cuda_driver_version: str | None = Field(None, description="CUDA version the driver supports, e.g. 13.0")
    nvml_version: str | None = Field(None, description="NVML library version")
    cuda_visible_devices: str | None = Field(None, description="the CUDA_VISIBLE_DEVICES value honoured")
    host_gpu_count: int = Field(..., ge=0, description="GPUs NVML sees before CUDA_VISIBLE_DEVICES")
    gpus: tuple[Gpu, ...] = Field(..., description="visible GPUs in CUDA order")
    pairs: tuple[GpuPair, ...] = Field((), description="every pair of visible GPUs: topology and P2P")
    errors: tuple[ProbeError, ...] = Field((), description="host-level NVML queries that failed")

    def gpu(self, index: int) -> Gpu | None:
        for g in self.gpus:
            if g.index == index:
                return g
        return None

    def pair(self, a: int, b: int) -> GpuPair | None:
        lo, hi = min(a, b), max(a, b)
        for p in self.pairs:
            if p.a == lo and p.b == hi:
                return p
        return None

    def pairs_within(self, indices: Iterable[int]) -> tuple[GpuPair, ...]:
        wanted = set(indices)
        return tuple(p for p in self.pairs if p.a in wanted and p.b in wanted)

    @property
    def visible_indices(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.gpus)

    def describe(self) -> str:
        """One line naming where this inventory came from."""
        when = self.captured_at.strftime("%Y-%m-%d %H:%M UTC")
        text = f"{self.provenance} inventory of {self.host} ({when}, {len(self.gpus)} GPU"
        text += "s)" if len(self.gpus) != 1 else ")"
        if self.derived_from:
            text += f", edited from {self.derived_from}"
        return text


def inventory_json(inv: Inventory) -> str:
    return inv.model_dump_json(indent=2) + "\n"


def save_inventory(inv: Inventory, path: str | os.PathLike[str]) -> Path:
    """Write ``inv`` as JSON atomically (``files.write_text``): only to a regular file or a new path."""
    return write_text(path, inventory_json(inv), key="--save", make_parents=True)


def parse_inventory(text: str, *, source: str = "<inventory>") -> Inventory:
    try:
        data = load_json(text, key="--inventory", value=short(source, 200), what="inventory")
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"not a JSON inventory ({exc.msg} at line {exc.lineno})",
            key="--inventory",
            source=source,
            hint="write one with `glmlaunch hw --save FILE` on the GPU host",
        ) from None
    if isinstance(data, dict) and data.get("schema_version") not in (None, SCHEMA_VERSION):
        raise ConfigError(
            f"inventory schema version {short(repr(data.get('schema_version')), 40)} is not supported "
            f"(this glmlaunch reads version {SCHEMA_VERSION})",
            key="--inventory",
            source=source,
        )
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<root>"
        more = len(exc.errors()) - 1
        message = f"invalid inventory: {where}: {first['msg']}"
        if more:
            message += f" (and {more} more)"
        raise ConfigError(message, key="--inventory", source=source) from None


def load_inventory(path: str | os.PathLike[str]) -> Inventory:
    """Read an inventory file: a regular UTF-8 JSON file within the limits of ``config.limits``."""
    p = Path(path)
    raw = read_file(p, limit=MAX_INVENTORY_BYTES, key="--inventory", what="inventory file")
    text = decode_utf8(raw, key="--inventory", value=short(p, 200), what="inventory file")
    return parse_inventory(text, source=str(p))


def cpu_list(cpus: Sequence[int]) -> str:
    """Compress sorted CPU ids into taskset form: [0,1,2,3,8] -> '0-3,8'."""
    parts: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def now_utc() -> datetime:
    from datetime import UTC

    return datetime.now(UTC)


def inventory_schema() -> dict[str, object]:
    """The JSON Schema (draft 2020-12) of ``hw --json`` / ``hw --save`` documents, from the model.

    ``docs/schemas/hw.schema.json`` is this, written by ``python -m glmlaunch.hardware.inventory``;
    tests/hardware/test_inventory_schema.py fails when the file and the model drift apart.
    """
    schema: dict[str, object] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://glmlaunch.invalid/schemas/hw.schema.json",
        "title": "glmlaunch hw --json",
    }
    schema.update(Inventory.model_json_schema(mode="serialization"))
    schema["title"] = "glmlaunch hw --json"
    schema["description"] = (
        "The GPU inventory NVML reported (what `hw --save` writes and `--inventory FILE` reads back); every "
        "field NVML could not read is null with a matching entry in `errors`."
    )
    return schema


if __name__ == "__main__":
    import sys

    sys.stdout.write(json.dumps(inventory_schema(), indent=2) + "\n")
