"""What a calibration record is keyed by, and why two keys differ.

A :class:`Fingerprint` has three groups of flat, dotted fields:

* ``hardware.*``: GPU model, count, UUIDs, PCI bus ids, compute capability, driver and CUDA driver version of
  the GPUs the deployment uses. From an inventory (:mod:`glmlaunch.hardware.inventory`) when one is given,
  otherwise only what the profile declares (model, count); identity fields are then unknown.
* ``software.*``: vLLM (from the boot log, or the installed distribution), torch, b12x, sparkinfer versions
  (installed distributions, read from metadata: nothing is imported), and the configured library stack.
* ``settings.*``: every configuration leaf that can change what a rank allocates outside the KV cache.
  A deny-list drops what cannot (ports, parsers, the description) and what the calibrated terms do not depend
  on (``gpu_memory_utilization`` and a pinned KV size only move R and KV; ``min_margin`` is a policy).
  Everything else is kept, so a field added to the configuration later is compared by default.

Comparison is strict where both sides know a value, and explicit where one does not: an unknown field is
listed as *unchecked* with the reason, never treated as equal in silence.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from glmlaunch.config import paths
from glmlaunch.config.lmcache_endpoint import BASE_PORT, endpoint
from glmlaunch.config.schema import DeploymentConfig

if TYPE_CHECKING:
    from glmlaunch.hardware.inventory import Inventory

JsonLeaf = str | int | float | bool | list[Any] | dict[str, Any] | None

#: Configuration keys (dotted prefixes) that cannot change W, P, N, G_e or the pre-snapshot footprint.
NON_MEMORY_SETTINGS: tuple[str, ...] = (
    "description",
    "hardware",  # the expectation; the real hardware is the hardware.* group
    "model.served_name",
    "parallel.gpus",  # which GPUs is identity (hardware.gpu_uuids), not a memory setting
    "model.weights_per_rank",  # a hint the calibration supersedes
    "vllm_version",  # compared as software.vllm
    "memory.gpu_memory_utilization",
    "memory.kv_cache_memory_bytes",
    "memory.min_margin",
    "server.host",
    "server.port",
    "server.enable_auto_tool_choice",
    "server.tool_call_parser",
    "server.reasoning_parser",
    "server.default_chat_template_kwargs",
    "server.enable_prompt_tokens_details",
    "server.enable_force_include_usage",
    "server.enable_request_id_headers",
    # replaced by their effective values below (two spellings of one capture list must compare equal)
    "cudagraph.capture_sizes",
    "cudagraph.capture_rule",
    "memory.allocator",
    # who starts the LMCache server and after which wrapper: process management, not a rank's memory
    "lmcache_config.server",
    "lmcache_config.wrapper",
)

#: Settings added after records began to be written: left out of the fingerprint while unset (null), so a
#: record written before they existed, which cannot name them, is the same configuration as a fresh one
#: (compare() already reads an absent key as unset); set, they are part of it like any other
ADDED_SETTINGS: tuple[str, ...] = (
    "lmcache_config.chunk_size",
    "lmcache_config.disk_path",
    "lmcache_config.http_port",
    "lmcache_config.l1_gb",
    "lmcache_config.prometheus_port",
    # the R7 line (issue 30): the checkpoint's expert tiers and NCCL's cuMem switch
    "model.expert_bits",
    "comm.nccl.cumem_enable",
)

SOFTWARE_DISTRIBUTIONS: tuple[str, ...] = ("vllm", "torch", "b12x", "sparkinfer")


def _denied(key: str) -> bool:
    return any(paths.within(key, d) for d in NON_MEMORY_SETTINGS)


def memory_settings(config: DeploymentConfig) -> dict[str, JsonLeaf]:
    """The memory-relevant configuration as flat dotted keys (``settings.`` prefix not included)."""
    flat = {
        k: v
        for k, v in paths.flatten(config.model_dump(mode="json"))
        if not _denied(k) and not (v is None and k in ADDED_SETTINGS)
    }
    # The port records always carried (5555 then) is null by default now, derived from the API port as
    # upstream's wrapper derives it: its effective value where LMCache runs, 5555 where it does not (no port
    # is used, and a record of such a boot keeps the identity it always had).
    port = config.lmcache_config.port
    if port is None:
        port = endpoint(config).port if config.lmcache else BASE_PORT
    flat["lmcache_config.port"] = port
    flat["cudagraph.capture_sizes_effective"] = config.capture_sizes()
    flat["memory.allocator_conf_effective"] = config.allocator_conf
    return dict(sorted(flat.items()))


def _version(name: str) -> str | None:
    # importlib.metadata (email, zipfile, csv, socket: ~8 ms) only where the package can be imported at
    # all: on a planning machine without vLLM, `plan` answers "unknown" without loading it.
    from importlib.util import find_spec

    try:
        if find_spec(name) is None:
            return None
    except (ImportError, ValueError):
        return None
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def installed_versions(names: Iterable[str] = SOFTWARE_DISTRIBUTIONS) -> dict[str, str | None]:
    """Versions of the serving stack, when this environment is one (vLLM installed); otherwise all unknown.

    Without vLLM this is a planning machine (a laptop, CI): its torch is not the one vLLM will run with, so
    reporting it would make every record mismatch for a reason that does not exist.
    """
    names = list(names)
    if _version("vllm") is None:
        return dict.fromkeys(names)
    return {name: _version(name) for name in names}


def hardware_facts(config: DeploymentConfig, inventory: Inventory | None) -> dict[str, JsonLeaf]:
    """Identity of the GPUs the deployment uses; declared model/count only when there is no inventory."""
    if inventory is None:
        return {
            "source": "declared",
            "gpu_name": config.hardware.gpu_model,
            "gpu_count": config.parallel.tp,
            "gpu_uuids": None,
            "pci_bus_ids": None,
            "compute_capability": config.hardware.compute_capability,
            "driver_version": None,
            "cuda_driver_version": None,
        }
    wanted = config.gpu_list
    by_index = {g.index: g for g in inventory.gpus}
    gpus = [by_index[i] for i in wanted if i in by_index] or list(inventory.gpus[: config.parallel.tp])
    names = sorted({g.name for g in gpus if g.name})
    caps = sorted({g.compute_capability for g in gpus if g.compute_capability})
    return {
        "source": "inventory",
        "gpu_name": names[0] if len(names) == 1 else (names or None),
        "gpu_count": len(gpus),
        "gpu_uuids": [g.uuid for g in gpus] if all(g.uuid for g in gpus) else None,
        "pci_bus_ids": [g.pci_bus_id for g in gpus] if all(g.pci_bus_id for g in gpus) else None,
        "compute_capability": caps[0] if len(caps) == 1 else (caps or None),
        "driver_version": inventory.driver_version,
        "cuda_driver_version": inventory.cuda_driver_version,
    }


class Fingerprint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    hardware: dict[str, JsonLeaf]
    software: dict[str, JsonLeaf]
    settings: dict[str, JsonLeaf]

    def fields(self) -> dict[str, JsonLeaf]:
        out: dict[str, JsonLeaf] = {}
        for group in ("hardware", "software", "settings"):
            for k, v in getattr(self, group).items():
                out[f"{group}.{k}"] = v
        return out

    @property
    def digest(self) -> str:
        """SHA-256 of the canonical JSON of every field; the hardware source label is not identity."""
        fields = {k: v for k, v in self.fields().items() if k != "hardware.source"}
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()


def make_fingerprint(
    config: DeploymentConfig,
    inventory: Inventory | None = None,
    *,
    vllm_version: str | None = None,
    versions: Mapping[str, str | None] | None = None,
) -> Fingerprint:
    """Fingerprint a configuration; ``vllm_version`` (from a boot log) beats the installed one."""
    soft: dict[str, JsonLeaf] = dict(installed_versions() if versions is None else versions)
    if vllm_version is not None:
        soft["vllm"] = vllm_version
    soft["stack"] = config.stack
    return Fingerprint(
        hardware=hardware_facts(config, inventory),
        software=dict(sorted(soft.items())),
        settings=memory_settings(config),
    )


@dataclass(frozen=True)
class FieldDiff:
    key: str
    recorded: JsonLeaf
    current: JsonLeaf

    def describe(self) -> str:
        return f"{self.key}: recorded {_show(self.recorded)}, here {_show(self.current)}"


def _show(value: JsonLeaf) -> str:
    return "unset" if value is None else json.dumps(value, default=str)


@dataclass(frozen=True)
class Comparison:
    """How a record's fingerprint compares with the current one."""

    differences: tuple[FieldDiff, ...]
    relaxed: tuple[FieldDiff, ...]
    unchecked: tuple[str, ...]

    @property
    def matches(self) -> bool:
        return not self.differences

    def explain(self) -> str:
        if self.differences:
            return "; ".join(d.describe() for d in self.differences)
        parts = ["matches"]
        if self.relaxed:
            parts.append("allowed to differ: " + "; ".join(d.describe() for d in self.relaxed))
        if self.unchecked:
            parts.append("not checked: " + ", ".join(self.unchecked))
        return "; ".join(parts)


# Identity facts a declared-hardware fingerprint cannot know; unknown on one side means "not checked".
_MAY_BE_UNKNOWN_PREFIXES = ("hardware.", "software.")


def compare(recorded: Fingerprint, current: Fingerprint, *, relax: Iterable[str] = ()) -> Comparison:
    """Compare field by field. ``relax`` names settings keys (``settings.…``) allowed to differ."""
    relax_set = set(relax)
    rec, cur = recorded.fields(), current.fields()
    diffs: list[FieldDiff] = []
    relaxed: list[FieldDiff] = []
    unchecked: list[str] = []
    for key in sorted(set(rec) | set(cur)):
        if key == "hardware.source":
            continue
        a, b = rec.get(key), cur.get(key)
        if key.startswith(_MAY_BE_UNKNOWN_PREFIXES) and (a is None or b is None):
            side = "both" if a is None and b is None else "the record" if a is None else "this run"
            unchecked.append(f"{key} (unknown to {side})")
            continue
        if a == b:
            continue
        diff = FieldDiff(key, a, b)
        (relaxed if key in relax_set else diffs).append(diff)
    return Comparison(tuple(diffs), tuple(relaxed), tuple(unchecked))
