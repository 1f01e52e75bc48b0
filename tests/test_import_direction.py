"""Imports go down the levels that docs/ARCHITECTURE.md draws, and no file imports itself round a circle.

The order is read from the first code block under "## Packages and layering" in docs/ARCHITECTURE.md:
one package (`name/`) or root module (`name.py`) per line, top to bottom. A package may import itself
and any package drawn below it. Every import counts, also one inside a function, under
`TYPE_CHECKING` or through `importlib.import_module("edgemesh_tf....")`: each is a dependency a
reader has to know about. The package root (`edgemesh_tf/__init__.py`) sits above every level.
"""
from __future__ import annotations

import ast
import os
import re
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "edgemesh_tf")


def drawn_order(text: str) -> list[str]:
    """The levels of the layering block, top first: `cli/` -> "cli", `api.py` -> "api"."""
    section = text.split("## Packages and layering", 1)[1]
    block = section.split("```", 2)[1]
    order = []
    for line in block.splitlines():
        m = re.match(r"^(\w+)(/|\.py)\s", line + " ")
        if m:
            order.append(m.group(1))
    return order


def _modules() -> dict[str, str]:
    """Every module of the package by dotted name (a package by its __init__.py)."""
    out = {}
    for dirpath, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, f), ROOT)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                out[".".join(rel)] = os.path.join(dirpath, f)
    return out


def imports_of(name: str, path: str, modules) -> list[tuple[int, str]]:
    """(line, module) for every edgemesh_tf module `name` imports, resolved to the deepest module that
    exists (`from edgemesh_tf.layers import ModelSpec` is edgemesh_tf.layers)."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(open(path).read(), path)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = ["%s.%s" % (mod, a.name) for a in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            targets = [node.args[0].value]
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.append((node.lineno, t))
    return found


def _level(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_imports(order: list[str], modules) -> list[str]:
    """'file:line: level imports level (drawn above it)' for each import that goes up."""
    rank = {lvl: i for i, lvl in enumerate(order)}
    rank["__init__"] = -1
    bad = []
    for name, path in sorted(modules.items()):
        for line, target in imports_of(name, path, modules):
            src, dst = _level(name), _level(target)
            if src != dst and rank[dst] < rank[src]:
                bad.append("%s:%d: %s imports %s, drawn above it" % (os.path.relpath(path, ROOT), line, src, target))
    return bad


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]; counter[0] += 1
        stack.append(start); on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_every_package_is_drawn_once():
    order = drawn_order(open(os.path.join(ROOT, "docs", "ARCHITECTURE.md")).read())
    assert len(order) == len(set(order)), order
    present = {_level(m) for m in _modules()} - {"__init__"}
    assert present == set(order), ("docs/ARCHITECTURE.md's layering block and edgemesh_tf/ differ: "
                                   "not drawn %s, drawn but absent %s" % (sorted(present - set(order)),
                                                                        sorted(set(order) - present)))


def test_imports_go_down_the_drawn_levels():
    order = drawn_order(open(os.path.join(ROOT, "docs", "ARCHITECTURE.md")).read())
    bad = upward_imports(order, _modules())
    assert not bad, "imports that go up docs/ARCHITECTURE.md's levels:\n" + "\n".join(bad)


def test_no_file_imports_itself_round_a_circle():
    modules = _modules()
    edges = defaultdict(set)
    for name, path in modules.items():
        edges[name] |= {t for _, t in imports_of(name, path, modules)}
    found = circles(edges)
    assert not found, "import circles between files: %s" % found


def test_the_checks_can_fail():
    """An upward import and a circle are found where they exist (so the tests above can fail)."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    modules = _modules()
    order = drawn_order(open(os.path.join(ROOT, "docs", "ARCHITECTURE.md")).read())
    flipped = order[:]
    i, j = flipped.index("engine"), flipped.index("sync")
    flipped[i], flipped[j] = flipped[j], flipped[i]
    bad = upward_imports(flipped, modules)
    assert any(" engine imports edgemesh_tf.sync" in b for b in bad), bad[:5]
    assert drawn_order("## Packages and layering\n\n```\ncli/   x\n             more\napi.py  y\n```\n") == ["cli", "api"]
