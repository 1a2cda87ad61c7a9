"""Composing a config reads each component's fields from its source (toolbox.core.source_fields):
what it reads must be what the imported component's signature says, for every registered one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from toolbox.core.registry import Registry, component_schema
from toolbox.core.source_fields import Unresolved

ROOT = Path(__file__).resolve().parents[2]


def _every_component():
    import toolbox.core.registries  # noqa: F401  (defines every registry)

    for kind, registry in Registry.all().items():
        for name, obj in registry:
            yield kind, registry, name, obj


def test_the_fields_read_from_source_are_the_imported_signatures() -> None:
    compared, mismatches = 0, []
    for kind, registry, name, obj in _every_component():
        read = registry._source_schema(name)
        if read is None:
            continue  # the registry imports it: nothing to compare
        compared += 1
        live = component_schema(obj)
        if read.accepts_any != live.accepts_any:
            mismatches.append(f"{kind} {name}: accepts_any {read.accepts_any} != {live.accepts_any}")
        if [f.name for f in read.fields] != [f.name for f in live.fields]:
            mismatches.append(
                f"{kind} {name}: fields {[f.name for f in read.fields]} != {[f.name for f in live.fields]}"
            )
            continue
        for a, b in zip(read.fields, live.fields, strict=True):
            for attr in ("default", "required", "doc"):
                x, y = getattr(a, attr), getattr(b, attr)
                if x != y or type(x) is not type(y):
                    mismatches.append(f"{kind} {name}.{a.name}: {attr} {x!r} != {y!r}")
            if not isinstance(a.annotation, Unresolved) and a.annotation != b.annotation:
                mismatches.append(f"{kind} {name}.{a.name}: annotation {a.annotation!r} != {b.annotation!r}")
    assert mismatches == []
    assert compared >= 140  # of the 162 built-in components, those the source says for certain


def test_a_default_computed_from_a_name_or_an_inherited_signature_is_left_to_the_import() -> None:
    import ast

    from toolbox.core.source_fields import _registered

    tree = ast.parse(
        textwrap.dedent(
            '''
            from toolbox.core.bounds import AtLeastOne
            LR = 0.1

            class Base:
                """A base."""
                def __init__(self, steps: AtLeastOne = 3, tokenizer: PreTrainedTokenizerBase = None):
                    pass

            @OPTIMIZERS.register("plain")
            def plain(lr: float = 0.1, betas: tuple[float, float] = (0.9, 0.99)):
                """Args:
                    lr: the rate.
                """

            @OPTIMIZERS.register("named")
            def named(lr: float = LR):
                """Named."""

            @OPTIMIZERS.register("child")
            class Child(Base):
                """A child: the base's __init__."""

            @OPTIMIZERS.register("settings")
            class Settings(Base):
                """Passes **settings on."""
                def __init__(self, extra: int = 1, **settings):
                    pass
            '''
        )
    )
    found = dict(_registered(tree, "OPTIMIZERS"))
    plain = found["plain"]
    assert [(p.name, p.default, p.required) for p in plain.params] == [
        ("lr", 0.1, False),
        ("betas", (0.9, 0.99), False),
    ]
    assert plain.params[1].annotation == tuple[float, float]
    assert found["named"] is None  # LR: only the import knows it
    child = found["child"]
    assert [p.name for p in child.params] == ["steps", "tokenizer"]
    assert isinstance(child.params[1].annotation, Unresolved)  # a class of a heavy module
    assert found["settings"] is None  # **settings: a base class may take them as fields


def test_composing_the_demo_imports_no_torch_transformers_or_datasets(tmp_path: Path) -> None:
    """Issue 38: `toolbox plan results/demo/` took minutes, most of it `toolbox compose` importing
    torch and transformers for the components' signatures; the workflow's compose stage (and
    `toolbox plan`) now read them from source."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys
                from toolbox.cli import main
                sys.argv = ["toolbox", "compose", "experiment=demo", "trainer.max_steps=3", "--out", sys.argv[1]]
                code = main()
                heavy = sorted(m for m in ("torch", "transformers", "datasets") if m in sys.modules)
                print("heavy:", ",".join(heavy) or "none")
                sys.exit(code)
                """
            ),
            str(tmp_path / "composed.yaml"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "heavy: none"


def test_every_name_the_source_registers_is_registered_once_imported() -> None:
    """A file under a registry's modules that the package never imports would register a name only
    the source knows: a config naming it would compose, then fail to build."""
    from toolbox.core import registries, source_fields

    extra = {}
    for var, registry in vars(registries).items():
        if isinstance(registry, Registry):
            only_in_source = set(source_fields._index(var, registry.modules)) - set(registry.names())
            if only_in_source:
                extra[registry.kind] = sorted(only_in_source)
    assert extra == {}
