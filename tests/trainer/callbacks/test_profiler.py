import json

import torch

from toolbox.trainer.callbacks.profiler import Profiler


def test_writes_a_chrome_trace_for_the_window(trainer, drive):
    cb = Profiler(start_step=2, num_steps=2)
    d = drive(cb)
    d.fit_start()
    x = torch.randn(32, 32)
    for _ in range(5):
        d.step(work=lambda: x @ x, loss=1.0)
    d.fit_end()
    trace = trainer.context.run_dir / "profiler" / "trace_step2.json"
    assert cb.trace_path == trace and trace.is_file()
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e.get("name") for e in events}
    assert {"train_step_2", "train_step_3"} <= names and "train_step_4" not in names
    assert "train_step_1" not in names
    assert "aten::mm" in names  # the step's own work is in the trace
    table = (trainer.context.run_dir / "profiler" / "key_averages_step2.txt").read_text()
    assert "Self CPU" in table and "aten::mm" in table


def test_run_ending_inside_the_window_still_writes(trainer, drive):
    cb = Profiler(start_step=1, num_steps=10)
    d = drive(cb)
    d.fit_start()
    d.step(loss=1.0)
    d.fit_end()
    assert (trainer.context.run_dir / "profiler" / "trace_step1.json").is_file()


def test_resumed_past_the_window_does_nothing(trainer, drive):
    d = drive(Profiler(start_step=2))
    d.fit_start(resumed_from=5)
    d.step(loss=1.0)
    d.fit_end()
    assert not (trainer.context.run_dir / "profiler").exists()
