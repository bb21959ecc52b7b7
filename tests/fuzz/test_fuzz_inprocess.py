"""Hostile input never crashes, hangs, leaks or injects (issue 13): the in-process volume.

Every case runs ``glmlaunch.cli.main`` in this process (as the console script does) on a fuzzed input and
asserts the contract (fuzzkit.assert_contract): an exit code from README's table and never 1, no traceback,
neither HF_TOKEN (set in every case's environment) nor a planted secret-named value in any output, and
under 5 s. Inputs start from the shipped profiles, the fixture inventories, the real boot logs and the
records ingesting them makes, and are mutated from there.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fuzzkit import (
    ARGV_FIXTURE,
    BOOT_LOGS,
    FIXTURES,
    INVENTORIES,
    PLANTED,
    SECRET_NAMES,
    Outcome,
    assert_contract,
    base_environ,
    config_keys,
    fuzz_settings,
    hostile_text,
    json_mutations,
    leaves,
    resolve_sentinel,
    run_inprocess,
    scalar_value,
    seeded,
    set_at,
    shipped_profiles,
    text_mutations,
    write,
    yaml_value,
)
from fuzzkit import cases as fuzzkit_cases
from hypothesis import given
from hypothesis import strategies as st

KEYS = config_keys()
PROFILES = shipped_profiles()
BUILTIN = sorted(PROFILES)
INVENTORY = str(FIXTURES / "inventories" / "rtxpro6000x4.json")
SHELL_NAMES = ("bash", "zsh", "sh", "fish", "pwsh", "dotenv", "json")


class Case:
    """One case's private directories: a work dir (cwd), a sentinel dir that must stay empty, a cache."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="glmfuzz-"))
        self.work = self.root / "work"
        self.sentinel = self.root / "sentinel"
        for d in (self.work, self.sentinel, self.root / "home"):
            d.mkdir()
        self.env = base_environ(self.root)
        self.env["GLMLAUNCH_PROFILE_PATH"] = str(self.root / "profiles")

    def run(self, *args: str, env: dict[str, str] | None = None) -> Outcome:
        o = run_inprocess(args, {**self.env, **(env or {})}, self.work)
        assert_contract(o)
        assert not any(self.sentinel.iterdir()), f"a value created files: {list(self.sentinel.iterdir())}"
        return o

    def text(self, value: str) -> str:
        return resolve_sentinel(value, self.sentinel)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def case() -> Iterator[Any]:
    """A factory of fresh cases (hypothesis runs many examples per test function)."""
    yield from fuzzkit_cases(Case)


def _planted_overrides() -> list[str]:
    return [f"--set=env.{name}={PLANTED}" for name in SECRET_NAMES[:2]]


COMMANDS: list[tuple[str, ...]] = [
    ("config", "--json"),
    ("config",),
    ("args",),
    ("args", "--json"),
    ("env", "--shell", "bash"),
    ("env", "--shell", "fish"),
    ("env", "--shell", "json"),
    ("plan", "--json"),
    ("plan",),
    ("audit", "--json"),
    ("check", "--inventory", INVENTORY, "--json"),
    ("serve", "--dry-run", "--json", "--inventory", INVENTORY, "--vllm-bin", "/bin/true"),
]


def _profiled(command: tuple[str, ...], profile: str) -> list[str]:
    return [command[0], "-p", profile, *command[1:]]


# --- --set ----------------------------------------------------------------------------------------


@seeded
@fuzz_settings(1600)
@given(
    data=st.data(),
    command=st.sampled_from(COMMANDS),
    profile=st.sampled_from(BUILTIN),
    n=st.integers(1, 3),
)
def test_set_overrides(
    case: Any, data: st.DataObject, command: tuple[str, ...], profile: str, n: int
) -> None:
    c = case()
    sets: list[str] = []
    for _ in range(n):
        key = data.draw(
            st.one_of(
                st.sampled_from(KEYS),
                st.sampled_from(KEYS).map(lambda k: k + "." + "x"),
                st.sampled_from([f"env.{n}" for n in SECRET_NAMES] + ["server.api_key", "hf_token", "env"]),
                hostile_text(0, 3),
            ),
            label="key",
        )
        value = data.draw(scalar_value(), label="value")
        sets.append(f"--set={c.text(key)}={c.text(value)}")
    c.run(*_profiled(command, profile), *sets, *_planted_overrides())


# --- GLMLAUNCH_SET and GLMLAUNCH_<SECTION>__<FIELD> ----------------------------------------------


def _env_name(key: str) -> str:
    from glmlaunch.config.resolve import setting_env_name

    return setting_env_name(key)


@seeded
@fuzz_settings(1000)
@given(
    data=st.data(),
    command=st.sampled_from(COMMANDS[:8]),
    profile=st.sampled_from([*BUILTIN, None]),
)
def test_environment_overrides(
    case: Any, data: st.DataObject, command: tuple[str, ...], profile: str | None
) -> None:
    c = case()
    env: dict[str, str] = {
        "GLMLAUNCH_ENV__DB_PASSWORD": PLANTED,
        f"GLMLAUNCH_ENV__{SECRET_NAMES[2]}": PLANTED,
    }
    for _ in range(data.draw(st.integers(0, 3), label="n-vars")):
        name = data.draw(
            st.one_of(
                st.sampled_from(KEYS).map(_env_name),
                st.sampled_from(KEYS).map(lambda k: _env_name(k).lower()),
                hostile_text(1, 3).map(lambda s: "GLMLAUNCH_" + s),
                st.sampled_from(["GLMLAUNCH_SERVER__API_KEY", "GLMLAUNCH_HF_TOKEN", "GLMLAUNCH_ENV__"]),
            ),
            label="name",
        )
        if "\x00" in name or "=" in name or not name:
            continue
        value = data.draw(scalar_value(), label="value").replace("\x00", "")
        env[name] = c.text(value)
    pairs = data.draw(st.lists(st.tuples(st.sampled_from(KEYS), scalar_value()), max_size=3), label="set")
    glm_set = ";".join(f"{k}={v}" for k, v in pairs) + data.draw(
        st.sampled_from(["", ";", ";;", "\n", f";env.GITHUB_TOKEN={PLANTED}", ";=", ";novalue"]), label="tail"
    )
    env["GLMLAUNCH_SET"] = c.text(glm_set).replace("\x00", "")
    if profile is not None:
        env["GLMLAUNCH_PROFILE"] = profile
    c.run(*command, env=env)


# --- profiles: structure, values, extends ----------------------------------------------------------


@st.composite
def mutated_profile(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    name = draw(st.sampled_from(BUILTIN))
    data: Any = PROFILES[name]
    paths = [p for p, _ in leaves(data)]
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["leaf", "leaf", "new-key", "section", "drop", "extends"]))
        if kind == "leaf":
            data = set_at(data, draw(st.sampled_from(paths)), draw(yaml_value()))
        elif kind == "new-key":
            data = set_at(data, (draw(st.sampled_from(KEYS)).split(".")), draw(yaml_value()))
        elif kind == "section":
            path = draw(st.sampled_from(paths))
            data = set_at(data, path[:1], draw(yaml_value()))
        elif kind == "drop" and isinstance(data, dict) and data:
            data = dict(data)
            data.pop(draw(st.sampled_from(sorted(data, key=str))), None)
        elif kind == "extends":
            data = set_at(
                data,
                ("extends",),
                draw(
                    st.one_of(
                        st.sampled_from([*BUILTIN, "fuzzed", "./fuzzed.yaml", "../", "/", "", "/dev/zero"]),
                        st.sampled_from(["/dev/stdin", "/proc/self/mem", "a" * 5000, "base", "base.yaml"]),
                        hostile_text(1, 3),
                        yaml_value(),
                    )
                ),
            )
    if draw(st.booleans()):
        data = set_at(data, ("env", SECRET_NAMES[3]), PLANTED)
    return data, name


@seeded
@fuzz_settings(750)
@given(
    profile=mutated_profile(),
    base=st.one_of(st.none(), mutated_profile()),
    command=st.sampled_from(COMMANDS),
)
def test_profile_structure(
    case: Any,
    profile: tuple[Any, str],
    base: tuple[Any, str] | None,
    command: tuple[str, ...],
) -> None:
    c = case()
    doc, _ = profile
    pdir = c.root / "profiles"
    if base is not None:  # a second fuzzed profile the first can extend (or that extends it: a cycle)
        write(pdir / "base.yaml", yaml.safe_dump(base[0], allow_unicode=True))
    try:
        text = yaml.safe_dump(doc, allow_unicode=True)
    except (yaml.YAMLError, ValueError, RecursionError):
        text = json.dumps(doc, default=str)
    path = write(pdir / "fuzzed.yaml", c.text(text))
    c.run(*_profiled(command, str(path)))
    c.run(*_profiled(command, "fuzzed"))


@seeded
@fuzz_settings(900)
@given(
    data=st.data(),
    name=st.sampled_from(BUILTIN),
    command=st.sampled_from([*COMMANDS[:8], ("profiles", "show"), ("diff",)]),
)
def test_profile_text(case: Any, data: st.DataObject, name: str, command: tuple[str, ...]) -> None:
    c = case()
    raw = (Path(__file__).resolve().parents[2] / "profiles" / f"{name}.yaml").read_text(encoding="utf-8")
    text = data.draw(text_mutations(raw), label="profile text")
    path = write(c.root / "profiles" / f"{name}-fuzzed.yaml", c.text(text))
    if command == ("profiles", "show"):
        c.run("profiles", "show", str(path))
    elif command == ("diff",):
        c.run("diff", str(path), name, "--json")
    else:
        c.run(*_profiled(command, str(path)))


# --- inventories ------------------------------------------------------------------------------------

_INVENTORY_DOCS = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in INVENTORIES}


@st.composite
def mutated_inventory(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(sorted(_INVENTORY_DOCS)))
    doc = _INVENTORY_DOCS[name]
    if draw(st.integers(0, 3)) == 0:
        raw = json.dumps(doc, indent=1)
        return draw(text_mutations(raw))
    return json.dumps(draw(json_mutations(doc)), default=str, allow_nan=True)


@seeded
@fuzz_settings(700)
@given(
    inventory=mutated_inventory(),
    command=st.sampled_from(
        [
            ("hw", "--json"),
            ("hw",),
            ("check", "-p", "turnkey"),
            ("check", "-p", "r12-exl3", "--json", "--strict"),
            ("check", "-p", "gate", "--purpose", "preflight"),
            ("serve", "-p", "turnkey", "--dry-run", "--vllm-bin", "/bin/true"),
            ("calibrate", "search", "-p", "r12-exl3", "--no-write", "--objective", "max-gmu"),
        ]
    ),
    via_env=st.booleans(),
)
def test_inventories(case: Any, inventory: str, command: tuple[str, ...], via_env: bool) -> None:
    c = case()
    path = write(c.root / "inv.json", c.text(inventory))
    if via_env:
        c.run(*command, env={"GLMLAUNCH_INVENTORY": str(path)})
    else:
        c.run(*command, "--inventory", str(path))


# --- boot logs ---------------------------------------------------------------------------------------

_LOG_LINES = {
    p.name: p.read_text(encoding="utf-8", errors="surrogateescape").splitlines(True) for p in BOOT_LOGS
}


@st.composite
def mutated_log(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(sorted(_LOG_LINES)))
    lines = _LOG_LINES[name]
    start = draw(st.sampled_from([0, 0, draw(st.integers(0, max(0, len(lines) - 1)))]))
    length = draw(st.sampled_from([len(lines), 50, 300, 1000]))
    window = "".join(lines[start : start + length])
    if draw(st.integers(0, 4)) == 0:
        return window
    return draw(text_mutations(window))


@seeded
@fuzz_settings(600)
@given(
    log=mutated_log(),
    command=st.sampled_from(
        [
            ("calibrate", "ingest", "{log}", "--dry-run", "--json"),
            ("calibrate", "ingest", "{log}", "-p", "r12-exl3"),
            ("profiles", "import", "{log}"),
            ("profiles", "import", "{log}", "--base", "gate"),
        ]
    ),
)
def test_boot_logs(case: Any, log: str, command: tuple[str, ...]) -> None:
    c = case()
    path = write(c.root / "boot.log", c.text(log).encode("utf-8", errors="surrogateescape"))
    c.run(*[str(path) if a == "{log}" else a for a in command])


# --- calibration cache files -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_records() -> list[dict[str, Any]]:
    """The records `calibrate ingest` stores for the real boot logs, as JSON documents."""
    root = Path(tempfile.mkdtemp(prefix="glmfuzz-records-"))
    try:
        env = base_environ(root)
        (root / "home").mkdir()
        logs = [str(p) for p in sorted((FIXTURES / "boot-logs").glob("*.log"))]
        out = run_inprocess(["calibrate", "ingest", *logs], env, root)
        assert out.code == 0, out.describe()
        files = sorted((root / "glmlaunch-cache").rglob("*.json"))
        assert files, "ingest stored no record"
        return [json.loads(f.read_text(encoding="utf-8")) for f in files]
    finally:
        shutil.rmtree(root, ignore_errors=True)


@seeded
@fuzz_settings(400)
@given(
    data=st.data(),
    command=st.sampled_from(
        [
            ("calibrate", "list", "--json"),
            ("calibrate", "list"),
            ("calibrate", "show", "-p", "r12-exl3", "--json"),
            ("calibrate", "show", "{id}"),
            ("plan", "-p", "r12-exl3", "--json"),
            ("check", "-p", "r12-exl3", "--inventory", INVENTORY),
            ("calibrate", "search", "-p", "r12-exl3", "--no-write", "--objective", "max-kv-bytes"),
        ]
    ),
)
def test_calibration_cache_files(
    case: Any, real_records: list[dict[str, Any]], data: st.DataObject, command: tuple[str, ...]
) -> None:
    c = case()
    cal = c.root / "glmlaunch-cache" / "calibration"
    ids: list[str] = []
    for i in range(data.draw(st.integers(1, 3), label="n-records")):
        doc = data.draw(st.sampled_from(real_records), label="record")
        ids.append(str(doc.get("record_id", doc.get("id", "x"))))
        mode = data.draw(st.sampled_from(["json", "json", "text", "raw"]), label="mode")
        if mode == "json":
            text = json.dumps(data.draw(json_mutations(doc), label="mutated"), default=str)
        elif mode == "text":
            text = data.draw(text_mutations(json.dumps(doc, indent=1)), label="mutated text")
        else:
            text = data.draw(st.sampled_from(["", "{", "null", "[]", "1e400", '{"schema_version": 999}']))
        name = data.draw(st.sampled_from([f"r{i}.json", f"{ids[-1]}.json", "x.json.tmp", ".hidden.json"]))
        write(cal / name, c.text(text))
    c.run(*[data.draw(st.sampled_from(ids)) if a == "{id}" else a for a in command])


# --- names and output paths --------------------------------------------------------------------------

_NAMES = st.one_of(
    hostile_text(1, 4),
    st.sampled_from(
        [
            "",
            ".",
            "..",
            "/",
            "/dev/null",
            "/dev/full",
            "/proc/self/status",
            "nonexistent/dir/out",
            "a" * 300,
            "x/" * 60 + "y",
            "-",
            "--json",
            "out.svg",
            "~/out",
            "/etc/passwd",
        ]
    ),
)


@seeded
@fuzz_settings(550)
@given(
    name=_NAMES,
    command=st.sampled_from(
        [
            ("plan", "-p", "turnkey", "--svg", "{out}"),
            ("hw", "--inventory", INVENTORY, "--save", "{out}"),
            ("profiles", "schema", "-o", "{out}"),
            ("profiles", "import", str(BOOT_LOGS[0]), "-o", "{out}"),
            ("calibrate", "search", "-p", "r12-exl3", "-o", "{out}"),
            ("config", "-p", "{name}"),
            ("profiles", "show", "{name}"),
            ("diff", "{name}", "turnkey"),
            ("plan", "-p", "turnkey", "--explain", "{name}"),
            ("env", "-p", "turnkey", "--shell", "{name}"),
            ("serve", "-p", "turnkey", "--dry-run", "--vllm-bin", "{name}"),
            ("serve", "-p", "turnkey", "--dry-run", "--vllm-bin", "/bin/true", "--", "--api-key", PLANTED),
            ("serve", "-p", "turnkey", "--dry-run", "--vllm-bin", "/bin/true", "--", "--x", "{name}"),
        ]
    ),
)
def test_names_and_output_paths(case: Any, name: str, command: tuple[str, ...]) -> None:
    c = case()
    value = c.text(name).replace("\x00", "")
    if value.startswith("/") and value not in ("/dev/null", "/dev/full") and "{out}" in command:
        value = value.lstrip("/") or "root"  # never write outside the case's directory
    before = set(c.work.rglob("*"))
    args = [a.replace("{out}", value).replace("{name}", value) for a in command]
    o = c.run(*args)
    created = set(c.work.rglob("*")) - before
    if "{out}" in command:
        target = (c.work / value).resolve() if value else None
        allowed = {target, *(target.parents if target is not None else ())}
        stray = {p for p in created if p.resolve() not in allowed}
        assert not stray, f"files other than the named output were created: {stray}\n{o.describe()}"
        if o.code not in (0, 4) and target is not None and _is_file(target):
            assert target in {p.resolve() for p in before} or target.stat().st_size > 0, (
                f"a failed run left an empty output file {target}\n{o.describe()}"
            )
    else:
        assert not created, f"a name created files: {created}\n{o.describe()}"


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for the file system: nothing was written there
        return False


# --- calibrate search on fuzzed profiles (item 16) ---------------------------------------------------


@seeded
@fuzz_settings(400)
@given(
    profile=mutated_profile(),
    objective=st.sampled_from(
        ["max-batched-tokens", "max-prefill-capacity", "max-kv-bytes", "max-gmu", "min-gmu", "x"]
    ),
    upper=st.one_of(
        st.none(), st.sampled_from(["1", "0.99", "1e400", "inf", "nan", "-5", "9" * 60, "96GiB"])
    ),
    step=st.one_of(st.none(), st.sampled_from(["0", "-1", "1", "7", "256", str(2**70)])),
    min_margin=st.one_of(st.none(), st.sampled_from(["0", "-1GiB", "1EiB", "1e400GiB", "nan"])),
)
def test_search_on_fuzzed_profiles(
    case: Any,
    profile: tuple[Any, str],
    objective: str,
    upper: str | None,
    step: str | None,
    min_margin: str | None,
) -> None:
    c = case()
    path = write(c.root / "profiles" / "s.yaml", c.text(yaml.safe_dump(profile[0], allow_unicode=True)))
    args = ["calibrate", "search", "-p", str(path), "--objective", objective, "--no-write", "--json"]
    for flag, value in (("--max", upper), ("--step", step), ("--min-margin", min_margin)):
        if value is not None:
            args += [flag, value]
    c.run(*args)


# --- the argv fixture: vllm arguments as extra serve arguments ---------------------------------------

_ARGV = ARGV_FIXTURE.read_text(encoding="utf-8").splitlines()[2:]


@seeded
@fuzz_settings(300)
@given(data=st.data())
def test_extra_vllm_arguments(case: Any, data: st.DataObject) -> None:
    c = case()
    picked = data.draw(st.lists(st.sampled_from(_ARGV), max_size=6), label="argv")
    extra = data.draw(st.lists(hostile_text(1, 3), max_size=3), label="extra")
    args = [c.text(a).replace("\x00", "") for a in [*picked, *extra]]
    c.run("serve", "-p", "r12-exl3", "--dry-run", "--json", "--vllm-bin", "/bin/true", "--", *args)
