import textwrap

import pytest

from toolbox.core.errors import ConfigError, UnknownComponentError
from toolbox.core.registry import Registry


@pytest.fixture
def reg():
    r = Registry("widget_test")
    yield r
    Registry._all.pop("widget_test", None)


def test_register_and_build_with_injection(reg):
    @reg.register("square")
    def square(size: int, color: str = "red", *, vocab_size: int = 0):
        """A square.

        Args:
            size: side length.
            color: fill colour.
        """
        return (size, color, vocab_size)

    # vocab_size is accepted, num_classes is not: only accepted injections are passed
    assert reg.build({"name": "square", "size": 3}, vocab_size=7, num_classes=2) == (3, "red", 7)
    fields = {f.name: f for f in reg.fields("square")}
    assert fields["size"].required and fields["size"].doc == "side length."
    assert fields["color"].default == "red" and fields["color"].doc == "fill colour."


def test_unknown_name_lists_names_and_suggests(reg):
    reg.add("circle", lambda: None)
    reg.add("square", lambda: None)
    with pytest.raises(UnknownComponentError) as e:
        reg.build({"name": "sqare"}, path="model")
    msg = str(e.value)
    assert "model.name: unknown widget_test 'sqare'" in msg
    assert "Did you mean 'square'?" in msg
    assert "circle, square" in msg


def test_unknown_name_names_the_file_of_the_closest_match():
    from toolbox.core.registries import OPTIMIZERS
    from toolbox.trainer import optim

    line = optim.adamw.__code__.co_firstlineno  # the decorator's line
    with pytest.raises(UnknownComponentError) as e:
        OPTIMIZERS.get("adamww", path="optimizer.name")
    assert f"Did you mean 'adamw'? It is defined in toolbox/trainer/optim.py:{line}." in str(e.value)


def test_misspelt_key_names_path_and_valid_keys(reg):
    @reg.register("box")
    def box(width: int = 1, height: int = 1):
        return width * height

    with pytest.raises(ConfigError) as e:
        reg.build({"name": "box", "widht": 3}, path="model")
    assert str(e.value).startswith("model.widht: unknown key for widget_test 'box'. Did you mean 'width'?")
    assert "Valid keys: width, height" in str(e.value)


def test_wrong_type_names_path(reg):
    @reg.register("box")
    def box(width: int = 1):
        return width

    with pytest.raises(ConfigError, match=r"model.width: expected int, got 'wide'"):
        reg.build({"name": "box", "width": "wide"}, path="model")
    assert reg.build({"name": "box", "width": 4}) == 4


def test_missing_required_field(reg):
    @reg.register("box")
    def box(width: int):
        return width

    with pytest.raises(ConfigError, match=r"model: widget_test 'box' needs width; set model.width=\.\.\."):
        reg.build({"name": "box"}, path="model")


def test_injected_key_cannot_be_set_in_config(reg):
    @reg.register("head")
    def head(vocab_size: int, dim: int = 4):
        return vocab_size

    with pytest.raises(ConfigError, match="'vocab_size' is set by the builder"):
        reg.build({"name": "head", "vocab_size": 3}, path="model", vocab_size=5)


def test_entry_point_plugin_is_discovered(tmp_path, monkeypatch):
    """A third-party package registers a component through the entry-point group toolbox.<kind>."""
    (tmp_path / "my_plugin.py").write_text("def make(scale: float = 1.0):\n    return ('plugin', scale)\n")
    dist = tmp_path / "my_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent("""
        [toolbox.gadget_test]
        fancy = my_plugin:make
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("gadget_test")
    try:
        assert "fancy" in reg.names()
        assert reg.build({"name": "fancy", "scale": 2}) == ("plugin", 2.0)
    finally:
        Registry._all.pop("gadget_test", None)


def test_built_in_registries_are_populated():
    from toolbox.core.registries import OBJECTIVES, OPTIMIZERS, SCHEDULERS, TRAINERS

    assert {"causal_lm", "classification"} <= set(OBJECTIVES.names())
    assert {"adamw", "sgd"} <= set(OPTIMIZERS.names())
    assert {"constant", "linear", "cosine"} <= set(SCHEDULERS.names())
    assert "supervised" in TRAINERS.names()


# Names that two registries share because they are the parts of one thing: a data pipeline's
# dataset and collator (and its evaluator), a trainer and its objective, a model and its tokenizer.
# This set only shrinks: a new name must be unique across every registry.
SHARED_NAMES = {
    "decision": {"collator", "dataset", "evaluator"},
    "graph": {"collator", "evaluator"},
    "grpo": {"objective", "trainer"},
    "preference": {"collator", "dataset", "trainer"},
    "pretrained": {"model", "tokenizer"},
    "unpaired_preference": {"collator", "dataset"},
}


def test_names_are_unique_across_registries_but_the_listed_pairs():
    import toolbox.core.registries  # noqa: F401  (every registry)

    kinds: dict[str, set[str]] = {}
    for kind, registry in Registry.all().items():
        for name, _ in registry:
            kinds.setdefault(name, set()).add(kind)
    shared = {name: ks for name, ks in kinds.items() if len(ks) > 1}
    assert shared == SHARED_NAMES
    assert "causal_lm" not in Registry.all()["model"] and "local" not in Registry.all()["source"]


def test_a_renamed_component_names_its_new_name():
    from toolbox.core.errors import UnknownComponentError
    from toolbox.core.registries import MODELS, SOURCES

    with pytest.raises(UnknownComponentError) as e:
        MODELS.get("causal_lm", path="model.name")
    assert str(e.value) == (
        "model.name: model 'causal_lm' is now called 'hf_causal_lm' (names are unique across registries); "
        "write model.name=hf_causal_lm."
    )
    with pytest.raises(UnknownComponentError, match="write data.source.name=local_files"):
        SOURCES.validate({"name": "local", "path": "x"}, "data.source")
