"""Imports point down the layers, lazy (function-local) imports included, with no exception listed.

The order is written down in docs/concepts/layers.md (a test holds the page to ``LAYERS``): a module
imports from its own package, from another package of its own layer, or from a lower layer. Within
a layer the packages' imports form no circle, and no module reaches itself through its imports.
Imports under ``if TYPE_CHECKING:`` are annotations only and are not counted.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import toolbox

ROOT = Path(toolbox.__file__).parent
DOC = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "layers.md"

# lowest first; a package or top-level module of toolbox/ in exactly one layer
LAYERS: list[tuple[str, ...]] = [
    ("core",),
    ("data", "nn"),
    ("objectives", "rewards", "rl", "serving", "tracing", "memory", "decision", "distributed"),
    ("trainer", "eval", "experiment", "launch", "results", "bundle", "catalog"),
    ("cli",),
]


def _module(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _annotation_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST, package: str, modules: set[str]) -> set[str]:
    """The toolbox modules ``tree`` imports anywhere (not under TYPE_CHECKING). ``from pkg import sub``
    imports the module ``pkg.sub``; ``from pkg import name`` (a class, a function) imports ``pkg``."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if _annotation_only(node):
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
        stack.extend(ast.iter_child_nodes(node))
    return found & modules


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the toolbox modules it imports."""
    paths = {_module(p, root): p for p in sorted(root.rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = _imports(ast.parse(path.read_text()), package, set(paths)) - {name}
    return graph


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_of(layers: list[tuple[str, ...]]) -> dict[str, int]:
    return {part: i for i, group in enumerate(layers) for part in group}


def upward_imports(graph: dict[str, set[str]], layers: list[tuple[str, ...]]) -> list[str]:
    """``a -> b`` for every import of a module of a higher layer (or of a part no layer names)."""
    rank = layer_of(layers)
    found = []
    for module, deps in sorted(graph.items()):
        here = _top(module)
        for dep in sorted(deps):
            there = _top(dep)
            if here == there or there == "":
                continue
            if here not in rank or there not in rank:
                found.append(f"{module} -> {dep} ({here or there} is in no layer)")
            elif rank[there] > rank[here]:
                found.append(f"{module} -> {dep} (layer {rank[here]} imports layer {rank[there]})")
    return found


def _cycle(graph: dict[str, set[str]], start: str) -> list[str] | None:
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def module_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    return [c for m in sorted(graph) if (c := _cycle(graph, m))]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Top-level part -> the other top-level parts it imports."""
    out: dict[str, set[str]] = {}
    for module, deps in graph.items():
        here = _top(module)
        out.setdefault(here, set()).update(_top(d) for d in deps if _top(d) not in (here, ""))
    return out


def test_every_import_points_down_the_layers():
    found = upward_imports(import_graph(ROOT), LAYERS)
    assert not found, "imports that point up (move the shared code down a layer):\n" + "\n".join(found)


def test_every_part_of_toolbox_is_in_exactly_one_layer():
    parts = {
        p.stem if p.suffix else p.name
        for p in ROOT.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    named = [part for group in LAYERS for part in group]
    assert len(named) == len(set(named)), "a part is named in two layers"
    assert parts - {"__init__"} == set(named)


def test_no_circle_between_the_packages_of_a_layer():
    packages = package_graph(import_graph(ROOT))
    cycles = module_cycles(packages)
    assert not cycles, "packages import each other: " + " -> ".join(cycles[0])


def test_no_module_reaches_itself_through_its_imports_lazy_ones_included():
    cycles = module_cycles(import_graph(ROOT))
    assert not cycles, "import circle: " + " -> ".join(cycles[0])


def test_the_torch_engine_is_used_through_its_package():
    """Outside ``toolbox.serving`` the torch engine is its package's public names, not its modules."""
    graph = import_graph(ROOT)
    inside = "toolbox.serving.engines.torch."
    found = sorted(
        f"{m} -> {d}"
        for m, deps in graph.items()
        if not m.startswith("toolbox.serving.")
        for d in deps
        if d.startswith(inside)
    )
    assert not found, "import toolbox.serving.engines.torch (its __all__) instead: " + ", ".join(found)


def test_the_docs_show_these_layers():
    text = DOC.read_text()
    for i, group in enumerate(LAYERS):
        line = f"{i}. " + ", ".join(f"`{part}`" for part in group)
        assert line in text, f"docs/concepts/layers.md lacks the line {line!r}"


def test_the_check_fails_on_an_injected_upward_import(tmp_path):
    """The real tree, copied, with one lazy import from core up to the trainer: the check sees it."""
    copy = tmp_path / "toolbox"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__", "configs"))
    target = copy / "core" / "atomic.py"
    target.write_text(target.read_text() + "\n\ndef _up():\n    from toolbox.trainer import base\n")
    found = upward_imports(import_graph(copy), LAYERS)
    assert found == ["toolbox.core.atomic -> toolbox.trainer.base (layer 0 imports layer 3)"]


def test_the_check_fails_on_an_injected_circle(tmp_path):
    """Two packages of one layer importing each other, and a lazy module cycle, are both seen."""
    copy = tmp_path / "toolbox"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__", "configs"))
    target = copy / "eval" / "run.py"
    target.write_text(target.read_text() + "\n\ndef _around():\n    from toolbox.launch import command\n")
    back = copy / "launch" / "command.py"
    back.write_text(back.read_text() + "\n\ndef _back():\n    from toolbox.eval import run\n")
    graph = import_graph(copy)
    assert upward_imports(graph, LAYERS) == []
    assert module_cycles(package_graph(graph))
    assert any({"toolbox.eval.run", "toolbox.launch.command"} <= set(c) for c in module_cycles(graph))
