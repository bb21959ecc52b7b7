"""Issue 29 item 1: a release is a factor of the fit identified by its build, never by a version string
alone. Two boots reporting one vLLM version string on different trees keep their own N."""

from __future__ import annotations

from glmlaunch.calibrate.model import Point, build_key, checkpoint_key, fit_model, itemized
from glmlaunch.calibrate.rigdefaults import rig_prior
from glmlaunch.config.resolve import resolve_config

MIB = 1024 * 1024
VERSION = "0.11.2.dev280+gilded.gnosis.v20.vllm749050e.si8110e3e.fi801d57a.cu132.20260730.r14"


def _point(label: str, stack: str, n_residual: int) -> Point:
    cfg = resolve_config("r12-exl3", [f"stack={stack}", "release=null"], environ={}).config
    return Point(
        label=label,
        source=f"{label}.log",
        config=cfg,
        vllm_version=VERSION,
        checkpoint=checkpoint_key(cfg),
        n=itemized(cfg)["n"] + n_residual,
    )


def test_one_version_string_on_two_trees_is_two_builds() -> None:
    a, b = _point("original", "sparkinfer-r14", 200 * MIB), _point("repair", "sparkinfer-r28", 450 * MIB)
    assert build_key(VERSION, a.config) != build_key(VERSION, b.config)
    model = fit_model([a, b])
    na, nb = model.n_build(VERSION, a.config), model.n_build(VERSION, b.config)
    assert na is not None and nb is not None
    assert (na[1], na[2]) == (200 * MIB, ("original",)) and (nb[1], nb[2]) == (450 * MIB, ("repair",))
    assert model.predict(a.config, VERSION).residuals["n"] == 200 * MIB
    assert model.predict(b.config, VERSION).residuals["n"] == 450 * MIB
    # a third tree reporting the same string is no build on record: the fit over every build
    other = a.config.model_copy(update={"stack": "b12x-r32"})
    assert model.n_build(VERSION, other) is None


def test_the_rig_defaults_key_n_by_build() -> None:
    cfg = resolve_config("r12-exl3", ["release=r14"], environ={}).config
    model = rig_prior(cfg)
    assert model is not None
    assert all(" | " in key for key, _, _ in model.n_by_version)
    assert model.n_build(VERSION, cfg) is not None  # the r14 logs' build
    # the bare "dev" of the field baseline log is its own build, not every build that says "dev"
    assert model.n_build("dev", cfg) is None
    assert model.n_build("dev", cfg.model_copy(update={"release": None})) is not None
