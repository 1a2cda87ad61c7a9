"""A config name is one hop from its code: the group files that only name a component are
generated from the registries (current, as dvc.yaml is), and ``toolbox compose`` prints each
component's file:line, which defines that name."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from toolbox.experiment import group_files
from toolbox.experiment.group_files import CONFIG_DIR, HEADER, groups, names_only, stale_files
from toolbox.experiment.schema import registry_of

ROOT = Path(group_files.__file__).parents[2]


def test_generated_group_files_are_current():
    assert stale_files() == [], "run `make configs`"


def test_every_built_in_name_has_a_group_file_and_no_hand_file_only_names_one():
    missing, hand_named = [], []
    for group, (attr, _) in groups().items():
        for name, obj in registry_of(attr):
            if obj.__module__.startswith("toolbox.") and not (CONFIG_DIR / group / f"{name}.yaml").exists():
                missing.append(f"{group}/{name}")
        for path in (CONFIG_DIR / group).glob("*.yaml"):
            if names_only(path) and not path.read_text().startswith(HEADER):
                hand_named.append(f"{group}/{path.name}")
    assert missing == [] and hand_named == []


def test_generated_file_names_the_module_and_the_defaults():
    text = (CONFIG_DIR / "objective" / "dpo.yaml").read_text()
    assert "is toolbox.objectives.preference.DPOLoss (toolbox/objectives/preference.py)" in text
    assert "#   beta: 0.1\n" in text and text.endswith("\nname: dpo\n")


def test_check_fails_on_an_edited_file_a_hand_written_one_and_an_orphan(tmp_path, monkeypatch):
    copy = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, copy)
    monkeypatch.setattr(group_files, "CONFIG_DIR", copy)
    (copy / "objective" / "dpo.yaml").write_text(
        (copy / "objective" / "dpo.yaml").read_text().replace("beta: 0.1", "beta: 0.2")
    )
    (copy / "optimizer" / "adam.yaml").write_text("name: adam\n")  # hand-written, only the name
    (copy / "model" / "gone.yaml").write_text(f"{HEADER}\nname: gone\n")  # no component of that name
    assert group_files.stale_files() == ["model/gone.yaml", "objective/dpo.yaml", "optimizer/adam.yaml"]
    assert group_files.main(["--check"]) == 1
    group_files.write_files()
    assert group_files.stale_files() == [] and not (copy / "model" / "gone.yaml").exists()


def _printed_sources(out: str) -> list[tuple[str, str, int]]:
    found = re.findall(r"^\s*name: (\S+)  # (\S+\.py):(\d+)$", out, flags=re.M)
    return [(name, path, int(line)) for name, path, line in found]


@pytest.mark.parametrize("experiment", ["dpo_arith", "grpo_arith"])
def test_compose_prints_where_each_name_is_defined(experiment, capsys):
    from omegaconf import OmegaConf

    from toolbox.cli import main
    from toolbox.experiment.compose import load_config
    from toolbox.experiment.schema import component_paths, node_at

    assert main(["compose", f"experiment={experiment}"]) == 0
    out = capsys.readouterr().out
    cfg = load_config([f"experiment={experiment}"])
    components = [p for p, _, _ in component_paths(cfg) if OmegaConf.is_dict(node_at(cfg, p))]
    printed = _printed_sources(out)
    assert len(printed) == len(components) > 10  # every component, no other line
    for name, path, line in printed:
        lines = (ROOT / path).read_text().splitlines()
        block = "\n".join(lines[line - 1 : line + 4])  # the decorator(s), then the def or class
        assert f'.register("{name}")' in block, f"{path}:{line} does not define '{name}'"
    assert OmegaConf.create(out) == OmegaConf.create(OmegaConf.to_yaml(cfg))  # comments only


def test_compose_out_file_has_no_line_numbers(tmp_path):
    from toolbox.cli import main

    target = tmp_path / "c.yaml"
    assert main(["compose", "experiment=dpo_arith", "--out", str(target)]) == 0
    assert "#" not in target.read_text()
