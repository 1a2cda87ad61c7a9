"""The conventions of the command line people already know: --version, completion, a subcommand's own
usage on a bad flag, did-you-mean for group options, `catalog KIND`, `callbacks=NAME`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from toolbox.cli import main
from toolbox.core.registries import CALLBACKS
from toolbox.experiment import load_config
from toolbox.experiment.compose import CONFIG_DIR


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "toolbox.cli", *argv], capture_output=True, text=True, timeout=120
    )


def test_version():
    from importlib.metadata import version

    out = run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"toolbox {version('toolbox')}"


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script_names_the_subcommands(shell, capsys):
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert "toolbox" in script and "train" in script and "traces" in script


def test_completion_script_works_in_bash(tmp_path):
    script = run("completion", "bash").stdout
    (tmp_path / "c.sh").write_text(script)
    probe = (
        f"source {tmp_path / 'c.sh'}; COMP_WORDS=(toolbox tra); COMP_CWORD=1; "
        "_shtab_toolbox; printf '%s\\n' \"${COMPREPLY[@]}\""
    )
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60)
    assert {"train", "traces"} <= set(out.stdout.split()), out.stderr


@pytest.mark.parametrize(
    ("argv", "usage", "hint"),
    [
        (["train", "--outt", "x"], "usage: toolbox train", "did you mean --out?"),
        (["traces", "show", "--trce", "s", "1"], "usage: toolbox traces show", "did you mean --trace?"),
        (["eval", "--rn", "x"], "usage: toolbox eval", "did you mean --run?"),
    ],
)
def test_a_bad_flag_prints_the_subcommands_own_usage(argv, usage, hint):
    out = run(*argv)
    assert out.returncode == 2
    assert out.stderr.startswith(usage), out.stderr
    assert hint in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("override", "suggestion"),
    [("optimizer=adamww", "optimizer=adamw"), ("experiment=sft_arth", "experiment=sft_arith")],
)
def test_a_misspelt_group_option_gets_a_suggestion(override, suggestion, capsys):
    assert main(["compose", override]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {override}: no such option") and f"Did you mean {suggestion}?" in err
    assert "search path" not in err and err.count("\n") == 1


def test_catalog_of_one_kind_and_one_component(capsys):
    assert main(["catalog", "callbacks"]) == 0
    text = capsys.readouterr().out
    assert "## callback" in text and "### `callback: wandb`" in text and "## objective" not in text
    assert main(["catalog", "objective", "dpo"]) == 0
    text = capsys.readouterr().out
    assert text.count("### ") == 1 and "### `objective: dpo`" in text
    assert main(["catalog", "objectve"]) == 2
    assert "Did you mean 'objective'?" in capsys.readouterr().err


def test_every_optional_callback_is_selected_by_name():
    default = set(load_config(["callbacks=default"]).callbacks)
    named = {p.stem for p in (CONFIG_DIR / "callbacks").glob("*.yaml")}
    for name in CALLBACKS.names():
        if name in default or name in ("memory_writer",):  # memory_writer: `callbacks=memory`
            continue
        assert name in named, f"toolbox/configs/callbacks/{name}.yaml: `callbacks={name}` should select it"
        callbacks = load_config([f"callbacks={name}"]).callbacks
        assert set(callbacks) == default | {name} and callbacks[name].name == name
    both = load_config(["callbacks=[wandb,profiler]"]).callbacks
    assert set(both) == default | {"wandb", "profiler"}


def test_third_party_progress_bars_are_off_under_the_cli():
    probe = (
        "import os, sys; from toolbox import cli; cli.main(['catalog', 'env']) ; "
        "from transformers.utils import logging; print(logging.is_progress_bar_enabled(), "
        "os.environ['HF_DATASETS_DISABLE_PROGRESS_BARS'])"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().endswith("False 1"), out.stdout + out.stderr
