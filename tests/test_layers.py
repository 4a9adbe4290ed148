"""Dependencies run one way: tileinfer (the engine) <- tileinfer_profiling (measuring) <- bench, notebooks
and tools (using). Every module's syntax tree is read: imports anywhere in it (inside functions too),
modules named to importlib, paths climbing out of its package, and string paths into a higher layer."""

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = {"tileinfer": 0, "tileinfer_profiling": 1, "bench": 2, "notebooks": 2, "tools": 2}
# a path ("../bench/results") or a module ("bench.report", as `python -m` takes it) of a higher layer
HIGHER_PATH = {level: re.compile(r"^(\.\./)*(" + "|".join(n for n, lv in LAYERS.items() if lv > level) + r")([/.]|$)")
               for level in set(LAYERS.values()) if level < max(LAYERS.values())}


def layer_of(module: str):
    return LAYERS.get(module.split(".")[0])


def python_files():
    for top in LAYERS:
        yield from sorted((REPO / top).rglob("*.py"))


def _docstrings(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                yield first.value


def _climb(node):
    """How many directories `node` climbs above the file: Path(__file__)...parent / .parents[i], or
    os.path.dirname(...(__file__)). None when it is not such an expression."""
    if isinstance(node, ast.Name) and node.id == "__file__":
        return 0
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id == "Path" and node.args:
            return _climb(node.args[0])
        if isinstance(func, ast.Attribute) and func.attr in ("resolve", "absolute"):
            return _climb(func.value)
        if isinstance(func, ast.Attribute) and func.attr in ("dirname", "abspath", "realpath") and node.args:
            inner = _climb(node.args[0])
            return None if inner is None else inner + (func.attr == "dirname")
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        inner = _climb(node.value)
        return None if inner is None else inner + 1
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
        inner = _climb(node.value.value)
        if inner is not None and isinstance(node.slice, ast.Constant):
            return inner + node.slice.value + 1
    return None


def upward_references(path: Path, source: str, level: int):
    """(line, what) of every reference from a module at `level` to a higher layer."""
    tree = ast.parse(source, str(path))
    docstrings = {id(c) for c in _docstrings(tree)}
    depth = len(path.relative_to(REPO).parts) - 1  # directories between the file and the repository root
    found, imported = [], set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__",
                                                                                   "run_module")):
            names = [node.args[0].value]
            imported.add(id(node.args[0]))
        found += [(node.lineno, f"imports {n}") for n in names if (layer_of(n) or 0) > level]
        if level < max(LAYERS.values()):
            climbed = _climb(node)
            if climbed is not None and climbed > depth:
                found.append((node.lineno, "climbs out of its package to the repository root"))
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                    and id(node) not in imported and HIGHER_PATH[level].match(node.value)):
                found.append((node.lineno, f"names the path {node.value!r}"))
    return sorted(set(found))


@pytest.mark.parametrize("path", list(python_files()), ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_reaches_a_higher_layer(path):
    level = LAYERS[path.relative_to(REPO).parts[0]]
    found = upward_references(path, path.read_text(), level)
    assert not found, "\n".join(f"{path.relative_to(REPO)}:{line}: {what}" for line, what in found)


@pytest.mark.parametrize("source, expected", [
    ("import tileinfer_profiling", ["imports tileinfer_profiling"]),
    ("def f():\n    from tileinfer_profiling.prompts import load\n", ["imports tileinfer_profiling.prompts"]),
    ("import importlib\nimportlib.import_module('tileinfer_profiling.cli')", ["imports tileinfer_profiling.cli"]),
    ("from pathlib import Path\nREPO = Path(__file__).resolve().parent.parent", ["climbs out of its package"]),
    ("import os\nROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))", ["climbs out of its package"]),
    ("from pathlib import Path\nDATA = Path(__file__).parents[1] / 'data'", ["climbs out of its package"]),
    ("p = 'bench/ref/reference.csv'", ["names the path 'bench/ref/reference.csv'"]),
    ("p = REPO / 'notebooks' / 'report.ipynb'", ["names the path 'notebooks'"]),
    ("cmd = [sys.executable, '-m', 'bench.report']", ["names the path 'bench.report'"]),
    ('"""Reads bench/results/ (a docstring, not a path)."""\nfrom pathlib import Path\nHERE = Path(__file__).parent',
     []),
    ("from tileinfer.ops import linear", []),
])
def test_the_check_sees_every_kind_of_upward_reference(source, expected):
    found = [what for _, what in upward_references(REPO / "tileinfer" / "example.py", source, 0)]
    assert [w[:len(e)] for w, e in zip(found, expected)] == expected and len(found) == len(expected)
