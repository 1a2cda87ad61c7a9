"""Registries: the only way a config names a component.

A registry maps names to callables (classes or factory functions)::

    MODELS = Registry("model")

    @MODELS.register("tiny_llama")
    def tiny_llama(vocab_size: int, hidden_size: int = 64) -> nn.Module: ...

    model = MODELS.build({"name": "tiny_llama", "hidden_size": 128}, vocab_size=100)

The schema of a component is the signature of its callable: ``build`` checks every config key
against the parameter names and annotated types before calling it, so a misspelt key or a wrong type
fails naming the key path and the valid keys. Keyword arguments passed to ``build`` are *injections*
(vocab_size, model parameters, ...): only those the callable accepts are passed on.

Third-party packages add components through the entry-point group ``toolbox.<registry name>``; an
entry point named ``foo`` pointing at ``pkg.module:Thing`` registers ``Thing`` as ``foo``.
"""

from __future__ import annotations

import difflib
import inspect
import sys
import typing
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from toolbox.core.config_types import check_type, type_name
from toolbox.core.errors import ConfigError, UnknownComponentError
from toolbox.core.source_fields import Unresolved

NAME_KEY = "name"


@dataclass(frozen=True)
class Field:
    """One config field of a component, read from its signature and docstring."""

    name: str
    annotation: Any
    default: Any
    required: bool
    doc: str

    @property
    def type_name(self) -> str:
        return type_name(self.annotation)


@dataclass(frozen=True)
class Schema:
    """What a config may set on a component: its fields, and whether it takes any other key too."""

    fields: tuple[Field, ...]
    accepts_any: bool


def component_schema(obj: Callable[..., Any]) -> Schema:
    """The schema of an imported component: its signature."""
    accepts_any = any(p.kind == p.VAR_KEYWORD for p in _signature(obj).parameters.values())
    return Schema(tuple(component_fields(obj)), accepts_any)


class Registry:
    """A named table of components that configs select with ``name:``."""

    _all: dict[str, Registry] = {}

    def __init__(
        self,
        kind: str,
        modules: tuple[str, ...] = (),
        base: type | None = None,
        renamed: Mapping[str, str] | None = None,
    ) -> None:
        self.kind = kind
        self.base = base
        self.modules = modules  # imported on first lookup: they register the built-in components
        self.renamed = dict(renamed or {})  # old name -> new name: a config using the old one is told
        self._entries: dict[str, Callable[..., Any]] = {}
        self._plugins_loaded = False
        Registry._all[kind] = self

    # registration -------------------------------------------------------------------------
    def register(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def decorator(obj: Callable[..., Any]) -> Callable[..., Any]:
            self.add(name, obj)
            return obj

        return decorator

    def add(self, name: str, obj: Callable[..., Any]) -> None:
        if name in self._entries and self._entries[name] is not obj:
            raise ValueError(f"{self.kind} '{name}' is registered twice")
        self._entries[name] = obj
        obj._registry_name = name  # type: ignore[attr-defined]

    # lookup --------------------------------------------------------------------------------
    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        self._load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[tuple[str, Callable[..., Any]]]:
        self._load_plugins()
        return iter(sorted(self._entries.items()))

    def get(self, name: str, path: str | None = None) -> Callable[..., Any]:
        self._load_plugins()
        if name not in self._entries and name in self.renamed:
            where = f"{path}: " if path else ""
            raise UnknownComponentError(
                f"{where}{self.kind} '{name}' is now called '{self.renamed[name]}' (names are unique across "
                f"registries); write {path or self.kind + '.name'}={self.renamed[name]}."
            )
        if name not in self._entries:
            names = self.names()
            close = difflib.get_close_matches(str(name), names, n=1)
            hint = (
                f" Did you mean '{close[0]}'? It is defined in {source_location(self._entries[close[0]])}."
                if close
                else ""
            )
            where = f"{path}: " if path else ""
            raise UnknownComponentError(
                f"{where}unknown {self.kind} '{name}'.{hint} Valid {self.kind} names: "
                f"{', '.join(names) or '(none registered)'}."
            )
        return self._entries[name]

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        import importlib
        from importlib.metadata import entry_points

        for module in self.modules:
            importlib.import_module(module)

        for ep in entry_points(group=f"toolbox.{self.kind}"):
            if ep.name not in self._entries:
                self.add(ep.name, ep.load())

    # schema --------------------------------------------------------------------------------
    def fields(self, name: str) -> list[Field]:
        return list(self.schema(name).fields)

    def schema(self, name: str, keys: Collection[str] = (), path: str | None = None) -> Schema:
        """The fields of component ``name``, read from its source when it says all of them for
        certain (``toolbox.core.source_fields``: composing a config then imports no torch), else
        from the imported component. ``keys``: the settings about to be checked; when the type of
        one of them names a class the source alone cannot resolve, the component is imported.
        ``path``: the config key naming it, for the message when ``name`` is unknown."""
        read = None if name in self._entries else self._source_schema(name)
        if read is not None and not any(
            isinstance(f.annotation, Unresolved) for f in read.fields if f.name in keys
        ):
            return read
        return component_schema(self.get(name, path=path))

    def _source_schema(self, name: str) -> Schema | None:
        from toolbox.core import source_fields

        registries = sys.modules.get("toolbox.core.registries")
        var = next((k for k, v in vars(registries).items() if v is self), None) if registries else None
        found = source_fields.component(var, self.modules, name) if var else None
        if found is None:
            return None
        docs = _arg_docs(found.doc)
        fields = tuple(
            Field(p.name, p.annotation, p.default, p.required, docs.get(p.name, "")) for p in found.params
        )
        return Schema(fields, found.accepts_any)

    def validate(
        self, spec: Mapping[str, Any], path: str, injected: frozenset[str] = frozenset()
    ) -> dict[str, Any]:
        """Check ``spec`` against the component's schema; return its keyword arguments."""
        spec = _plain(spec)
        if not isinstance(spec, dict) or NAME_KEY not in spec:
            raise ConfigError(
                f"{path}: expected a mapping with a '{NAME_KEY}' key selecting a {self.kind} "
                f"(one of: {', '.join(self.names())}), got {spec!r}."
            )
        name = spec[NAME_KEY]
        kwargs = {k: v for k, v in spec.items() if k != NAME_KEY}
        schema = self.schema(name, kwargs, path=f"{path}.{NAME_KEY}")
        return validate_schema(schema, kwargs, path, f"{self.kind} '{name}'", injected)

    def build(self, spec: Mapping[str, Any], path: str | None = None, **injected: Any) -> Any:
        """Build a component from its config node, passing the injections it accepts."""
        path = path or self.kind
        kwargs = self.validate(spec, path, frozenset(injected))
        obj = self.get(_plain(spec)[NAME_KEY])
        accepted = _accepted(obj, injected)
        missing = [f.name for f in component_fields(obj) if f.required]
        missing = [m for m in missing if m not in kwargs and m not in accepted]
        if missing:
            raise ConfigError(
                f"{path}: {self.kind} '{spec[NAME_KEY]}' needs {', '.join(missing)}; "
                f"set {', '.join(f'{path}.{m}=...' for m in missing)}."
            )
        result = obj(**accepted, **kwargs)
        if self.base is not None and not isinstance(result, self.base):
            raise ConfigError(
                f"{path}: {self.kind} '{spec[NAME_KEY]}' built a {type(result).__name__}, "
                f"not a {self.base.__name__}."
            )
        return result

    @classmethod
    def all(cls) -> dict[str, Registry]:
        return dict(sorted(cls._all.items()))


def source_location(obj: Any) -> str:
    """``path/to/module.py:line`` of a component's definition, the path relative to the folder
    holding its top-level package (``toolbox/trainer/optim.py:21``)."""
    import sys
    from pathlib import Path

    target = inspect.unwrap(obj)
    try:
        file = Path(inspect.getsourcefile(target) or "")
        line = inspect.getsourcelines(target)[1]
    except (OSError, TypeError):
        return getattr(target, "__module__", "?")
    top = sys.modules.get((getattr(target, "__module__", "") or "").split(".")[0])
    base = Path(top.__file__).parent.parent if top is not None and getattr(top, "__file__", None) else None
    try:
        shown = file.resolve().relative_to(base.resolve()) if base else file
    except ValueError:
        shown = file
    return f"{shown.as_posix()}:{line}"


def registered_name(obj: Any) -> str:
    """The name a component (an instance, or its class or factory) is registered under, else its
    class name."""
    target = obj if inspect.isclass(obj) or inspect.isfunction(obj) else type(obj)
    return getattr(target, "_registry_name", target.__name__)


# helpers ----------------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """OmegaConf containers to plain Python, so values can be type-checked and passed on."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover - hydra is a hard dependency
        return value
    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _signature(obj: Callable[..., Any]) -> inspect.Signature:
    target = obj.__init__ if inspect.isclass(obj) else obj
    return inspect.signature(target)


def _hints(obj: Callable[..., Any]) -> dict[str, Any]:
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        return typing.get_type_hints(target, include_extras=True)  # keep Annotated ranges
    except Exception:  # one unresolvable forward reference (a TYPE_CHECKING import): resolve one by one
        pass
    namespace = dict(getattr(inspect.unwrap(target), "__globals__", {}))
    hints = {}
    for name, annotation in getattr(target, "__annotations__", {}).items():
        try:
            hints[name] = eval(annotation, namespace) if isinstance(annotation, str) else annotation
        except Exception:
            continue
    return hints


def _accepted(obj: Callable[..., Any], injected: Mapping[str, Any]) -> dict[str, Any]:
    params = _signature(obj).parameters
    return {k: v for k, v in injected.items() if k in params}


def component_fields(obj: Callable[..., Any]) -> list[Field]:
    """The config fields of a component: its keyword parameters with types and docs."""
    hints = _hints(obj)
    docs = _arg_docs(inspect.getdoc(obj) or "")
    fields = []
    for p in _signature(obj).parameters.values():
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        fields.append(
            Field(
                name=p.name,
                annotation=hints.get(p.name, Any),
                default=None if p.default is p.empty else p.default,
                required=p.default is p.empty,
                doc=docs.get(p.name, ""),
            )
        )
    if inspect.isclass(obj) and getattr(obj, "config_from_base", False):
        # ``**settings`` passed on to the base class: its fields are this class's too (less the ones
        # the class sets itself, ``config_excludes``)
        have = {f.name for f in fields} | set(getattr(obj, "config_excludes", ()))
        base = next(c for c in obj.__mro__[1:] if "__init__" in vars(c))
        fields += [f for f in component_fields(base) if f.name not in have and f.name != "parts"]
    return fields


def validate_kwargs(
    obj: Callable[..., Any],
    kwargs: Mapping[str, Any],
    path: str,
    what: str,
    injected: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Type-check ``kwargs`` against the signature of ``obj``; errors name ``path.key``."""
    return validate_schema(component_schema(obj), kwargs, path, what, injected)


def validate_schema(
    schema: Schema,
    kwargs: Mapping[str, Any],
    path: str,
    what: str,
    injected: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Type-check ``kwargs`` against a component's schema; errors name ``path.key``."""
    fields = {f.name: f for f in schema.fields}
    accepts_any = schema.accepts_any
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key not in fields:
            if accepts_any:
                out[key] = value
                continue
            valid = [n for n in fields if n not in injected]
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"{path}.{key}: unknown key for {what}.{hint} Valid keys: {', '.join(valid)}.")
        if key in injected:
            raise ConfigError(
                f"{path}.{key}: '{key}' is set by the builder for {what}; remove it from the config."
            )
        out[key] = check_type(value, fields[key].annotation, f"{path}.{key}")
    return out


def _arg_docs(doc: str) -> dict[str, str]:
    """Parse a Google-style ``Args:`` section into {name: description}."""
    out: dict[str, str] = {}
    lines = doc.splitlines()
    in_args = False
    current = None
    for line in lines:
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if not in_args:
            continue
        if stripped and not line.startswith(" ") and stripped.endswith(":"):
            break  # the next section
        if not stripped:
            current = None
            continue
        head, sep, rest = stripped.partition(":")
        name = head.split(" ")[0].strip()
        if sep and name.isidentifier() and line.startswith("    ") and not line.startswith("        "):
            current = name
            out[name] = rest.strip()
        elif current:
            out[current] = f"{out[current]} {stripped}".strip()
    return out
