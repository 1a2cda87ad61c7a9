"""Trainers follow the skeleton through public hooks: none overrides ``fit`` or a private method
of ``BaseTrainer``, and every native trainer's module docstring maps the files one step crosses."""

import inspect

from toolbox.core.registries import TRAINERS
from toolbox.trainer.base import BaseTrainer

SKELETON = {
    n
    for n, v in vars(BaseTrainer).items()
    if callable(v) and (n == "fit" or (n.startswith("_") and not n.startswith("__")))
}


def test_no_trainer_overrides_fit_or_a_private_step():
    assert {"fit", "_finish", "_prepare_run", "_resume"} <= SKELETON
    overrides = {
        f"{name}.{attr}"
        for name, cls in TRAINERS
        for klass in cls.__mro__
        if klass is not BaseTrainer and issubclass(klass, BaseTrainer)
        for attr in vars(klass)
        if attr in SKELETON
    }
    assert overrides == set()


def test_native_trainers_name_the_files_of_one_step():
    for name in ("supervised", "preference", "grpo", "ppo_env"):
        doc = inspect.getmodule(TRAINERS.get(name)).__doc__
        assert "trainer/base.py" in doc and "data/" in doc or "rl/" in doc, name
        assert "step" in doc and "files" in doc.lower(), name


def test_every_trainer_maps_one_step_through_files_that_exist():
    """The TRL backends and both preference modes too: each path the map names is a real file of
    toolbox (or, for ``trl/...``, of TRL)."""
    import re
    from pathlib import Path

    import toolbox
    from toolbox.trainer.unpaired_preference import UnpairedPreferenceTrainer

    roots = {"": Path(toolbox.__file__).parent}
    try:
        import trl

        roots["trl/"] = Path(trl.__file__).parent.parent
    except ImportError:  # TRL's own files are then not checked
        pass
    missing = []
    for cls in [cls for _, cls in TRAINERS] + [UnpairedPreferenceTrainer]:
        doc = inspect.getmodule(cls).__doc__
        assert "step" in doc and "files" in doc.lower() and "trainer/" in doc, cls.__name__
        paths = re.findall(r"``((?:[a-z_]+/)+[a-z_]+\.py)``", doc)
        assert len(paths) >= 3, cls.__name__
        for path in paths:
            root = roots.get("trl/") if path.startswith("trl/") else roots[""]
            if root is not None and not (root / path).is_file():
                missing.append(f"{cls.__name__}: {path}")
    assert missing == []


def test_paired_and_unpaired_preference_modes_have_their_own_step():
    from toolbox.trainer.preference import PreferenceTrainer
    from toolbox.trainer.preference_base import PreferenceTrainerBase
    from toolbox.trainer.unpaired_preference import UnpairedPreferenceTrainer

    for cls in (PreferenceTrainer, UnpairedPreferenceTrainer):
        for hook in ("train_step", "inputs", "preference_metrics", "check_data", "reference_fields"):
            assert hook in vars(cls), f"{cls.__name__}.{hook}"
    assert "train_step" not in vars(PreferenceTrainerBase)
    assert not issubclass(UnpairedPreferenceTrainer, PreferenceTrainer)
