"""The EXL3 lines Gilded Gnosis r28+ / r34 and Infernal Invocation builds print, as each reader takes them:
the boot parser (``calibrate ingest`` and the supervised serve), the booted configuration (``profiles
import``) and the ingest itself, end to end through the CLI.

The lines are written with the format strings of the release patches (blackwell-llm-docker@3dd078a
patches/releases/infernal-invocation-r18/vllm/integration.patch: L8774-8785 the mixed-Trellis plan, L6971-6978
the R7 arena, L9381 the fused layer, L9493-9501 the fallback's runtime, L10402-10411 the route-pack warm-up;
the same strings in gilded-gnosis-v20-r34, and the plan line in r28 L7716-7717) and the r18 build's version
string (build-deepseek-infernal-invocation-cu133-torch213.sh@d568788 L59). No shared boot log of these builds
exists yet: the shared r14 logs keep the older form, which the same readers still take.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from glmlaunch.calibrate.bootconfig import map_boot
from glmlaunch.config.releases import release_of
from glmlaunch.vllmlog.boot import parse_log_text
from glmlaunch.vllmlog.bootconfig import parse_boot_config

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20
VERSION = "0.26.1rc0+infernal.invocation.cu133.r18.vllmf0fa1ce.b12x75787c7"
W0 = "(Worker_TP0 pid=4101) INFO 08-18 10:00:{s:02d} [exl3.py:{line}] "
TIERS = "((3, 148), (4, 100), (5, 8))"
API_VERSION = (
    f"(APIServer pid=4000) INFO 08-18 09:59:00 [api_server.py:1888] vLLM API server version {VERSION}"
)


def _worker(text: str, s: int, line: int = 3580, rank: int = 0) -> str:
    return W0.replace("Worker_TP0", f"Worker_TP{rank}").format(s=s, line=line) + text


def r7_boot(rank: int = 0) -> list[str]:
    """One rank's EXL3 lines of an R7 boot at TP4/DCP1/MTP3, 2,048 tokens (target and drafter owners)."""
    arena = "R7 fused MoE scratch arena (worst-case sized): capacity={} block_m={} topk=8 max_m_blocks={}"
    return [
        _worker("Model loading took 86.61 GiB and 412.5 seconds", 1, 394, rank),
        _worker("R7 fused B12X MoE model.layers.3.mlp.experts: K3x148 K4x100 K5x8", 2, 9381, rank),
        _worker("R7 fused B12X MoE model.layers.4.mlp.experts: K3x150 K4x98 K5x8", 3, 9381, rank),
        _worker(arena.format(32, 8, 256), 4, 6971, rank),
        _worker(arena.format(2048, 32, 760), 5, 6971, rank),
        _worker(
            f"EXL3 mixed Trellis runtime planned: tiers={TIERS} one-grid decode=32 "
            "one-grid prefill=2048/2048 "
            "block_m=32 buffers=31.0+527.1 MiB",
            6,
            8774,
            rank,
        ),
        _worker(arena.format(32, 8, 256), 7, 6971, rank),
        _worker(arena.format(2048, 32, 760), 8, 6971, rank),
        _worker(
            "Warmed up 24 EXL3 mixed-Trellis route-pack variant(s); free-memory delta 12.5 MiB.",
            9,
            10402,
            rank,
        ),
    ]


def test_the_boot_parser_reads_every_new_line() -> None:
    text = "\n".join(
        [
            API_VERSION,
            *r7_boot(),
        ]
    )
    log = parse_log_text(text)
    assert log.engine.vllm_version == VERSION and release_of(log.engine.vllm_version) == "ii-r18"
    (rank,) = log.ranks
    assert rank.unparsed == [] and not log.repeated_ranks
    assert rank.exl3 is not None
    assert (rank.exl3.decode_capacity, rank.exl3.prefill_capacity, rank.exl3.scheduler_capacity) == (
        32,
        2048,
        2048,
    )
    assert rank.exl3.block_m == 32 and rank.exl3.tiers == TIERS
    assert rank.exl3.decode_buffers_bytes == round(31.0 * MIB) and rank.exl3.prefill_buffers_bytes == round(
        527.1 * MIB
    )
    assert rank.exl3.buffers_bytes == rank.exl3.decode_buffers_bytes + rank.exl3.prefill_buffers_bytes
    # one arena line per owner and geometry: target and drafter, decode and prefill, in log order
    assert [(a.capacity, a.block_m, a.max_m_blocks) for a in rank.r7_arenas] == [
        (32, 8, 256),
        (2048, 32, 760),
        (32, 8, 256),
        (2048, 32, 760),
    ]
    assert rank.r7_fused_layers == 2
    assert rank.route_pack_warmup is not None
    assert (rank.route_pack_warmup.variants, rank.route_pack_warmup.free_delta_bytes) == (
        24,
        round(12.5 * MIB),
    )


def test_a_second_boot_in_the_file_starts_its_lists_again() -> None:
    log = parse_log_text("\n".join([*r7_boot(), *r7_boot()]))
    (rank,) = log.ranks
    assert len(rank.r7_arenas) == 4 and rank.r7_fused_layers == 2
    assert log.repeated_ranks == [rank.rank]


def test_the_fallback_runtime_line() -> None:
    line = _worker(
        "R7 EXL3 CUDA-graph runtime planned: capacity=2048 route_block=128 concurrency=4 topk=8 experts=256 "
        "arena=412.3MiB a1_min_rows=0",
        1,
        9493,
    )
    (rank,) = parse_log_text(line).ranks
    g = rank.r7_graph_runtime
    assert g is not None and (g.capacity, g.route_block, g.concurrency, g.experts) == (2048, 128, 4, 256)
    assert g.arena_bytes == round(412.3 * MIB) and g.a1_min_rows == 0


def test_a_cut_line_is_named_unparsed_not_dropped() -> None:
    line = _worker("R7 fused MoE scratch arena (worst-case sized): capacity=2048 block_m=", 1, 6971)
    (rank,) = parse_log_text(line).ranks
    assert rank.r7_arenas == [] and rank.unparsed[0].startswith("r7_arena: R7 fused MoE scratch arena")


def test_the_older_plan_line_still_reads() -> None:
    line = _worker(
        "EXL3 mixed Trellis runtime planned: tiers=((3, 192), (4, 64)) decode_capacity=6 "
        "prefill_capacity=1024 "
        "scheduler_capacity=3072 buffers=279.7 MiB",
        1,
        1942,
    )
    (rank,) = parse_log_text(line).ranks
    assert rank.exl3 is not None and rank.exl3.block_m is None
    assert (rank.exl3.decode_capacity, rank.exl3.prefill_capacity) == (6, 1024)


def test_profiles_import_reads_the_capacities_and_the_release() -> None:
    text = "\n".join(
        [
            API_VERSION,
            *r7_boot(),
        ]
    )
    bc = parse_boot_config(text)
    assert (bc.exl3_decode_capacity, bc.exl3_prefill_capacity, bc.exl3_scheduler_capacity) == (32, 2048, 2048)
    assert bc.exl3_prefill_block_m == 32
    assert bc.exl3_buffers_bytes == round(31.0 * MIB) + round(527.1 * MIB)
    got = map_boot(bc).settings
    assert got["exl3.prefill_capacity"] == 2048
    assert got["release"] == "ii-r18" and got["stack"] == "b12x-ii"


def test_calibrate_ingest_keeps_them_in_the_record(tmp_path: Path, clean_env: dict[str, str]) -> None:
    log = tmp_path / "ii-r18-r7.log"
    lines = [API_VERSION]
    for rank in range(4):
        lines += r7_boot(rank)
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {**clean_env, "GLMLAUNCH_CACHE_DIR": str(tmp_path / "cache")}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "glmlaunch",
            "calibrate",
            "ingest",
            str(log),
            "-p",
            "ii-r18-exl3-r7",
            "--dry-run",
            "--json",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    doc = json.loads(res.stdout)
    text = json.dumps(doc)
    assert "r7_arenas" in text and "route_pack_warmup" in text, res.stderr
    assert '"block_m": 32' in text
