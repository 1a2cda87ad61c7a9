"""Bad command lines, as a user types them: each ends in one line ``error: ...`` on stderr, exit
code 2, no traceback, and nothing written (the run folder is never created)."""

import shutil
import subprocess
import sys

import pytest

from tests.conftest import TINY

TOOLBOX = [sys.executable, "-m", "toolbox.cli"]
# a tiny sft run with no warmup of its own (an experiment's warmup longer than a shortened run
# only warns) and no console output
BASE = ["train", "experiment=sft_arith", *TINY, "scheduler.warmup_steps=0", "trainer.max_steps=3"]

# (id, arguments after BASE ({tmp} is the test's folder), the start of the error line)
CASES = [
    ("grad_accum_zero", ["trainer.grad_accum_steps=0"], "trainer.grad_accum_steps: expected int >= 1, got 0"),
    ("batch_size_zero", ["trainer.batch_size=0"], "trainer.batch_size: expected int >= 1, got 0"),
    ("max_steps_zero", ["trainer.max_steps=0"], "trainer.max_steps: expected int >= 1, got 0"),
    ("eval_every_negative", ["trainer.eval_every=-1"], "trainer.eval_every: expected int >= 0, got -1"),
    ("save_every_negative", ["trainer.save_every=-5"], "trainer.save_every: expected int >= 0, got -5"),
    ("grad_norm_negative", ["trainer.max_grad_norm=-1"], "trainer.max_grad_norm: expected float >= 0"),
    ("lr_zero", ["optimizer.lr=0"], "optimizer.lr: expected float > 0, got 0"),
    ("weight_decay_negative", ["optimizer.weight_decay=-0.1"], "optimizer.weight_decay: expected float >= 0"),
    ("warmup_negative", ["scheduler.warmup_steps=-1"], "scheduler.warmup_steps: expected int >= 0, got -1"),
    (
        "min_lr_ratio_above_one",
        ["scheduler.min_lr_ratio=2"],
        "scheduler.min_lr_ratio: expected float >= 0, <= 1",
    ),
    (
        "warmup_beyond_max_steps",
        ["scheduler.warmup_steps=1000"],
        "scheduler.warmup_steps=1000 is more than trainer.max_steps=3",
    ),
    ("num_threads_negative", ["num_threads=-1"], "config.num_threads: expected int >= 1 | None, got -1"),
    ("ddp_one_process", ["strategy=ddp"], "strategy=ddp with launcher=local runs one process"),
    ("out_is_a_file", ["--out", "{tmp}/a_file"], "run_dir (--out): {tmp}/a_file is a file, not a folder"),
    ("out_under_a_file", ["--out", "{tmp}/a_file/run"], "run_dir (--out): {tmp}/a_file is a file"),
    ("config_bad_yaml", ["--config", "{tmp}/bad.yaml"], "--config: {tmp}/bad.yaml is not valid YAML"),
    ("config_not_a_mapping", ["--config", "{tmp}/list.yaml"], "--config: {tmp}/list.yaml holds a ListConfig"),
    ("model_width_zero", ["model.hidden_size=0"], "model.hidden_size: expected int >= 1, got 0"),
    ("model_dropout_above_one", ["model.dropout=1.5"], "model.dropout: expected float >= 0, <= 1, got 1.5"),
    (
        "model_heads_not_dividing",
        ["model.num_heads=3"],
        "model.num_heads=3 does not divide model.hidden_size=64",
    ),
    ("source_num_train_zero", ["data.source.num_train=0"], "data.source.num_train: expected int >= 1, got 0"),
    ("source_digits_zero", ["data.source.digits=0"], "data.source.digits: expected int >= 1, got 0"),
    (
        "torchrun_nproc_zero",
        ["launcher=torchrun", "launcher.nproc=0"],
        "launcher.nproc: expected int >= 1, got 0",
    ),
    (
        "torchrun_node_rank_outside",
        ["launcher=torchrun", "launcher.node_rank=3"],
        "launcher.node_rank=3 must lie in [0, 1)",
    ),
    (
        "slurm_time_zero",
        ["launcher=slurm", "launcher.time_min=0"],
        "launcher.time_min: expected int >= 1 | None, got 0",
    ),
    (
        "srun_nodes_zero",
        ["launcher=srun", "launcher.nodes=0"],
        "launcher.nodes: expected int >= 1 | None, got 0",
    ),
]
GRPO_CASES = [
    (
        "engine_threads_negative",
        ["engine=torch", "engine.num_threads=-1"],
        "engine.num_threads: expected int >= 1",
    ),
    ("top_p_above_one", ["trainer.top_p=1.5"], "trainer.top_p: expected float >= 0, <= 1, got 1.5"),
    ("generations_zero", ["trainer.num_generations=0"], "trainer.num_generations: expected int >= 1, got 0"),
    ("hf_batch_zero", ["engine=hf", "engine.batch_size=0"], "engine.batch_size: expected int >= 1, got 0"),
    (
        "vllm_no_memory",
        ["engine=vllm", "engine.gpu_memory_utilization=0"],
        "engine.gpu_memory_utilization: expected float > 0, <= 1, got 0",
    ),
    (
        "http_retries_negative",
        ["engine=http", "engine.max_retries=-1"],
        "engine.max_retries: expected int >= 0",
    ),
]


def _assert_one_line_error(proc, start):
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {start}"), lines[0]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "a_file").write_text("not a folder\n")
    (tmp_path / "bad.yaml").write_text("run_name: x\ntrainer: {max_steps: [3\n")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    return tmp_path


@pytest.mark.parametrize(("args", "start"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_train_command_line(files, args, start):
    run_dir = files / "run"
    args = [a.format(tmp=files) for a in args]
    proc = subprocess.run(
        [*TOOLBOX, *BASE, f"run_dir={run_dir}", *args], capture_output=True, text=True, timeout=600
    )
    _assert_one_line_error(proc, start.format(tmp=files))
    assert not run_dir.exists()  # nothing written
    assert (files / "a_file").read_text() == "not a folder\n"


@pytest.mark.parametrize(("args", "start"), [c[1:] for c in GRPO_CASES], ids=[c[0] for c in GRPO_CASES])
def test_bad_grpo_command_line(tmp_path, args, start):
    run_dir = tmp_path / "run"
    cmd = [*TOOLBOX, "train", "experiment=grpo_arith", "device=cpu", f"run_dir={run_dir}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    _assert_one_line_error(proc, start)
    assert not run_dir.exists()


def _namespace_works():
    if shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--user", "--map-root-user", "--mount", "true"]
    return subprocess.run(probe, capture_output=True).returncode == 0


needs_namespace = pytest.mark.skipif(
    not _namespace_works(),
    reason="needs user and mount namespaces (unshare) for a real read-only or full disk",
)


def _in_namespace(mount: str, argv: list[str]) -> subprocess.CompletedProcess:
    """Run ``argv`` in a user+mount namespace after ``mount`` (a shell line): a read-only folder
    or a tiny disk that only this process sees, even when the tests run as root."""
    command = " ".join(f"'{a}'" for a in argv)
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", f"{mount} && exec {command}"],
        capture_output=True,
        text=True,
        timeout=600,
    )


@needs_namespace
def test_read_only_output_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    mount = f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder}"
    proc = _in_namespace(mount, [*TOOLBOX, *BASE, "--out", str(folder / "run")])
    _assert_one_line_error(proc, f"run_dir (--out): {folder}: cannot write here (Read-only file system)")
    assert list(folder.iterdir()) == []


@needs_namespace
def test_full_disk_during_a_checkpoint(tmp_path):
    """A 100 KiB disk holds config.yaml and metrics.jsonl but not the checkpoint: one line naming the
    checkpoint, and no ``.tmp-step_*`` folder left behind."""
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (
        f"mount -t tmpfs -o size=100k tmpfs {disk} && "
        f"{' '.join(TOOLBOX)} {' '.join(BASE)} callbacks=default '~callbacks.console' --out {disk}/run; "
        f"code=$?; ls -a {disk}/run/checkpoints; exit $code"
    )
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
    )
    _assert_one_line_error(proc, f"{disk}/run/checkpoints/step_00000003: no space left on the device")
    assert proc.stdout.split() == [".", ".."]  # the listing of checkpoints/: no temp folder left


def test_warmup_beyond_a_shortened_run_warns_once(tmp_path):
    """An experiment's warmup (sft_arith: 50) outlasting ``trainer.max_steps=3`` is a warning, not
    an error (a smoke run keeps the recipe's schedule); ``toolbox train`` prints it exactly once
    (the command's check; the launcher and the builder re-check without repeating it)."""
    run_dir = tmp_path / "run"
    base = [a for a in BASE if a != "scheduler.warmup_steps=0"]
    proc = subprocess.run(
        [*TOOLBOX, *base, f"run_dir={run_dir}"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [line for line in proc.stderr.splitlines() if "is more than trainer.max_steps=3" in line]
    assert warnings == [
        "scheduler.warmup_steps=50 is more than trainer.max_steps=3: the learning rate would never "
        "reach its peak; set scheduler.warmup_steps to at most 3 (or raise trainer.max_steps)."
    ]
    assert (run_dir / "config.yaml").is_file()  # the run went on


@needs_namespace
def test_full_disk_while_saving_the_final_model(tmp_path):
    """A 640 KiB disk holds the final checkpoint (~540 KB) but not the exported model (~175 KB
    more): one line naming the model folder, no half-written ``.tmp-model-*`` folder, and the
    checkpoint kept (the run can be resumed elsewhere)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (
        f"mount -t tmpfs -o size=640k tmpfs {disk} && "
        f"{' '.join(TOOLBOX)} {' '.join(BASE)} callbacks=default '~callbacks.console' --out {disk}/run; "
        f"code=$?; ls -a {disk}/run; ls {disk}/run/checkpoints; exit $code"
    )
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
    )
    _assert_one_line_error(proc, f"{disk}/run/model: no space left on the device")
    listing = proc.stdout.split()
    assert listing == [".", "..", "checkpoints", "config.yaml", "metrics.jsonl", "step_00000003"]
