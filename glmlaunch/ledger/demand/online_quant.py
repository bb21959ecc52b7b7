"""Online quantization's prefill temporaries (``model.online_quant``: exl3-b6 = the r28 online K6, mxfp8).

The records name them when they fail: "48 MiB mixed-Trellis temporary" (3.42 natural pool, r28), "48 MiB
mixed-K temporary" (3.36 automatic pool, r20). The online-quantized layers run prefill chunks through
paths the profiled dummy batch does not reach at full size. Their sum is a fitted term,
``online_quant_bytes`` (facts.json), measured on exl3-b6 only: mxfp8 is charged the same as an estimate.
On the r34 and Infernal Invocation stacks with mixed-tier experts (:mod:`glmlaunch.ledger.r7`) none is
charged: their K6 temporary is sized from the code and profiled (``exl3.k6_scratch``).
"""

from __future__ import annotations

from glmlaunch.ledger import r7
from glmlaunch.ledger.context import Context, fmt_int
from glmlaunch.ledger.demand.entry import transient
from glmlaunch.ledger.demand.facts import term
from glmlaunch.ledger.model import Transient

FITTED_ON = "exl3-b6"


def transients(ctx: Context) -> list[Transient]:
    quant = ctx.config.model.online_quant
    if quant == "none":
        return []
    if quant == FITTED_ON and r7.applies(ctx.config):
        # r34 / ii B12X K6 runs one capped split-K temporary per call, reused across layers and charged
        # in P (exl3.k6_scratch, derived); the mixed-Trellis experts run preallocated arenas. The fitted
        # term stands for the SparkInfer-era paths whose 48 MiB temporaries the records name.
        return []
    t = term("online_quant_bytes")
    measured = quant == FITTED_ON
    return [
        transient(
            "demand.online_quant",
            t.bytes,
            phase="long-prefill",
            trigger=f"the first long prefill chunk through the online-quantized ({quant}) layers",
            reader="EXL3 mixed-Trellis / mixed-K prefill path of the online-quantized layers",
            formula=f"online_quant_bytes = {fmt_int(t.bytes)}  [fitted: {t.cite()}]",
            origin="calibrated" if measured else "estimate",
            note=(
                "a named term fitted on the appliance's records; the failing allocation they name is its "
                "last 48 MiB piece"
                + ("" if measured else f"; fitted on {FITTED_ON}, so for {quant} it is an estimate")
            ),
        )
    ]
