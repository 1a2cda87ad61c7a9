"""No import cycle in toolbox/: neither at module level, nor through the CLI's lazy imports."""

from __future__ import annotations

import ast
from pathlib import Path

import toolbox

ROOT = Path(toolbox.__file__).parent


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, lazy: bool) -> set[str]:
    """toolbox modules ``path`` imports: at module level (not under TYPE_CHECKING), or anywhere."""
    tree = ast.parse(path.read_text())
    nodes = ast.walk(tree) if lazy else _module_level(tree.body)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("toolbox")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("toolbox"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def _module_level(body):
    for node in body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Try | ast.If):
            yield from _module_level(node.body)
            continue
        yield node


def _graph(lazy: bool) -> dict[str, set[str]]:
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    return {m: {i for i in _imports(p, lazy) if i in modules and i != m} for m, p in modules.items()}


def _cycle(graph: dict[str, set[str]], start: str) -> list[str] | None:
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, ()):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_no_module_level_import_cycle():
    graph = _graph(lazy=False)
    cycles = [c for m in sorted(graph) if (c := _cycle(graph, m))]
    assert not cycles, " -> ".join(cycles[0])


def test_the_cli_is_imported_by_no_other_module():
    """``toolbox/cli.py`` is the top: commands live in their packages and never import it back."""
    graph = _graph(lazy=True)
    importers = sorted(m for m, deps in graph.items() if "toolbox.cli" in deps)
    assert importers == []
    assert _cycle(graph, "toolbox.cli") is None
