"""The world sizes each library generation's communication pools are built for, read from each tree.

One table for both stages that need it: validation (``config.rules`` refuses a TP or DCP the pool does not
support) and the ledger (``ledger.constants`` rows size no pool there). The ledger's rows take these
values; ``tests/ledger/test_generations.py`` proves them equal to what each tree's own code says
(``SUPPORTED_WORLD_SIZES`` of ``pcie_oneshot`` and ``pcie_dcp_a2a``, file:line in the fixtures).
"""

from __future__ import annotations

from glmlaunch.config.releases import StackName

#: pcie_oneshot.py SUPPORTED_WORLD_SIZES
ONESHOT_WORLD_SIZES: dict[StackName, tuple[int, ...]] = {
    "sparkinfer-r14": (2, 4, 6, 8, 10),
    "sparkinfer-r28": (2, 4, 6, 8, 10),
    "b12x-r29": (2, 4, 6, 8, 10),
    "b12x-r32": (2, 4, 6, 8, 10),
    "b12x-ii": (2, 4, 6, 8, 10),
    "b12x-1.5": (2, 4, 6, 8, 10),
}
#: pcie_dcp_a2a.py SUPPORTED_WORLD_SIZES
DCP_A2A_WORLD_SIZES: dict[StackName, tuple[int, ...]] = {
    "sparkinfer-r14": (2, 4, 8),
    "sparkinfer-r28": (2, 4, 8),
    "b12x-r29": (2, 4, 8, 16),
    "b12x-r32": (2, 4, 8, 16),
    "b12x-ii": (2, 4, 8, 16),
    "b12x-1.5": (2, 4, 8, 9, 10, 12, 16),
}
