"""The ``lmcache server`` command upstream's wrapper derives from a deployment, as a frozen value.

Each argument follows the lines of the wrapper ``lmcache_config.wrapper`` names
(:data:`glmlaunch.config.lmcache_endpoint.WRAPPERS`):

* ``appliance``: malaiwah/glm52-exl3-vast@eba43a5:scripts/glm52_lmcache_wrapper.sh L50-58 (the arguments),
  L29-42 (the initial L1 arena: at most 20 GiB), L44 (GPU workers = TP), L60-73 (the disk tier), L84-91
  (the environment), L103-107 (the ready probes); the DRAM tier is the entrypoint's
  (malaiwah/glm52-exl3-vast@eba43a5:entrypoint.sh L1281-1325: ``OFFLOAD_FRACTION`` of min(MemTotal, the
  cgroup's limit), at least 1 GiB) and the disk tier's directory ``$MODEL_ROOT/.lmcache/l2`` (L1329);
* ``release``: local-inference-lab/blackwell-llm-docker@3dd078a:launchers/lmcache-mp-wrapper.sh L114-134
  (the arguments), L70-76 (L1 24 GiB, its initial size the same, GPU workers = TP), L146-175 (the disk
  tier, ``/cache/lmcache/$PORT``), L255-269 (the environment), L304-321 (the ready probes).

Where upstream writes to a container path (``/tmp/lmcache-mp-$PORT.log``, ``/cache/lmcache``), glmlaunch
uses its own cache directory: the server's log goes into the boot directory beside vLLM's
(``lmcache.log``), the disk tier under ``<cache>/lmcache/``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from glmlaunch.config.executables import Executable, locate_executable
from glmlaunch.config.lmcache_endpoint import Endpoint, endpoint
from glmlaunch.config.registry import GLMLAUNCH_LMCACHE_BIN
from glmlaunch.config.schema import DeploymentConfig
from glmlaunch.config.units import GIB
from glmlaunch.errors import LaunchError
from glmlaunch.output import mask_argv, mask_secrets, shell_join

DEFAULT_LMCACHE = "lmcache"
#: both wrappers wait 120 one-second probes (appliance L103, release L305: ``LMCACHE_START_TIMEOUT``)
DEFAULT_START_TIMEOUT_S = 120.0
#: the line LMCache logs once its ZMQ server listens (appliance L107, release L315)
READY_TEXT = "LMCache ZMQ cache server is running"
#: the appliance keeps LMCache's own 20 GiB default as the initial arena of a larger tier (L31-41)
APPLIANCE_L1_INIT_CAP_GB = 20
#: the release line's DRAM tier when none is given (L70)
RELEASE_L1_GB = 24
#: what both wrappers fix (appliance L52-57, release L119-133)
CPU_WORKERS = 4
L2_WORKERS = 4
LOG_NAME = "lmcache.log"

Mode = Literal["ram", "disk"]


def locate_lmcache(cli_value: str | None, environ: Mapping[str, str]) -> Executable:
    """``--lmcache-bin``, else ``$GLMLAUNCH_LMCACHE_BIN``, else ``lmcache`` on the PATH of ``environ``."""
    return locate_executable(
        cli_value,
        flag="--lmcache-bin",
        env_name=GLMLAUNCH_LMCACHE_BIN,
        default=DEFAULT_LMCACHE,
        environ=environ,
    )


def require_lmcache(binary: Executable) -> str:
    if binary.path is None:
        raise LaunchError(
            f"cannot start the LMCache server: {binary.problem}",
            key=binary.source,
            hint=(
                f"install lmcache, point --lmcache-bin / {GLMLAUNCH_LMCACHE_BIN} at it, or run a server "
                "yourself and --set lmcache_config.server=external"
            ),
        )
    return binary.path


def _cgroup_limit(root: Path) -> int | None:
    for name in ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = (root / name).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return int(text)
    return None


def host_memory_bytes(root: Path = Path("/")) -> int | None:
    """min(MemTotal, the cgroup's memory limit), as the appliance sizes the tier (entrypoint.sh L1282-1286);
    None where /proc/meminfo cannot be read."""
    try:
        text = (root / "proc/meminfo").read_text()
    except OSError:
        return None
    m = re.search(r"^MemTotal:\s+([0-9]+) kB", text, re.MULTILINE)
    if m is None:
        return None
    total = int(m.group(1)) * 1024
    limit = _cgroup_limit(root)
    return min(total, limit) if limit is not None else total


@dataclass(frozen=True)
class ServerCommand:
    """What the supervisor starts before vLLM, and how it knows the server is ready."""

    argv: tuple[str, ...]
    #: the server's whole environment (the launch environment, with the wrapper's changes)
    env: Mapping[str, str]
    #: (name, value) the wrapper sets on top of the launch environment
    env_set: tuple[tuple[str, str], ...]
    endpoint: Endpoint
    mode: Mode
    l1_gb: int
    l1_init_gb: int
    l1_from: str
    l2_path: str | None
    l2_gb: int
    gpu_workers: int
    start_timeout_s: float
    ready_text: str = READY_TEXT
    log_name: str = LOG_NAME
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def source(self) -> str:
        return self.endpoint.facts.source

    def command_line(self) -> str:
        return mask_secrets(shell_join(mask_argv(self.argv)))

    def summary(self) -> str:
        """One line, as the wrappers print theirs once the server is ready (appliance L119, release L330)."""
        l2 = f"{self.l2_gb} GiB at {self.l2_path}" if self.l2_path else "disabled"
        ep = self.endpoint
        metrics = f", metrics :{ep.prometheus_port}" if ep.prometheus_port is not None else ""
        return (
            f"mode={self.mode} L1={self.l1_gb} GiB (initial {self.l1_init_gb} GiB; {self.l1_from}) "
            f"chunk={ep.chunk_size} GPU-workers={self.gpu_workers} L2={l2} on {ep.host}:{ep.port}, "
            f"health {ep.health_url}{metrics} ({ep.wrapper} wrapper: {self.source})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "argv": mask_argv(self.argv),
            "command": self.command_line(),
            "env_set": {k: mask_secrets(v) for k, v in self.env_set},
            "endpoint": self.endpoint.to_json(),
            "mode": self.mode,
            "l1_gb": self.l1_gb,
            "l1_init_gb": self.l1_init_gb,
            "l1_from": self.l1_from,
            "l2_path": self.l2_path,
            "l2_gb": self.l2_gb,
            "gpu_workers": self.gpu_workers,
            "start_timeout_s": self.start_timeout_s,
            "ready": {"healthcheck": self.endpoint.health_url, "log_line": self.ready_text},
            "log": self.log_name,
        }


def _allocator(conf: str | None) -> str:
    """LMCache registers KV by address: expandable segments forced off, other options kept (appliance
    L84-90, release L259-266)."""
    if not conf:
        return "expandable_segments:False"
    return conf.replace("expandable_segments:True", "expandable_segments:False")


def _l1(config: DeploymentConfig, host_memory: int | None) -> tuple[int, str]:
    lm = config.lmcache_config
    if lm.l1_gb is not None:
        return lm.l1_gb, "lmcache_config.l1_gb"
    if lm.wrapper == "release":
        return RELEASE_L1_GB, "the release wrapper's default (L70)"
    if host_memory is None:
        raise LaunchError(
            "cannot size LMCache's DRAM tier: /proc/meminfo is not readable here",
            key="lmcache_config.l1_gb",
            hint="set lmcache_config.l1_gb (GiB) explicitly",
        )
    # entrypoint.sh L1295 (int(MEM_BYTES * OFFLOAD_FRACTION)), L1324-1325 (GiB, at least 1)
    gb = max(1, int(host_memory * lm.offload_fraction) // GIB)
    return gb, f"offload_fraction {lm.offload_fraction} of {host_memory // GIB} GiB host memory"


def derive(
    config: DeploymentConfig,
    launch_env: Mapping[str, str],
    *,
    binary: str,
    cache_root: Path,
    host_memory: int | None,
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
) -> ServerCommand:
    """The server command for ``config`` (``lmcache: true``), its environment on top of ``launch_env``."""
    lm = config.lmcache_config
    ep = endpoint(config)
    appliance = lm.wrapper == "appliance"
    l1, l1_from = _l1(config, host_memory)
    # appliance L37-41: a tier above LMCache's 20 GiB default starts at 20 and grows; release L71: its size
    l1_init = min(l1, APPLIANCE_L1_INIT_CAP_GB) if appliance else l1
    tp = config.parallel.tp  # appliance L44, release L75: one GPU worker per TP rank
    args: list[str] = [
        binary,
        "server",
        "--host", ep.host,
        "--port", str(ep.port),
        "--chunk-size", str(ep.chunk_size),
        "--max-gpu-workers", str(tp),
        "--max-cpu-workers", str(CPU_WORKERS),
    ]  # fmt: skip
    if not appliance:
        args += ["--supported-transfer-mode", ep.facts.transfer_mode or "auto"]  # release L121
    args += [
        "--l1-size-gb", str(l1),
        "--l1-init-size-gb", str(l1_init),
        "--l1-write-ttl-seconds", "600",
        "--l1-read-ttl-seconds", "300",
        "--eviction-policy", "LRU",
        "--eviction-trigger-watermark", "0.90",
        "--eviction-ratio", "0.10",
        "--l2-store-policy", "default",
        "--l2-prefetch-policy", "retain",
        "--http-port", str(ep.http_port),
    ]  # fmt: skip
    if appliance:
        args += ["--prometheus-port", str(ep.prometheus_port)]  # L58
    else:
        # release L132-133: the defaults of L100-101
        args += ["--worker-reap-timeout-seconds", "120", "--worker-registration-grace-seconds", "3600"]
    mode: Mode = "disk" if lm.disk_gb > 0 else "ram"
    l2_path: str | None = None
    if mode == "disk":
        default = cache_root / "lmcache" / ("l2" if appliance else str(config.server.port))
        l2_path = lm.disk_path or str(default)
        adapter = {
            "type": "fs_native",
            "base_path": l2_path,
            "num_workers": L2_WORKERS,
            "use_odirect": False,
            "max_capacity_gb": float(lm.disk_gb),
        }
        args += ["--l2-adapter", json.dumps(adapter, separators=(",", ":"))]
    env_set = (
        ("PYTORCH_CUDA_ALLOC_CONF", _allocator(launch_env.get("PYTORCH_CUDA_ALLOC_CONF"))),
        ("LMCACHE_DISABLE_BANNER", launch_env.get("LMCACHE_DISABLE_BANNER") or "1"),
    )
    env = {**launch_env, **dict(env_set)}
    return ServerCommand(
        argv=tuple(args),
        env=env,
        env_set=env_set,
        endpoint=ep,
        mode=mode,
        l1_gb=l1,
        l1_init_gb=l1_init,
        l1_from=l1_from,
        l2_path=l2_path,
        l2_gb=lm.disk_gb,
        gpu_workers=tp,
        start_timeout_s=start_timeout_s,
    )
