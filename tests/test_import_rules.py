"""The import rules of tdyn's layers, read from the source (every ``import`` statement, module level or
inside a function; ``if TYPE_CHECKING:`` blocks excepted, they never run):

* dependencies flow one way: theory <- simulate <- empirical <- figures;
* a generic module (one outside a paper's package) never imports a paper's package, and a paper's
  package never imports another paper's;
* no module imports a private module (``_name``) of another top-level package;
* no import circles (a package's ``__init__`` naming its own submodules, its lazy re-exports, aside).

Each rule is checked on the real tree and shown to catch a planted violation.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from figures.papers import PAPERS

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("theory", "simulate", "empirical", "figures")


def _modules(root: Path) -> dict[str, Path]:
    mods = {}
    for layer in LAYERS:
        for f in sorted((root / layer).rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = f
    return mods


def _targets(module: str, node: ast.AST, is_package: bool, mods) -> list[str]:
    """The tdyn modules one import statement loads (the longest known prefix of each name)."""
    names = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in mods else prefix for a in node.names]
    out = []
    for name in names:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.append(name)
    return out


def import_graph(root: Path = ROOT, sources: dict[str, str] | None = None) -> dict[str, set[str]]:
    """Module -> the tdyn modules it imports anywhere in its source. ``sources`` replaces (or adds)
    modules' source text (a planted violation)."""
    mods = _modules(root)
    sources = dict(sources or {})
    for name in sources:
        mods.setdefault(name, root / (name.replace(".", "/") + ".py"))
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(sources[name] if name in sources else path.read_text())
        skip = set()
        for node in ast.walk(tree):
            test = getattr(node, "test", None)
            if isinstance(node, ast.If) and getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING":
                skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skip:
                edges.update(_targets(name, node, path.name == "__init__.py", mods))
        graph[name] = edges
    return graph


def _paper(module: str) -> str | None:
    parts = module.split(".")
    own = {row.module for row in PAPERS.values() if row.module}
    return parts[1] if len(parts) > 1 and parts[1] in own else None


def layer_violations(graph) -> list[str]:
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    return sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts
                  if rank[t.split(".")[0]] > rank[m.split(".")[0]])


def paper_violations(graph) -> list[str]:
    return sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts
                  if _paper(t) is not None and _paper(m) != _paper(t))


def private_violations(graph) -> list[str]:
    return sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts
                  if t.split(".")[0] != m.split(".")[0] and any(p.startswith("_") for p in t.split(".")[1:]))


def cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (scipy's csgraph)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    names = sorted(set(graph) | {t for ts in graph.values() for t in ts})
    index = {m: i for i, m in enumerate(names)}
    edges = [(index[m], index[t]) for m, ts in graph.items() for t in ts if not t.startswith(m + ".")]
    rows, cols = zip(*edges) if edges else ((), ())
    adjacency = coo_matrix(([1] * len(edges), (rows, cols)), shape=(len(names), len(names)))
    _, label = connected_components(adjacency, directed=True, connection="strong")
    groups: dict[int, list[str]] = {}
    for name, lab in zip(names, label):
        groups.setdefault(int(lab), []).append(name)
    return sorted(g for g in groups.values() if len(g) > 1)


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_the_graph_sees_module_level_and_function_local_imports(graph):
    # module level (figures.make) and inside a function (figures.cli imports figures.make in _figures)
    assert {"figures.core", "figures.claims.report", "figures.context"} <= graph["figures.make"]
    assert "figures.make" in graph["figures.cli"]
    assert "theory.core" in graph["simulate.ode"]


def test_layers_flow_one_way(graph):
    assert layer_violations(graph) == []
    planted = import_graph(sources={"theory.planted": "def f():\n    from simulate.ode import solve\n"})
    assert layer_violations(planted) == ["theory.planted -> simulate.ode"]


def test_generic_modules_never_import_a_paper_and_papers_not_each_other(graph):
    assert paper_violations(graph) == []
    planted = import_graph(sources={"figures.planted": "from figures.scb import compare\n",
                                    "figures.topic.planted": "from ..joma.claims import claims\n"})
    assert paper_violations(planted) == ["figures.planted -> figures.scb.compare",
                                         "figures.topic.planted -> figures.joma.claims"]


def test_no_module_imports_another_packages_private_module(graph):
    assert private_violations(graph) == []
    planted = import_graph(sources={"empirical.planted": "from simulate._em import em_paths\n"})
    assert private_violations(planted) == ["empirical.planted -> simulate._em"]


def test_no_import_circles(graph):
    assert cycles(graph) == []
    assert cycles({"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}}) == [["a.x", "a.y", "a.z"]]
    planted = import_graph(sources={"figures.core": (ROOT / "figures" / "core.py").read_text()
                                    + "\n\ndef _planted():\n    from .make import make_figures\n"})
    assert [c for c in cycles(planted) if {"figures.core", "figures.make"} <= set(c)]


def test_type_checking_imports_are_not_runtime_imports():
    src = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .core import ReducedSystem\n"
    assert "theory.core" not in import_graph(sources={"theory.export": src})["theory.export"]
