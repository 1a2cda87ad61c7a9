import json

import torch

from toolbox.trainer.callbacks.jsonl import JsonlMetrics


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def run(driver, steps, eval_every=2):
    for _ in range(steps):
        s = driver.trainer.step + 1
        driver.step(loss=1.0 / s, lr=1e-3, num_tokens=torch.tensor(64))
        if s % eval_every == 0:
            driver.eval(**{"eval/loss": 2.0 / s})


def test_writes_train_and_eval_lines(trainer, drive):
    d = drive(JsonlMetrics())
    d.fit_start()
    run(d, 4)
    path = trainer.context.run_dir / "metrics.jsonl"
    # flushed as written: readable before FIT_END closes the file
    lines = read(path)
    assert [(r["step"], r["split"]) for r in lines] == [
        (1, "train"), (2, "train"), (2, "eval"), (3, "train"), (4, "train"), (4, "eval"),
    ]  # fmt: skip
    assert lines[0] == {"step": 1, "split": "train", "loss": 1.0, "lr": 1e-3, "num_tokens": 64}
    assert lines[2] == {"step": 2, "split": "eval", "eval/loss": 1.0}
    d.fit_end()


def test_non_finite_and_reserved_keys(trainer, drive):
    d = drive(JsonlMetrics(filename="m.jsonl"))
    d.fit_start()
    d.step(loss=float("nan"), step=99, split="x")
    d.fit_end()
    (line,) = read(trainer.context.run_dir / "m.jsonl")
    assert line == {"step": 1, "split": "train", "loss": None}


def test_resume_drops_lines_after_the_resumed_step(trainer, drive):
    d = drive(JsonlMetrics())
    d.fit_start()
    run(d, 6)  # crashed after step 6; the last checkpoint was at step 4
    d.fit_end()
    path = trainer.context.run_dir / "metrics.jsonl"
    with path.open("a") as f:
        f.write('{"step": 7, "split": "tr')  # a line cut by the crash

    trainer.step = 0
    d2 = drive(JsonlMetrics())
    d2.fit_start(resumed_from=4)
    assert [r["step"] for r in read(path)] == [1, 2, 2, 3, 4, 4]
    run(d2, 2)
    d2.fit_end()
    lines = read(path)
    steps = [(r["step"], r["split"]) for r in lines]
    assert len(steps) == len(set(steps)), "a resumed run must not duplicate steps"
    assert [r["step"] for r in lines if r["split"] == "train"] == [1, 2, 3, 4, 5, 6]
    assert not list(path.parent.glob(".tmp-*")), "no temp file left behind"


def test_fresh_run_starts_a_new_file(trainer, drive):
    path = trainer.context.run_dir / "metrics.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"step": 1, "split": "train", "loss": 5.0}\n')
    d = drive(JsonlMetrics())
    d.fit_start(resumed_from=None)
    d.step(loss=1.0)
    d.fit_end()
    assert read(path) == [{"step": 1, "split": "train", "loss": 1.0}]
