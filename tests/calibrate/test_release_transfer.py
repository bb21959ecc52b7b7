"""Issue 29 item 1: a release's overhead beyond the r14 fit reaches every shape of that release.

The rig defaults' release offsets exist only at the DCP their documented boots ran (DCP2 for r9-r11 and
v31, DCP4 for r20-r28, DCP1 only for the README's R7 checkpoint). A plan at another DCP used to find no
offset at all and so get the r14 TP4/DCP4 figures alone, which under-predicts what later releases profile.
"""

from __future__ import annotations

from glmlaunch.calibrate.model import ReleaseOffset, pick_offset
from glmlaunch.calibrate.rigdefaults import rig_prior
from glmlaunch.config.resolve import resolve_config

OFFSETS = (
    ReleaseOffset("r11", 2, 1_500, ("a",)),
    ReleaseOffset("r14", 4, 0, ("b",)),
    ReleaseOffset("r26", 4, 700, ("c",)),
    ReleaseOffset("r28", 4, 1_300, ("d",)),
    ReleaseOffset("r34", 1, 3_000, ("e",), checkpoint="r7", mtp=False),
)


def test_the_same_release_and_dcp_is_its_own() -> None:
    off, own = pick_offset(OFFSETS, "r28", 4)
    assert off is not None and off.bytes == 1_300 and own


def test_the_nearest_release_at_the_same_dcp_before_another_dcp() -> None:
    # r28 at DCP2: r11's DCP2 offset, not r28's DCP4 one
    off, own = pick_offset(OFFSETS, "r28", 2)
    assert off is not None and off.release == "r11" and not own
    off, own = pick_offset(OFFSETS, "r29", 4)
    assert off is not None and off.release == "r28" and not own


def test_a_dcp_no_release_documented_takes_the_release_at_the_nearest_dcp() -> None:
    off, own = pick_offset(OFFSETS, "r28", 1)
    assert off is not None and (off.release, off.dcp) == ("r28", 4) and not own
    # a release with no offset anywhere: the nearest release's, at the nearest DCP
    off, _ = pick_offset(OFFSETS, "r30", 1)
    assert off is not None and off.release == "r28"
    # a checkpoint's own offsets stand for it alone
    off, own = pick_offset(OFFSETS, "r34", 1, "r7", False)
    assert off is not None and off.bytes == 3_000 and own
    # no release named: the rig's own fit
    assert pick_offset(OFFSETS, None, 1) == (None, False)


def test_a_later_release_at_dcp1_mtp0_is_not_given_the_r14_dcp4_figures() -> None:
    cfg = resolve_config(
        "exl3-tr3-3.36bpw",
        ["parallel.dcp=1", "speculative.num_speculative_tokens=0", "memory.num_gpu_blocks_override=null"],
        environ={},
    ).config
    model = rig_prior(cfg)
    assert model is not None
    offset, own = model.release_offset(cfg)
    assert offset is not None and offset.release == "r28" and offset.bytes > 0 and not own
    pred = model.predict(cfg)
    assert "transferred to DCP1" in pred.explain["p"]
    r14 = model.predict(cfg.model_copy(update={"release": "r14"}))
    assert pred.terms["p"] - r14.terms["p"] == offset.bytes
