"""A component's config fields read from its source file, without importing its module.

Composing a config (``toolbox compose``, the workflow's compose stage, ``toolbox plan``) fills in
and checks every component's signature; importing the modules that define the components would
import torch and transformers (seconds) for names, defaults and plain types. This reads them from
the source instead: each ``@REGISTRY.register("name")`` of a registry's modules, its parameters,
their literal defaults and their annotations, evaluated with only light names (builtins,
``typing``, ``collections.abc``, ``toolbox.core.bounds``).

Whatever it cannot read for certain (a default that is no literal, a class whose ``__init__`` is
inherited, another decorator, a plugin from an entry point) gives ``None``, and the registry then
imports the component as before (``Registry.schema``). tests/core/test_source_fields.py holds it
equal to the imported signatures of every registered component.
"""

from __future__ import annotations

import ast
import collections.abc
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the folder holding the toolbox package
# modules whose names an annotation may use: importing them costs nothing
LIGHT_MODULES = {
    "typing": typing,
    "collections.abc": collections.abc,
    "toolbox.core.bounds": None,  # imported on first use (it imports annotated_types)
}


class Unresolved:
    """An annotation naming a type of a module not imported here (a tokenizer, a torch module)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Unresolved({self.text!r})"


@dataclass(frozen=True)
class SourceParam:
    name: str
    annotation: Any  # the evaluated annotation, Any when none, or an Unresolved
    default: Any
    required: bool


@dataclass(frozen=True)
class SourceComponent:
    """One registered callable as its source declares it."""

    params: tuple[SourceParam, ...]
    accepts_any: bool  # takes **settings
    doc: str


def component(var: str, modules: tuple[str, ...], name: str) -> SourceComponent | None:
    """The component registered as ``@<var>.register("<name>")`` in ``modules`` (and the modules
    under them), or None when its source does not say everything for certain."""
    found = _index(var, modules).get(name)
    return found if isinstance(found, SourceComponent) else None


_INDEXES: dict[tuple[str, tuple[str, ...]], dict[str, SourceComponent | None]] = {}


def _index(var: str, modules: tuple[str, ...]) -> dict[str, SourceComponent | None]:
    key = (var, modules)
    if key not in _INDEXES:
        marker = re.compile(rf"@{re.escape(var)}\.register\(")
        found: dict[str, SourceComponent | None] = {}
        for path in _files(modules):
            text = path.read_text(encoding="utf-8")
            if marker.search(text):
                for name, comp in _registered(ast.parse(text), var):
                    found[name] = None if name in found else comp  # twice: let the import decide
        _INDEXES[key] = found
    return _INDEXES[key]


def _files(modules: tuple[str, ...]) -> list[Path]:
    files: list[Path] = []
    for module in modules:
        base = ROOT.joinpath(*module.split("."))
        if base.is_dir():
            files += sorted(base.rglob("*.py"))
        elif base.with_suffix(".py").is_file():
            files.append(base.with_suffix(".py"))
    return files


def _registered(tree: ast.Module, var: str) -> list[tuple[str, SourceComponent | None]]:
    namespace = _light_namespace(tree)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.ClassDef):
            continue
        names = [_registered_name(d, var) for d in node.decorator_list]
        for name in filter(None, names):
            sure = len(node.decorator_list) == 1  # another decorator may change the signature
            out.append((name, _read(node, namespace, classes) if sure else None))
    return out


def _registered_name(decorator: ast.expr, var: str) -> str | None:
    if (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and decorator.func.attr == "register"
        and isinstance(decorator.func.value, ast.Name)
        and decorator.func.value.id == var
        and len(decorator.args) == 1
        and isinstance(decorator.args[0], ast.Constant)
        and isinstance(decorator.args[0].value, str)
    ):
        return decorator.args[0].value
    return None


def _read(
    node: ast.FunctionDef | ast.ClassDef, namespace: dict[str, Any], classes: dict[str, ast.ClassDef]
) -> SourceComponent | None:
    doc = ast.get_docstring(node) or ""
    if isinstance(node, ast.ClassDef):
        if not doc:  # documented by a base class
            return None
        node = _init_of(node, classes)
        if node is None or (node.args.kwarg is not None and node is not OBJECT_INIT):
            return None  # **settings: a base class may take them as fields
        skip = 1  # self
    else:
        skip = 0
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults, strict=True))[skip:] + list(
        zip(args.kwonlyargs, args.kw_defaults, strict=True)
    )
    params = []
    for arg, default in pairs:
        annotation = _annotation(arg.annotation, namespace)
        if default is None:
            params.append(SourceParam(arg.arg, annotation, None, True))
            continue
        try:
            value = ast.literal_eval(default)
        except ValueError:
            return None  # a default computed from a name: only the import knows it
        params.append(SourceParam(arg.arg, annotation, value, False))
    return SourceComponent(tuple(params), args.kwarg is not None, doc)


def _init_of(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> ast.FunctionDef | None:
    """The ``__init__`` a class runs: its own, else that of its one base defined in the same
    module (and so on up); None when it comes from elsewhere or the class takes its base's fields."""
    seen = set()
    while cls.name not in seen:
        seen.add(cls.name)
        body = cls.body
        if (
            any(
                isinstance(n, ast.Assign | ast.AnnAssign)
                and any(getattr(t, "id", "") == "config_from_base" for t in _targets(n))
                for n in body
            )
            or cls.keywords
        ):
            return None
        init = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is not None:
            return init if len(init.decorator_list) == 0 else None
        if any(isinstance(n, ast.FunctionDef) and n.name == "__new__" for n in body):
            return None
        if not cls.bases or [ast.unparse(b) for b in cls.bases] == ["object"]:
            return OBJECT_INIT  # object's: no fields, and any key is passed on (**kwargs)
        if len(cls.bases) != 1 or not isinstance(cls.bases[0], ast.Name) or cls.bases[0].id not in classes:
            return None
        cls = classes[cls.bases[0].id]
    return None


OBJECT_INIT = ast.parse("def __init__(self, /, *args, **kwargs): pass").body[0]


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def _annotation(node: ast.expr | None, namespace: dict[str, Any]) -> Any:
    if node is None:
        return Any
    text = ast.unparse(node)
    try:
        return eval(text, dict(namespace))  # noqa: S307  (names of light modules only)
    except Exception:
        return Unresolved(text)


def _light_namespace(tree: ast.Module) -> dict[str, Any]:
    """The names a module's annotations may use that cost nothing to import: builtins and what it
    imports from ``typing``, ``collections.abc`` and ``toolbox.core.bounds``."""
    namespace: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module in LIGHT_MODULES:
            module = LIGHT_MODULES[node.module]
            if module is None:
                import importlib

                module = importlib.import_module(node.module)
            for alias in node.names:
                if hasattr(module, alias.name):
                    namespace[alias.asname or alias.name] = getattr(module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("typing", "collections.abc", "collections") and alias.asname is None:
                    top = alias.name.split(".")[0]
                    namespace[top] = __import__(alias.name) if top == alias.name else collections
    return namespace
