"""LMCache's GPU buffers (``lmcache``): allocated by the connector after vLLM sized the KV pool.

vLLM's budget never sees them, so they come out of the margin (X). The appliance measured them on the
same boot with and without LMCache (docs/glm52-3.25-offload-qualification.md: idle free VRAM 3,466 MiB
with native offload, 2,633-2,637 MiB with LMCache, 2,637 MiB with its NVMe tier): the difference is the
term ``lmcache_gpu_bytes`` (demand/facts.json), measured at TP4/DCP4 and charged as measured elsewhere.
"""

from __future__ import annotations

from glmlaunch.ledger.context import Context, Draft, fmt_int
from glmlaunch.ledger.demand.facts import term


def entries(ctx: Context) -> list[Draft]:
    if not ctx.config.lmcache:
        return []
    t = term("lmcache_gpu_bytes")
    return [
        Draft(
            name="lmcache.gpu_buffers",
            subsystem="lmcache",
            requested_bytes=t.bytes,
            count=1,
            kind="torch",
            lifetime="unbudgeted",
            condition="lmcache on (the LMCache multiprocess connector)",
            reader="LMCache connector: GPU staging of KV chunks to and from host DRAM / NVMe",
            formula=f"lmcache_gpu_bytes = {fmt_int(t.bytes)}  [measured: {t.cite()}]",
            origin="calibrated",
            alloc="fixed",
            note="allocated after vLLM sized its KV pool: outside the budget, out of the margin",
        )
    ]
