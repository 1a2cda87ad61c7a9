"""The rollout producer's schedule: round r is generated with version max(r − k, 0), never later;
weights are loaded only between rounds; queued rounds restart a producer; a failure reaches take."""

from __future__ import annotations

import threading

import pytest

from toolbox.rl.producer import ProducerError, RolloutProducer


class Fake:
    """Records what each round was generated with; ``published`` versions are loaded in order."""

    def __init__(self) -> None:
        self.engine_version = 0
        self.generated: list[tuple[int, int, int]] = []  # (round, scheduled version, engine version)
        self.loads: list[str] = []

    def produce(self, r: int, version: int) -> str:
        self.generated.append((r, version, self.engine_version))
        return f"round{r}@v{version}"

    def load(self, snapshot: str) -> None:
        self.loads.append(snapshot)
        self.engine_version = int(snapshot[1:])


def _train(producer: RolloutProducer, start: int, end: int) -> list[str]:
    taken = []
    for step in range(start, end):
        item, waited, producer_wait = producer.take(step)
        assert waited >= 0 and producer_wait >= 0
        taken.append(item)
        if producer.needs(step + 1):
            producer.publish(step + 1, f"v{step + 1}")
    producer.close()
    return taken


@pytest.mark.parametrize("k", [0, 1, 2])
def test_round_r_is_generated_with_version_r_minus_k(k):
    fake = Fake()
    producer = RolloutProducer(fake.produce, fake.load, max_staleness=k, start=0, end=6)
    taken = _train(producer, 0, 6)
    assert taken == [f"round{r}@v{max(r - k, 0)}" for r in range(6)]
    assert fake.generated == [(r, max(r - k, 0), max(r - k, 0)) for r in range(6)]
    # each needed version loaded once, in order; none past the last round's
    assert fake.loads == [f"v{v}" for v in range(1, 6 - k)]


def test_the_thread_runs_ahead_by_k_rounds_and_no_further():
    fake = Fake()
    producer = RolloutProducer(fake.produce, fake.load, max_staleness=2, start=0, end=10)
    producer.queued(0)  # rounds 0 and 1 are generated without any update
    item, _, _ = producer.take(0)
    assert item == "round0@v0"
    # round 2 also uses version 0 and round 3 needs version 1: the thread stops at round 2
    producer.queued(1)
    with producer._cond:  # the thread is blocked on version 1
        producer._cond.wait_for(lambda: producer._next == 3, timeout=5)
        assert sorted(producer._ready) == [1, 2] and producer._next == 3
    producer.close()
    assert [g[0] for g in fake.generated] == [0, 1, 2]


def test_queued_rounds_restart_a_producer_where_it_stopped():
    fake = Fake()
    first = RolloutProducer(fake.produce, fake.load, max_staleness=2, start=0, end=6)
    _train(first, 0, 0)  # nothing taken: close
    first = RolloutProducer(fake.produce, fake.load, max_staleness=2, start=0, end=6)
    taken = []
    for step in range(3):
        taken.append(first.take(step)[0])
        first.publish(step + 1, f"v{step + 1}")
    queued = first.queued(3)
    assert queued == ["round3@v1", "round4@v2"]
    first.close()
    fake.engine_version = 3  # a resumed run: the engine holds the checkpoint's policy
    second = RolloutProducer(fake.produce, fake.load, max_staleness=2, start=3, end=6, queued=queued)
    taken += _train(second, 3, 6)
    assert taken == [f"round{r}@v{max(r - 2, 0)}" for r in range(6)]


def test_too_few_queued_rounds_are_refused():
    fake = Fake()
    with pytest.raises(ValueError, match="1 queued rounds at step 3; max_staleness=2 needs 2"):
        RolloutProducer(fake.produce, fake.load, max_staleness=2, start=3, end=10, queued=["x"])


def test_a_failing_round_is_raised_by_take():
    def produce(r, version):
        if r == 1:
            raise RuntimeError("engine died")
        return r

    producer = RolloutProducer(produce, lambda s: None, max_staleness=1, start=0, end=4)
    assert producer.take(0)[0] == 0
    with pytest.raises(ProducerError, match="engine died"):
        producer.take(1)
    producer.close()


def test_close_unblocks_a_waiting_thread():
    producer = RolloutProducer(lambda r, v: r, lambda s: None, max_staleness=0, start=0, end=5)
    assert producer.take(0)[0] == 0  # round 1 now waits for version 1, which never comes
    producer.close()
    assert not producer._thread.is_alive()
    assert threading.active_count() >= 1
