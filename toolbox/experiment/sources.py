"""Where each component of a composed config is defined: ``name: dpo_mix  # toolbox/objectives/dpo_family.py:190``.

``toolbox compose`` prints the composed YAML with each component node's ``name:`` line followed by
the file and line of the class or function its registry builds, so a config name is one hop from
its code. The comments go to the printed text only: ``--out`` files stay free of line numbers that
would change whenever code moves (and with them every workflow stage that reads the config).
"""

from __future__ import annotations

import re

from omegaconf import DictConfig

from toolbox.core.errors import ConfigError
from toolbox.core.registry import source_location
from toolbox.experiment.schema import component_paths, node_at, registry_of

# a block-style mapping key (what OmegaConf.to_yaml writes): indentation, key, the rest of the line
_KEY_LINE = re.compile(r"^( *)([A-Za-z_][\w.-]*):(.*)$")


def component_sources(cfg: DictConfig) -> dict[str, str]:
    """Config path of each component node -> ``file:line`` of what its name selects (a name no
    registry knows is left out: validating the config names it)."""
    out = {}
    for path, attr, _ in component_paths(cfg):
        node = node_at(cfg, path)
        if not isinstance(node, DictConfig) or not isinstance(node.get("name"), str):
            continue
        try:
            out[path] = source_location(registry_of(attr).get(node.name))
        except ConfigError:
            continue
    return out


def with_sources(text: str, sources: dict[str, str]) -> str:
    """``text`` (block-style YAML of a composed config) with ``  # file:line`` after each ``name:``
    line of a node in ``sources``."""
    lines = []
    stack: list[tuple[int, str]] = []  # (indentation, key) of the mappings the line is inside
    for line in text.splitlines():
        match = _KEY_LINE.match(line)
        if match:
            indent, key, rest = len(match.group(1)), match.group(2), match.group(3)
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = ".".join(k for _, k in stack)
            if key == "name" and parent in sources:
                line = f"{line}  # {sources[parent]}"
            elif not rest.strip():
                stack.append((indent, key))  # a mapping (or a list) follows
        lines.append(line)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")
