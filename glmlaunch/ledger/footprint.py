"""Device footprint of requested bytes: cudaMalloc pages and torch caching-allocator segments.

The rules are the measured driver and allocator facts of docs/memory-model.md §1 (H200, driver 580,
torch 2.11):

* ``cudaMalloc`` commits whole 2 MiB pages; small IPC slabs are sub-allocated inside a 2 MiB chunk the
  driver already committed (the first small cudaMalloc costs a page, later ones often cost nothing).
* torch, default allocator: requests <= 1 MiB share 2 MiB small-pool segments; requests in (1 MiB, 10 MiB)
  are carved out of 20 MiB segments (two 8 MiB ``rank_data`` share one); larger requests get their own
  segment rounded up to 2 MiB.
* torch with ``expandable_segments:True``: the large pool is one segment that grows in 20 MiB steps.
* torch keeps its pools **per stream**: a block cached for one stream is never handed to an allocation on
  another. vLLM's ``graph_capture`` makes a fresh stream current before it enters the pools' capture
  contexts, so each capture pass packs only with itself: its first small allocation (the IPC-handle
  exchange) opens a 2 MiB small segment and its 8 MiB ``rank_data`` a whole 20 MiB segment. Measured with
  the real r12 library on 2x H200 (bench/preflight/h200x2-gate-sparkinfer-warm.json): 22 MiB of torch
  reserve per pass, 32 MiB with its slabs; a replay on one stream packed two passes into one segment
  instead (docs/memory-model.md §1). The driver's cudaMalloc sub-allocation is per device, not per stream.

Allocations are packed in creation order (the ledger's lifetime order), so a later allocation that fits
in space an earlier one left on the same stream (or, for cudaMalloc, anywhere on the device) costs
nothing. The result is a model; the preflight measures the truth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
class StreamPools:
    """Free space in the torch segments cached for one stream."""

    small_free: int = 0
    mid_free: int = 0
    expandable_free: int = 0


#: the stream name of allocations made on the default (current eager) stream
DEFAULT_STREAM = ""


@dataclass(slots=True)
class Packer:
    """Free space left in already committed pages/segments on one rank."""

    expandable: bool
    ipc_small_free: int = 0
    #: free small-pool space on the default stream when packing starts
    torch_small_free: int = 0
    streams: dict[str, StreamPools] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.streams.setdefault(DEFAULT_STREAM, StreamPools(small_free=self.torch_small_free))

    def ipc(self, request: int, count: int) -> int:
        """cudaMalloc of ``count`` slabs of ``request`` bytes (the driver packs across streams)."""
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

    def torch(self, request: int, count: int, stream: str = DEFAULT_STREAM) -> int:
        """Persistent torch allocations of ``count`` tensors of ``request`` bytes.

        ``stream``: ``DEFAULT_STREAM`` puts every instance on the default stream; any other name is a
        family of fresh streams, instance ``i`` on stream ``name#i`` (one capture pass each), so two
        entries of the same family and index share that pass's segments.
        """
        if request <= 0 or count <= 0:
            return 0
        block = align(request, TORCH_BLOCK)
        cost = 0
        for i in range(count):
            key = stream if stream == DEFAULT_STREAM else f"{stream}#{i}"
            pools = self.streams.get(key)
            if pools is None:
                pools = self.streams[key] = StreamPools()
            cost += self._torch_one(block, pools)
        return cost

    def _torch_one(self, block: int, pools: StreamPools) -> int:
        if block <= SMALL_REQUEST_MAX:
            if block <= pools.small_free:
                pools.small_free -= block
                return 0
            pools.small_free = SMALL_SEGMENT - block
            return SMALL_SEGMENT
        if self.expandable:
            if block <= pools.expandable_free:
                pools.expandable_free -= block
                return 0
            grow = align(block - pools.expandable_free, EXPANDABLE_STEP)
            pools.expandable_free += grow - block
            return grow
        if block < MID_REQUEST_MAX:
            if block <= pools.mid_free:
                pools.mid_free -= block
                return 0
            pools.mid_free = MID_SEGMENT - block
            return MID_SEGMENT
        return align(block, LARGE_ROUND)


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
