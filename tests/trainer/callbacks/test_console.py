import io

from rich.console import Console

from toolbox.trainer.callbacks.console import ConsoleCallback
from toolbox.trainer.callbacks.throughput import Throughput


def run(drive, trainer, terminal: bool, log_every: int = 3):
    buf = io.StringIO()
    cb = ConsoleCallback(log_every=log_every)
    cb.console = Console(file=buf, force_terminal=terminal, width=120)
    d = drive(Throughput(), cb)
    d.fit_start()
    for s in range(1, trainer.max_steps + 1):
        d.step(loss=2.0 / s, lr=3e-4, num_tokens=256)
        if s == 5:
            d.eval(**{"eval/loss": 0.75, "eval/accuracy": 0.5})
    d.fit_end(stopped_early=True, stop_reason="early stopping: eval/loss did not improve")
    return buf.getvalue()


def test_plain_lines_when_not_a_terminal(trainer, drive):
    out = run(drive, trainer, terminal=False)
    lines = out.splitlines()
    step_lines = [line for line in lines if line.startswith("step ")]
    # every 3 steps, plus the last step
    assert [line.split()[1] for line in step_lines] == ["3/10", "6/10", "9/10", "10/10"]
    assert "loss 0.6667" in step_lines[0] and "lr 0.0003" in step_lines[0]
    assert "tok/s" in step_lines[0] and "eta" in step_lines[0]
    assert "eval @ step 5: eval/loss 0.75 | eval/accuracy 0.5" in out
    assert "stopped early (early stopping: eval/loss did not improve)" in out
    assert f"run dir: {trainer.context.run_dir}" in out
    assert "\x1b[" not in out  # no escape codes in logs


def test_live_bar_in_a_terminal(trainer, drive):
    out = run(drive, trainer, terminal=True)
    assert "train" in out and "10/10" in out  # the bar's final state
    assert "eval @ step 5" in out
    assert "run dir:" in out
    assert "step 3/10" not in out  # no plain lines with a live bar


def test_resumed_run_says_so(trainer, drive):
    buf = io.StringIO()
    cb = ConsoleCallback()
    cb.console = Console(file=buf, force_terminal=False)
    d = drive(cb)
    d.fit_start(resumed_from=8)
    d.step(loss=1.0)
    d.step(loss=1.0)
    d.fit_end()
    out = buf.getvalue()
    assert "resumed from step 8" in out and "step 10/10" in out and "finished at step 10/10" in out


def test_async_grpo_fields_are_shown_when_logged(trainer, drive):
    buf = io.StringIO()
    cb = ConsoleCallback(log_every=1)
    cb.console = Console(file=buf, force_terminal=False, width=160)
    d = drive(Throughput(), cb)
    d.fit_start()
    d.step(loss=1.0, lr=3e-4, num_tokens=256, **{"async/staleness": 1.0, "async/trainer_wait_s": 0.25,
                                                   "is/clip_fraction": 0.125})  # fmt: skip
    d.step(loss=1.0, lr=3e-4, num_tokens=256)
    lines = [line for line in buf.getvalue().splitlines() if line.startswith("step ")]
    assert "stale 1 | wait s 0.25 | is clip 0.125" in lines[0]
    assert "stale" not in lines[1]  # a synchronous step shows none of them


def test_the_bar_fits_80_columns(trainer, drive):
    """Issue 38: at 80 columns rich cut the bar's step count and times ("1234/2…", "0:00:…");
    the bar narrows and the metrics that do not fit are left out (loss stays)."""
    buf = io.StringIO()
    cb = ConsoleCallback()
    cb.console = Console(file=buf, force_terminal=True, width=80, color_system=None)
    trainer.max_steps = 2500  # the demo's
    d = drive(Throughput(), cb)
    d.fit_start()
    for _ in range(1234):
        d.step(loss=0.123456, lr=0.00099987, num_tokens=256)
    d.fit_end()  # the bar's last frame is drawn when it stops
    frames = [f.replace("\x1b[2K", "").replace("\x1b[?25l", "") for f in buf.getvalue().split("\r")]
    bars = [f.split("\n")[0] for f in frames if f.startswith("train")]
    assert bars, buf.getvalue()
    last = bars[-1]
    assert "1234/2500" in last and "loss 0.1235" in last and "eta" in last
    assert "…" not in last, last  # nothing cut
    assert all(len(bar) <= 80 for bar in bars), bars


def test_progress_lines_reach_the_descriptor_the_workflow_keeps(trainer, drive, monkeypatch):
    """Issue 38: under `snakemake -c2` a training showed nothing on the screen (its output goes to
    the rule's log). The train rule keeps the terminal as fd 3 and sets TOOLBOX_PROGRESS_FD=3: the
    plain lines go to the log and, prefixed by the run's name, to that descriptor."""
    import os

    read, write = os.pipe()
    monkeypatch.setenv("TOOLBOX_PROGRESS_FD", str(write))
    trainer.cfg.run_name = "demo"
    log = run(drive, trainer, terminal=False)
    os.close(write)
    with os.fdopen(read) as f:
        screen = f.read().splitlines()
    assert "step 3/10 | loss 0.6667" in log
    assert [line.split()[2] for line in screen if line.startswith("[demo] step ")] == [
        "3/10",
        "6/10",
        "9/10",
        "10/10",
    ]
    assert any(line.startswith("[demo] eval @ step 5") for line in screen)
    assert any("eta" in line for line in screen)
    # the log holds the same lines without the prefix
    assert [line.removeprefix("[demo] ") for line in screen] == [line for line in log.splitlines() if line]


def test_a_descriptor_that_is_not_open_is_ignored(trainer, drive, monkeypatch):
    monkeypatch.setenv("TOOLBOX_PROGRESS_FD", "987")  # not open in this process
    assert "step 3/10" in run(drive, trainer, terminal=False)
