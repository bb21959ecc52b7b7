"""Write the constructed and edited inventory fixtures under tests/fixtures/inventories/.

The target rig (4x RTX PRO 6000 Blackwell Server Edition on PCIe) is not available to capture, so
``rtxpro6000x4.json`` is constructed from public facts and marked ``provenance: constructed``; its
``notes`` say which value comes from where and which are assumptions. Every failure case is an edited
copy of it (``provenance: edited``, ``derived_from``), changing exactly one thing.

    python scripts/make_inventory_fixtures.py            # rewrite the files
    python scripts/make_inventory_fixtures.py --check    # exit 1 if a committed file differs

The output is deterministic (fixed dates), so a test can regenerate and compare.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from glmlaunch.config.units import GIB, MIB
from glmlaunch.hardware.inventory import (
    Gpu,
    GpuPair,
    GpuProcess,
    Inventory,
    P2PCaps,
    PcieLink,
    ProbeError,
    inventory_json,
)

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "inventories"
BASE_NAME = "rtxpro6000x4.json"

# Usable memory as cudaMemGetInfo reports it on this card (vLLM's T), a whole MiB as CUDA totals are. The
# real rig's boot logs print it as 95.01 GiB, and each "Free memory on device (F0/T GiB)" line's two
# --kv-cache-memory-bytes figures differ by F0 - ceil(GMU*T), which bounds T to 97,285.1-97,290.6 MiB
# (tests/fixtures/boot-logs/vllm-current210-cap1024-mtp0-v1-server.log:977 sets the upper end;
# tests/ledger/test_device_total.py checks it). No log pins the byte, so this value is chosen within the
# bound, and profiles/r12-exl3.yaml states the same bytes (hardware.memory_per_gpu: 97290MiB) so that
# plan and check agree on this rig.
USABLE = 97_290 * MIB
# NVML's total as nvidia-smi prints it for the 96 GB card (97,887 MiB); the driver reserve is the rest.
# On the captured H200s NVML total - reserved equals cudaMemGetInfo's total to the byte.
NVML_TOTAL = 97_887 * MIB

P2P_PCIE = P2PCaps(read="ok", write="ok", atomics="ok", nvlink="not_supported", pci="ok")

NOTES = (
    "constructed from public facts, not captured: name, sm120, 188 SMs (24,064 CUDA cores), 96 GB GDDR7, "
    "PCIe Gen5 x16 (NVIDIA product specifications); usable memory 97,290 MiB (the vLLM boot logs' "
    "95.01 GiB bounds it to 97,286-97,290 whole MiB; profiles/r12-exl3.yaml states the same T); NVML total "
    "97,887 MiB (nvidia-smi's figure for this card, reserve = difference). "
    "Assumed: driver 590.48.01 / CUDA 13.2 (the turnkey's minimum), one CPU socket with all four GPUs under "
    "separate root ports (NODE), P2P over PCIe allowed, BAR1 128 GiB (large BAR on), idle-free GPUs, "
    "UUIDs and PCI addresses made up."
)


def base() -> Inventory:
    buses = ("00000000:01:00.0", "00000000:21:00.0", "00000000:41:00.0", "00000000:61:00.0")
    gpus = tuple(
        Gpu(
            index=i,
            nvml_index=i,
            name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            uuid=f"GPU-c0de0000-0000-4000-8000-00000000000{i}",
            pci_bus_id=bus,
            memory_total=NVML_TOTAL,
            memory_reserved=NVML_TOTAL - USABLE,
            memory_free=USABLE,
            memory_used=0,
            compute_capability="12.0",
            multiprocessor_count=None,
            cuda_cores=24_064,
            pcie=PcieLink(
                current_generation=5, max_generation=5, gpu_max_generation=5, current_width=16, max_width=16
            ),
            bar1_total=128 * GIB,
            numa_node=0,
            cpu_affinity="0-63",
            performance_state=0,
            persistence_mode=True,
            mig_enabled=False,
            nvlink_active=None,
            errors=(ProbeError(field="multiprocessor_count", error="Not Supported"),),
        )
        for i, bus in enumerate(buses)
    )
    pairs = tuple(
        GpuPair(a=a, b=b, topology="node", forward=P2P_PCIE, reverse=P2P_PCIE)
        for a in range(4)
        for b in range(a + 1, 4)
    )
    return Inventory(
        provenance="constructed",
        captured_at=datetime(2026, 11, 30, tzinfo=UTC),
        host="rtxpro6000x4-constructed",
        source="scripts/make_inventory_fixtures.py",
        notes=NOTES,
        driver_version="590.48.01",
        cuda_driver_version="13.2",
        nvml_version="13.590.48.01",
        host_gpu_count=4,
        gpus=gpus,
        pairs=pairs,
    )


def _edit(inv: Inventory, note: str, **update: object) -> Inventory:
    return inv.model_copy(update={"provenance": "edited", "derived_from": BASE_NAME, "notes": note, **update})


def _gpu(inv: Inventory, index: int, **update: object) -> tuple[Gpu, ...]:
    return tuple(g.model_copy(update=update) if g.index == index else g for g in inv.gpus)


def _pair(inv: Inventory, a: int, b: int, **update: object) -> tuple[GpuPair, ...]:
    return tuple(p.model_copy(update=update) if (p.a, p.b) == (a, b) else p for p in inv.pairs)


def missing_gpu(inv: Inventory) -> Inventory:
    return _edit(
        inv,
        "GPU 3 is gone (fell off the bus): NVML counts 3 devices",
        host_gpu_count=3,
        gpus=inv.gpus[:3],
        pairs=tuple(p for p in inv.pairs if p.b != 3),
    )


def gen3_x8(inv: Inventory) -> Inventory:
    link = PcieLink(
        current_generation=3, max_generation=5, gpu_max_generation=5, current_width=8, max_width=16
    )
    return _edit(
        inv, "GPU 2 trained at Gen3 x8 under load (P0) in a Gen5 x16 slot", gpus=_gpu(inv, 2, pcie=link)
    )


def cotenant_40g(inv: Inventory) -> Inventory:
    held = 40 * GIB + 512 * MIB  # 40 GiB of tensors plus a CUDA context, as measured on the H200 capture
    proc = GpuProcess(pid=48211, name="python3", used_bytes=held, kind="compute")
    return _edit(
        inv,
        "another user's python3 holds 40 GiB (+ its context) on GPU 1",
        gpus=_gpu(inv, 1, processes=(proc,), memory_used=held, memory_free=USABLE - held),
    )


def no_p2p(inv: Inventory) -> Inventory:
    none = P2PCaps(
        read="topology_not_supported",
        write="topology_not_supported",
        atomics="topology_not_supported",
        nvlink="not_supported",
        pci="topology_not_supported",
    )
    return _edit(
        inv,
        "the driver reports no P2P between GPU 0 and GPU 3",
        pairs=_pair(inv, 0, 3, forward=none, reverse=none),
    )


def old_driver(inv: Inventory) -> Inventory:
    return _edit(
        inv,
        "driver 575.57.08 with CUDA 12.9, older than the turnkey's 590.48.01 / 13.2",
        driver_version="575.57.08",
        cuda_driver_version="12.9",
        nvml_version="12.575.57.08",
    )


def cuda133(inv: Inventory) -> Inventory:
    # The rig the Infernal Invocation profile describes: its image is CUDA 13.3 (blackwell-llm-docker@3dd078a
    # README L229-233), so its profile asks a driver that reports CUDA 13.3 (hardware.min_cuda). The data
    # names no driver branch for it, so the driver's own version is left unknown rather than made up.
    return _edit(
        inv,
        "a driver that reports CUDA 13.3 (the Infernal Invocation cu133 image's rig); its version number is "
        "not in the data, so driver_version and nvml_version are unknown",
        driver_version=None,
        cuda_driver_version="13.3",
        nvml_version=None,
    )


def sys_topology(inv: Inventory) -> Inventory:
    node = {0: 0, 1: 0, 2: 1, 3: 1}
    gpus = tuple(
        g.model_copy(
            update={"numa_node": node[g.index], "cpu_affinity": "0-31" if node[g.index] == 0 else "32-63"}
        )
        for g in inv.gpus
    )
    pairs = tuple(
        p.model_copy(update={"topology": "system" if node[p.a] != node[p.b] else "node"}) for p in inv.pairs
    )
    return _edit(
        inv,
        "two CPU sockets: GPUs 0-1 on node 0, GPUs 2-3 on node 1 (SYS between them)",
        gpus=gpus,
        pairs=pairs,
    )


def small_bar1(inv: Inventory) -> Inventory:
    gpus = tuple(g.model_copy(update={"bar1_total": 256 * MIB}) for g in inv.gpus)
    return _edit(inv, "Resizable BAR off in the BIOS: 256 MiB BAR1 on every GPU", gpus=gpus)


def nvml_error(inv: Inventory) -> Inventory:
    lost = Gpu(
        index=3,
        nvml_index=3,
        errors=(ProbeError(field="device", error="GPU is lost"),),
    )
    gpus = (*inv.gpus[:3], lost)
    # hardware.probe gets no NVML handle for a lost GPU, so it records no pair with it either.
    pairs = tuple(p for p in inv.pairs if p.b != 3)
    return _edit(
        inv,
        "NVML answers 'GPU is lost' for GPU 3 (Xid 79); the other three read normally",
        gpus=gpus,
        pairs=pairs,
    )


EDITS: dict[str, Callable[[Inventory], Inventory]] = {
    "rtxpro6000x4-missing-gpu.json": missing_gpu,
    "rtxpro6000x4-gen3-x8.json": gen3_x8,
    "rtxpro6000x4-cotenant-40g.json": cotenant_40g,
    "rtxpro6000x4-no-p2p.json": no_p2p,
    "rtxpro6000x4-old-driver.json": old_driver,
    "rtxpro6000x4-cuda133.json": cuda133,
    "rtxpro6000x4-sys-topology.json": sys_topology,
    "rtxpro6000x4-small-bar1.json": small_bar1,
    "rtxpro6000x4-nvml-error.json": nvml_error,
}


def documents() -> dict[str, str]:
    root = base()
    docs = {BASE_NAME: inventory_json(root)}
    for name, fn in EDITS.items():
        docs[name] = inventory_json(Inventory.model_validate(fn(root).model_dump()))
    return docs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    stale: list[str] = []
    for name, text in documents().items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print("stale fixtures (run scripts/make_inventory_fixtures.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
