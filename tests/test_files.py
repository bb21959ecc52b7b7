"""files.write_text: the one safe writer (atomic; regular files and new paths only)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from glmlaunch.errors import ConfigError, ExitCode
from glmlaunch.files import check_writable_target, write_text


def test_new_file_and_replaced_file(tmp_path: Path) -> None:
    out = write_text(tmp_path / "a.txt", "one\n", key="--x")
    assert out.read_text(encoding="utf-8") == "one\n"
    out.chmod(0o600)
    write_text(out, "two\n")
    assert out.read_text(encoding="utf-8") == "two\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name != "home"] == ["a.txt"]


def test_missing_parent_is_an_error_unless_asked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist") as info:
        write_text(tmp_path / "no" / "a.txt", "x", key="--svg")
    assert info.value.exit_code == ExitCode.CONFIG and info.value.key == "--svg"
    write_text(tmp_path / "no" / "a.txt", "x", make_parents=True)
    assert (tmp_path / "no" / "a.txt").read_text(encoding="utf-8") == "x"


@pytest.mark.parametrize("kind", ["dir", "fifo", "symlink", "dangling", "device", "dot"])
def test_refused_targets_are_left_alone(kind: str, tmp_path: Path) -> None:
    target = tmp_path / "t"
    if kind == "dir":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "symlink":
        (tmp_path / "real").write_text("keep", encoding="utf-8")
        target.symlink_to(tmp_path / "real")
    elif kind == "dangling":
        target.symlink_to(tmp_path / "nowhere")
    elif kind == "device":
        target = Path("/dev/null")
    else:
        target = Path(".")
    before = os.lstat(target)
    with pytest.raises(ConfigError) as info:
        write_text(target, "x", key="--save")
    assert info.value.exit_code == ExitCode.CONFIG
    after = os.lstat(target)
    assert (stat.S_IFMT(after.st_mode), after.st_ino) == (stat.S_IFMT(before.st_mode), before.st_ino)
    if kind == "symlink":
        assert (tmp_path / "real").read_text(encoding="utf-8") == "keep"
    if kind == "dangling":
        assert not (tmp_path / "nowhere").exists()
    assert all(not p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_check_accepts_regular_files_and_new_names(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x", encoding="utf-8")
    assert check_writable_target(tmp_path / "f") == tmp_path / "f"
    assert check_writable_target(tmp_path / "new") == tmp_path / "new"


def test_undecodable_text_is_written_as_its_bytes(tmp_path: Path) -> None:
    name = os.fsdecode(b"boot-\xff.log")
    out = write_text(tmp_path / "a.txt", f"log {name}\n")
    assert out.read_bytes() == b"log boot-\xff.log\n"


def test_mode_makes_a_private_file_new_or_replaced(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    target.chmod(0o644)
    write_text(target, "secret-free but private", mode=0o600)
    assert target.read_text() == "secret-free but private"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    fresh = write_text(tmp_path / "new.json", "x", mode=0o600)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600


def test_comment_header_is_comments_only_whatever_a_line_holds() -> None:
    import yaml

    from glmlaunch.files import comment_header

    lines = ["log: a\nb: injected", "x\u2028y: 1", "z\x85w", "HF_TOKEN=hf_headerSECRET99"]
    text = comment_header(lines) + "key: 1\n"
    assert yaml.safe_load(text) == {"key": 1}
    assert all(line.startswith("# ") for line in text.splitlines()[:-1])
    assert "hf_headerSECRET99" not in text


def test_refuse_existing_is_one_rule(tmp_path: Path) -> None:
    from glmlaunch.files import refuse_existing

    target = tmp_path / "out.yaml"
    refuse_existing(target, key="--output", force=False)  # a new path is fine
    target.write_text("x")
    with pytest.raises(ConfigError, match="exists"):
        refuse_existing(target, key="--output", force=False)
    refuse_existing(target, key="--output", force=True)
