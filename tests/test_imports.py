"""The library has no import cycle, lazy imports (inside functions) included: each module can be
read, and imported, after the ones it needs. Read from the source (no import runs), so it is fast.
At 98ed9fe it found engine -> model -> layers -> tp -> scheduler -> engine, closed by a lazy import."""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "minisgl_edu"


def module_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    """module -> the library modules it imports anywhere in its source (top level or inside a function)."""
    files = {".".join(f.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): f
             for f in root.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, f in files.items():
        pkg = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = pkg.rsplit(".", node.level - 1)[0] if node.level > 1 else pkg
                base = f"{base}.{node.module}" if node.module else base
                names = [f"{base}.{a.name}" for a in node.names]
                graph[mod].update(n if n in files else base for n in names)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                graph[mod].update(names)
        graph[mod] = {m for m in graph[mod] if m in files and m != mod}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (c := visit(n, path + [n])):
                return c
        state[m] = 2
        return None

    return next((c for m in sorted(graph) if m not in state and (c := visit(m, [m]))), None)


def test_no_import_cycle():
    assert find_cycle(module_graph()) is None, " -> ".join(find_cycle(module_graph()))


def test_the_check_finds_a_lazy_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
