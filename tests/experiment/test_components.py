"""``Components`` names the type of every part it holds (what its registry builds), none ``Any``."""

from __future__ import annotations

import ast
import importlib
import typing
from pathlib import Path

from toolbox.experiment import build


def _type_checking_names() -> dict[str, object]:
    """The names build.py imports under ``if TYPE_CHECKING:``, imported for real."""
    tree = ast.parse(Path(build.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    names: dict[str, object] = {}
    for node in block.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name] = importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom):
            module = importlib.import_module(node.module)
            for alias in node.names:
                names[alias.asname or alias.name] = getattr(module, alias.name)
    return names


def test_every_component_field_has_a_resolvable_type_that_is_not_any():
    hints = typing.get_type_hints(build.Components, localns=_type_checking_names())
    import torch

    from toolbox.objectives.base import Objective
    from toolbox.trainer.base import BaseTrainer

    assert set(hints) == {f for f in build.Components.__dataclass_fields__}
    untyped = [name for name, hint in hints.items() if hint is typing.Any]
    assert untyped == []
    assert hints["model"] is torch.nn.Module and hints["objective"] is Objective
    assert hints["trainer"] == BaseTrainer | None
