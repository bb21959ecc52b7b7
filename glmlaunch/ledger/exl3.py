"""EXL3 runtime arenas: the target model's mixed Trellis buffers and the MTP drafter's rank-sliced arena.

Both are planned by vLLM's EXL3 runtime and live inside the profiled peak P (torch). Both are sized from
the EXL3 prefill capacity C (``VLLM_EXL3_PREFILL_CAPACITY``; unset, the launchers pass
``max_num_batched_tokens``). Fitted on the five TP4/DCP4 boot logs of GLM-5.2 EXL3 (rank 0):

* ``EXL3 mixed Trellis runtime planned: ... decode_capacity=D prefill_capacity=C scheduler_capacity=S
  buffers=X MiB`` at (C, D, S, X) = (1024, 6, 3072, 279.7), (3072, 6, 3072, 759.8), (1024, 32, 2048, 294.6):
  exactly 240 KiB per prefill token (hidden 6144 x 40 B), plus 39.7/39.8 MiB at D=6 and 54.6 MiB at D=32.
  Modelled as ``240 KiB * C + B0 + B1 * D`` with D = ``VLLM_EXL3_TRELLIS_MAX_M`` (else the largest capture
  size). D and S changed together between those boots, so the logs cannot tell which one the second term
  follows; it is charged to D.
* ``EXL3 rank-sliced runtime planned: Trellis m=1..M ... capacity=C arena=X MiB scheduler_capacity=S`` (only
  with MTP) at (C, M, S, X) = (1024, 6, 3072, 414.1), (3072, 6, 3072, 1054.2), (1024, 32, 2048, 414.1):
  exactly 320 KiB per token plus 94.15 MiB, independent of M and S.
"""

from __future__ import annotations

from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.ledger import r7
from glmlaunch.ledger.context import Context, Draft, fmt_int

KIB = 1024
MIB = 1024 * KIB

#: target-model arena per prefill-capacity token: hidden_size 6144 x 40 B (logged slope, exact)
TRELLIS_PER_TOKEN = 240 * KIB
#: per decode-capacity token: (54.6 - 39.75) MiB over D 6 -> 32
TRELLIS_PER_DECODE = round((54.6 - 39.75) * MIB / 26)
#: fixed part: 39.75 MiB at D = 6 (the logs print 39.7 and 39.8)
TRELLIS_BASE = round(39.75 * MIB) - 6 * TRELLIS_PER_DECODE
#: drafter arena per prefill-capacity token (logged slope, exact)
DRAFTER_PER_TOKEN = 320 * KIB
#: drafter fixed part: 94.1 / 94.2 MiB in the logs
DRAFTER_BASE = round(94.15 * MIB)


def trellis_arena_bytes(capacity: int, decode: int) -> int:
    return TRELLIS_PER_TOKEN * capacity + TRELLIS_BASE + TRELLIS_PER_DECODE * decode


def drafter_arena_bytes(capacity: int) -> int:
    return DRAFTER_PER_TOKEN * capacity + DRAFTER_BASE


def decode_capacity(cfg: DeploymentConfig, capture_sizes: tuple[int, ...]) -> tuple[int, str]:
    """D: VLLM_EXL3_TRELLIS_MAX_M, else the largest capture size, else max_num_seqs x (1 + MTP)."""
    if cfg.exl3_trellis_max_m is not None:
        return cfg.exl3_trellis_max_m, "exl3_trellis_max_m"
    if capture_sizes:
        return max(capture_sizes), "largest capture size"
    return cfg.scheduler.max_num_seqs * cfg.decode_step, "max_num_seqs x (1 + MTP)"


def _capacity_text(cfg: DeploymentConfig) -> str:
    if cfg.exl3.prefill_capacity is not None:
        return "exl3.prefill_capacity"
    return "exl3.prefill_capacity unset: max_num_batched_tokens"


def entries(ctx: Context) -> list[Draft]:
    cfg = ctx.config
    if not cfg.is_exl3 or r7.applies(cfg):
        # mixed-tier experts on the r34 / ii stacks run B12X's worst-case arenas instead (ledger/r7.py)
        return []
    c = cfg.exl3_prefill_capacity_effective
    d, d_src = decode_capacity(cfg, ctx.capture_sizes)
    n = trellis_arena_bytes(c, d)
    out = [
        Draft(
            name="exl3.trellis_arena",
            subsystem="exl3",
            requested_bytes=n,
            count=1,
            kind="torch",
            lifetime="profiled",
            condition=f"model.quantization exl3; prefill capacity C = {c} ({_capacity_text(cfg)})",
            reader="EXL3 mixed Trellis runtime (target model prefill and decode GEMMs)",
            formula=(
                f"240 KiB * C + B0 + B1 * D = {fmt_int(TRELLIS_PER_TOKEN)} * {c} + {fmt_int(TRELLIS_BASE)} + "
                f"{fmt_int(TRELLIS_PER_DECODE)} * {d} = {fmt_int(n)}  [D = {d}: {d_src}; "
                f"240 KiB = hidden 6144 * 40 B]"
            ),
            origin="calibrated",
            alloc="torch",
            note=(
                "fitted on boot logs (EXL3 mixed Trellis runtime planned ... buffers=): C=1024 D=6 S=3072 "
                "279.7 MiB, C=3072 D=6 S=3072 759.8 MiB, C=1024 D=32 S=2048 294.6 MiB; slope exactly "
                "240 KiB per prefill token. B1 = (54.6 - 39.75) MiB / 26: decode capacity D and scheduler "
                "capacity S both changed between those boots, so the logs cannot tell which one it follows "
                "(charged to D)"
            ),
        )
    ]
    if cfg.mtp > 0:
        a = drafter_arena_bytes(c)
        out.append(
            Draft(
                name="exl3.drafter_arena",
                subsystem="exl3",
                requested_bytes=a,
                count=1,
                kind="torch",
                lifetime="profiled",
                condition=f"model.quantization exl3 and MTP k = {cfg.mtp} > 0; prefill capacity C = {c}",
                reader="EXL3 rank-sliced runtime (MTP drafter)",
                formula=(
                    f"320 KiB * C + 94.15 MiB = {fmt_int(DRAFTER_PER_TOKEN)} * {c} + {fmt_int(DRAFTER_BASE)} "
                    f"= {fmt_int(a)}"
                ),
                origin="calibrated",
                alloc="torch",
                note=(
                    "fitted on boot logs (EXL3 rank-sliced runtime planned ... arena=): C=1024 414.1 MiB at "
                    "m=1..6 S=3072 and at m=1..32 S=2048, C=3072 1054.2 MiB; slope exactly 320 KiB per "
                    "token, intercept 94.1/94.2 MiB, independent of m and S"
                ),
            )
        )
    return out
