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


def shared_names(registries) -> dict[str, set[str]]:
    """Each name that more than one of ``registries`` holds, with the kinds that hold it."""
    kinds: dict[str, set[str]] = {}
    for registry in registries:
        for name, _ in registry:
            kinds.setdefault(name, set()).add(registry.kind)
    return {name: ks for name, ks in kinds.items() if len(ks) > 1}


def test_names_are_unique_across_registries():
    import toolbox.core.registries  # noqa: F401  (every registry)

    assert shared_names(Registry.all().values()) == {}
    assert "causal_lm" not in Registry.all()["model"] and "local" not in Registry.all()["source"]


def test_a_name_in_two_registries_is_found():
    first, second = Registry("names_test_a"), Registry("names_test_b")
    try:
        first.add("twin", lambda: None)
        second.add("twin", lambda: None)
        second.add("single", lambda: None)
        assert shared_names([first, second]) == {"twin": {"names_test_a", "names_test_b"}}
    finally:
        Registry._all.pop("names_test_a", None)
        Registry._all.pop("names_test_b", None)


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


# old name -> (registry, new name): the parts of one thing renamed so that no two registries share a name
RENAMED_PARTS = {
    ("collator", "decision"): "decision_batch",
    ("collator", "graph"): "graph_batch",
    ("collator", "preference"): "preference_pad",
    ("collator", "unpaired_preference"): "unpaired_preference_pad",
    ("dataset", "preference"): "preference_pairs",
    ("evaluator", "decision"): "decision_metrics",
    ("evaluator", "graph"): "graph_metrics",
    ("objective", "grpo"): "clipped_policy",
    ("tokenizer", "pretrained"): "hf_tokenizer",
}


@pytest.mark.parametrize(("kind", "old"), sorted(RENAMED_PARTS))
def test_a_renamed_part_names_its_new_name(kind, old):
    import toolbox.core.registries  # noqa: F401  (every registry)

    registry, new = Registry.all()[kind], RENAMED_PARTS[(kind, old)]
    assert new in registry and old not in registry
    message = rf"^x\.{kind}\.name: {kind} '{old}' is now called '{new}' .*; write x\.{kind}\.name={new}\.$"
    with pytest.raises(UnknownComponentError, match=message):
        registry.get(old, path=f"x.{kind}.name")


def test_a_config_with_an_old_part_name_is_told_the_field_to_write():
    from toolbox.core.errors import UnknownComponentError
    from toolbox.core.registries import COLLATORS, OBJECTIVES, TOKENIZERS

    with pytest.raises(UnknownComponentError) as e:
        COLLATORS.validate({"name": "preference"}, "data.collator")
    assert str(e.value) == (
        "data.collator.name: collator 'preference' is now called 'preference_pad' (names are unique across "
        "registries); write data.collator.name=preference_pad."
    )
    with pytest.raises(UnknownComponentError, match=r"write objective.name=clipped_policy\.$"):
        OBJECTIVES.validate({"name": "grpo", "loss_type": "grpo"}, "objective")
    with pytest.raises(UnknownComponentError, match=r"write tokenizer.name=hf_tokenizer\.$"):
        TOKENIZERS.build({"name": "pretrained", "path": "x"}, path="tokenizer")
