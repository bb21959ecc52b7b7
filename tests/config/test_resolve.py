"""Layering, provenance and validation of the resolved configuration (real YAML files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from glmlaunch.config.resolve import resolve_config, setting_env_name
from glmlaunch.errors import ConfigError, ConfigErrors, ExitCode


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def errors_of(exc: ConfigError) -> list[str]:
    return exc.all_lines() if isinstance(exc, ConfigErrors) else [exc.one_line()]


# --- precedence, pair by pair -------------------------------------------------------------------


def test_profile_beats_default() -> None:
    r = resolve_config("gate", environ={})
    assert r.config.scheduler.max_num_batched_tokens == 3072  # default is 8192
    assert r.provenance["scheduler.max_num_batched_tokens"].kind == "profile"
    assert (
        r.provenance["scheduler.max_num_batched_tokens"].detail == "r12-exl3:scheduler.max_num_batched_tokens"
    )
    assert r.provenance["lmcache"].kind == "default"


def test_child_profile_beats_base() -> None:
    r = resolve_config("gate", environ={})
    assert r.config.memory.kv_cache_dtype == "fp8"
    assert r.provenance["memory.kv_cache_dtype"].detail == "gate:memory.kv_cache_dtype"
    assert r.config.memory.gpu_memory_utilization == 0.95
    assert r.provenance["memory.gpu_memory_utilization"].detail.startswith("r12-exl3:")


def test_env_beats_profile() -> None:
    name = setting_env_name("scheduler.max_num_seqs")
    assert name == "GLMLAUNCH_SCHEDULER__MAX_NUM_SEQS"
    r = resolve_config("r12-exl3", environ={name: "2"})
    assert r.config.scheduler.max_num_seqs == 2
    assert r.provenance["scheduler.max_num_seqs"].kind == "env"
    assert r.provenance["scheduler.max_num_seqs"].detail == name


def test_glmlaunch_set_beats_env_and_cli_beats_both() -> None:
    env = {
        "GLMLAUNCH_SCHEDULER__MAX_NUM_SEQS": "2",
        "GLMLAUNCH_SET": "scheduler.max_num_seqs=4; memory.min_margin=2GiB",
    }
    r = resolve_config("r12-exl3", environ=env)
    assert r.config.scheduler.max_num_seqs == 4
    assert r.provenance["scheduler.max_num_seqs"].detail == "GLMLAUNCH_SET scheduler.max_num_seqs"
    r = resolve_config("r12-exl3", ["scheduler.max_num_seqs=6"], environ=env)
    assert r.config.scheduler.max_num_seqs == 6
    assert r.provenance["scheduler.max_num_seqs"].kind == "cli"
    assert r.config.memory.min_margin == 2 * 1024**3


def test_profile_from_env_and_cli_profile_wins() -> None:
    assert resolve_config(None, environ={"GLMLAUNCH_PROFILE": "gate"}).profile_name == "gate"
    assert resolve_config("turnkey", environ={"GLMLAUNCH_PROFILE": "gate"}).profile_name == "turnkey"
    assert resolve_config(None, environ={}).profile_name == "turnkey"


def test_nested_merge_keeps_siblings(tmp_path: Path) -> None:
    write(
        tmp_path / "child.yaml",
        "extends: r12-exl3\nmemory:\n  allocator:\n    extra: garbage_collection_threshold:0.8\n"
        "env:\n  VLLM_LOGGING_LEVEL: DEBUG\n",
    )
    write(tmp_path / "grandchild.yaml", "extends: child.yaml\nenv:\n  MY_FLAG: 1\n")
    r = resolve_config(str(tmp_path / "grandchild.yaml"), environ={})
    alloc = r.config.memory.allocator
    assert alloc.expandable_segments is True and alloc.extra == "garbage_collection_threshold:0.8"
    # env maps merge key by key: the child's and grandchild's names join the preset's own passthroughs
    assert r.config.env["VLLM_LOGGING_LEVEL"] == "DEBUG" and r.config.env["MY_FLAG"] == "1"
    inherited = resolve_config("r12-exl3", environ={}).config.env
    assert {k: v for k, v in r.config.env.items() if k in inherited} == inherited
    assert r.provenance["memory.allocator.expandable_segments"].detail.startswith("r12-exl3:")
    assert str(tmp_path / "child.yaml") in r.provenance["memory.allocator.extra"].detail
    assert r.config.allocator_conf == "expandable_segments:True,garbage_collection_threshold:0.8"
    assert [p.name for p in r.profile_chain] == ["r12-exl3", "child", "grandchild"]


def test_null_replaces_a_section_and_drops_its_provenance(tmp_path: Path) -> None:
    text = "extends: r12-exl3\ncudagraph:\n  capture_rule: null\n  capture_sizes: [4, 8]\n"
    write(tmp_path / "sizes.yaml", text)
    r = resolve_config(str(tmp_path / "sizes.yaml"), ["scheduler.max_num_seqs=2"], environ={})
    assert r.config.cudagraph.capture_rule is None
    assert not any(k.startswith("cudagraph.capture_rule.") for k in r.provenance)
    assert r.config.capture_sizes() == [4, 8]


def test_one_spelling_of_the_capture_sizes_replaces_the_other() -> None:
    # turnkey writes a rule; a list given later wins and the inherited rule is dropped (and vice versa)
    r = resolve_config("turnkey", ["cudagraph.capture_sizes=[6,12,48]"], environ={})
    assert r.config.cudagraph.capture_rule is None and r.config.capture_sizes() == [6, 12, 48]
    assert r.provenance["cudagraph.capture_rule"].kind == "cli"
    back = resolve_config("turnkey", ["cudagraph.capture_sizes=[6,48]", "cudagraph.capture_rule.max=54"])
    assert back.config.cudagraph.capture_sizes is None and back.config.capture_sizes()[-1] == 54


def test_user_profile_dir_and_env_dict_case(tmp_path: Path) -> None:
    write(tmp_path / "mine.yaml", "extends: gate\ndescription: my gate\n")
    env = {"GLMLAUNCH_PROFILE_PATH": str(tmp_path), "GLMLAUNCH_ENV__My_Var": "x y"}
    r = resolve_config("mine", environ=env)
    assert r.config.description == "my gate"
    assert r.config.env["My_Var"] == "x y"
    assert r.provenance["env.My_Var"].detail == "GLMLAUNCH_ENV__My_Var"


def test_set_parses_lists_sizes_and_null() -> None:
    r = resolve_config(
        "r12-exl3",
        [
            "parallel.gpus=[4,5,6,7]",
            "comm.dma_min_bytes=off",
            "memory.kv_cache_memory_bytes=8GiB",
            "cudagraph.capture_rule=null",
            "cudagraph.capture_sizes=[4,8,16,32]",
            "hardware.gpu_count=8",
        ],
        environ={},
    )
    assert r.config.gpu_list == [4, 5, 6, 7]
    assert r.config.comm.dma_min_bytes is None
    assert r.config.memory.kv_cache_memory_bytes == 8 * 1024**3
    assert r.config.capture_sizes() == [4, 8, 16, 32]


# --- errors -------------------------------------------------------------------------------------


def expect_error(
    profile: str | None, overrides: list[str] | None = None, environ: dict[str, str] | None = None
) -> str:
    with pytest.raises(ConfigError) as info:
        resolve_config(profile, overrides or [], environ=environ or {})
    assert info.value.exit_code == ExitCode.CONFIG
    return "\n".join(errors_of(info.value))


def test_unknown_key_suggests() -> None:
    text = expect_error("gate", ["scheduler.max_num_seq=4"])
    assert "scheduler.max_num_seq: unknown key" in text
    assert "did you mean scheduler.max_num_seqs?" in text
    assert "from cli --set scheduler.max_num_seq" in text


def test_unknown_key_in_profile_names_file(tmp_path: Path) -> None:
    write(tmp_path / "p.yaml", "extends: gate\ncomm:\n  dma_wire_mod: ring\n")
    text = expect_error(str(tmp_path / "p.yaml"))
    assert "comm.dma_wire_mod: unknown key" in text and "did you mean comm.dma_wire_mode?" in text
    assert "p.yaml:comm.dma_wire_mod" in text


def test_wrong_type_and_range() -> None:
    assert "scheduler.max_num_seqs" in expect_error("gate", ["scheduler.max_num_seqs=many"])
    text = expect_error("gate", ["memory.gpu_memory_utilization=1.5"])
    assert "memory.gpu_memory_utilization" in text and "1.5" in text
    assert "memory.min_margin" in expect_error("gate", ["memory.min_margin=12 parsecs"])


def test_enum_typos_list_allowed_values() -> None:
    text = expect_error("gate", ["memory.kv_cache_dtype=fp9"])
    assert "allowed: auto, bfloat16, fp8" in text and "did you mean 'fp8'?" in text
    assert "allowed: v1, v2" in expect_error("gate", ["runner=v3"])
    assert "did you mean 'i8_ring'" in expect_error("gate", ["comm.dma_wire_mode=i8-ring"])


def test_dcp_must_divide_tp() -> None:
    text = expect_error("gate", ["parallel.dcp=3"])
    assert "parallel.dcp: decode context parallel size must divide tp=4" in text
    assert "allowed: 1, 2, 4" in text


def test_heads_divisible_by_tp() -> None:
    text = expect_error("gate", ["parallel.tp=3", "parallel.dcp=1", "hardware.gpu_count=8"])
    assert "64 attention heads are not divisible by tp" in text
    assert "allowed: 1, 2, 4, 8;" in text  # the TP sizes that split them, up to the GPUs there are


def test_heads_allowed_values_are_bounded_by_the_gpus() -> None:
    # a head count of 10**18 + 1: listing every divisor up to it never ended (the fuzz found it)
    text = expect_error("gate", ["model.geometry.num_attention_heads=1000000000000000001"])
    assert "attention heads are not divisible by tp" in text and "allowed: 1;" in text


def test_capture_window() -> None:
    text = expect_error("r12-exl3", ["scheduler.max_num_seqs=16"])
    assert "largest capture size 32 is below max_num_seqs x (1 + MTP) = 16 x 4 = 64" in text
    # the --set that made the profile's sizes too small is named first (issue 22, item 11)
    assert "from cli --set scheduler.max_num_seqs and profile r12-exl3:cudagraph.capture_rule" in text


def test_capture_size_opinions_are_audit_findings_not_warnings() -> None:
    # The appliance's turnkey captures 4..64 step 4 at MTP 5 and the old chain's gate [4..32] with one
    # sequence: what these graphs cost or pad is an opinion for `audit`, never a warning about a preset.
    from glmlaunch.plan.audit import run_audit

    sizes = ["cudagraph.capture_sizes=[4,8,12,48]", "cudagraph.max_capture_size=48"]
    off_step = resolve_config("turnkey", sizes, environ={})
    assert not off_step.warnings
    _, audit = run_audit("turnkey", sizes)
    (f,) = [f for f in audit.findings if f.id == "capture-off-decode-step"]
    assert "multiples of MTP+1 = 6" in f.title and "[8, 12, 48]" in f.title
    _, gate = run_audit("gate")
    (beyond,) = [f for f in gate.findings if f.id == "capture-beyond-decode-window"]
    assert "7 capture size(s) above the decode window 4" in beyond.title and beyond.recoverable_bytes > 0


@pytest.mark.parametrize(
    "name", ["r12-exl3", "gate", "turnkey", "exl3-tr3-3.25bpw", "exl3-tr3-3.36bpw", "exl3-tr3-3.42bpw"]
)
def test_shipped_profiles_do_not_warn_about_themselves(name: str) -> None:
    assert resolve_config(name, environ={}).warnings == ()


def test_compressed_wire_needs_opt_in() -> None:
    text = expect_error("gate", ["comm.dma_wire_mode=i8_ring"])
    assert "explicit opt-in" in text and "comm.allow_compressed_wire=true" in text
    r = resolve_config("gate", ["comm.dma_wire_mode=i8_ring", "comm.allow_compressed_wire=true"], environ={})
    assert r.config.comm.compressed_wire


def test_uncapped_a2a_warns_with_cost() -> None:
    r = resolve_config("gate", ["comm.dcp_a2a_max_tokens=0"], environ={})
    (w,) = [w for w in r.warnings if w.key == "comm.dcp_a2a_max_tokens"]
    assert "144.5 KiB per batched token per channel" in w.message  # 64 heads at DCP4


def test_passthrough_of_managed_name_is_an_error_and_unknown_vllm_warns(tmp_path: Path) -> None:
    write(tmp_path / "p.yaml", "extends: gate\nenv:\n  VLLM_PCIE_DMA_FP8: ring\n")
    text = expect_error(str(tmp_path / "p.yaml"))
    assert "env.VLLM_PCIE_DMA_FP8" in text and "set comm.dma_wire_mode instead" in text
    r = resolve_config(
        "gate", ["stack=b12x", "env.VLLM_MADE_UP=1", "env.SPARKINFER_PCIE_DMA_FP8=0"], environ={}
    )
    messages = {w.key: w.message for w in r.warnings}
    assert "unknown VLLM_*" in messages["env.VLLM_MADE_UP"]
    assert "never reads" in messages["env.SPARKINFER_PCIE_DMA_FP8"]


def test_vllm_args_cannot_repeat_managed_flags() -> None:
    text = expect_error("gate", ["vllm_args=[--max-num-seqs, '4']"])
    assert "--max-num-seqs is managed" in text and "set scheduler.max_num_seqs instead" in text


def test_unknown_glmlaunch_variable() -> None:
    text = expect_error("gate", environ={"GLMLAUNCH_SCHEDULER__MAX_NUM_SEQ": "2"})
    assert "did you mean GLMLAUNCH_SCHEDULER__MAX_NUM_SEQS?" in text
    assert "unknown glmlaunch variable" in expect_error("gate", environ={"GLMLAUNCH_PROFLE": "x"})


def test_extends_cycle(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "extends: b.yaml\n")
    write(tmp_path / "b.yaml", "extends: a.yaml\n")
    text = expect_error(str(tmp_path / "a.yaml"))
    assert "extends cycle" in text and "a -> b -> a" in text


def test_missing_profile_lists_known() -> None:
    text = expect_error("turnkee")
    assert "profile not found" in text and "turnkey" in text


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"- a\n- b\n", "must be a YAML mapping"),
        (b"scheduler: [1\n", "invalid YAML at line"),
        (b"description: caf\xe9\n", "not UTF-8"),
        (b"x: !!python/object/apply:os.system ['true']\n", "YAML tag not allowed"),
        (b"1: 2\n", "keys must be strings"),
        (b"extends: [gate, turnkey]\n", "extends must name one profile"),
    ],
)
def test_bad_files(tmp_path: Path, content: bytes, fragment: str) -> None:
    (tmp_path / "bad.yaml").write_bytes(content)
    assert fragment in expect_error(str(tmp_path / "bad.yaml"))


def test_many_errors_are_all_reported() -> None:
    with pytest.raises(ConfigErrors) as info:
        resolve_config("gate", ["runner=v9", "memory.kv_cache_dtype=fp9", "parallel.tp=x"], environ={})
    assert len(info.value.errors) == 3
    assert "(and 2 more errors)" in info.value.one_line()


def test_a_whole_map_setting_is_replaced_by_a_layer_and_extended_by_a_dotted_set(tmp_path: Path) -> None:
    """server.default_chat_template_kwargs is one value: a profile that gives it replaces its base's."""
    prof = tmp_path / "mine.yaml"
    prof.write_text("extends: r12-exl3\nserver:\n  default_chat_template_kwargs: {enable_thinking: false}\n")
    resolved = resolve_config(str(prof), (), environ={})
    assert resolved.config.server.default_chat_template_kwargs == {"enable_thinking": False}
    key = "server.default_chat_template_kwargs.enable_thinking"
    assert resolved.source_of(key).kind == "profile"
    added = resolve_config("r12-exl3", ("server.default_chat_template_kwargs.enable_thinking=1",), environ={})
    kwargs = added.config.server.default_chat_template_kwargs
    assert kwargs == {"reasoning_effort": "high", "enable_thinking": "1"}
    whole = resolve_config("r12-exl3", ("server.default_chat_template_kwargs={x: 1}",), environ={})
    assert whole.config.server.default_chat_template_kwargs == {"x": 1}
    emptied = resolve_config("r12-exl3", ("server.default_chat_template_kwargs={}",), environ={})
    assert not emptied.config.server.default_chat_template_kwargs
