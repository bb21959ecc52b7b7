"""Releases as (line, number): Gilded Gnosis (bare rNN or gg-rNN) and Infernal Invocation (ii-rNN), the
older vNN image line; their vLLM build strings; the b12x-ii generation; the trellis-mcg-b6 spelling; the
prefill block rule of three-tier checkpoints. Real YAML profiles, the real CLI in a subprocess where the
exit code is the point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from glmlaunch.config.environment import produced_env
from glmlaunch.config.releases import (
    RELEASE_BANDS,
    Release,
    canonical_release,
    parse_release,
    release_distance,
    release_number,
    release_of,
    stack_is_read,
    stack_of_release,
)
from glmlaunch.config.render_args import full_argv
from glmlaunch.config.resolve import resolve_config
from glmlaunch.errors import ConfigErrors, ExitCode

REPO = Path(__file__).resolve().parents[2]
GG_R14 = "0.11.2.dev280+gilded.gnosis.v20.vllm749050e.si8110e3e.fi801d57a.cu132.20260730.r14"
#: the Infernal Invocation r18 build string (blackwell-llm-docker
#: build-deepseek-infernal-invocation-cu133-torch213.sh@d568788 L59, the trees of its r18 locks)
II_R18 = "0.26.1rc0+infernal.invocation.cu133.r18.vllmf0fa1ce.b12x75787c7"


@pytest.mark.parametrize(
    ("text", "line", "number", "label"),
    [
        ("r28", "gg", 28, "r28"),
        ("gg-r28", "gg", 28, "r28"),
        ("GG-R28", "gg", 28, "r28"),
        ("ii-r18", "ii", 18, "ii-r18"),
        (" II-r18 ", "ii", 18, "ii-r18"),
        ("v31", "v", 31, "v31"),
    ],
)
def test_a_release_is_a_line_and_a_number(text: str, line: str, number: int, label: str) -> None:
    rel = parse_release(text)
    assert rel == Release(line, number)  # type: ignore[arg-type]
    assert rel is not None and rel.label == label == canonical_release(text)


@pytest.mark.parametrize("text", ["", "28", "ii-v3", "gg-", "r", "x-r18", "ii-r18a"])
def test_what_is_no_release(text: str) -> None:
    assert parse_release(text) is None
    assert canonical_release(text) == text


def test_both_lines_build_strings_name_their_release() -> None:
    assert release_of(GG_R14) == "r14"
    assert release_of(II_R18) == "ii-r18"
    assert release_of(II_R18.upper()) == "ii-r18"
    assert release_of("0.11.2.dev280+g1234abc") is None
    assert release_of("dev") is None and release_of(None) is None


def test_the_lines_keep_their_numbers_apart() -> None:
    # the same number on two lines is two releases: a bare number is Gilded Gnosis
    assert release_number("r18") == 18 and release_number("ii-r18") is None
    assert stack_of_release("r18") == "sparkinfer-r28"
    assert stack_of_release("ii-r18") == "b12x-ii"
    assert release_distance("r17", "r18") == 1
    assert release_distance("ii-r16", "ii-r18") == 2
    # across the lines through the Gilded Gnosis release whose memory code ii shares (r34): always further
    # than any release of one line
    assert release_distance("ii-r18", "r34") == 1000 and release_distance("ii-r18", "r28") == 1006
    assert release_distance("v31", "r14") is None and release_distance("v31", "v31") == 0


def test_bands_carry_their_line() -> None:
    assert RELEASE_BANDS["b12x-ii"].labels() == ["ii-r16", "ii-r17", "ii-r18"]
    assert RELEASE_BANDS["b12x-ii"].text() == "ii-r16-r18"
    assert RELEASE_BANDS["b12x-r32"].text() == "r32-r34"
    # a tree read is evidence; an ii release outside r16-r18 or a GG release after r34 is a guess
    assert stack_is_read("ii-r17") and stack_is_read("r34") and stack_is_read("r9")
    assert not stack_is_read("ii-r5") and not stack_is_read("r35") and not stack_is_read("v31")


def test_profiles_and_sets_store_one_spelling_per_release() -> None:
    assert resolve_config("gate", ["release=gg-r12"], environ={}).config.release == "r12"
    config = resolve_config("ii-r18-exl3-r7", ["release=II-R18"], environ={}).config
    assert config.release == config.release_effective == "ii-r18"
    # null: the release the vLLM build names, on either line
    config = resolve_config("ii-r18-exl3-r7", ["release=null", f"vllm_version={II_R18}"], environ={}).config
    assert config.release_effective == "ii-r18"
    with pytest.raises(ConfigErrors):
        resolve_config("gate", ["release=ii-v18"], environ={})


def test_release_ii_r18_resolves_to_b12x_ii() -> None:
    got = resolve_config("r12-exl3", ["release=ii-r18", "stack=b12x-r32"], environ={})
    warning = next(w for w in got.warnings if w.rule == "stack-release")
    assert "release ii-r18 runs the b12x-ii (releases ii-r16-r18) library generation" in warning.message
    assert warning.hint == "--set stack=b12x-ii"
    assert not [w for w in resolve_config("ii-r18-exl3-r7", environ={}).warnings if w.rule == "stack-release"]
    # an ii release whose tree nobody read is not evidence against the stack it names
    got = resolve_config("r12-exl3", ["release=ii-r5", "stack=b12x-r32"], environ={})
    assert not [w for w in got.warnings if w.rule == "stack-release"]


def test_the_image_line_resolves_as_before_with_a_note() -> None:
    got = resolve_config("gate", ["release=v31"], environ={})
    assert got.config.release_effective == "v31"
    note = next(n for n in got.notes if n.rule == "release-image-line")
    assert "v31 is an image of the older vNN image line" in note.message
    assert not [w for w in got.warnings if w.rule == "stack-release"]


def test_trellis_mcg_b6_is_exl3_b6() -> None:
    a = resolve_config("r34-exl3-r7", ["model.online_quant=trellis-mcg-b6"], environ={}).config
    b = resolve_config("r34-exl3-r7", ["model.online_quant=exl3-b6"], environ={}).config
    assert a.model.online_quant == b.model.online_quant == "exl3-b6"
    assert produced_env(a) == produced_env(b) and full_argv(a) == full_argv(b)
    with pytest.raises(ConfigErrors):
        resolve_config("r34-exl3-r7", ["model.online_quant=trellis-mcg-b4"], environ={})


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "glmlaunch", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_trellis_mcg_b6_plans_as_exl3_b6(clean_env: dict[str, str]) -> None:
    plans = [
        json.loads(
            _cli("plan", "-p", "turnkey", "--json", "--set", f"model.online_quant={q}", env=clean_env).stdout
        )
        for q in ("trellis-mcg-b6", "exl3-b6")
    ]
    for doc in plans:
        doc.pop("overrides", None)
    assert plans[0] == plans[1]
    assert plans[0]["budget"]["weights_bytes"] > 0


def test_check_refuses_prefill_block_64_on_the_three_tier_checkpoint(clean_env: dict[str, str]) -> None:
    res = _cli("check", "-p", "r34-exl3-r7", "--set", "env.VLLM_EXL3_PREFILL_BLOCK_M=64", env=clean_env)
    assert res.returncode == ExitCode.CONFIG, res.stderr
    assert "env.VLLM_EXL3_PREFILL_BLOCK_M" in res.stderr and "109,568 B of shared memory" in res.stderr
    assert res.stdout == ""


def test_the_block_rule_reads_the_tiers_and_the_architecture() -> None:
    block64 = ["env.VLLM_EXL3_PREFILL_BLOCK_M=64"]
    # block 32 is what vLLM picks itself; the two-tier 3.42 bpw checkpoint is not concerned
    resolve_config("r34-exl3-r7", ["env.VLLM_EXL3_PREFILL_BLOCK_M=32"], environ={})
    resolve_config("exl3-tr3-3.42bpw", block64, environ={})
    # the R7 checkpoint under a local directory of its name, and another name that states its tiers
    with pytest.raises(ConfigErrors):
        resolve_config(
            "r34-exl3-r7", [*block64, "model.path=/models/GLM-5.2-EXL3-TR3v4-3.5bpw-MTP78/"], environ={}
        )
    with pytest.raises(ConfigErrors):
        resolve_config("exl3-tr3-3.42bpw", [*block64, "model.expert_bits=[5,3,4]"], environ={})
    # another architecture than SM12x launches it
    resolve_config("r34-exl3-r7", [*block64, "hardware.compute_capability=10.0"], environ={})
    # the shipped r12 preset sets 64: extending it onto the R7 checkpoint is refused
    with pytest.raises(ConfigErrors) as err:
        resolve_config(
            "r12-exl3",
            ["model.path=brandonmusic/GLM-5.2-EXL3-TR3v4-3.5bpw-MTP78", "parallel.dcp=1"],
            environ={},
        )
    assert "three-tier K3/K4/K5" in str(err.value)
