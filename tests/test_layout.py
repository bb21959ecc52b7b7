"""The package layout is the pipeline: no import cycles, and no stage imports a later one.

Stages in pipeline order (``ls glmlaunch/``): config → vllmlog → ledger (the memory model) → hardware →
fetch → calibrate → plan → preflight → watch → supervise → launch, with ``cli.py`` on top. ``vllmlog`` is
the grammar of vLLM's log (its lines, patterns and events); calibrate learns from a boot's log, watch
explains an OOM line, supervise reads vLLM's output live, so it sits below all three; it parses text and
needs only config's units and read limits, so it sits right above config, where nothing but config can
reach it. ``fetch`` puts the profile's pinned checkpoint on disk: it runs after the hardware checks (no
download for a host that would fail them, as upstream's entrypoint refuses) and feeds the plan the fetched
safetensors payload, so it sits between the two; ``launch`` calls its weights check in the preflight stage.
Calibration feeds the plan, so it sits below it; the memory model sits below calibration, which fits its
residuals. ``watch`` compares live
memory with the plan and feeds runtime evidence back to calibration; ``serve --supervise --watch`` runs it
on a thread, so it sits below ``supervise``. ``supervise`` runs vLLM as a child and writes calibration
records from its log, so it sits above calibration; ``launch/serve.py`` orchestrates the stages and hands
the supervisor the prepared launch, so ``launch`` sits above ``supervise``.
``errors.py`` and ``output.py`` are shared by every stage; ``output`` reads two names from the one registry
(``config.registry``) and nothing else.

Every import counts: module level, inside functions (lazy) and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "glmlaunch"
STAGES = (
    "config",
    "vllmlog",
    "ledger",
    "hardware",
    "fetch",
    "calibrate",
    "plan",
    "preflight",
    "watch",
    "supervise",
    "launch",
    "cli",
)
SHARED = {"glmlaunch", "glmlaunch.errors", "glmlaunch.files", "glmlaunch.output"}
# What the shared modules may import from the stages: the registry's names and nothing else.
SHARED_MAY_IMPORT = {"glmlaunch.config.registry", "glmlaunch.config.schema", "glmlaunch.config.units"}


def modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if not node.module.startswith("glmlaunch"):
                    continue
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in mods]
                # `from package import module` depends on the module; anything else on the module named
                targets = subs if len(subs) == len(node.names) else [node.module, *subs]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("glmlaunch")]
            for t in targets:
                if t in mods and t != mod:
                    graph[mod].add(t)
    return graph


def stage_of(module: str) -> str | None:
    if module in ("glmlaunch.__main__", "glmlaunch.clikit"):
        return "cli"
    if module in SHARED:
        return None
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_belongs_to_a_stage_or_is_shared() -> None:
    for mod in modules():
        stage = stage_of(mod)
        assert mod in SHARED or stage in STAGES, (
            f"{mod}: not in a stage package (ls glmlaunch/ should read {STAGES})"
        )


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_no_stage_imports_a_later_stage() -> None:
    bad = []
    for mod, targets in import_graph().items():
        here = stage_of(mod)
        for t in targets:
            there = stage_of(t)
            if here is None:
                if there is not None and t not in SHARED_MAY_IMPORT:
                    bad.append(f"{mod} (shared) imports {t}")
            elif there is not None and STAGES.index(there) > STAGES.index(here):
                bad.append(f"{mod} ({here}) imports {t} ({there})")
    assert bad == []


def test_the_checks_themselves_catch_a_cycle_and_a_backward_import() -> None:
    graph = {"glmlaunch.config.a": {"glmlaunch.config.b"}, "glmlaunch.config.b": {"glmlaunch.config.a"}}
    assert cycles(graph) == [["glmlaunch.config.a", "glmlaunch.config.b"]]
    assert STAGES.index(stage_of("glmlaunch.plan.render") or "") > STAGES.index(
        stage_of("glmlaunch.ledger") or ""
    )


def test_files_imports_only_errors() -> None:
    """glmlaunch.files is the writer every stage uses: it must not pull any stage in. It may use
    glmlaunch.output, the other shared module, whose escaping and masking rule its headers follow."""
    assert import_graph()["glmlaunch.files"] <= {"glmlaunch.errors", "glmlaunch.output"}
