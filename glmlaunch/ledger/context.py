"""What every subsystem module receives, and the draft entry it returns (before device footprints)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger.constants import StackConstants
from glmlaunch.ledger.inputs import LedgerInputs
from glmlaunch.ledger.model import Kind, Lifetime, Origin

Alloc = Literal["ipc", "torch", "transient", "fixed", "absorbed"]


class LibraryLayouts(Protocol):
    """Layout functions taken from an installed library (see ``b12x_bridge``)."""

    name: str

    def oneshot_slab_bytes(self, *, eager_bytes: int, world_size: int, push: bool, shards: int) -> int: ...

    def dcp_a2a_slab_bytes(
        self, *, world_size: int, max_batch_size: int, total_heads: int, head_dim: int, query_head_dim: int
    ) -> int: ...

    def dcp_topk_slab_bytes(self, *, world_size: int, max_rows: int, topk: int) -> int: ...

    def indexer_plan_bytes(
        self,
        *,
        num_q_heads: int,
        max_q_rows: int,
        page_table_width: int,
        topk: int,
        mode: str,
        shared_page_table: bool,
        supertile_k: int,
        num_sms: int,
        fused: bool,
    ) -> tuple[int, str]: ...

    def fold_candidate_bytes(
        self,
        *,
        q_rows: int,
        topk: int,
        page_table_width: int,
        supertile_pages: int,
        output_physical_slots: bool,
        mode: str,
        budget_mib: int,
    ) -> tuple[int, int, str]: ...


class Draft(NamedTuple):
    name: str
    subsystem: str
    requested_bytes: int
    count: int  # type: ignore[assignment]  # shadows tuple.count on purpose: the field name is the contract
    kind: Kind
    lifetime: Lifetime
    condition: str
    reader: str
    formula: str
    origin: Origin
    alloc: Alloc
    note: str = ""
    pieces: tuple[int, ...] = ()
    #: torch stream family (footprint.Packer.torch): "" the default stream, else one fresh stream per instance
    stream: str = ""
    #: the entry stands for the residual of its budget term: what a term model fits over the itemized rest
    #: (its size comes from the calibration when one is given; Ledger.itemized leaves it out)
    residual: bool = False


@dataclass(frozen=True, slots=True)
class Context:
    config: DeploymentConfig
    k: StackConstants
    inputs: LedgerInputs
    lib: LibraryLayouts | None
    #: DeploymentConfig.capture_sizes(), computed once per build
    capture_sizes: tuple[int, ...]


def a256(x: int) -> int:
    return -(-x // 256) * 256


def align(x: int, a: int) -> int:
    return -(-x // a) * a


def fmt_int(n: int) -> str:
    return f"{n:,}"
