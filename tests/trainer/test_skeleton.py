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
