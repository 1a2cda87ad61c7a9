"""A Griffe extension (``extensions:`` of mkdocstrings in mkdocs.yml) that turns the reST our
docstrings use into the Markdown mkdocstrings renders, for every docstring of the package at once:

- a literal block, ``text::`` then a blank line and an indented block, becomes ``text:`` and a
  fenced code block (a lone ``::`` line disappears, ``text ::`` loses its colons), as Sphinx shows
  it; without this the ``::`` is printed and the block's first line may join the paragraph;
- a cross-reference role, ``:class:`Name``` / ``:meth:`~pkg.mod.Name.method```, becomes code that
  links to the object's API entry where the site has one (resolved in the docstring's scope; an
  object the site does not render stays plain code, never a broken link).

Only the text mkdocstrings receives changes; the source files keep their docstrings as written.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

from griffe import Extension, Object

_ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|attr|data|obj|exc|const|type):`([^`]+)`")


_ITEM = re.compile(r"\s*(?:[-*+]|\d+[.)])\s+")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _content_indent(line: str) -> int:
    """Where a line's text starts: after a list item's marker (``- ``, ``1. ``) when it has one."""
    item = _ITEM.match(line)
    return item.end() if item else _indent(line)


def literal_blocks(text: str) -> str:
    """``text``'s reST literal blocks as fenced code blocks (see the module docstring)."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        head = line.rstrip()
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        base = _content_indent(line)
        is_literal = head.endswith("::") and not head.lstrip().startswith("..")
        if not (is_literal and j > i + 1 and j < len(lines) and _indent(lines[j]) > base):
            out.append(line)
            i += 1
            continue
        end = j
        while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > base):
            end += 1
        while not lines[end - 1].strip():
            end -= 1
        pad = " " * base
        text_part = head[:-2]
        if text_part.strip():  # "Tables::" -> "Tables:"; "Tables ::" -> "Tables"
            out += [text_part.rstrip() if text_part.endswith(" ") else text_part + ":", ""]
        elif out and out[-1].strip():  # a lone "::" right under a paragraph
            out.append("")
        body = textwrap.dedent("\n".join(lines[j:end])).split("\n")
        out += [pad + "```text", *[pad + b if b.strip() else "" for b in body], pad + "```"]
        i = end
    return "\n".join(out)


def _target(obj: Object, target: str) -> str | None:
    """The full path of a role's target, resolved in ``obj``'s scope (None when it is not ours)."""
    first, _, rest = target.partition(".")
    if first == obj.package.name:
        return target
    try:
        path = obj.resolve(first)
    except Exception:  # griffe's NameResolutionError, or an alias it cannot follow
        return None
    return f"{path}.{rest}" if rest else path


def roles(text: str, obj: Object) -> str:
    """``:role:`target``` cross-references as (linked) code."""

    def fix(m: re.Match) -> str:
        content = m.group(1).strip()
        title, _, explicit = content.partition(" <")
        if explicit:  # :class:`the store <Store>`
            target, shown = explicit.rstrip(">"), title
        else:
            target = content.lstrip("~")
            shown = target.rsplit(".", 1)[-1] if content.startswith("~") else target
        path = _target(obj, target)
        if path is None:
            return f"`{shown}`"
        return f'<autoref identifier="{path}" optional><code>{shown}</code></autoref>'

    return _ROLE.sub(fix, text)


def markdown(text: str, obj: Object) -> str:
    return roles(literal_blocks(text), obj)


class RestToMarkdown(Extension):
    """Rewrites every docstring of a package once it is loaded (griffe's ``on_package``)."""

    def on_package(self, *, pkg: Object, **kwargs: Any) -> None:
        stack = [pkg]
        while stack:
            obj = stack.pop()
            if obj.docstring is not None:
                obj.docstring.value = markdown(obj.docstring.value, obj)
            stack += [m for m in obj.members.values() if not m.is_alias]
