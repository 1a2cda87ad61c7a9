"""Composing and validating configs: every mistake names the key path and the fix."""

import pytest

from toolbox.core.errors import ConfigError, UnknownComponentError
from toolbox.experiment import ExperimentBuilder, load_config
from toolbox.experiment.validate import validate_config


def test_experiment_overrides_groups_and_cli_overrides_experiment():
    cfg = load_config(["experiment=sft_arith", "trainer.max_steps=7"])
    assert cfg.run_name == "sft_arith"
    assert cfg.run_dir == "results/sft_arith"
    assert cfg.trainer.max_steps == 7  # the command line wins over the experiment file
    assert cfg.model.hidden_size == 128  # from the experiment file
    assert set(cfg.eval) == {"perplexity", "exact_match"}  # the experiment overrode the eval group
    validate_config(cfg)


def test_composition_is_deterministic_and_machine_independent():
    from omegaconf import OmegaConf

    a = OmegaConf.to_yaml(load_config(["experiment=demo"]), resolve=True)
    b = OmegaConf.to_yaml(load_config(["experiment=demo"]), resolve=True)
    assert a == b
    assert "/work/" not in a and "/tmp" not in a


def test_misspelt_key_on_the_command_line():
    with pytest.raises(ConfigError) as e:
        load_config(["trainer.max_stepz=5"])
    assert str(e.value).startswith("trainer.max_stepz: unknown key. Did you mean 'max_steps'? Valid keys:")
    assert "batch_size" in str(e.value) and "+trainer.max_stepz=" in str(e.value)
    cfg = load_config(["+trainer.max_stepz=5"])
    with pytest.raises(ConfigError) as e:
        validate_config(cfg)
    assert "trainer.max_stepz: unknown key for trainer 'supervised'. Did you mean 'max_steps'?" in str(
        e.value
    )
    assert "Valid keys:" in str(e.value) and "batch_size" in str(e.value)


def test_misspelt_nested_component_key():
    cfg = load_config(["+optimizer.weight_decy=0.1"])
    with pytest.raises(
        ConfigError,
        match=r"optimizer.weight_decy: unknown key for optimizer 'adamw'. Did you mean 'weight_decay'\?",
    ):
        validate_config(cfg)


def test_wrong_type_names_the_key():
    cfg = load_config(["trainer.max_steps=lots"])
    with pytest.raises(ConfigError, match=r"trainer.max_steps: expected int >= 1, got 'lots'"):
        validate_config(cfg)


def test_unknown_top_level_key():
    cfg = load_config(["+seeed=3"])
    with pytest.raises(ConfigError, match=r"seeed: unknown top-level key. Did you mean 'seed'\?"):
        validate_config(cfg)


def test_unknown_group_option_lists_options():
    with pytest.raises(ConfigError) as e:
        load_config(["optimizer=adamm"])
    assert "adamw" in str(e.value) and "sgd" in str(e.value)


def test_unknown_component_name_lists_names_and_suggests():
    cfg = load_config(["optimizer.name=adamww"])
    with pytest.raises(UnknownComponentError) as e:
        validate_config(cfg)
    assert "optimizer.name: unknown optimizer 'adamww'. Did you mean 'adamw'?" in str(e.value)
    assert "sgd" in str(e.value)


def test_objective_of_the_wrong_family_fails_fast(tiny_overrides):
    from toolbox.core.registries import OBJECTIVES
    from toolbox.objectives.base import PreferenceObjective

    class FakeDPO(PreferenceObjective):
        """A preference objective, for this test only."""

    OBJECTIVES.add("fake_dpo_for_test", FakeDPO)
    try:
        cfg = load_config(
            [
                *tiny_overrides,
                "objective.name=fake_dpo_for_test",
                "~objective.completion_only",
                "~objective.label_smoothing",
            ]
        )
        with pytest.raises(ConfigError) as e:
            ExperimentBuilder.from_config(cfg).build()
        msg = str(e.value)
        assert "'fake_dpo_for_test' is a preference objective" in msg
        assert "trainer 'supervised' needs a supervised objective" in msg
        assert "causal_lm" in msg
    finally:
        OBJECTIVES._entries.pop("fake_dpo_for_test")


# group folder -> (component path inside its files, registry attribute); maps are label -> component
GROUP_NODES = {
    "model": [((), "MODELS")],
    "tokenizer": [((), "TOKENIZERS")],
    "objective": [((), "OBJECTIVES")],
    "optimizer": [((), "OPTIMIZERS")],
    "scheduler": [((), "SCHEDULERS")],
    "precision": [((), "PRECISIONS")],
    "strategy": [((), "STRATEGIES")],
    "launcher": [((), "LAUNCHERS")],
    "engine": [((), "ENGINES")],
    "trainer": [((), "TRAINERS")],
    "data": [(("source",), "SOURCES"), (("dataset",), "DATASETS"), (("collator",), "COLLATORS")],
}


def test_group_files_hold_only_what_differs_from_the_signature():
    import yaml

    from toolbox.core import registries
    from toolbox.core.registry import component_fields
    from toolbox.experiment.compose import CONFIG_DIR

    restated = []
    for group, nodes in [*GROUP_NODES.items(), ("callbacks", "CALLBACKS"), ("eval", "EVALUATORS")]:
        for path in sorted((CONFIG_DIR / group).glob("*.yaml")):
            data = yaml.safe_load(path.read_text()) or {}
            if isinstance(nodes, str):  # a map of label -> component
                specs = [(v, nodes) for v in data.values() if isinstance(v, dict) and "name" in v]
            else:
                specs = []
                for sub, attr in nodes:
                    node = data
                    for key in sub:
                        node = (node or {}).get(key)
                    if isinstance(node, dict) and "name" in node:
                        specs.append((node, attr))
            for node, attr in specs:
                fields = component_fields(getattr(registries, attr).get(node["name"]))
                defaults = {f.name: f.default for f in fields if not f.required}
                for key, value in node.items():
                    default = defaults.get(key, object())
                    default = list(default) if isinstance(default, tuple) else default
                    if key != "name" and value == default and type(value) is type(default):
                        restated.append(f"{path.relative_to(CONFIG_DIR)}: {key}")
    assert restated == []


def test_composition_fills_every_default_and_overrides_reach_them():
    from omegaconf import OmegaConf

    cfg = load_config(["trainer=grpo", "objective=grpo", "trainer.top_k=5"])
    assert cfg.trainer.top_k == 5  # a field the group file leaves to the signature
    assert cfg.trainer.temperature == 1.0 and cfg.trainer.max_steps == 100  # filled from the signature
    assert list(cfg.trainer)[:3] == ["name", "max_steps", "prompts_per_step"]  # in signature order
    cfg = load_config(["optimizer.name=sgd", "optimizer.momentum=0.9"])
    assert cfg.optimizer.momentum == 0.9 and cfg.optimizer.nesterov is False
    validate_config(cfg)
    cfg = load_config(["data=local"])
    assert OmegaConf.is_missing(cfg.data.source, "path")  # a required field stays required
