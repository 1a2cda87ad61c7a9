"""A config stored before a component was renamed (issue 32's unique names) still evaluates and resumes:
its old names are read as the new ones, one stderr line each; typed configs still get the error."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from toolbox.core.errors import ConfigError, UnknownComponentError
from toolbox.experiment import compose_run
from toolbox.experiment.run_folder import claim_run_folder

OLD = {  # (path in dpo_arith's / grpo_arith's composed config, new name, old name)
    "dpo_arith": [
        ("data.dataset", "preference_pairs", "preference"),
        ("data.collator", "preference_pad", "preference"),
    ],
    "grpo_arith": [("objective", "clipped_policy", "grpo"), ("tokenizer", "hf_tokenizer", "pretrained")],
}


def _stored_with_old_names(tmp_path: Path, experiment: str) -> Path:
    cfg = compose_run([f"experiment={experiment}"])
    for path, new, old in OLD[experiment]:
        assert OmegaConf.select(cfg, f"{path}.name") == new
        OmegaConf.update(cfg, f"{path}.name", old)
    stored = tmp_path / experiment / "config.yaml"
    stored.parent.mkdir(parents=True)
    stored.write_text(OmegaConf.to_yaml(cfg, resolve=True))
    return stored


@pytest.mark.parametrize("experiment", sorted(OLD))
def test_a_stored_config_with_old_names_reads_as_the_new_ones(tmp_path, capsys, experiment) -> None:
    stored = _stored_with_old_names(tmp_path, experiment)
    cfg = compose_run([], stored)  # validated: the old names would be unknown components
    err = capsys.readouterr().err.splitlines()
    for path, new, old in OLD[experiment]:
        assert OmegaConf.select(cfg, f"{path}.name") == new
        assert f"{stored}: {path}.name '{old}' is read as '{new}' (renamed)" in err
    assert len(err) == len(OLD[experiment])


def test_a_run_folder_trained_before_the_rename_is_the_same_configuration(tmp_path) -> None:
    stored = _stored_with_old_names(tmp_path, "grpo_arith")
    (stored.parent / "checkpoints").mkdir()  # a run was trained there
    now = compose_run(["experiment=grpo_arith", f"run_dir={stored.parent}"])
    assert claim_run_folder(now).run_dir == str(stored.parent)  # not refused: same run, old names
    changed = compose_run(["experiment=grpo_arith", f"run_dir={stored.parent}", "objective.beta=0.5"])
    with pytest.raises(ConfigError, match=r"objective.beta: 0.04 -> 0.5"):
        claim_run_folder(changed)


def test_a_typed_old_name_is_still_refused_with_the_new_one() -> None:
    with pytest.raises(UnknownComponentError, match="write objective.name=clipped_policy"):
        compose_run(["experiment=grpo_arith", "objective.name=grpo"])
