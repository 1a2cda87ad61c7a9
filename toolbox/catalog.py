"""Render every registered component, with where it is defined (``path.py:line``), its config fields
and docs, as Markdown."""

from __future__ import annotations

import inspect

from toolbox.core.registry import Registry, component_fields, source_location
from toolbox.experiment.schema import INJECTED as _INJECTED  # the builder's one list


def _summary(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    paragraph = doc.split("\n\n")[0]
    return " ".join(paragraph.split())


def render_catalog(link=None, kind: str | None = None, only: str | None = None) -> str:
    """The catalog as Markdown; ``link(location)`` (optional) turns a ``path.py:line`` into Markdown
    (the docs site links each entry to its API page). ``kind`` (a registry kind or the config group
    that selects it: ``objective``, ``callbacks``) and ``only`` (a component's name) narrow it to one section or entry."""
    import toolbox.core.registries  # noqa: F401  (defines every registry)

    registries = Registry.all()
    if kind is not None:
        registries = {_kind(kind, registries): registries[_kind(kind, registries)]}
        if only is not None:
            registries[next(iter(registries))].get(only)  # an unknown name: the registry's own error
    lines = ["# Component catalog", "", "Every name a config can select, generated from the registries.", ""]
    for kind, registry in registries.items():
        entries = [(n, obj) for n, obj in registry if only is None or n == only]
        if not entries:
            continue
        lines += [f"## {kind}", ""]
        for name, obj in entries:
            lines += [
                f"### `{kind}: {name}`",
                "",
                f"{link(source_location(obj)) if link else f'`{source_location(obj)}`'} — {_summary(obj) or '(no description)'}",
                "",
            ]
            fields = [f for f in component_fields(obj) if f.name not in _INJECTED]
            injected = [f.name for f in component_fields(obj) if f.name in _INJECTED]
            if fields:
                lines += ["| field | type | default | description |", "|---|---|---|---|"]
                for f in fields:
                    default = "**required**" if f.required else f"`{f.default!r}`"
                    lines.append(f"| `{f.name}` | `{f.type_name}` | {default} | {f.doc} |")
                lines.append("")
            if injected:
                lines += [f"Injected by the builder: {', '.join(f'`{n}`' for n in injected)}.", ""]
    return "\n".join(lines) + "\n"


def _kind(given: str, registries: dict[str, Registry]) -> str:
    """The registry kind a user named: the kind itself or its config group (plural, ``callbacks``)."""
    import difflib

    from toolbox.core.errors import ConfigError

    for candidate in (given, given.rstrip("s"), given.removesuffix("es")):
        if candidate in registries:
            return candidate
    close = difflib.get_close_matches(given, list(registries), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise ConfigError(f"catalog: no kind {given!r}.{hint} Kinds: {', '.join(sorted(registries))}.")
