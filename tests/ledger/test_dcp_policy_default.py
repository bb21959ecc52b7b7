"""Query split and top-k owner merge left unset: what vLLM and b12x decide, and what the plan says.

The shipped profiles set the policy as the deployments they follow do (the appliance turns the query split
on). Left unset (null), glmlaunch exports neither ``VLLM_DCP_QUERY_SPLIT`` nor
``VLLM_DCP_TOPK_OWNER_MERGE``, so vLLM reads its own default for both, 0: no top-k exchange slab is
allocated. The plan must neither charge the slab nor print a note about it on every run; it lists the slab
as latent (a caller's variable could turn it on).

b12x's own policy for the query split is a measurement (``overlap_probe.decide_query_split`` over the
probe's full-phase timings): fed the timings the rig's calibration measured (the field boot log), it
turns the split off, the same answer as vLLM's default.
"""

from __future__ import annotations

import json
import re

import pytest

from glmlaunch.config.resolve import resolve_config
from glmlaunch.ledger import build_ledger
from tests.conftest import FIXTURES, REPO, run_cli

PROFILES = sorted(p.stem for p in (REPO / "profiles").glob("*.yaml"))
UNSET = ["dcp_policy.query_split=null", "dcp_policy.topk_owner_merge=null"]
FIELD_LOG = FIXTURES / "boot-logs" / "vllm-r14-field-baseline-mtp3-c8-v2-server.log"


@pytest.mark.parametrize("profile", PROFILES)
def test_shipped_profiles_plan_without_notes_about_themselves(
    profile: str, clean_env: dict[str, str]
) -> None:
    assert build_ledger(resolve_config(profile).config).notes == ()
    out = run_cli("plan", "-p", profile, env=clean_env)
    assert out.returncode in (0, 4), out.stderr
    assert "dcp_policy" not in out.stderr and "top-k" not in out.stderr
    doc = json.loads(run_cli("plan", "-p", profile, "--json", env=clean_env).stdout)
    assert doc["notes"] == []
    # with the policy unset the hazard is still visible, as data: a latent entry with its size and the
    # condition that charges it
    unset = [a for kv in UNSET for a in ("--set", kv)]
    doc = json.loads(run_cli("plan", "-p", profile, *unset, "--json", env=clean_env).stdout)
    assert doc["notes"] == []
    slabs = [e for e in doc["latent"] if e["name"] == "dcp_topk.slab"]
    if resolve_config(profile).config.parallel.dcp == 1:
        # no DCP group (the R7 composes at DCP 1): no exchange to size, charged or latent
        charged = [e for r in doc["ranks"] for e in r["entries"] if e["name"] == "dcp_topk.slab"]
        assert slabs == [] and charged == []
        return
    (slab,) = slabs
    assert slab["requested_bytes"] > 0 and "unset: vLLM's default, off" in slab["condition"]


#: the profiles with a DCP group (the R7 composes run DCP 1: no DCP variable is exported there)
DCP_PROFILES = [p for p in PROFILES if resolve_config(p, environ={}).config.parallel.dcp > 1]


@pytest.mark.parametrize("profile", DCP_PROFILES)
def test_unset_policy_exports_nothing_so_vllm_keeps_its_default(
    profile: str, clean_env: dict[str, str]
) -> None:
    unset = [a for kv in UNSET for a in ("--set", kv)]
    out = run_cli("env", "-p", profile, *unset, "--shell", "json", env=clean_env)
    assert out.returncode == 0, out.stderr
    names = set(re.findall(r'"(VLLM_[A-Z0-9_]+)"', out.stdout))
    assert "VLLM_USE_B12X_DCP_A2A" in names  # the document does list the DCP variables it manages
    assert not names & {"VLLM_DCP_QUERY_SPLIT", "VLLM_DCP_TOPK_OWNER_MERGE"}
    # the moment either is set, it is exported and the slab is charged (no longer latent)
    on = resolve_config(profile, [*UNSET, "dcp_policy.query_split=true"]).config
    led = build_ledger(on)
    assert led.entry("dcp_topk.slab") is not None
    assert "dcp_topk.slab" not in {e.name for e in led.latent}


def _field_query_split_timings() -> list[tuple[int, float, float]]:
    """(context, full_ms, split_ms) from the calibrator table in the field boot log."""
    text = FIELD_LOG.read_text(encoding="utf-8", errors="replace")
    table = text.split("Query split: indexer + exact owner candidate merge + final gather", 1)[1]
    rows = re.findall(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+-?[\d.]+%", table, flags=re.MULTILINE)
    return [(int(c), float(f), float(s)) for c, f, s in rows[:3]]


@pytest.mark.b12x
def test_b12x_policy_on_the_rigs_measurements_turns_the_query_split_off() -> None:
    probe = pytest.importorskip("b12x.comm.pcie.overlap_probe")
    timings = _field_query_split_timings()
    assert [c for c, _f, _s in timings] == [8192, 65536, 131072]
    defaults = probe.ProbeConfig()
    decisions = [
        (
            context,
            probe.decide_query_split(
                full_ms=full,
                split_ms=split,
                wire_bytes_per_rank=0,
                minimum_query_split_gain=defaults.minimum_query_split_gain,
            ),
        )
        for context, full, split in timings
    ]
    assert not any(d.enable_query_split for _c, d in decisions)
    # the library's policy field: dcp_query_split = int(crossover > 0)
    assert probe.query_split_crossover_tokens(decisions) == 0
    assert '"dcp_query_split": 0' in FIELD_LOG.read_text(encoding="utf-8", errors="replace")


@pytest.mark.b12x
def test_latent_slab_is_b12x_layout() -> None:
    lib_topk = pytest.importorskip("b12x.comm.pcie.pcie_dcp_topk")
    config = resolve_config("turnkey", ["stack=b12x", *UNSET]).config
    led = build_ledger(config, library="b12x")
    (slab,) = [e for e in led.latent if e.name == "dcp_topk.slab"]
    # R: the DCP A2A batch (VLLM_DCP_A2A_MAX_TOKENS, 16 on the turnkey) rounded to the DCP world size
    rows = config.comm.dcp_a2a_max_tokens
    layout = lib_topk._candidate_staging_layout(
        signal_bytes=lib_topk._SIGNAL_BYTES, max_rows=rows, topk=2048, world_size=2
    )
    assert slab.requested_bytes == layout.slab_bytes
    assert slab.device_bytes % (2 * 1024 * 1024) == 0 and slab.device_bytes >= slab.requested_bytes
