"""No import cycle among the project's modules, lazy imports included (grimp reads the imports inside
functions too, so an import moved into a function to dodge a circle is still seen). `lint-imports`
checks the same per package (`acyclic_siblings` in .importlinter); this looks at the whole module
graph at once, across packages, and is checked against a package with a circle hidden the same way."""

from __future__ import annotations

import configparser
import sys
import textwrap
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def project_packages() -> list[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return config["importlinter"]["root_packages"].split()


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                    break
                if child in on_stack:
                    low[module] = min(low[module], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


# none: a package's `__init__` importing a module of its own that imports the package back would be
# one (`lint-imports` checks siblings only); the converter's warm-up lives in `engines/onnx_engine.py`
KNOWN_CYCLES: list[list[str]] = []


def test_the_project_has_no_import_cycle(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    graph = grimp.build_graph(*project_packages(), cache_dir=None)
    assert import_cycles(graph) == KNOWN_CYCLES


def test_a_circle_hidden_by_a_lazy_import_is_found(tmp_path, monkeypatch):
    """The circle `core` had: deadlines -> prediction -> planning -> deadlines, the first import
    inside a function."""
    package = tmp_path / "circled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "deadlines.py").write_text(
        textwrap.dedent(
            """
            def estimated_run_s():
                from circled.prediction import measured
                return measured()
            """
        )
    )
    (package / "prediction.py").write_text("from circled.planning import floor\n\ndef measured():\n    return floor\n")
    (package / "planning.py").write_text("from circled.deadlines import estimated_run_s\n\nfloor = 1\n")
    (package / "alone.py").write_text("import circled.planning\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "circled", raising=False)
    graph = grimp.build_graph("circled", cache_dir=None)
    assert import_cycles(graph) == [["circled.deadlines", "circled.planning", "circled.prediction"]]
