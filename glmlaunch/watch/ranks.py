"""Which GPU each rank runs on, by UUID.

vLLM's rank r runs on the r-th device its ``CUDA_VISIBLE_DEVICES`` lists (``CUDA_DEVICE_ORDER=PCI_BUS_ID``,
which glmlaunch always sets: integers are positions in PCI bus order), so a deployment that reorders
them (``CUDA_VISIBLE_DEVICES=2,1,0,3``) puts rank 0 on the third GPU of the bus. The watcher sees every
GPU NVML sees, in PCI bus order, and applies the *deployment's* list to them exactly as CUDA does
(:func:`glmlaunch.hardware.probe.select_visible`: integers, UUIDs or unique UUID prefixes); from then on
a rank is its GPU's UUID, whatever index NVML, DCGM or another container gives that GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from glmlaunch.config.registry import CUDA_VISIBLE_DEVICES
from glmlaunch.errors import ConfigError
from glmlaunch.hardware.memory import Device
from glmlaunch.hardware.probe import select_visible


@dataclass(frozen=True, slots=True)
class RankGpu:
    """Rank ``rank`` runs on ``device``, which is ``position`` in the source's device list."""

    rank: int
    device: Device
    position: int


def map_ranks(
    devices: Sequence[Device], visible: str | None, tp: int, *, key: str = "--gpus"
) -> tuple[RankGpu, ...]:
    """The first ``tp`` GPUs of the deployment's ``visible`` list (None: every GPU, in PCI order)."""
    ordered = sorted(range(len(devices)), key=lambda i: devices[i].index)
    selection = select_visible(visible, [devices[i].uuid for i in ordered])
    chosen = [ordered[i] for i in selection.indices]
    if len(chosen) < tp:
        detail = f" ({selection.problem})" if selection.problem else ""
        raise ConfigError(
            f"the deployment's {CUDA_VISIBLE_DEVICES} leaves {len(chosen)} of the {len(devices)} GPU(s) NVML "
            f"sees, but the plan has {tp} rank(s){detail}",
            key=key,
            value=visible,
            hint="give the deployment's CUDA_VISIBLE_DEVICES with --gpus (indices in PCI order, or UUIDs)",
        )
    return tuple(RankGpu(rank=r, device=devices[pos], position=pos) for r, pos in enumerate(chosen[:tp]))
