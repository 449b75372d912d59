"""The layout shows the pipeline (docs/architecture.md): codegen/'s folders are stages, and
every import, at a module's top or inside a function, points down the stage order, so no
two modules, folders or packages import each other."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Bottom to top: a module may import its own stage and the stages before it.
STAGES = [
    "codegen.ir",           # values, ops, blocks, dims, dtypes, errors
    "codegen.ops",          # the primitive and structured-op tables, builder, printer, verifier
    "dsl",                  # .mdl text to IR
    "codegen.transforms",   # prepare, autodiff, passes
    "codegen.reference",    # the NumPy interpreter, gradient checks
    "codegen.backend",      # lowering, memory plan, rendering: shared by every target
    "codegen.compile",      # toolchains, the runtime, the build cache
    "codegen.targets",      # cpu, cuda: a backend's hooks plus a toolchain
    "codegen.pipeline",     # the stages in order, for every entry point
    "codegen.drawing",      # mdlc graph
    "codegen.export",       # mdlc export: ONNX
    "codegen.models",       # what as_module and DataParallel ask of a model argument
    "codegen.pytorch",
    "codegen.distributed",
    "codegen.profile",      # a profiled build's report, mdlc profile
    "codegen.cli",
    "codegen",              # load()
]


def stage(module: str) -> int:
    """The stage of a module: the longest STAGES prefix naming it."""
    best = max((s for s in STAGES if module == s or module.startswith(s + ".")), key=len)
    return STAGES.index(best)


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted([*ROOT.glob("codegen/**/*.py"), *ROOT.glob("dsl/**/*.py")]):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, known: dict) -> set[str]:
    """The mdl modules `name` imports anywhere in its file (a `from P import m` of a
    module m counts as importing P.m)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known)
    return {m for m in found if m in known}


def test_every_module_has_a_stage_and_imports_only_down():
    known = modules()
    upward = []
    for name, path in known.items():
        for target in imports(name, path, known):
            if stage(target) > stage(name):
                upward.append(f"{name} ({STAGES[stage(name)]}) imports {target} "
                              f"({STAGES[stage(target)]})")
    assert not upward, "\n".join(upward)


def test_no_import_cycle_between_modules():
    known = modules()
    graph = {name: imports(name, path, known) - {name} for name, path in known.items()}
    done, active, cycles = set(), [], []

    def visit(node):
        if node in active:
            cycles.append(" -> ".join(active[active.index(node):] + [node]))
            return
        if node in done:
            return
        active.append(node)
        for nxt in sorted(graph[node]):
            # a package's __init__ importing its own modules is how packages fill tables
            if not nxt.startswith(node + "."):
                visit(nxt)
        active.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)
    assert not cycles, "\n".join(cycles)


def test_stage_folders_are_the_folders():
    """Every folder of codegen/ is a stage of the list (a new folder needs a place)."""
    folders = {f"codegen.{p.name}" for p in (ROOT / "codegen").iterdir()
               if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(STAGES)


def test_the_architecture_names_files_that_exist():
    """Every file or folder docs/architecture.md names by path is there (a module that
    moves takes its description along)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:codegen|dsl|cpp_runtime|tests|templates)/[\w/.<>-]+)`", text))
    missing = [p for p in sorted(named) if "<" not in p and not (ROOT / p).exists()]
    assert not missing, missing
    for stage in STAGES:  # every stage of the order is described
        assert f"`{stage.replace('.', '/')}" in text, stage


def test_the_runtime_gets_the_python_tables_facts_from_generated_code():
    """Facts of Python's tables reach the C++ runtime through the spec generated code
    hands it, never as a second spelling there: dtype names (ir/dtypes.py, as DTypeSpec),
    the regularizers' kinds (ir/graph.py's PENALTIES, as strengths), the arenas
    (backend/module.py's ARENAS, as a count) and the derived-dim marker."""
    runtime = "\n".join(p.read_text() for p in (ROOT / "cpp_runtime").rglob("*")
                        if p.suffix in (".h", ".cpp", ".cu"))
    for spelled in ('"f32', '"f64', '"i32', "Penalty", "arena_infer", "arena_fwd",
                    "arena_bwd", "1000000"):
        assert spelled not in runtime, spelled
