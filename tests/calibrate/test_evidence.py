"""A boot log's figures are checked before they become a record (issue 31): against each other (vLLM's own
arithmetic in its free-memory line), the KV cache's token count, the configuration the record is keyed on and
the GPU. A forged or impossible log is refused with the figure, its value and what it disagrees with (exit 2),
nothing stored; every real boot log of the rig passes. Real logs, real profiles, a real store."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli

from glmlaunch.calibrate.evidence import boot_disagreements, record_disagreements
from glmlaunch.calibrate.ingest import ingest_logs
from glmlaunch.calibrate.learn import record_config
from glmlaunch.calibrate.store import Store
from glmlaunch.errors import EvidenceError
from glmlaunch.vllmlog.boot import parse_log_text

BOOTS = FIXTURES / "boot-logs"
#: the complete r14 boot of the field review (GMU 0.92, 8 seqs, MTP 3): F0 93.63 of 95.01 GiB
BASELINE = BOOTS / "vllm-r14-field-baseline-mtp3-c8-v2-server.log"
GIB = 1 << 30
VERSIONS = {"vllm": None, "torch": None, "b12x": None, "sparkinfer": None}
FREE_LINE = "Free memory on device (93.63/95.01 GiB)"
KV_TO_GPU = "--kv-cache-memory-bytes=8914281984"
DELTA = round((94.90 - 93.63) * GIB)


def _forge_issue(text: str) -> str:
    """The issue's reproducer: the free-memory reading and the suggested --kv-cache-memory-bytes, changed
    together (the exact T - F0 a record derives is the two suggestions' difference)."""
    text = text.replace(FREE_LINE, "Free memory on device (94.90/95.01 GiB)")
    return text.replace(KV_TO_GPU, f"--kv-cache-memory-bytes={8914281984 + DELTA}")


FORGERIES: dict[str, tuple[Callable[[str], str], str]] = {
    "issue": (
        _forge_issue,
        "--kv-cache-memory-bytes to fully use the GPU 10,277,934,100 disagrees with "
        "the 8.30 GiB vLLM printed beside it",
    ),
    "free-only": (
        lambda t: t.replace(FREE_LINE, "Free memory on device (94.90/95.01 GiB)"),
        "--kv-cache-memory-bytes to fully use the GPU 8,914,281,984 disagrees with F0 94.90 GiB - (W + P + N "
        "+ G) 85.19 GiB - vLLM's 150 MiB",
    ),
    "suggestion-and-print": (
        lambda t: t.replace(
            f"{KV_TO_GPU}` (8.3 GiB)", f"--kv-cache-memory-bytes={8914281984 + DELTA}` (9.57 GiB)"
        ),
        "--kv-cache-memory-bytes to fully use the GPU 10,277,934,100 disagrees with F0 93.63 GiB",
    ),
    "free-above-total": (
        lambda t: t.replace(FREE_LINE, "Free memory on device (96.63/95.01 GiB)"),
        "free memory at start F0 96.63 GiB disagrees with its device total T 95.01 GiB: larger",
    ),
    "zero-total": (
        lambda t: t.replace(FREE_LINE, "Free memory on device (0.00/0.00 GiB)"),
        "device total T 0.00 GiB disagrees with any GPU (a total of 0 B or less)",
    ),
    "larger-than-the-gpu": (
        lambda t: t.replace(FREE_LINE, "Free memory on device (193.63/195.01 GiB)"),
        "device total T 195.01 GiB disagrees with the GPU's 97,887 MiB (the log's nvidia-smi lines): larger "
        "than the GPU",
    ),
    "kv-tokens": (
        lambda t: t.replace("GPU KV cache size: 252,416 tokens", "GPU KV cache size: 2,524,160 tokens"),
        "the engine's GPU KV cache size 2,524,160 tokens disagrees with the logged KV memory 1.88 GiB",
    ),
    "gmu": (
        lambda t: t.replace(
            "Desired GPU memory utilization is (0.92, 87.41 GiB)",
            "Desired GPU memory utilization is (0.98, 93.11 GiB)",
        ),
        "--kv-cache-memory-bytes to fit into requested memory 2,232,367,739 disagrees with R 93.11 GiB",
    ),
    "kv-available": (
        lambda t: t.replace("Available KV cache memory: 1.88 GiB", "Available KV cache memory: 7.88 GiB"),
        "KV cache memory in use 1.88 GiB disagrees with the available KV cache memory 7.88 GiB it logged",
    ),
    "runtime-oom-larger-than-the-gpu": (
        lambda t: (
            t + "(APIServer pid=229476) INFO:     Application startup complete.\n"
            "(Worker_TP0_DCP0 pid=229732) ERROR 07-31 11:10:00 [multiproc_executor.py:700] "
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 900.00 GiB. GPU 0 has a total "
            "capacity of 94.97 GiB of which 10.00 MiB is free.\n"
        ),
        "allocation 900.00 GiB disagrees with a GPU of 94.97 GiB: larger than the GPU",
    ),
}


@pytest.fixture(scope="module")
def baseline() -> str:
    return BASELINE.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "path", sorted(BOOTS.glob("*.log")) + sorted((FIXTURES / "logs").glob("*.log")), ids=lambda p: p.name
)
def test_every_real_boot_log_is_evidence(path: Path, tmp_path: Path) -> None:
    # the five real boots, and the hand-made logs of earlier issues (which state no KV dtype: the one the
    # configuration takes by default is no claim to hold their token count to)
    [item] = ingest_logs(
        [path], config=None, profile=None, inventory=None, store=Store(tmp_path), versions=VERSIONS
    )
    assert record_disagreements(item.record, record_config(item.record)) == []
    assert item.record.evidence_refused is None


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forged_or_impossible_log_is_refused_naming_the_figure(
    name: str, baseline: str, tmp_path: Path
) -> None:
    forge, why = FORGERIES[name]
    forged = forge(baseline)
    assert forged != baseline
    log = tmp_path / "forged.log"
    log.write_text(forged, encoding="utf-8")
    store = Store(tmp_path / "calibration")
    with pytest.raises(EvidenceError) as caught:
        ingest_logs([log], config=None, profile=None, inventory=None, store=store, versions=VERSIONS)
    line = caught.value.one_line()
    assert line.startswith("LOG: the log's figures are no evidence: "), line
    assert why in line, line
    assert "\n" not in line and caught.value.exit_code == 2
    assert not (tmp_path / "calibration").exists()  # nothing stored
    # the figures alone show every forgery but the token count's, which needs the configuration's bytes
    alone = boot_disagreements(parse_log_text(forged), None)
    assert bool(alone) == (name != "kv-tokens"), alone


def test_the_store_refuses_to_write_a_forged_record(baseline: str, tmp_path: Path) -> None:
    """Validation on write: a record built from a forged log (by any path) is never saved as evidence."""
    real = tmp_path / "real.log"
    real.write_text(baseline, encoding="utf-8")
    [item] = ingest_logs([real], config=None, profile=None, inventory=None, store=None, versions=VERSIONS)
    forged_boot = parse_log_text(_forge_issue(baseline), source=str(real))
    forged = item.record.model_copy(update={"boot": forged_boot})
    store = Store(tmp_path / "calibration")
    with pytest.raises(EvidenceError):
        store.save(forged)
    # a record that says it is no evidence is kept (a supervised boot): stored, and learning skips it
    kept = forged.model_copy(update={"evidence_refused": "forged"})
    store.save(kept)
    from glmlaunch.calibrate.learn import learn

    config = record_config(kept)
    assert config is not None
    assert learn(config, store.load().records).skipped == (
        f"{kept.record_id}: its log is no evidence: forged",
    )


def test_a_record_stored_unchecked_is_not_learned_from(baseline: str, tmp_path: Path) -> None:
    """A forged record an earlier glmlaunch stored (written here by hand, as it would have written it)."""
    from glmlaunch.calibrate.learn import learn

    real = tmp_path / "real.log"
    real.write_text(baseline, encoding="utf-8")
    [item] = ingest_logs([real], config=None, profile=None, inventory=None, store=None, versions=VERSIONS)
    forged = item.record.model_copy(update={"boot": parse_log_text(_forge_issue(baseline), source=str(real))})
    root = tmp_path / "calibration"
    root.mkdir()
    (root / f"{forged.record_id}.json").write_text(forged.model_dump_json(indent=2), encoding="utf-8")
    config = record_config(forged)
    assert config is not None
    learned = learn(config, Store(root).load().records)
    assert learned.used == ()
    [skipped] = learned.skipped
    assert "its log is no evidence: Worker_TP0_DCP0's free-memory line" in skipped


def _plan(env: dict[str, str], profile: Path) -> tuple[int, dict[str, object]]:
    done = run_cli(
        "plan", "-p", str(profile), "--set", "memory.gpu_memory_utilization=0.98", "--json", env=env
    )
    return done.returncode, json.loads(done.stdout)


def test_the_reproducer_the_forged_log_no_longer_turns_the_plan(
    clean_env: dict[str, str], baseline: str, tmp_path: Path
) -> None:
    """issue 31: the real log calibrates the plan at GMU 0.98 to runtime-oom (exit 4); the forged log of the
    same boot turned it into ok, confirmed (exit 0). Now it is refused and the plan stays what it was."""
    profile = tmp_path / "boot.yaml"
    assert run_cli("profiles", "import", str(BASELINE), "-o", str(profile), env=clean_env).returncode == 0
    assert run_cli("calibrate", "ingest", str(BASELINE), env=clean_env).returncode == 0
    code, before = _plan(clean_env, profile)
    assert code == 4 and before["verdict"]["status"] == "runtime-oom"  # type: ignore[index]
    assert before["verdict"]["confidence"] == "confirmed"  # type: ignore[index]
    forged = tmp_path / "forged.log"
    forged.write_text(_forge_issue(baseline), encoding="utf-8")
    done = run_cli("calibrate", "ingest", str(forged), env=clean_env)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "error: LOG: the log's figures are no evidence: Worker_TP0_DCP0's free-memory line"
    )
    assert re.search(r"disagrees with the 8\.30 GiB vLLM printed beside it", last)
    code, after = _plan(clean_env, profile)
    assert code == 4 and after["verdict"] == before["verdict"]


def _at_gmu_090(text: str) -> str:
    """The boot's free-memory line as vLLM would have written it at GMU 0.9 (R and the suggestion to fit
    into it recomputed): consistent in itself."""
    mib = 1 << 20
    requested = round(85.51 * GIB)
    kv = requested - round(85.19 * GIB) - 150 * mib
    return text.replace(
        "Desired GPU memory utilization is (0.92, 87.41 GiB)",
        "Desired GPU memory utilization is (0.9, 85.51 GiB)",
    ).replace(
        "--kv-cache-memory-bytes=2232367739` (2.08 GiB)",
        f"--kv-cache-memory-bytes={kv}` ({kv / GIB:.2f} GiB)",
    )


def test_the_gmu_is_held_to_the_configuration_only_where_the_log_states_one(
    baseline: str, tmp_path: Path
) -> None:
    # the launcher's table states GMU 0.92: a free-memory line of 0.9 disagrees with it
    stated = tmp_path / "stated.log"
    stated.write_text(_at_gmu_090(baseline), encoding="utf-8")
    with pytest.raises(EvidenceError) as caught:
        ingest_logs([stated], config=None, profile=None, inventory=None, store=None, versions=VERSIONS)
    assert (
        "GPU memory utilization 0.9 disagrees with memory.gpu_memory_utilization 0.92" in caught.value.message
    )
    # where nothing states it, the configuration's 0.92 is the fork's default, filled in: not a claim
    unstated = tmp_path / "unstated.log"
    unstated.write_text(
        _at_gmu_090(baseline).replace(
            "      GPU_MEMORY_UTILIZATION             = 0.92                         [env]\n", ""
        ),
        encoding="utf-8",
    )
    [item] = ingest_logs([unstated], config=None, profile=None, inventory=None, store=None, versions=VERSIONS)
    assert item.record.evidence_refused is None
    store = Store(tmp_path / "calibration")
    store.save(item.record)  # what ingest accepts, the store writes


def test_kv_tokens_are_held_to_the_record_only_as_far_as_the_log_states_what_sizes_it(
    baseline: str, tmp_path: Path
) -> None:
    # The indexer sharding splits the indexer part of the KV record (ledger/kv_cache.py); a log that does not
    # state it is not refused for a token count that another sharding its DCP allows explains, while a
    # configuration that claims the sharding (a profile's) holds the log to it.
    from glmlaunch.calibrate.evidence import _record_sizes, shown_settings

    boot = parse_log_text(baseline)
    claimed = shown_settings(boot)
    assert "dcp_policy.indexer_shards" not in claimed
    [item] = ingest_logs([BASELINE], config=None, profile=None, inventory=None, store=None, versions=VERSIONS)
    cfg = record_config(item.record)
    stated, unstated = _record_sizes(cfg, None), _record_sizes(cfg, claimed)
    assert len(stated) == 1 and stated[0] in unstated and len(unstated) > 1, (stated, unstated)
    # the tokens the same KV memory holds at another sharding
    other = max(unstated, key=lambda size: abs(size - stated[0]))
    kv = next(r.kv_available_bytes for r in boot.ranks if r.kv_available_bytes is not None)
    tokens = kv // other * cfg.parallel.dcp // 64 * 64
    resharded = tmp_path / "resharded.log"
    resharded.write_text(
        baseline.replace("GPU KV cache size: 252,416 tokens", f"GPU KV cache size: {tokens:,} tokens"),
        encoding="utf-8",
    )
    [kept] = ingest_logs(
        [resharded], config=None, profile=None, inventory=None, store=None, versions=VERSIONS
    )
    assert kept.record.evidence_refused is None
    held = [
        d
        for d in boot_disagreements(parse_log_text(resharded.read_text()), cfg)
        if "KV cache size" in d.text()
    ]
    assert held, "a configuration that claims its sharding holds the log to it"
