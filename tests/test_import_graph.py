"""The project's import graph has no cycles, counting the hidden ones.

A cycle hidden behind a function-local import or ``if TYPE_CHECKING:`` still
ties two modules together: neither can be read, tested or moved without the
other. So this test parses every module with ``ast`` and collects every import,
wherever it sits, not only the ones Python runs at import time.

The packages also keep their layers: no two packages import each other, even through others; ``core`` imports none
of the others (everything raises its errors); ``sim`` imports neither ``bench`` (the simulator runs the bench's
traffic, from ``traffic``, not the bench) nor ``serve_app`` (what it shares with the app lives in ``router``); and
``core``, ``traffic``, ``router`` and ``sim`` import no Ray.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "traffic", "serve_app", "engines", "router", "sim", "bench", "cluster")
# Run outputs, not code: they stay out of the package.
EXCLUDED = (ROOT / "results",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _project_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if any(path.is_relative_to(excluded) for excluded in EXCLUDED):
                continue
            modules[_module_name(path)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest project module that ``name`` names (``a.b.func`` -> ``a.b``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every project module that ``module`` imports, at any depth of its code."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name, modules)
                if target is not None:
                    found.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # `from . import x` in a.b.c starts at a.b; in package a.b, at a.b.
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                if node.module:
                    base = [*base, *node.module.split(".")]
                origin = ".".join(base)
            else:
                origin = node.module or ""
            for alias in node.names:
                # `from pkg import mod` imports the module pkg.mod when there is one.
                target = _resolve(f"{origin}.{alias.name}", modules)
                if target is not None:
                    found.add(target)
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _project_modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component (Tarjan), as a chain."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                connect(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)

    cycles = []
    for component in components:
        start = min(component)
        # Breadth-first from start back to start, inside the component: a shortest cycle.
        parents: dict[str, str] = {}
        frontier = [start]
        closing: str | None = None
        while frontier and closing is None:
            following = []
            for node in frontier:
                for succ in sorted(graph[node] & component):
                    if succ == start:
                        closing = node
                        break
                    if succ not in parents:
                        parents[succ] = node
                        following.append(succ)
                if closing is not None:
                    break
            frontier = following
        assert closing is not None
        chain = [closing]
        while chain[-1] != start:
            chain.append(parents[chain[-1]])
        cycles.append([start, *reversed(chain[:-1]), start])
    return sorted(cycles)


def test_the_graph_sees_the_project() -> None:
    graph = import_graph()
    # A parser that resolved nothing would pass the cycle test vacuously.
    assert {"engines.factory", "router.policy", "serve_app.ingress", "sim.simulator"} <= graph.keys()
    assert "engines.config" in graph["engines.factory"]
    assert not any(name.startswith("bench.results") for name in graph)


def test_hidden_relative_and_submodule_imports_count(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "from . import sibling\n"
        "from pkg import helpers, CONSTANT\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.typed import T\n"
        "def f():\n"
        "    import pkg.inner.deep\n"
    )
    modules = {name: tmp_path for name in ("pkg", "pkg.mod", "pkg.sibling", "pkg.helpers", "pkg.typed", "pkg.inner")}
    # pkg.inner.deep is no module here: the deepest one it names is pkg.inner; CONSTANT is a name in pkg.
    assert _imports("pkg.mod", source, modules) == {"pkg", "pkg.sibling", "pkg.helpers", "pkg.typed", "pkg.inner"}


def test_find_cycles_reports_a_chain() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": {"e"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["e", "e2", "e"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles (counting function-local and TYPE_CHECKING imports):\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles
    )


def _imports_out_of(package: str) -> set[tuple[str, str]]:
    """(module, imported module) for each import a module of ``package`` makes of another package's module."""
    return {
        (name, target)
        for name, targets in import_graph().items()
        if name.split(".")[0] == package
        for target in targets
        if target.split(".")[0] != package
    }


def test_core_imports_no_other_package_of_the_project() -> None:
    # Everything imports core (the error hierarchy and its table): one import back would tie it to the rest.
    assert _imports_out_of("core") == set()


def test_sim_does_not_import_bench() -> None:
    assert {(name, target) for name, target in _imports_out_of("sim") if target.split(".")[0] == "bench"} == set()


def test_sim_does_not_import_serve_app() -> None:
    # What the simulator shares with the app (the views, the autoscaling policy and its config, the stack's periods)
    # lives in router/: the simulator runs it without the app, and the app's Ray glue stays out of it.
    assert {(name, target) for name, target in _imports_out_of("sim") if target.split(".")[0] == "serve_app"} == set()


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Which packages each package's modules import (a package's imports of itself left out)."""
    packages: dict[str, set[str]] = {}
    for name, targets in graph.items():
        package = name.split(".")[0]
        packages.setdefault(package, set()).update(t.split(".")[0] for t in targets)
    for package, targets in packages.items():
        targets.discard(package)
    return packages


def test_package_graph_folds_modules_into_their_packages() -> None:
    graph = {"a.x": {"a.y", "b.z"}, "a.y": set(), "b.z": {"c"}, "c": set()}
    assert package_graph(graph) == {"a": {"b"}, "b": {"c"}, "c": set()}
    assert find_cycles(package_graph({"a.x": {"b.z"}, "b.z": set(), "b.w": {"a.y"}, "a.y": set()})) == [["a", "b", "a"]]


def test_no_package_level_import_cycles() -> None:
    # serve_app and cluster, for one: cluster (the deploy tooling) reads the app's config, so the app's placement of
    # a replica lives in serve_app (serve_app/placement.py), not in cluster.
    cycles = find_cycles(package_graph(import_graph()))
    assert not cycles, "packages that import each other:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def _imports_ray(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ray" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "ray":
            return True
    return False


def test_the_pure_packages_import_no_ray() -> None:
    # The router's policy, the simulator and what they build on run without Ray (and Serve pickles
    # router.serve_autoscaling into its controller by value): no Ray import, at any depth of their code.
    pure = ("core", "traffic", "router", "sim")
    assert [
        name for name, path in _project_modules().items() if name.split(".")[0] in pure and _imports_ray(path)
    ] == []


def test_a_cycle_hidden_in_source_files_is_found(tmp_path: Path) -> None:
    # The whole path on files: a -> b at import time, b -> a only inside a function, c -> a under TYPE_CHECKING.
    sources = {
        "pkg.a": "import pkg.b\n",
        "pkg.b": "def f():\n    from pkg import a\n",
        "pkg.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n",
    }
    paths = {}
    for name, text in sources.items():
        paths[name] = tmp_path / f"{name.split('.')[-1]}.py"
        paths[name].write_text(text)
    modules = {"pkg": tmp_path / "__init__.py", **paths}
    graph = {name: _imports(name, path, modules) for name, path in paths.items()}
    assert graph["pkg.c"] == {"pkg.a"}
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.a"]]
