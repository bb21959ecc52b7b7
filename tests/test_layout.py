"""The package layout is the pipeline: no import cycles, and no stage imports a later one.

Stages in pipeline order (``ls glmlaunch/``): config → vllmlog → ledger (the memory model) → hardware →
fetch → calibrate → plan → preflight → watch → lmcache → supervise → launch, with ``cli.py`` on top.
``vllmlog`` is the grammar of vLLM's log (its lines, patterns and events); calibrate learns from a boot's
log, watch explains an OOM line, supervise reads vLLM's output live, so it sits below all three; it parses
text and needs only config's units and read limits, so it sits right above config, where nothing but config
can reach it. ``fetch`` puts the profile's pinned checkpoint on disk: it runs after the hardware checks (no
download for a host that would fail them, as upstream's entrypoint refuses) and feeds the plan the fetched
safetensors payload, so it sits between the two; ``launch`` calls its weights check in the preflight stage.
Calibration feeds the plan, so it sits below it; the memory model sits below calibration, which fits its
residuals. ``watch`` compares live
memory with the plan and feeds runtime evidence back to calibration; ``serve --supervise --watch`` runs it
on a thread, so it sits below ``supervise``. ``lmcache`` derives the LMCache server's command from the
configuration (upstream's wrapper, as data) and probes whether the server is ready; ``supervise`` starts,
probes and drains that server around vLLM, and ``launch`` decides whether a launch has one, so it sits below
both (it needs nothing of the plan, the preflight or the watch). ``supervise`` runs vLLM as a child and
writes calibration records from its log, so it sits above calibration; ``launch/serve.py`` orchestrates the
stages and hands the supervisor the prepared launch, so ``launch`` sits above ``supervise``.
``errors.py`` and ``output.py`` are shared by every stage; ``output`` reads two names from the one registry
(``config.registry``) and nothing else.

Every import counts: module level, inside functions (lazy) and under ``TYPE_CHECKING``. The import check
cannot see a dependency passed as ``object`` and read with ``getattr``: the typing check below refuses it.
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
    "lmcache",
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


# --- stage objects are typed: no `object` where another stage's type belongs ---------------------------
#
# A stage that takes another stage's object as `object` (and reads it with getattr) hides the dependency
# from mypy and from the import check above (issue 28: the calibration crossed the ledger boundary as
# `object | None`). So a parameter or a class field may be typed `object` (alone or `| None`) only when it
# holds a value of any kind: what a user or a file wrote, a JSON node, a printed value (VALUE_NAMES), values
# passed on unread (`*args` / `**kwargs`), or a foreign library's handle in the modules that wrap that
# library (FOREIGN). Whatever is named like a stage object may be neither `object` nor `Any`: name its type.

#: names whose `object` type means "any value": validated, printed or walked, never read as a stage's object
VALUE_NAMES = frozenset({"value", "item", "key", "node"})
#: (module, function, parameter): handles of a foreign library (torch, b12x) or of the interpreter
FOREIGN = frozenset(
    {
        ("glmlaunch.ledger.b12x_bridge", "_SlabRecorder._allocate_shared_buffer", "exchange_group"),
        ("glmlaunch.ledger.b12x_bridge", "_SlabRecorder._allocate_shared_buffer", "ipc"),
        ("glmlaunch.preflight.backends.b12x", "CpuChannel.capture", "stream"),
        ("glmlaunch.preflight.backends.replay", "ReplayBackend._exchange", "local"),
        ("glmlaunch.preflight.launcher", "_signals_raise.handler", "_frame"),
    }
)
#: names of the objects on the arrows between stages: never `object` or `Any`, whatever the module
STAGE_OBJECT_NAMES = frozenset({"calibration", "cal", "inputs", "ledger", "budget", "verdict", "plan"})


def _loose(annotation: ast.expr | None) -> str | None:
    """``object`` / ``Any`` when the annotation is one of them, alone or with ``| None`` / ``Optional``."""
    if annotation is None:
        return None
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(annotation, ast.Name):
        return annotation.id if annotation.id in ("object", "Any") else None
    if isinstance(annotation, ast.Attribute):  # typing.Any
        return "Any" if annotation.attr == "Any" else None
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        sides = [annotation.left, annotation.right]
        loose = [x for x in (_loose(s) for s in sides) if x]
        nones = [s for s in sides if isinstance(s, ast.Constant) and s.value is None]
        return loose[0] if len(loose) == 1 and len(nones) == 1 else None
    if isinstance(annotation, ast.Subscript) and isinstance(annotation.value, ast.Name):
        return _loose(annotation.slice) if annotation.value.id == "Optional" else None
    return None


def loosely_typed(module: str, source: str) -> list[str]:
    """Every parameter and class field of ``source`` typed ``object`` or ``Any`` that the rule refuses."""
    bad: list[str] = []

    def judge(where: str, name: str, annotation: ast.expr | None, lineno: int, *, star: bool = False) -> None:
        loose = _loose(annotation)
        if loose is None:
            return
        if name in STAGE_OBJECT_NAMES:
            bad.append(f"{module}:{lineno} {where}({name}: {loose}): a stage object: name its type")
        elif loose == "object" and not (star or name in VALUE_NAMES or (module, where, name) in FOREIGN):
            bad.append(f"{module}:{lineno} {where}({name}: object): name the type, or see VALUE_NAMES")

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                for st in child.body:
                    if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                        judge(".".join([*scope, child.name]), st.target.id, st.annotation, st.lineno)
                visit(child, [*scope, child.name])
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                where = ".".join([*scope, child.name])
                if child.name in STAGE_OBJECT_NAMES and _loose(child.returns):  # a property, a getter
                    bad.append(f"{module}:{child.lineno} {where}() -> {_loose(child.returns)}: name its type")
                a = child.args
                for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                    judge(where, arg.arg, arg.annotation, child.lineno)
                for arg in (a.vararg, a.kwarg):
                    if arg is not None:
                        judge(where, arg.arg, arg.annotation, child.lineno, star=True)
                visit(child, [*scope, child.name])
            else:
                visit(child, scope)

    visit(ast.parse(source), [])
    return bad


def test_no_stage_takes_another_stages_object_as_object() -> None:
    bad = [b for mod, path in sorted(modules().items()) for b in loosely_typed(mod, path.read_text("utf-8"))]
    assert bad == []


def test_the_typing_check_catches_an_untyped_stage_object() -> None:
    source = (
        "from typing import Any, Optional\n"
        "def build(config: object, *, calibration: object | None = None) -> None: ...\n"
        "class Run:\n"
        "    plan: 'Any'\n"
        "    @property\n"
        "    def calibration(self) -> object | None: ...\n"
        "    def fix(self, found: Optional[object], value: object, *rest: object) -> None: ...\n"
        "    def run(self, **calibration: object) -> None: ...\n"
        "def fine(value: object, key: object | None, calibration: 'LedgerInputs') -> None: ...\n"
    )
    found = loosely_typed("glmlaunch.plan.x", source)
    assert [f.split(" ", 1)[1].split(":")[0] for f in found] == [
        "build(config",
        "build(calibration",
        "Run(plan",
        "Run.calibration() -> object",
        "Run.fix(found",
        "Run.run(calibration",
    ]
