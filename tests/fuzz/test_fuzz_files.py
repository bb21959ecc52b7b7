"""Hostile input on the surfaces issue 22 found unfuzzed: log file names, the files glmlaunch writes,
completion candidates and values that start with '-'.

Every case keeps the contract of fuzzkit.assert_contract (documented exit code and never 1, no traceback, no
secret, under the deadline) and the issue's rule for names and files: what reaches a terminal holds no raw
control character, line separator or bidi control (output.escape), and a file glmlaunch writes is read
back: its generated header is comments only, the YAML loads, and it resolves to what was meant.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fuzzkit import (
    FIXTURES,
    PLANTED,
    Outcome,
    assert_contract,
    base_environ,
    fuzz_settings,
    hostile_text,
    resolve_sentinel,
    run_inprocess,
    seeded,
)
from fuzzkit import cases as fuzzkit_cases
from hypothesis import event, given
from hypothesis import strategies as st

BOOT = FIXTURES / "boot-logs" / "vllm-current210-cap1024-mtp3-v3-server.log"
BUILTIN = (
    "exl3-tr3-3.25bpw",
    "exl3-tr3-3.36bpw",
    "exl3-tr3-3.42bpw",
    "gate",
    "ii-r18-exl3-r7",
    "r12-exl3",
    "r34-exl3-r7",
    "turnkey",
)
#: Raw terminal and line-structure characters that must never reach stdout or stderr unescaped.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: What a file name can hold that a terminal or a YAML file must not obey.
NAME_PIECES = (
    "\n",
    "\r",
    "\u2028",
    "\u2029",
    "\u0085",
    "\t",
    "\x1b]0;PWN\x07",
    "\x1b[2J",
    "\x9b31m",
    "\u202e",
    "vllm_args: [--chat-template, evil.jinja]",
    "#",
    "- ",
    "--json",
    "-",
    "'",
    '"',
    "\\",
    "$(touch @SENTINEL@/n)",
    "`touch @SENTINEL@/b`",
    "HF_TOKEN=" + PLANTED,
    ": ",
    "{",
    "[",
    "&a *a",
    "!!python/object",
)


class Case:
    """One case's directories: work (cwd), a sentinel that must stay empty, a cache, a profile path."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="glmfuzz-files-"))
        self.work = self.root / "work"
        self.sentinel = self.root / "sentinel"
        self.profiles = self.root / "profiles"
        for d in (self.work, self.sentinel, self.root / "home", self.profiles):
            d.mkdir()
        self.env = base_environ(self.root)
        self.env["GLMLAUNCH_PROFILE_PATH"] = str(self.profiles)

    def run(self, *args: str, env: dict[str, str] | None = None, terminal: bool = True) -> Outcome:
        o = run_inprocess(args, {**self.env, **(env or {})}, self.work)
        assert_contract(o)
        if terminal:
            raw = RAW.findall(o.stdout + o.stderr)
            shown = sorted(set(raw))
            assert not raw, f"raw control characters {shown!r} reached the terminal\n{o.describe()}"
        assert not any(self.sentinel.iterdir()), f"a name ran a command: {list(self.sentinel.iterdir())}"
        return o

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def case() -> Iterator[Any]:
    yield from fuzzkit_cases(Case)


def hostile_name(suffix: str) -> st.SearchStrategy[bytes]:
    """A file name (bytes: Linux names need not be UTF-8) made of hostile pieces, ending in ``suffix``."""
    piece = st.one_of(
        st.sampled_from(NAME_PIECES),
        hostile_text(1, 2),
        st.sampled_from([b"\xff", b"\xfe\xfd", b"\xc3"]).map(lambda b: b.decode("utf-8", "surrogateescape")),
    )

    def build(parts: list[str]) -> bytes:
        text = "".join(parts).replace("/", "_").replace("\x00", "")
        raw = text.encode("utf-8", "surrogateescape")[:180]
        return raw + suffix.encode()

    return st.lists(piece, min_size=1, max_size=5).map(build)


def _name(c: Case, raw: bytes) -> bytes:
    return (
        resolve_sentinel(raw.decode("utf-8", "surrogateescape"), c.sentinel)
        .replace("/", "_")
        .encode("utf-8", "surrogateescape")
    )


def _path(directory: Path, raw: bytes) -> str:
    return os.fsdecode(os.fsencode(directory) + b"/" + raw)


def _assert_comment_header(text: str, o: Outcome) -> dict[str, Any]:
    """A generated file: comments above the data, no raw line separator or control anywhere in the
    comments, and the YAML loads to a mapping."""
    head = text.split("\ndescription:", 1)[0]
    assert not RAW.findall(head.replace("\n", "")), f"raw control characters in the header\n{o.describe()}"
    for line in head.splitlines():
        assert line.startswith("#"), f"a header line is live YAML: {line!r}\n{o.describe()}"
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict), o.describe()
    return doc


# --- hostile log file names: ingest, list, show, import ------------------------------------------------


@seeded
@fuzz_settings(60)
@given(name=hostile_name(".log"))
def test_ingest_names(case: Any, name: bytes) -> None:
    c = case()
    path = _path(c.work, _name(c, name))
    shutil.copyfile(BOOT, path)
    c.run("calibrate", "ingest", path, "--dry-run", "--json")
    ingest = c.run("calibrate", "ingest", path)
    assert ingest.code == 0, ingest.describe()
    listed = c.run("calibrate", "list", "--json")
    (record,) = json.loads(listed.stdout)["records"]
    assert not RAW.findall(record["log"]["source"]), record["log"]["source"]
    c.run("calibrate", "list")
    c.run("calibrate", "show", record["record_id"])
    c.run("plan", "-p", "r12-exl3")


@seeded
@fuzz_settings(60)
@given(name=hostile_name(".log"), base=st.sampled_from([None, *BUILTIN]))
def test_import_names_and_the_file_it_writes(case: Any, name: bytes, base: str | None) -> None:
    c = case()
    path = _path(c.work, _name(c, name))
    shutil.copyfile(BOOT, path)
    extra = ["--base", base] if base else []
    printed = c.run("profiles", "import", path, *extra, terminal=False)
    assert printed.code == 0, printed.describe()
    out = c.work / "imported.yaml"
    written = c.run("profiles", "import", path, *extra, "-o", str(out))
    assert written.code == 0, written.describe()
    text = out.read_text(encoding="utf-8")
    assert text == printed.stdout, "the file and the printed profile differ"
    doc = _assert_comment_header(text, written)
    assert "vllm_args" not in doc and doc["extends"] in BUILTIN
    # read back: it resolves, and to the boot's own vLLM flags
    argv = c.run("args", "-p", str(out), "--json")
    assert argv.code == 0, argv.describe()
    assert "--chat-template" not in json.loads(argv.stdout)["argv"]


# --- the overlay calibrate search -o writes --------------------------------------------------------------


@seeded
@fuzz_settings(30)
@given(
    value=hostile_text(1, 4),
    log_name=st.one_of(st.none(), hostile_name(".log")),
    objective=st.sampled_from(["max-gmu", "max-batched-tokens", "max-kv-bytes"]),
)
def test_search_overlay_is_read_back(case: Any, value: str, log_name: bytes | None, objective: str) -> None:
    c = case()
    if log_name is not None:
        path = _path(c.work, _name(c, log_name))
        shutil.copyfile(BOOT, path)
        assert c.run("-q", "calibrate", "ingest", path).code == 0
    value = resolve_sentinel(value, c.sentinel).replace("\x00", "")
    out = c.work / "overlay.yaml"
    args = ("calibrate", "search", "-p", "r12-exl3", "--objective", objective, "-o", str(out), "--json")
    o = c.run(*args, f"--set=env.FUZZ_NOTE={value}", f"--set=env.OPENAI_API_KEY={PLANTED}", terminal=False)
    event(f"search exit {o.code}")
    if o.code != 0:
        return
    result = json.loads(o.stdout)
    text = out.read_text(encoding="utf-8")
    assert PLANTED not in text, "a secret was written into the overlay"
    doc = _assert_comment_header(text, o)
    assert set(doc) == {"description", "extends"} | {result["knob"].split(".")[0]}, doc
    resolved = c.run("config", "-p", str(out), "--json")
    assert resolved.code == 0, resolved.describe()
    node: Any = json.loads(resolved.stdout)["config"]
    for part in result["knob"].split("."):
        node = node[part]
    assert node == result["best"]["value"], (node, result["best"]["value"])


# --- completion candidates --------------------------------------------------------------------------------


def _answer(c: Case, shell: str, line: str) -> str:
    env = {"_GLMLAUNCH_COMPLETE": f"complete_{shell}"}
    if shell == "bash":
        words = line.split(" ")
        env.update(COMP_WORDS=line, COMP_CWORD=str(len(words) - 1))
    else:
        env["_TYPER_COMPLETE_ARGS"] = line
        if shell == "fish":
            env["_TYPER_COMPLETE_FISH_ACTION"] = "get-args"
    o = c.run(env=env, terminal=False)
    assert o.code == 0, o.describe()
    return o.stdout


def _bash_unescape(word: str) -> str:
    return re.sub(r"\\(.)", r"\1", word, flags=re.DOTALL)


@seeded
@fuzz_settings(120)
@given(names=st.lists(hostile_name(".yaml"), min_size=1, max_size=4, unique=True))
def test_completion_candidates_are_the_profile_names(case: Any, names: list[bytes]) -> None:
    from fuzzkit import SECRETS

    from glmlaunch.output import is_safe, mask_secrets

    c = case()
    stems: set[str] = set()
    for raw in names:
        raw = _name(c, raw)
        if raw in (b".yaml",) or raw.startswith(b"."):
            continue
        Path(_path(c.profiles, raw)).write_text("extends: gate\n")
        stem = os.fsdecode(raw)[: -len(".yaml")]
        if is_safe(stem) and mask_secrets(stem, SECRETS) == stem:  # what completion may offer
            stems.add(stem)
    want = stems | set(BUILTIN)
    zsh = _answer(c, "zsh", "glmlaunch plan -p ").split("\0")[:-1]
    assert set(zsh[0::2]) == want, (zsh, want)
    assert all(not RAW.findall(d) for d in zsh[1::2])
    bash = _answer(c, "bash", "glmlaunch plan -p ").split("\0")[:-1]
    assert {_bash_unescape(w) for w in bash} == want
    assert all(not RAW.findall(w) for w in bash)
    fish = _answer(c, "fish", "glmlaunch plan -p ").splitlines()
    assert {line.split("\t", 1)[0] for line in fish} == want


@pytest.mark.slow
@seeded
@fuzz_settings(8)
@given(names=st.lists(hostile_name(".yaml"), min_size=1, max_size=3, unique=True))
def test_completion_in_real_shells_runs_nothing(case: Any, names: list[bytes]) -> None:
    """The scripts themselves, in bash and zsh (compadd stood in: its input is what zsh would list)."""
    from glmlaunch.clikit import completion_script

    c = case()
    for raw in names:
        raw = _name(c, raw)
        if not raw.startswith(b"."):
            Path(_path(c.profiles, raw)).write_text("extends: gate\n")
    from fuzzkit import glmlaunch_exe

    env = dict(c.env, PATH=os.pathsep.join([str(Path(glmlaunch_exe()[0]).parent), c.env["PATH"]]))
    drivers = {
        "bash": f'{completion_script("bash")}\nCOMP_WORDS=(glmlaunch plan -p ""); COMP_CWORD=3\n'
        '_glmlaunch_completion glmlaunch\nfor w in "${COMPREPLY[@]}"; do eval "printf \'%s\\0\' $w"; done\n',
        "zsh": 'compdef() { :; }\ncompadd() { print -rn -- "${(pj:\\0:)values}" }\n'
        f'{completion_script("zsh")}\nwords=(glmlaunch plan -p ""); CURRENT=4\n_glmlaunch_completion\n',
    }
    for shell, driver in drivers.items():
        exe = shutil.which(shell)
        if exe is None:
            continue
        argv = [exe, "--norc", "-c", driver] if shell == "bash" else [exe, "-f", "-c", driver]
        done = subprocess.run(argv, env=env, cwd=c.work, capture_output=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        got = set(done.stdout.decode("utf-8", "surrogateescape").split("\0")) - {""}
        assert set(BUILTIN) <= got, got
        assert not any(c.sentinel.iterdir()) and not list(c.work.iterdir()), f"{shell} ran a candidate"


# --- values that start with '-' ---------------------------------------------------------------------------

DASH_VALUES = st.one_of(
    st.sampled_from(["-", "--", "-x", "-q", "--json", "--chat-template=/etc/passwd", "-p turnkey", "--set"]),
    hostile_text(1, 3).map(lambda s: "-" + s),
    hostile_text(1, 3).map(lambda s: "--" + s),
)
STANDALONE = ("model.path", "model.revision", "model.served_name", "server.host", "server.tool_call_parser")


@seeded
@fuzz_settings(200)
@given(
    key=st.sampled_from([*STANDALONE, "env.FUZZ_DASH", "model.quantization", "server.reasoning_parser"]),
    value=DASH_VALUES,
    command=st.sampled_from(
        [
            ("args", "--json"),
            ("args",),
            ("config", "--json"),
            ("serve", "--dry-run", "--json", "--vllm-bin", "/bin/true"),
        ]
    ),
)
def test_values_that_start_with_a_dash_never_become_options(
    case: Any, key: str, value: str, command: tuple[str, ...]
) -> None:
    c = case()
    value = resolve_sentinel(value, c.sentinel).replace("\x00", "")
    o = c.run(command[0], "-p", "gate", *command[1:], f"--set={key}={value}")
    standalone = key in STANDALONE or key.startswith("model.quant") or key.endswith("parser")
    if standalone and value.startswith("-"):
        assert o.code == 2 and key in o.stderr, o.describe()
    if o.code == 0 and command == ("args", "--json"):
        argv = json.loads(o.stdout)["argv"]
        assert not argv[2].startswith("-"), argv[:3]


@seeded
@fuzz_settings(150)
@given(
    value=DASH_VALUES,
    command=st.sampled_from(
        [
            ("plan", "-p", "{v}"),
            ("profiles", "import", str(BOOT), "--base", "{v}"),
            ("profiles", "import", str(BOOT), "-o", "{v}"),
            ("plan", "-p", "turnkey", "--svg", "{v}"),
            ("calibrate", "search", "-p", "r12-exl3", "-o", "{v}"),
            ("calibrate", "search", "-p", "r12-exl3", "--min-margin", "{v}", "--no-write"),
            ("check", "-p", "gate", "--inventory", "{v}"),
            ("env", "-p", "gate", "--shell", "{v}"),
            ("diff", "gate", "{v}"),
            ("calibrate", "ingest", "{v}"),
        ]
    ),
)
def test_option_values_that_start_with_a_dash(case: Any, value: str, command: tuple[str, ...]) -> None:
    c = case()
    value = resolve_sentinel(value, c.sentinel).replace("\x00", "")
    before = set(c.work.rglob("*"))
    c.run(*[value if a == "{v}" else a for a in command])
    created = set(c.work.rglob("*")) - before
    assert not {p for p in created if p.name.startswith("-")}, f"a file named like an option: {created}"
