"""Device footprint of requested bytes: cudaMalloc pages and torch caching-allocator segments.

The rules are the measured driver and allocator facts of memory-model.md §1 (H200, driver 580, torch 2.11):

* ``cudaMalloc`` commits whole 2 MiB pages; small IPC slabs are sub-allocated inside a 2 MiB chunk the
  driver already committed (the first small cudaMalloc costs a page, later ones often cost nothing).
* torch, default allocator: requests <= 1 MiB share 2 MiB small-pool segments; requests in (1 MiB, 10 MiB)
  are carved out of 20 MiB segments (two 8 MiB ``rank_data`` share one); larger requests get their own
  segment rounded up to 2 MiB.
* torch with ``expandable_segments:True``: the large pool is one segment that grows in 20 MiB steps.

Allocations are packed in creation order (the ledger's lifetime order), so a later allocation that fits
in space an earlier one left costs nothing. The result is a model; the preflight measures the truth.
"""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024
MIB = 1024 * 1024

PAGE = 2 * MIB
SMALL_REQUEST_MAX = 1 * MIB
SMALL_SEGMENT = 2 * MIB
MID_REQUEST_MAX = 10 * MIB
MID_SEGMENT = 20 * MIB
LARGE_ROUND = 2 * MIB
EXPANDABLE_STEP = 20 * MIB
TORCH_BLOCK = 512


def align(x: int, a: int) -> int:
    return -(-x // a) * a


@dataclass(slots=True)
class Packer:
    """Free space left in already committed pages/segments on one rank."""

    expandable: bool
    ipc_small_free: int = 0
    torch_small_free: int = 0
    torch_mid_free: int = 0
    torch_expandable_free: int = 0

    def ipc(self, request: int, count: int) -> int:
        """cudaMalloc of ``count`` slabs of ``request`` bytes."""
        if request <= 0 or count <= 0:
            return 0
        if request >= PAGE:
            return count * align(request, PAGE)
        cost = 0
        for _ in range(count):
            if request <= self.ipc_small_free:
                self.ipc_small_free -= request
            else:
                pages = align(request, PAGE)
                cost += pages
                self.ipc_small_free = pages - request
        return cost

    def torch(self, request: int, count: int) -> int:
        """Persistent torch allocations of ``count`` tensors of ``request`` bytes."""
        if request <= 0 or count <= 0:
            return 0
        block = align(request, TORCH_BLOCK)
        cost = 0
        for _ in range(count):
            if block <= SMALL_REQUEST_MAX:
                if block <= self.torch_small_free:
                    self.torch_small_free -= block
                else:
                    cost += SMALL_SEGMENT
                    self.torch_small_free = SMALL_SEGMENT - block
            elif self.expandable:
                if block <= self.torch_expandable_free:
                    self.torch_expandable_free -= block
                else:
                    grow = align(block - self.torch_expandable_free, EXPANDABLE_STEP)
                    cost += grow
                    self.torch_expandable_free += grow - block
            elif block < MID_REQUEST_MAX:
                if block <= self.torch_mid_free:
                    self.torch_mid_free -= block
                else:
                    cost += MID_SEGMENT
                    self.torch_mid_free = MID_SEGMENT - block
            else:
                cost += align(block, LARGE_ROUND)
        return cost


def transient_peak(pieces: tuple[int, ...], *, expandable: bool) -> int:
    """Peak device growth of tensors allocated together and freed at the end of one call.

    Small pieces are assumed to fit in small-pool segments already open; large ones need fresh segments.
    """
    large = [align(p, TORCH_BLOCK) for p in pieces if p > SMALL_REQUEST_MAX]
    if not large:
        return 0
    if expandable:
        return align(sum(large), EXPANDABLE_STEP)
    total = 0
    for block in large:
        total += MID_SEGMENT if block < MID_REQUEST_MAX else align(block, LARGE_ROUND)
    return total


def torch_single(request: int, *, expandable: bool) -> int:
    """Footprint of one torch allocation made on a fresh allocator (the facts of §1 in isolation)."""
    return Packer(expandable=expandable).torch(request, 1)
