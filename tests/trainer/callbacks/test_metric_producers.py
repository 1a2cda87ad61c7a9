import time

from toolbox.core.events import Event
from toolbox.trainer.callbacks.memory_usage import MemoryMonitor
from toolbox.trainer.callbacks.throughput import Throughput


def test_throughput_is_positive_and_reaches_later_handlers(trainer, drive):
    seen = []
    d = drive(Throughput(window=3))
    # a logger at the default priority 0, subscribed before nothing else: it must see the rates
    d.bus.subscribe(Event.STEP_END, lambda data: seen.append(dict(data.metrics)))
    d.fit_start()
    for _ in range(5):
        d.step(loss=1.0, num_tokens=128)
        time.sleep(0.01)
    assert len(seen) == 5
    for m in seen:
        assert m["tokens_per_s"] > 0 and m["steps_per_s"] > 0
        # 128 tokens per step: the two rates agree (one window, same times)
        assert abs(m["tokens_per_s"] / m["steps_per_s"] - 128) < 1e-6
    # ~10 ms between step ends: well under 200 steps/s, yet positive
    assert seen[-1]["steps_per_s"] < 200


def test_throughput_subscribed_after_a_logger_still_runs_first(trainer, drive):
    seen = []
    d = drive()
    d.bus.subscribe(Event.STEP_END, lambda data: seen.append("tokens_per_s" in data.metrics))
    Throughput().attach(d.bus)  # attached later, but priority -10 orders it first
    d.step(num_tokens=10)
    d.step(num_tokens=10)
    assert seen == [True, True]


def test_throughput_excludes_eval_time(trainer, drive):
    d = drive(Throughput(window=1))
    d.step(num_tokens=1)
    d.eval(**{"eval/loss": 1.0})
    time.sleep(0.3)  # eval and checkpoint happen between the two steps
    m = d.step(num_tokens=1)
    assert m["steps_per_s"] > 10, "the step after an eval is timed from its own start"


def test_throughput_without_num_tokens_gives_steps_only(trainer, drive):
    d = drive(Throughput())
    m = d.step(loss=1.0)
    assert "tokens_per_s" not in m and m["steps_per_s"] > 0


def test_memory_every_n_steps(trainer, drive):
    d = drive(MemoryMonitor(every=3))
    d.fit_start()
    got = [d.step(loss=1.0) for _ in range(6)]
    has = [("memory/rss_mb" in m) for m in got]
    assert has == [True, False, True, False, False, True]  # first step seen, then steps 3 and 6
    assert 1 < got[0]["memory/rss_mb"] < 1e6
    assert "memory/cuda_peak_mb" not in got[0]  # CPU-only here


def test_memory_reports_the_cuda_peak_once_cuda_is_in_use(trainer, drive, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a, **k: 3 * 1024 * 1024)
    m = drive(MemoryMonitor()).step(loss=1.0)
    assert m["memory/cuda_peak_mb"] == 3.0
