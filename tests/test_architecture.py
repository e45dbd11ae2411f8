"""The layering rules of the package, read from its sources (imports are parsed, not executed).

Rules: the prompt and session layers never import the engine; nothing under ``core/``
parses arguments or prints (front ends do); no two files import each other, directly or
through others, counting the imports inside functions too (only ``TYPE_CHECKING`` blocks
are left out: they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "replayer"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PKG.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _walk(tree: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """The package's own modules ``module`` imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    base = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in _walk(tree):
        if isinstance(node, ast.Import):
            out.update(filter(None, (_resolve(a.name) for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            src = node.module or ""
            if node.level:
                up = base.split(".")[: len(base.split(".")) - node.level + 1]
                src = ".".join(up + ([src] if src else []))
            for a in node.names:
                target = _resolve(f"{src}.{a.name}") if f"{src}.{a.name}" in MODULES else _resolve(src)
                if target:
                    out.add(target)
    out.discard(module)
    return {m for m in out if m.startswith("replayer")}


GRAPH = {m: imports_of(m) for m in MODULES}


def test_the_graph_is_read():
    assert "replayer.core.engine.events" in GRAPH["replayer.core.compare"]
    assert "replayer.core.runspec" in GRAPH["replayer.core.prompt.layout"]


@pytest.mark.parametrize("layer", ["replayer.core.prompt", "replayer.core.session"])
def test_prompt_and_session_never_import_the_engine(layer):
    bad = {m: sorted(d for d in deps if d.startswith("replayer.core.engine"))
           for m, deps in GRAPH.items() if m == layer or m.startswith(layer + ".")}
    assert {m: d for m, d in bad.items() if d} == {}


def test_core_never_parses_arguments_or_prints():
    found = []
    for m, path in MODULES.items():
        if not m.startswith("replayer.core"):
            continue
        for node in _walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if "argparse" in names:
                    found.append(f"{m}: imports argparse")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                found.append(f"{m}:{node.lineno}: print")
    assert found == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one file (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_between_files():
    assert _cycles(GRAPH) == []


# -- function length ---------------------------------------------------------------------------

#: the longest a function's body may be (docstring included; signature and decorators not):
#: a longer one is split into named stages, so that each step of a pipeline reads on its own
MAX_FUNCTION_LINES = 60


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(qualified name, body lines) of every function or method whose body is longer than ``limit``."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lines = child.end_lineno - child.body[0].lineno + 1
                    if lines > limit:
                        found.append((name, lines))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_the_length_check_finds_a_long_function():
    body = "    x = 1\n"
    assert long_functions("def f():\n" + body * 61) == [("f", 61)]
    assert long_functions("def f():\n" + body * 60) == []
    nested = 'class C:\n    @property\n    def m(self):\n        """Why."""\n' + "        x = 1\n" * 60
    assert long_functions(nested) == [("C.m", 61)]


def test_no_function_is_longer_than_the_limit():
    too_long = [f"{path.relative_to(PKG.parent)}::{name} ({n} lines)"
                for path in sorted(MODULES.values()) for name, n in long_functions(path.read_text())]
    assert not too_long, f"split into named stages (≤ {MAX_FUNCTION_LINES} lines): {too_long}"


# -- issue 20: size limits and the pipeline's layering, as ratchets --------------------------
# Each rule is checked over the whole package. What broke a rule when it was written is listed
# here, by name, with its size: a listed file may not grow, nothing else may break the rule, and
# an entry that no longer breaks it fails too (delete it), so the lists only shrink.

MODULE_LINES, CLASS_LINES = 500, 300
OVER_LONG_MODULES: dict[str, int] = {}
OVER_LONG_CLASSES: dict[str, int] = {}
ORCHESTRATION = {"replayer.core.compare", "replayer.core.replay", "replayer.core.pipeline",
                 "replayer.core.session_replay"}
KNOWN_LAYER_BREAKS: set[tuple[str, str]] = set()
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str]] = set()


def _ratchet(found: dict, known: dict) -> list[str]:
    """What breaks a rule beyond the known list (new, or grown), and known entries now fixed."""
    worse = [f"{k}: {v}" for k, v in found.items() if k not in known or v > known[k]]
    fixed = [f"{k}: fixed, delete it from the list" for k in known if k not in found]
    return worse + fixed


def test_no_module_over_500_lines_and_no_class_over_300():
    modules, classes = {}, {}
    for m, path in MODULES.items():
        src = path.read_text(encoding="utf-8")
        if len(src.splitlines()) > MODULE_LINES:
            modules[m] = len(src.splitlines())
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > CLASS_LINES:
                classes[f"{m}.{node.name}"] = node.end_lineno - node.lineno + 1
    assert _ratchet(modules, OVER_LONG_MODULES) == [] and _ratchet(classes, OVER_LONG_CLASSES) == []


def test_the_engine_never_imports_the_orchestration_nor_the_builds_the_engine():
    found = {(m, d) for m, deps in GRAPH.items() for d in deps
             if (m.startswith("replayer.core.engine") and d in ORCHESTRATION)
             or (m.startswith("replayer.core.builds") and d.startswith("replayer.core.engine"))}
    assert _ratchet(dict.fromkeys(found, 0), dict.fromkeys(KNOWN_LAYER_BREAKS, 0)) == []


def test_no_module_imports_another_modules_private_names():
    found = set()
    for m, path in MODULES.items():
        for node in _walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module != m:
                found |= {(m, a.name) for a in node.names if a.name.startswith("_") and not a.name.startswith("__")}
    assert _ratchet(dict.fromkeys(found, 0), dict.fromkeys(KNOWN_PRIVATE_IMPORTS, 0)) == []
