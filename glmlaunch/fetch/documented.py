"""The download size a checkpoint's revision is documented to have (``download_sizes.json``).

What a dry run states without the hub. The hub's file metadata always wins when it answers: these are
upstream's round figures, each row with its source.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

GIB = 1024**3
SIZES_FILE = "download_sizes.json"


@dataclass(frozen=True)
class DocumentedSize:
    repository: str
    revision: str
    gib: float
    source: str

    @property
    def bytes(self) -> int:
        return round(self.gib * GIB)


@lru_cache(maxsize=1)
def documented_sizes() -> tuple[DocumentedSize, ...]:
    text = resources.files("glmlaunch.fetch").joinpath(SIZES_FILE).read_text(encoding="utf-8")
    rows = json.loads(text)["sizes"]
    return tuple(DocumentedSize(str(r[0]), str(r[1]), float(r[2]), str(r[3])) for r in rows)


def documented_size(repository: str | None, revision: str | None) -> DocumentedSize | None:
    """The documented size of exactly this repository and revision (another revision may differ)."""
    for row in documented_sizes():
        if row.repository == repository and row.revision == revision:
            return row
    return None
