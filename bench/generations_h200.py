"""The r28 SparkInfer pools (tree 200c1db7) built for real on one NVIDIA H200, against the ledger.

What the machine lent for issue 23 allows (one GPU): the preflight proper needs one GPU per rank and an
NCCL group (the r28 pools refuse other exchange groups), and NCCL refuses two ranks on one GPU. So:

1. ``build``: the three r28 extensions (one-shot, DMA, DCP A2A) JIT-built by their own ``_load_extension()``
   with nvcc for sm_90 (``TORCH_CUDA_ARCH_LIST=9.0``; the release images name 12.0a), three processes at once,
   cold, into a fresh ``TORCH_EXTENSIONS_DIR``; seconds per extension.
2. ``meta``: ``meta_size()`` of the built one-shot and DCP A2A extensions, the signal regions the pools
   allocate, next to the ledger's ``sparkinfer-r28`` row (150,656 B and 133,248 B).
3. ``residency``: the r28 pools' ``_require_full_grid_residency`` on this GPU with vLLM's
   ``max_concurrent_channels=2`` (72 and 128 SMs), and again under a 64-SM cap
   (``SPARKINFER_PCIE_TEST_VISIBLE_SM_COUNT``), where it must refuse.
4. ``pools``: two ranks on the one GPU, as two processes over a gloo group: the pools' NCCL-only guard on
   the object exchange (``_object_broadcast_device``) is bypassed; everything else (IPC export/open,
   contracts, named channels, checkpoint/rollback, close) is the library's own. The call sequence is the
   preflight's for the profile's generation (``glmlaunch.preflight.backends.sequence.capture_passes``, the
   r17+ channel ids), the configuration the profile scaled to TP2/DCP2. Rank 0 reads the device's free
   memory before and after each collective step, both ranks past a barrier: the drop covers both ranks, so
   half of it is one rank's cost, set next to the ledger's device bytes of the entries the step realises.
   The channels each pool holds afterwards are counted (``len(pool._all_channels)``, the named ids).

Usage (from the staging folder's parent)::

    python3 bench/generations_h200.py --tree DIR [--profile turnkey] \
        [--phases build,meta,residency,pools] --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

EXTENSIONS = ("pcie_oneshot", "pcie_dma", "pcie_dcp_a2a")
MIB = 1 << 20


def _write(out: Path, name: str, doc: dict[str, Any]) -> None:
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"== {name}: " + json.dumps(doc, default=str)[:1500], flush=True)


def build(tree: Path, out: Path) -> dict[str, Any]:
    procs = {}
    t0 = time.monotonic()
    for ext in EXTENSIONS:
        code = (
            f"import sys, time; sys.path.insert(0, {str(tree)!r}); t = time.monotonic(); "
            f"from sparkinfer.comm.pcie import {ext} as m; m._load_extension(); "
            "print(round(time.monotonic() - t, 1))"
        )
        procs[ext] = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    result: dict[str, Any] = {"extensions": {}}
    for ext, p in procs.items():
        stdout, stderr = p.communicate(timeout=560)
        result["extensions"][ext] = {
            "rc": p.returncode,
            "seconds": stdout.strip().splitlines()[-1] if stdout.strip() else None,
            "stderr_tail": stderr[-800:] if p.returncode else "",
        }
    result["wall_seconds"] = round(time.monotonic() - t0, 1)
    result["torch_cuda_arch_list"] = os.environ.get("TORCH_CUDA_ARCH_LIST")
    result["torch_extensions_dir"] = os.environ.get("TORCH_EXTENSIONS_DIR")
    return result


def meta(tree: Path) -> dict[str, Any]:
    sys.path.insert(0, str(tree))
    from sparkinfer.comm.pcie import pcie_dcp_a2a, pcie_oneshot

    from glmlaunch.ledger.constants import for_stack

    k = for_stack("sparkinfer-r28")
    got = {
        "oneshot": int(pcie_oneshot._load_extension().meta_size()),
        "dcp_a2a": int(pcie_dcp_a2a._load_extension().meta_size()),
    }
    want = {"oneshot": k.oneshot_signal_bytes, "dcp_a2a": k.dcp_a2a_signal_bytes}
    return {"meta_size": got, "ledger": want, "equal": got == want}


def residency(tree: Path) -> dict[str, Any]:
    sys.path.insert(0, str(tree))
    import torch
    from sparkinfer.comm.pcie import pcie_dcp_a2a, pcie_oneshot

    dev = torch.device("cuda", 0)
    sms = int(torch.cuda.get_device_properties(dev).multi_processor_count)
    out: dict[str, Any] = {"visible_sms": sms, "checks": []}
    for cap in (None, "64"):
        if cap is None:
            os.environ.pop("SPARKINFER_PCIE_TEST_VISIBLE_SM_COUNT", None)
        else:
            os.environ["SPARKINFER_PCIE_TEST_VISIBLE_SM_COUNT"] = cap
        for owner, required in (
            ("PCIe oneshot", pcie_oneshot.ONESHOT_REQUIRED_SMS * 2),
            ("PCIe DCP A2A", pcie_dcp_a2a.DCP_A2A_REQUIRED_SMS * 2),
        ):
            try:
                pcie_oneshot._require_full_grid_residency(
                    owner=owner, required_sms=required, device=dev, exchange_group=None
                )
                verdict = "passes"
            except RuntimeError as exc:
                verdict = f"refuses: {exc}"
            out["checks"].append({"owner": owner, "required_sms": required, "sm_cap": cap, "result": verdict})
    os.environ.pop("SPARKINFER_PCIE_TEST_VISIBLE_SM_COUNT", None)
    return out


def pools(tree: Path, profile: str, out: Path) -> dict[str, Any]:
    port = 29_617
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                str(rank),
                "--tree",
                str(tree),
                "--profile",
                profile,
                "--out",
                str(out),
                "--port",
                str(port),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    logs = []
    for p in procs:
        stdout, _ = p.communicate(timeout=300)
        logs.append({"rc": p.returncode, "tail": stdout[-2500:]})
    path = out / "pools-rank0.json"
    doc: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    doc["workers"] = logs
    return doc


def worker(rank: int, tree: Path, profile: str, out: Path, port: int) -> None:
    sys.path.insert(0, str(tree))
    import torch
    import torch.distributed as dist
    from sparkinfer.comm.pcie import (
        DcpAllToAllPool,
        DmaAllReduce,
        OneshotAllReducePool,
        pcie_dcp_a2a,
        pcie_dma,
        pcie_oneshot,
    )

    from glmlaunch.config.resolve import resolve_config
    from glmlaunch.ledger.channels import channel_plan
    from glmlaunch.ledger.inputs import UNCALIBRATED
    from glmlaunch.preflight.backends.sequence import (
        capture_passes,
        covers,
        dcp_batch,
        dma_max_bytes,
        pass_covers,
    )

    sets = ["parallel.tp=2", "parallel.dcp=2", "hardware.num_sms=132"]
    config = resolve_config(profile, sets, environ={}).config
    from glmlaunch.plan.plan import make_plan

    ledger = make_plan(config, inputs=UNCALIBRATED).ledger
    entries = {e.name: e for e in ledger.rank0.entries}
    names = list(entries)

    def predicted(covered: list[str]) -> int:
        return sum(entries[n].device_bytes // entries[n].count for n in covered)

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    group = dist.new_group([0, 1], backend="gloo")
    # Two ranks share the one GPU: NCCL refuses that, so the exchange runs over gloo on host tensors.
    pcie_oneshot._object_broadcast_device = lambda _group: "cpu"
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.ones(1, device=dev)
    steps: list[dict[str, Any]] = []

    def step(name: str, covered: list[str], fn: Any) -> Any:
        torch.cuda.synchronize(dev)
        dist.barrier(group)
        free0, reserved0 = torch.cuda.mem_get_info(dev)[0], torch.cuda.memory_reserved(dev)
        dist.barrier(group)
        value = fn()
        torch.cuda.synchronize(dev)
        dist.barrier(group)
        free1, reserved1 = torch.cuda.mem_get_info(dev)[0], torch.cuda.memory_reserved(dev)
        dist.barrier(group)
        steps.append(
            {
                "step": name,
                "covers": covered,
                "predicted_device_bytes_per_rank": predicted(covered),
                "measured_device_bytes_both_ranks": free0 - free1,
                "measured_device_bytes_per_rank": (free0 - free1) // 2,
                "torch_reserved_delta_this_rank": reserved1 - reserved0,
            }
        )
        return value

    def load_extensions() -> None:
        # the module images of the three pools (vLLM loads them before its memory snapshot): measured apart
        # so the pool steps below hold the pools' own allocations only
        for module in (pcie_oneshot, pcie_dma, pcie_dcp_a2a):
            module._load_extension()

    step("extensions.load (one-shot, DMA, DCP A2A modules)", [], load_extensions)
    e = config.comm.oneshot_eager_bytes
    oneshot = OneshotAllReducePool.from_exchange_group(
        exchange_group=group,
        device=dev,
        eager_buffer_bytes=e,
        max_size=e,
        single_channel=False,
        max_concurrent_channels=2,
    )

    def eager_oneshot() -> Any:
        oneshot.prepare_channels(("vllm:eager:allreduce",))
        return oneshot.for_stream(channel_id="vllm:eager:allreduce")

    step("oneshot.eager_channel (vllm:eager:allreduce)", covers(names, "oneshot", "eager"), eager_oneshot)
    dma_holder: list[Any] = []
    step(
        "dma.slab",
        covers(names, "dma"),
        lambda: dma_holder.append(
            DmaAllReduce(
                exchange_group=group,
                device=dev,
                max_bytes=dma_max_bytes(config),
                fp8=config.comm.dma_wire_mode,
            )
        ),
    )
    geo = config.model.geometry
    dcp = DcpAllToAllPool.from_exchange_group(
        exchange_group=group,
        device=dev,
        max_batch_size=dcp_batch(config),
        total_heads=(geo.num_attention_heads // config.parallel.tp) * config.parallel.dcp,
        head_dim=geo.kv_lora_rank,
        query_head_dim=geo.query_head_dim,
        single_channel=False,
        max_concurrent_channels=2,
    )

    def eager_dcp() -> Any:
        dcp.prepare_channels(("vllm:eager:dcp",))
        return dcp.for_stream(channel_id="vllm:eager:dcp")

    step("dcp_a2a.eager_channel (vllm:eager:dcp)", covers(names, "dcp_a2a", "eager"), eager_dcp)
    streams = []
    passes = capture_passes(config)
    for cap in passes:
        stream = torch.cuda.Stream(device=dev)
        streams.append(stream)
        checkpoints = [p.checkpoint_channels() for p in (oneshot, dcp)] if cap.rollback else []

        def enter_and_leave(cap: Any = cap, stream: Any = stream) -> None:
            with (
                torch.cuda.stream(stream),
                oneshot.capture(stream=stream, channel_id=cap.channel_id),
                dcp.capture(stream=stream, channel_id=cap.channel_id),
            ):
                pass

        covered = pass_covers(names, cap.role)
        step(f"capture.{cap.name} ({cap.channel_id})", covered, enter_and_leave)
        if cap.rollback:
            step(
                f"capture.{cap.name}.rollback",
                [],
                lambda cps=checkpoints: [
                    p.rollback_channels(c) for p, c in zip((oneshot, dcp), cps, strict=True)
                ],
            )
    plan = {
        g.role: g.count
        for g in channel_plan(
            runner=config.runner,
            mtp=config.mtp,
            graphs=True,
            single_channel=False,
            estimate_cudagraphs=config.memory.estimate_cudagraphs,
            eager_lifetime="pre-snapshot",
            semantic=True,
            piecewise=config.cudagraph.mode in ("PIECEWISE", "FULL_AND_PIECEWISE"),
        ).groups
    }
    channels = {
        "oneshot": {"alive": len(oneshot._all_channels), "named": sorted(oneshot._logical_channels)},
        "dcp_a2a": {"alive": len(dcp._all_channels), "named": sorted(dcp._logical_channels)},
        "ledger_live_channels_per_pool": plan.get("eager", 0) + plan.get("capture", 0),
    }

    def close() -> None:
        for p in (oneshot, dcp):
            p.rollback_channels((0, {}))
            p.close()
        dist.barrier(group)
        dma_holder[0].close()
        dist.barrier(group)

    free_before_close = torch.cuda.mem_get_info(dev)[0]
    close()
    torch.cuda.empty_cache()
    torch.cuda.synchronize(dev)
    dist.barrier(group)
    free_after_close = torch.cuda.mem_get_info(dev)[0]
    if rank == 0:
        doc = {
            "config": {
                "profile": profile,
                "sets": sets,
                "stack": config.stack,
                "runner": config.runner,
                "mtp": config.mtp,
                "eager_bytes": e,
                "dma_max_bytes": dma_max_bytes(config),
                "dcp_batch": dcp_batch(config),
            },
            "passes": [{"name": p.name, "channel_id": p.channel_id, "rollback": p.rollback} for p in passes],
            "steps": steps,
            "channels": channels,
            "returned_by_close_both_ranks": free_after_close - free_before_close,
            "device": torch.cuda.get_device_name(dev),
            "torch": torch.__version__,
        }
        (out / "pools-rank0.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", type=Path, required=True)
    ap.add_argument("--profile", default="turnkey")
    ap.add_argument("--phases", default="build,meta,residency,pools")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--worker", type=int)
    ap.add_argument("--port", type=int, default=29_617)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.worker is not None:
        worker(args.worker, args.tree, args.profile, args.out, args.port)
        return 0
    phases = {
        "build": lambda: build(args.tree, args.out),
        "meta": lambda: meta(args.tree),
        "residency": lambda: residency(args.tree),
        "pools": lambda: pools(args.tree, args.profile, args.out),
    }
    rc = 0
    for name in args.phases.split(","):
        t0 = time.monotonic()
        try:
            doc = phases[name]()
        except Exception:
            doc = {"error": traceback.format_exc()[-3000:]}
            rc = 1
        doc["phase_seconds"] = round(time.monotonic() - t0, 1)
        _write(args.out, name, doc)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
