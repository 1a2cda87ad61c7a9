import json

import pytest

from toolbox.core.errors import ToolboxError
from toolbox.eval.plot import plot_metrics

PNG = b"\x89PNG\r\n\x1a\n"


def write_metrics(run_dir, steps=40):
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for s in range(1, steps + 1):
        lines.append(
            {
                "step": s, "split": "train", "loss": 3.0 / s**0.5, "lr": 1e-3 * min(1, s / 10),
                "grad_norm": 1.0, "num_tokens": 256, "tokens_per_s": 5000.0 + s, "steps_per_s": 20.0,
                "memory/rss_mb": 400.0 + s,
            }
        )  # fmt: skip
        if s % 10 == 0:
            lines.append({"step": s, "split": "eval", "eval/loss": 3.5 / s**0.5, "eval/accuracy": s / 50})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_writes_one_png_per_group(tmp_path):
    run_dir = tmp_path / "run"
    write_metrics(run_dir)
    paths = plot_metrics(run_dir)
    names = sorted(p.name for p in paths)
    assert names == [
        "eval_accuracy.png",
        "grad_norm.png",
        "loss.png",
        "lr.png",
        "memory.png",
        "throughput.png",
    ]
    for p in paths:
        assert p.parent == run_dir / "plots"
        data = p.read_bytes()
        assert data[:8] == PNG and len(data) > 10_000  # a real image, not an empty canvas


def test_out_folder_and_resumed_duplicates(tmp_path):
    run_dir = tmp_path / "run"
    write_metrics(run_dir, steps=5)
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 5, "split": "train", "loss": 0.1}) + "\n")  # the last value wins
        f.write('{"step": 6, "spl')  # a cut line is skipped
    paths = plot_metrics(run_dir, out=tmp_path / "figs")
    assert {p.parent for p in paths} == {tmp_path / "figs"}


@pytest.mark.parametrize("content", [None, "", '{"step": 1, "split": "train"}\n'])
def test_missing_or_empty_metrics_is_a_clear_error(tmp_path, content):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if content is not None:
        (run_dir / "metrics.jsonl").write_text(content)
    with pytest.raises(ToolboxError, match="no metrics to plot"):
        plot_metrics(run_dir)


def test_plots_what_the_callbacks_write(trainer, drive):
    from toolbox.trainer.callbacks.jsonl import JsonlMetrics
    from toolbox.trainer.callbacks.memory_usage import MemoryMonitor
    from toolbox.trainer.callbacks.throughput import Throughput

    d = drive(Throughput(), MemoryMonitor(every=2), JsonlMetrics())
    d.fit_start()
    for s in range(1, 21):
        d.step(loss=2.0 / s, lr=1e-3, num_tokens=64)
        if s % 5 == 0:
            d.eval(**{"eval/loss": 2.5 / s})
    d.fit_end()
    names = sorted(p.name for p in plot_metrics(trainer.context.run_dir))
    assert names == ["loss.png", "lr.png", "memory.png", "throughput.png"]
