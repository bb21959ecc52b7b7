"""Record what one kernel-library generation's own code says about memory: constants with file:line,
the layouts its functions compute over fixed grids, the environment names it reads, and what the
release's vLLM integration patch says about channels.

Usage (the library tree or unzipped wheel goes first on sys.path, so it shadows an installed b12x)::

    python scripts/record_generation.py --stack sparkinfer-r28 --tree DIR \\
        [--vllm-patch FILE] [--wheel FILE] [--sections all|env] [--out FILE]

The tree is not glmlaunch's code and is never committed: ``scripts/fetch_generations.py`` rebuilds each one
(git archive of the base + the release's integration patch, checked against the lock's tree hash; or the
PyPI wheel, checked by sha256) in a git-ignored folder. This script imports nothing from glmlaunch: what
it writes (``tests/fixtures/generations/<stack>.json``) is the tree's own answer, which
``tests/ledger/test_generations.py`` compares with the ledger's formulas. A SparkInfer ``Signal`` is a C++
struct in a ``.cu`` file: its size is what g++ says ``sizeof`` is (the ``meta_size()`` the pool reads).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import inspect
import itertools
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any, ClassVar

SCHEMA_VERSION = 1

# --- the grids (tests/ledger/test_generations.py replays them with the ledger's formulas) ----------------
A2A_BATCHES = (1, 16, 48, 64, 3072)
A2A_HEADS_PER_RANK = (8, 16, 24)
A2A_DIMS = ((512, 576), (256, 576), (512, 512))
TOPK_ROWS_PER_RANK = (1, 16, 22, 1024)
TOPKS = (512, 2048)
ONESHOT_EAGER = (16, 65_536, 86_016, 8 << 20)
#: (push, TP2 remote push, TP4 remote push, TP8 owner reduce): None leaves a variable unset
ONESHOT_FLAGS = (
    ("0", None, None, None),
    ("1", None, None, None),
    ("0", "1", None, None),
    ("0", None, "1", None),
    ("0", None, None, "0"),
    ("1", None, None, "0"),
)
DMA_WORLD = (2, 4, 6, 8)
DMA_TOKENS = (1, 3072, 8192, 17_664)
DMA_HIDDEN = 6144
DMA_WIRES = ("0", "ag")
INDEXER_GRID = [
    c
    for c in itertools.product(
        (1, 6, 7, 16, 17, 33, 64, 511, 3072),  # rows
        (1, 100, 512, 513, 8192),  # page-table width (pages)
        (32, 64),  # heads
        (512, 2048),  # topk
        ("prefill", "decode"),
        (False, True),  # shared page table
        (32768, 8192, 1000),  # supertile (default, explicit, rounded up)
    )
    if not (c[4] == "prefill" and not c[5])  # vLLM's prefill plans always share the page table
]
FUSED_GRID = list(
    itertools.product(
        (256, 512, 1024, 2048),  # topk
        (1, 6, 7, 16, 17),  # rows
        (16, 32, 64),  # heads (1, 2 or 4 head tiles: the plan gates wider ones before this resolver)
        ("none", "12.0", "12.1", "9.0"),  # compute capability
    )
)
FUSED_WIDTH = 8192 * 64
#: the mixed-Trellis MoE arenas (B12X from the r34 tree on): size_m, route block, SMs, intermediate rows
MIXED_GRID = list(
    itertools.product(
        (1, 8, 32, 256, 2048, 3072),  # size_m (decode windows, prefill capacities)
        (8, 16, 32, 64),  # route block
        (188, 132),  # SMs (RTX PRO 6000, H200)
        (512, 1024),  # intermediate rows per rank (GLM-5.2 at TP4, TP2)
    )
)
FOLD_GRID = list(
    itertools.product(
        (1, 48, 64, 511, 512, 3072),  # rows
        (100, 511, 512, 8192, 16384, 32768),  # width (pages)
        (128, 512),  # supertile pages
        (False, True),  # output physical slots
        ("auto", "0", "1"),
        (0, 64, 256),  # budget MiB
    )
)

#: constant -> (module key, attribute, source file relative to the package, definition regex)
CONSTANTS: dict[str, tuple[str, str, str, str]] = {
    "oneshot_world_sizes": (
        "oneshot",
        "SUPPORTED_WORLD_SIZES",
        "comm/pcie/pcie_oneshot.py",
        r"^SUPPORTED_WORLD_SIZES\s*=",
    ),
    "oneshot_rank_data_bytes": (
        "oneshot",
        "DEFAULT_RANK_DATA_BYTES",
        "comm/pcie/pcie_oneshot.py",
        r"^DEFAULT_RANK_DATA_BYTES\s*=",
    ),
    "ipc_align": ("oneshot", "IPC_SLAB_ALIGNMENT", "comm/pcie/pcie_oneshot.py", r"^IPC_SLAB_ALIGNMENT\s*="),
    "oneshot_required_sms": (
        "oneshot",
        "ONESHOT_REQUIRED_SMS",
        "comm/pcie/pcie_oneshot.py",
        r"^ONESHOT_REQUIRED_SMS\s*=",
    ),
    "dma_flag_slots": ("dma", "FLAG_SLOTS", "comm/pcie/pcie_dma.py", r"^FLAG_SLOTS\s*="),
    "dma_flag_stride": ("dma", "FLAG_STRIDE", "comm/pcie/pcie_dma.py", r"^FLAG_STRIDE\s*="),
    "dma_scratch_align": ("dma", "SCRATCH_ALIGN", "comm/pcie/pcie_dma.py", r"^SCRATCH_ALIGN\s*="),
    "dma_fp8_quant_block": ("dma", "FP8_QUANT_BLOCK", "comm/pcie/pcie_dma.py", r"^FP8_QUANT_BLOCK\s*="),
    "dma_world_sizes": (
        "dma",
        "SUPPORTED_WORLD_SIZES",
        "comm/pcie/pcie_dma.py",
        r"^SUPPORTED_WORLD_SIZES\s*=",
    ),
    "dcp_a2a_world_sizes": (
        "a2a",
        "SUPPORTED_WORLD_SIZES",
        "comm/pcie/pcie_dcp_a2a.py",
        r"^SUPPORTED_WORLD_SIZES\s*=",
    ),
    "dcp_a2a_required_sms": (
        "a2a",
        "DCP_A2A_REQUIRED_SMS",
        "comm/pcie/pcie_dcp_a2a.py",
        r"^DCP_A2A_REQUIRED_SMS\s*=",
    ),
    "dcp_topk_world_sizes": (
        "topk",
        "SUPPORTED_WORLD_SIZES",
        "comm/pcie/pcie_dcp_topk.py",
        r"^SUPPORTED_WORLD_SIZES\s*=",
    ),
    "indexer_supertile_default": (
        "scratch",
        "_PAGED_INDEX_SUPERTILE_K_DEFAULT",
        "attention/nsa_indexer/scratch.py",
        r"^_PAGED_INDEX_SUPERTILE_K_DEFAULT\s*=",
    ),
    "indexer_tile_block_q": (
        "scratch",
        "_PAGED_INDEX_TILE_BLOCK_Q",
        "attention/nsa_indexer/scratch.py",
        r"^_PAGED_INDEX_TILE_BLOCK_Q\s*=",
    ),
    "indexer_tile_block_k": (
        "scratch",
        "_PAGED_INDEX_TILE_BLOCK_K",
        "attention/nsa_indexer/scratch.py",
        r"^_PAGED_INDEX_TILE_BLOCK_K\s*=",
    ),
    "indexer_fused_max_rows": (
        "fused",
        "FUSED_MAX_ROWS",
        "attention/nsa_indexer/fused_indexer.py",
        r"^FUSED_MAX_ROWS\s*=",
    ),
    "indexer_fused_max_rows_glm32": (
        "fused",
        "_GLM32_FUSED_MAX_ROWS",
        "attention/nsa_indexer/fused_indexer.py",
        r"^_GLM32_FUSED_MAX_ROWS\s*=",
    ),
    "indexer_fused_merge_state_words": (
        "fused",
        "_COOP_STATE_WORDS",
        "attention/nsa_indexer/persistent_topk.py",
        r"^_STATE_WORDS\s*=",
    ),
    "fold_slice_tokens": (
        "paged",
        "_TWO_LEVEL_SLICE_TOKENS",
        "attention/nsa_indexer/paged.py",
        r"^_TWO_LEVEL_SLICE_TOKENS\s*=",
    ),
    "fold_max_slices": (
        "paged",
        "_TWO_LEVEL_MAX_SLICES",
        "attention/nsa_indexer/paged.py",
        r"^_TWO_LEVEL_MAX_SLICES\s*=",
    ),
    "fold_budget_mib_default": (
        "paged",
        "_TWO_LEVEL_FOLD_MAX_MIB_DEFAULT",
        "attention/nsa_indexer/paged.py",
        r"^_TWO_LEVEL_FOLD_MAX_MIB_DEFAULT\s*=",
    ),
}
#: the signal structs: (module key, .cu stem, Python fallback attribute)
SIGNALS = {
    "oneshot_signal_bytes": ("oneshot", "pcie_oneshot", "_SIGNAL_BYTES"),
    "dcp_a2a_signal_bytes": ("a2a", "pcie_dcp_a2a", "_SIGNAL_BYTES"),
    "dcp_topk_signal_bytes": ("topk", "pcie_dcp_topk", "_SIGNAL_BYTES"),
}
#: what the release's vLLM integration patch says about channels (lines of non-test files)
VLLM_NEEDLES = {
    "max_concurrent_channels": r"_B12X_PCIE_MAX_CONCURRENT_CHANNELS = (\d+)",
    "eager_allreduce_id": r'"vllm:eager:allreduce"',
    "eager_dcp_id": r'"vllm:eager:dcp"',
    "target_profile_id": r'"vllm:target:profile"',
    "target_production_id": r'"vllm:target:production"',
    "v1_draft_profile_id": r'"vllm:draft:profile"',
    "v1_draft_production_id": r'"vllm:draft:production"',
    "v2_draft_prefill_id": r"vllm:draft:prefill:\{",
    "v2_draft_decode_id": r"vllm:draft:decode:\{",
    "graph_channel_checkpoint": r"checkpoint_b12x_graph_channels\(\)",
}
ENV_NAME = re.compile(r"""["']((?:SPARKINFER|B12X)_[A-Z0-9_]+)["']""")
GETTER = re.compile(r"getenv|environ|env_int|env_flag|env_bool|_env\w*\(|env_str|env_float|_read_env|flag\(")
ENV_CONST = re.compile(
    r"^\s*(_?[A-Z][A-Z0-9_]*)\s*(?::\s*\w+\s*)?=\s*[\"']((?:SPARKINFER|B12X)_[A-Z0-9_]+)[\"']"
)


@contextmanager
def env(values: dict[str, str | None]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


def _source(root: Path, pkg: str, rel: str, pattern: str) -> str | None:
    path = root / pkg / rel
    if not path.exists():
        return None
    for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if re.search(pattern, line):
            return f"{pkg}/{rel}:{i}"
    return None


def signal_sizeof(cu: Path) -> tuple[int, int]:
    """sizeof(Signal) of a raw-CUDA extension's struct, compiled by g++; and the struct's line."""
    src = cu.read_text()
    consts = re.findall(r"^constexpr int (kMaxBlocks|kMaxRanks|kFlagStride) = (\d+);", src, re.M)
    m = re.search(r"^struct Signal \{.*?^\};", src, re.M | re.S)
    if m is None:
        raise SystemExit(f"{cu}: no `struct Signal` found")
    prog = "#include <cstdint>\n#include <cstdio>\nusing FlagType = uint32_t;\n"
    prog += "".join(f"constexpr int {n} = {v};\n" for n, v in consts)
    prog += m.group(0) + '\nint main(){printf("%zu\\n", sizeof(Signal));}\n'
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "s.cpp").write_text(prog)
        subprocess.run(["g++", "-std=c++17", "-o", f"{d}/s", f"{d}/s.cpp"], check=True)
        size = int(subprocess.run([f"{d}/s"], capture_output=True, text=True, check=True).stdout)
    return size, src[: m.start()].count("\n") + 1


def scan_env(root: Path, pkg: str) -> dict[str, str]:
    """Every SPARKINFER_* / B12X_* name the package reads (a getter call on or just before the line),
    with the first file:line; tests and benchmarks are skipped."""
    found: dict[str, list[str]] = {}
    consts: dict[str, tuple[str, str]] = {}
    files: dict[str, list[str]] = {}
    for dp, dn, fn in os.walk(root / pkg):
        dn[:] = sorted(d for d in dn if d not in ("tests", "__pycache__"))
        for f in sorted(fn):
            if f.endswith((".py", ".cu", ".cuh", ".h", ".cpp")):
                p = Path(dp) / f
                rel = str(p.relative_to(root))
                files[rel] = p.read_text(encoding="utf-8", errors="replace").splitlines()
                for line in files[rel]:
                    m = ENV_CONST.match(line)
                    if m:
                        consts[m.group(1)] = (m.group(2), rel)
    for rel, lines in files.items():
        for i, line in enumerate(lines, 1):
            code = line.split("#", 1)[0] if rel.endswith(".py") else line.split("//", 1)[0]
            if not GETTER.search("".join(lines[max(0, i - 3) : i])):
                continue
            for name in ENV_NAME.findall(code):
                found.setdefault(name, []).append(f"{rel}:{i}")
            for cname, (value, crel) in consts.items():
                if crel == rel and re.search(rf"\b{cname}\b", code):
                    found.setdefault(value, []).append(f"{rel}:{i}")
    return {
        k: sorted(v, key=lambda s: (s.rsplit(":", 1)[0], int(s.rsplit(":", 1)[1])))[0]
        for k, v in sorted(found.items())
    }


def _patch_lines(patch: Path, kinds: tuple[str, ...]) -> Iterator[tuple[str, int, str]]:
    """(path, patch line, text) of the non-test files' lines of one ``kinds`` (``+`` added, `` `` context)."""
    current = ""
    for n, line in enumerate(patch.read_text(errors="replace").splitlines(), 1):
        if line.startswith("diff "):
            current = line.split()[2][2:]
            continue
        if "/tests/" in f"/{current}" or not line.startswith(kinds):
            continue
        yield current, n, line[1:].strip()


def vllm_facts(patch: Path, context: Path | None = None) -> dict[str, Any]:
    """Lines of the integration patch's non-test files that name the channel model (PR 216).

    A line vLLM's base already holds appears in a release patch only as context, or not at all; then
    ``context`` (a patch of the same vLLM branch whose context lines show it) is read for the facts the
    release patch does not state, and each such fact names that patch (``context_of``): a citation, not a
    reading of the release's own tree."""
    facts: dict[str, Any] = {"patch_sha256": hashlib.sha256(patch.read_bytes()).hexdigest(), "lines": {}}
    for current, n, text in _patch_lines(patch, ("+", " ")):
        for key, needle in VLLM_NEEDLES.items():
            if key not in facts["lines"] and re.search(needle, " " + text):
                facts["lines"][key] = {"path": current, "patch_line": n, "text": text}
    if context is not None:
        facts["context_patch"] = context.name
        facts["context_patch_sha256"] = hashlib.sha256(context.read_bytes()).hexdigest()
        for current, n, text in _patch_lines(context, (" ",)):
            for key, needle in VLLM_NEEDLES.items():
                if key not in facts["lines"] and re.search(needle, " " + text):
                    facts["lines"][key] = {
                        "path": current,
                        "patch_line": n,
                        "text": text,
                        "context_of": context.name,
                    }
    m = facts["lines"].get("max_concurrent_channels")
    facts["max_concurrent_channels"] = (
        int(re.search(VLLM_NEEDLES["max_concurrent_channels"], m["text"]).group(1)) if m else 1
    )
    # PR 216 named every channel at once: a named eager channel is its code (r12-r16 name none); the ii
    # base shows only its eager names (in another patch's context), the per-pass names never
    facts["semantic_channels"] = bool({"target_production_id", "eager_allreduce_id"} & set(facts["lines"]))
    hunks = {}
    for n, line in enumerate(patch.read_text(errors="replace").splitlines(), 1):
        if line.startswith("@@") and "distinct_target_and_draft_channels" in line:
            hunks["profile_channel_rollback_test"] = {"patch_line": n, "text": line.split("@@")[-1].strip()}
            break
    if hunks:
        facts["hunk_context"] = hunks
    return facts


class _SlabRecorder:
    sizes: ClassVar[list[int]] = []

    @classmethod
    def _allocate_shared_buffer(cls, exchange_group: Any, nbytes: int, *, zero_fill: bool, ipc: Any) -> Any:
        cls.sizes.append(int(nbytes))
        return types.SimpleNamespace(peer_ptrs=(0,) * 16, local_ptr=0, remote_ptrs=())


def _dist(world: int) -> Any:
    return types.SimpleNamespace(get_world_size=lambda group=None: world, get_rank=lambda group=None: 0)


def record(stack: str, root: Path, sections: str) -> dict[str, Any]:
    pkg = "sparkinfer" if (root / "sparkinfer").is_dir() else "b12x"
    prefix = pkg.upper() + "_"
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "stack": stack, "package": pkg}
    out["env_reads"] = scan_env(root, pkg)
    if sections == "env":
        return out
    sys.path.insert(0, str(root))
    import torch

    mods = {
        key: importlib.import_module(f"{pkg}.{path}")
        for key, path in {
            "oneshot": "comm.pcie.pcie_oneshot",
            "dma": "comm.pcie.pcie_dma",
            "a2a": "comm.pcie.pcie_dcp_a2a",
            "topk": "comm.pcie.pcie_dcp_topk",
            "scratch": "attention.nsa_indexer.scratch",
            "paged": "attention.nsa_indexer.paged",
            "fused": "attention.nsa_indexer.fused_indexer",
        }.items()
    }
    where = Path(mods["oneshot"].__file__).resolve()
    if not where.is_relative_to(root.resolve()):
        raise SystemExit(f"{pkg} was imported from {where}, not from {root}")

    constants: dict[str, Any] = {}
    sources: dict[str, str | None] = {}
    for name, (key, attr, rel, pattern) in CONSTANTS.items():
        value = getattr(mods[key], attr, None)
        constants[name] = list(value) if isinstance(value, tuple) else value
        sources[name] = _source(root, pkg, rel, pattern) if value is not None else None
    for name, (key, stem, attr) in SIGNALS.items():
        cu = root / pkg / "comm" / "pcie" / f"{stem}.cu"
        if cu.exists():
            constants[name], line = signal_sizeof(cu)
            sources[name] = f"{pkg}/comm/pcie/{stem}.cu:{line} (g++ sizeof(Signal))"
        else:
            constants[name] = int(getattr(mods[key], attr))
            sources[name] = _source(root, pkg, f"comm/pcie/{stem}.py", rf"^{attr}\s*=")
    out["constants"] = constants
    out["sources"] = sources

    lay: dict[str, list[list[Any]]] = {}
    a2a, topk, oneshot, dma = mods["a2a"], mods["topk"], mods["oneshot"], mods["dma"]
    s6, st, s1 = (
        constants[k] for k in ("dcp_a2a_signal_bytes", "dcp_topk_signal_bytes", "oneshot_signal_bytes")
    )
    lay["dcp_a2a"] = []
    for w, b, hpr, (d, dq) in itertools.product(
        a2a.SUPPORTED_WORLD_SIZES, A2A_BATCHES, A2A_HEADS_PER_RANK, A2A_DIMS
    ):
        layout = a2a._staging_layout(
            signal_bytes=s6,
            world_size=w,
            max_batch_size=b,
            total_heads=hpr * w,
            head_dim=d,
            query_head_dim=dq,
        )
        lay["dcp_a2a"].append([w, b, hpr * w, d, dq, int(layout.slot_bytes), int(layout.slab_bytes)])
    lay["dcp_topk"] = []
    for w, m, k in itertools.product(topk.SUPPORTED_WORLD_SIZES, TOPK_ROWS_PER_RANK, TOPKS):
        layout = topk._candidate_staging_layout(signal_bytes=st, max_rows=w * m, topk=k, world_size=w)
        lay["dcp_topk"].append([w, w * m, k, int(layout.slab_bytes)])

    alloc = oneshot.PCIeOneshotAllReduce.__dict__["_allocate_eager_channel_buffers"].__func__
    sharded_arg = "sharded_eager_storage" in inspect.signature(alloc).parameters
    lay["oneshot"] = []
    saved_dist = oneshot.dist
    try:
        for w, flags, e in itertools.product(oneshot.SUPPORTED_WORLD_SIZES, ONESHOT_FLAGS, ONESHOT_EAGER):
            names = (
                "PCIE_ONESHOT_PUSH",
                "PCIE_TP2_REMOTE_PUSH",
                "PCIE_TP4_REMOTE_PUSH",
                "PCIE_TP8_OWNER_REDUCE",
            )
            oneshot.dist = _dist(w)
            _SlabRecorder.sizes = []
            with env({prefix + n: v for n, v in zip(names, flags, strict=True)}):
                kw: dict[str, Any] = dict(signal_bytes=s1, eager_buffer_bytes=e, ipc=None)
                if sharded_arg:
                    kw["sharded_eager_storage"] = bool(
                        oneshot._uses_sharded_eager_storage(w, oneshot._transport_policy_contract())
                    )
                alloc(_SlabRecorder, None, **kw)
            lay["oneshot"].append([w, *flags, e, _SlabRecorder.sizes[-1]])
    finally:
        oneshot.dist = saved_dist

    lay["dma"] = []
    world = [w for w in DMA_WORLD if w in getattr(dma, "SUPPORTED_WORLD_SIZES", DMA_WORLD)]
    for w, t, wire in itertools.product(world, DMA_TOKENS, DMA_WIRES):
        mb = t * DMA_HIDDEN * 2
        lay["dma"].append([w, mb, wire, *_dma_bytes(dma, torch, w, mb, wire)])

    scratch, paged, fused = mods["scratch"], mods["paged"], mods["fused"]
    caps = next(
        getattr(scratch, n)
        for n in dir(scratch)
        if n.endswith("IndexerScratchCaps") and not n.startswith("_")
    )
    lay["indexer"] = []
    for rows, width, heads, k, mode, shared, supertile in INDEXER_GRID:
        explicit = 0 if supertile == constants["indexer_supertile_default"] else supertile
        with env({prefix + "FUSED_INDEXER": "1", prefix + "PAGED_INDEX_SUPERTILE_K": None}):
            plan = scratch.plan_indexer_scratch(
                caps(
                    device="cpu",
                    source_layout="paged",
                    num_q_heads=heads,
                    max_q_rows=rows,
                    max_page_table_width=width,
                    topk=k,
                    mode=mode,
                    shared_page_table=shared,
                    supertile_k=explicit,
                )
            ).layout
        lay["indexer"].append(
            [
                rows,
                width,
                heads,
                k,
                mode,
                shared,
                supertile,
                int(plan.nbytes),
                str(plan.route),
                int(plan.supertile_tokens),
                int(plan.max_chunks),
            ]
        )
    lay["fused_route"] = []
    for k, rows, heads, cc in FUSED_GRID:
        capability = None if cc == "none" else tuple(int(x) for x in cc.split("."))
        ok = fused.resolve_fused_indexer_path(
            topk=k, num_rows=rows, width=FUSED_WIDTH, num_heads=heads, compute_capability=capability
        )
        lay["fused_route"].append([k, rows, heads, cc, bool(ok)])
    lay["fold"] = []
    for rows, width, stp, physical, mode, budget in FOLD_GRID:
        with env(
            {prefix + "INDEXER_TWO_LEVEL_FOLD": mode, prefix + "INDEXER_TWO_LEVEL_FOLD_MAX_MIB": str(budget)}
        ):
            f = paged._plan_two_level_fold(
                q_rows=rows,
                topk=2048,
                page_size=64,
                page_table_width=width,
                supertile_pages=stp,
                output_physical_slots=physical,
            )
        lay["fold"].append(
            [
                rows,
                width,
                stp,
                physical,
                mode,
                budget,
                str(f.reason),
                int(f.total_slices),
                int(f.candidate_nbytes),
            ]
        )
    mixed = _mixed_trellis(pkg, torch)
    if mixed is not None:
        lay["mixed_trellis"] = mixed
    out["layouts"] = lay
    return out


def _mixed_trellis(pkg: str, torch: Any) -> list[list[Any]] | None:
    """The tree's own ``make_mixed_trellis3_buffers`` for the worst-case launch vLLM sizes one arena per
    owner with (256 + 255 + 1 tier slots, 256 routed experts, top-8, hidden 6144), on the CPU: the unique
    storage bytes of every buffer (FC2 reuses the rotation gate's). None for a tree without the kernels."""
    try:
        mt = importlib.import_module(f"{pkg}.moe._shared.kernels.w4a16.mixed_trellis")
    except ImportError:
        return None
    make = getattr(mt, "make_mixed_trellis3_buffers", None)
    if make is None:
        return None
    rows = []
    for size_m, block, sms, inter in MIXED_GRID:
        launch = types.SimpleNamespace(
            size_m=size_m,
            top_k=8,
            moe_block_size=block,
            max_m_blocks=1 << 30,
            hidden_size=6144,
            intermediate_size=inter,
            blocks_per_sm=4,
            topk_sum=types.SimpleNamespace(route_num_experts=256),
            tier0_num_experts=256,
            tier1_num_experts=255,
            tier2_num_experts=1,
        )
        bufs = make(launch, device=torch.device("cpu"), sms=sms)
        seen: dict[int, int] = {}
        for f in dataclasses.fields(bufs):
            value = getattr(bufs, f.name)
            if isinstance(value, torch.Tensor):
                seen[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
        rows.append([size_m, block, sms, inter, sum(seen.values())])
        del bufs
    return rows


class _TorchShim(types.ModuleType):
    """Stands in for torch inside pcie_dma: records every zeros/empty allocation by bytes and dtype."""

    def __init__(self, torch: Any, rec: list[tuple[int, str]]) -> None:
        super().__init__("torch_shim")
        self._torch, self._rec = torch, rec
        self.cuda = types.SimpleNamespace(
            Stream=lambda *a, **k: object(),
            Event=lambda *a, **k: object(),
            device=torch.cuda.device,
            is_available=lambda: False,
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch, name)

    def _alloc(self, *shape: Any, dtype: Any = None, **kw: Any) -> Any:
        dtype = dtype or self._torch.float32
        n = 1
        for s in shape:
            n *= int(s)
        self._rec.append((n * self._torch.empty((), dtype=dtype).element_size(), str(dtype)))
        return self._torch.empty(0, dtype=dtype)

    def zeros(self, *shape: Any, **kw: Any) -> Any:
        return self._alloc(*shape, **kw)

    def empty(self, *shape: Any, **kw: Any) -> Any:
        return self._alloc(*shape, **kw)


def _dma_bytes(dma: Any, torch: Any, w: int, mb: int, wire: str) -> tuple[int, int, int]:
    """The tree's own ``PCIeDmaAllReduce.__init__`` with IPC, streams and CUDA allocations recorded:
    (slab, int32 counters, fp8 stage bytes)."""
    rec: list[tuple[int, str]] = []
    slabs: list[int] = []

    class _Alloc:
        @staticmethod
        def _allocate_shared_buffer(group: Any, nbytes: int, *, zero_fill: bool, ipc: Any) -> Any:
            slabs.append(int(nbytes))
            return types.SimpleNamespace(peer_ptrs=(0,) * w, local_ptr=0, remote_ptrs=())

    patch = {
        "torch": _TorchShim(torch, rec),
        "dist": _dist(w),
        "CudaRTLibrary": lambda: types.SimpleNamespace(cudaSetDevice=lambda i: None),
        "PCIeOneshotAllReduce": _Alloc,
    }
    for name in ("_load_extension", "_load_kernels"):
        if hasattr(dma, name):
            patch[name] = lambda: types.SimpleNamespace()
    saved = {n: getattr(dma, n) for n in patch}
    try:
        for n, v in patch.items():
            setattr(dma, n, v)
        dma.PCIeDmaAllReduce(exchange_group=None, device=torch.device("cuda", 0), max_bytes=mb, fp8=wire)
    finally:
        for n, v in saved.items():
            setattr(dma, n, v)
    counters = sum(b for b, dt in rec if dt == "torch.int32")
    stage = sum(b for b, dt in rec if dt == "torch.uint8")
    return slabs[-1], counters, stage


def tree_identity(root: Path, wheel: Path | None) -> dict[str, Any]:
    ident: dict[str, Any] = {}
    if (root / ".git").exists():
        # the tree as built: base + integration patch applied to the index (scripts/fetch_generations.py)
        ident["git_tree"] = subprocess.run(
            ["git", "-C", str(root), "write-tree"], capture_output=True, text=True, check=True
        ).stdout.strip()
    dist = sorted(p.name for p in root.glob("*.dist-info"))
    if dist:
        ident["dist_info"] = [d for d in dist if d.startswith(("b12x-", "sparkinfer-"))]
    if wheel is not None:
        ident["wheel"] = wheel.name
        ident["wheel_sha256"] = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return ident


def dump(doc: dict[str, Any]) -> str:
    """JSON with one grid row per line (diffable, a few hundred KiB per generation)."""
    lines = ["{"]
    keys = list(doc)
    for i, key in enumerate(keys):
        end = "," if i < len(keys) - 1 else ""
        value = doc[key]
        if key == "layouts":
            lines.append(f"  {json.dumps(key)}: {{")
            names = list(value)
            for j, name in enumerate(names):
                rows = ",\n".join("      " + json.dumps(r, separators=(",", ":")) for r in value[name])
                lines.append(
                    f"    {json.dumps(name)}: [\n{rows}\n    ]" + ("," if j < len(names) - 1 else "")
                )
            lines.append("  }" + end)
        else:
            text = json.dumps(value, indent=2, sort_keys=False)
            lines.append(f"  {json.dumps(key)}: " + text.replace("\n", "\n  ") + end)
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stack", required=True)
    ap.add_argument("--tree", required=True, type=Path, help="the library tree or unzipped wheel")
    ap.add_argument("--vllm-patch", type=Path, help="the release's vLLM integration.patch")
    ap.add_argument(
        "--vllm-context-patch",
        type=Path,
        help="a patch of the same vLLM branch whose context lines show what the release's base holds",
    )
    ap.add_argument("--wheel", type=Path, help="the wheel --tree was unzipped from (its sha256 is recorded)")
    ap.add_argument("--sections", choices=("all", "env"), default="all")
    ap.add_argument("--out", type=Path, help="write here (default: stdout)")
    args = ap.parse_args(argv)
    doc = record(args.stack, args.tree, args.sections)
    doc = {
        "schema_version": doc.pop("schema_version"),
        "stack": doc.pop("stack"),
        "package": doc.pop("package"),
        "tree": tree_identity(args.tree, args.wheel),
        **doc,
    }
    if args.vllm_patch is not None:
        doc["vllm"] = vllm_facts(args.vllm_patch, args.vllm_context_patch)
    try:
        import torch

        torch_version = str(torch.__version__)
    except ImportError:
        torch_version = None
    doc["recorded_with"] = {
        "command": "python scripts/record_generation.py "
        + " ".join(
            f"--{k.replace('_', '-')} {Path(v).name if isinstance(v, Path) else v}"
            for k, v in vars(args).items()
            if v is not None and k != "out"
        ),
        "python": platform.python_version(),
        "torch": torch_version if args.sections == "all" else None,
        "date": date.today().isoformat(),
    }
    text = dump(doc)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
