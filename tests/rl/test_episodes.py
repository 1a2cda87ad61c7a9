"""Episode rollouts against a scripted agent: the calculator and the lookup task solved over 2-3
turns; ids and masks equal the chat dataset's for the same conversation; only the model's tokens
are masked in; limits end episodes; episodes at different turns are in flight together."""

from __future__ import annotations

import pytest

from tests.rl.conftest import ScriptedEngine
from toolbox.data.datasets.chat import Chat
from toolbox.rl.episodes import EpisodeRunner
from toolbox.rl.rollouts import TextRollout
from toolbox.serving.engine import SamplingParams

PARAMS = SamplingParams(temperature=1.0)


def run(tokenizer, tasks, env, schedule="waves", policy=None, reply=96, g=2, engine=None):
    engine = engine or (ScriptedEngine(tokenizer) if policy is None else ScriptedEngine(tokenizer, policy))
    runner = EpisodeRunner(engine, tokenizer, env, max_reply_tokens=reply, schedule=schedule)
    return runner.run(tasks, g, PARAMS, seed=7), engine


@pytest.mark.parametrize("env,turns,calls", [("calculator", 2, 1), ("lookup_calculator", 3, 2)])
def test_scripted_agent_solves_both_tasks_in_sequence(tool_tokenizer, tasks, env, turns, calls):
    episodes, engine = run(tool_tokenizer, tasks[:3], {"name": env, "max_tokens": 1000})
    assert len(episodes) == 6 and [e.group for e in episodes] == [0, 0, 1, 1, 2, 2]
    for e in episodes:
        assert e.reward == 1.0 and e.scores["correct"] is True, e.messages
        assert len(e.turns) == turns and e.finish_reason == "stop"
        runs = [r for t in e.turns if t.step for r in t.step.tool_runs]
        assert len(runs) == calls and runs[-1].result == e.task["answer"]
    # turn 0: one request of n=G per task; later turns one request per episode, each its own seed
    assert [p.n for _, p, _ in engine.log[:3]] == [2, 2, 2]
    later = [p for _, p, _ in engine.log[3:]]
    assert all(p.n == 1 for p in later) and len({p.seed for p in later}) == len(later)


@pytest.mark.parametrize("env", ["calculator", "lookup_calculator"])
def test_ids_and_mask_equal_the_chat_dataset(tool_tokenizer, tasks, env):
    """The episode's tokens are those the chat dataset gives its conversation (the template renders
    calls and tool replies as the server does); the mask is the dataset's completion mask."""
    episodes, _ = run(tool_tokenizer, tasks[:2], {"name": env, "max_tokens": 1000}, g=1)
    chat = Chat(tool_tokenizer, max_length=100_000)
    for e in episodes:
        ids, mask, _ = chat.tokenize(e.messages, 0, e.tools)
        assert e.all_ids() == ids
        assert [0] * len(e.prompt_ids) + e.mask == mask
        # the opening prompt is what the server encodes for the same request
        messages, tools = __import__("toolbox.data.hermes.calls", fromlist=["x"]).template_messages(
            e.messages[: e.opening], e.tools, tool_tokenizer.chat_template
        )
        served = tool_tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=True
        )
        served = served["input_ids"] if hasattr(served, "keys") else served
        assert e.prompt_ids == list(served)


def test_rollout_masks_environment_tokens_and_keeps_sampling_logprobs(tool_tokenizer, tasks):
    episodes, _ = run(tool_tokenizer, tasks[:2], {"name": "lookup_calculator", "max_tokens": 1000})
    rollout = TextRollout.from_episodes(episodes, 2, {"answer": [t["answer"] for t in tasks[:2]]})
    assert rollout.fields["answer"] == [tasks[0]["answer"]] * 2 + [tasks[1]["answer"]] * 2
    for r, e in enumerate(episodes):
        n = len(e.ids)
        assert rollout.completion_ids[r, :n].tolist() == e.ids
        mask = rollout.completion_mask[r, :n].tolist()
        assert mask == e.mask and 0 < sum(mask) < n
        # every masked-in token is one the model sampled (the replies' tokens, in order)
        replies = [tool_tokenizer.encode(t.text, add_special_tokens=False) for t in e.turns]
        assert [t for t, m in zip(e.ids, mask, strict=True) if m] == [
            x for ids in replies for x in [*ids, tool_tokenizer.eos_token_id]
        ]
        samp = rollout.sampling_logprobs[r, :n]
        assert bool((samp[torch_mask(mask)] < 0).all()) and bool((samp[~torch_mask(mask)] == 0).all())
        # every turn (the traces' turn spans) lies within its episode: the first turn's request is
        # one of n = G for the group, and its time was once set on the first episode only (the
        # others' turn spans started in 1970)
        times = [t for turn in e.turns for t in (turn.start, turn.end)]
        assert e.start <= min(times) and times == sorted(times) and max(times) <= e.end


def torch_mask(mask):
    import torch

    return torch.tensor(mask, dtype=torch.bool)


def test_turn_limit_token_budget_and_cut_replies_end_episodes(tool_tokenizer, tasks):
    one_turn, _ = run(tool_tokenizer, tasks[:1], {"name": "calculator", "max_turns": 1, "max_tokens": 1000})
    assert all(e.finish_reason == "length" and e.reward == 0.0 and len(e.turns) == 1 for e in one_turn)
    small, _ = run(tool_tokenizer, tasks[:1], {"name": "calculator", "max_tokens": 90})
    for e in small:  # the call fits, the tool's reply and the answer would not
        assert e.finish_reason == "length" and e.reward == 0.0 and len(e.ids) <= 90
    cut, _ = run(tool_tokenizer, tasks[:1], {"name": "calculator", "max_tokens": 1000}, reply=10)
    assert all(e.finish_reason == "length" and len(e.ids) == 10 for e in cut)


def test_async_schedule_has_episodes_at_different_turns_in_flight(tool_tokenizer, tasks):
    """Replies come back at different times (the scripted engine's handles finish after a number
    of polls that depends on the prompt): a later turn of one episode is asked while another
    episode's earlier turn is still in flight; the episodes are those of the waves schedule."""
    episodes, engine = run(tool_tokenizer, tasks[:3], {"name": "lookup_calculator", "max_tokens": 1000},
                           schedule="async")  # fmt: skip
    assert all(e.reward == 1.0 for e in episodes)
    assistant = tool_tokenizer.convert_tokens_to_ids("<|assistant|>")
    turn = lambda ids: ids.count(assistant)  # noqa: E731  (the prompt's generation prompts: its turn + 1)
    mixed = [(turn(ids), {turn(p) for p in flight}) for ids, _, flight in engine.log]
    assert any(flight - {k} for k, flight in mixed), mixed
    waves, engine = run(tool_tokenizer, tasks[:3], {"name": "lookup_calculator", "max_tokens": 1000})
    assert [e.ids for e in waves] == [e.ids for e in episodes]  # the same episodes either way


class TimedHandle:
    """A handle that finishes ``delay`` seconds after submission (a timer thread), telling its done
    callbacks, as the torch engine's handles do; with ``early``, completion 0 is reported to
    completion callbacks at once, the others when it finishes."""

    def __init__(self, output, delay: float, early: bool = False) -> None:
        import threading

        self.output, self.callbacks, self.each, self.lock = output, [], [], threading.Lock()
        self.finished = threading.Event()
        self.reported = [0] if early else []
        if delay <= 0:
            self.finish()
        else:
            threading.Timer(delay, self.finish).start()

    def finish(self) -> None:
        with self.lock:
            self.finished.set()
            callbacks, self.callbacks = self.callbacks, []
            rest = [i for i in range(len(self.output.completions)) if i not in self.reported]
            self.reported += rest
            each = list(self.each)
        for i in rest:
            for fn in each:
                fn(self, i, self.output.completions[i])
        for fn in callbacks:
            fn(self)

    def add_completion_callback(self, fn) -> None:
        with self.lock:
            self.each.append(fn)
            reported = list(self.reported)
        for i in reported:
            fn(self, i, self.output.completions[i])

    @property
    def done(self) -> bool:  # (the runner must not poll it: a handle with callbacks is not polled)
        raise AssertionError("a handle with done callbacks was polled")

    def add_done_callback(self, fn) -> None:
        with self.lock:
            if not self.finished.is_set():
                self.callbacks.append(fn)
                return
        fn(self)

    def result(self, timeout=None):
        assert self.finished.is_set()
        return self.output


class CallbackEngine(ScriptedEngine):
    """The scripted engine with handles that report when they finish, after ``delay(prompt ids)``
    seconds; ``calls`` keeps how many requests each ``submit_requests`` call carried."""

    def __init__(self, tokenizer, delay, early: bool = False) -> None:
        super().__init__(tokenizer)
        self.delay, self.early, self.calls, self.first = delay, early, [], []
        self.first_running = []  # per call after the first: whether a turn-0 request was still running

    def submit_requests(self, requests, *, stream=False, queue_limit=True):
        self.calls.append(len(requests))
        if self.first:
            self.first_running.append(not all(h.finished.is_set() for h in self.first))
        handles = [
            TimedHandle(
                self.generate([list(ids)], params)[0], self.delay(list(ids)), self.early and params.n > 1
            )
            for ids, params in requests
        ]
        self.first = self.first or handles
        return handles


def test_async_turns_ready_together_reach_the_engine_in_one_submit(tool_tokenizer, tasks):
    """Replies that are in when the runner looks are continued together: one ``submit_requests``
    call (one engine step prefills them all) per batch of finished replies, not one per episode."""
    engine = CallbackEngine(tool_tokenizer, delay=lambda ids: 0.0)  # finished as soon as submitted
    episodes, _ = run(tool_tokenizer, tasks[:3], {"name": "lookup_calculator", "max_tokens": 1000},
                      schedule="async", engine=engine)  # fmt: skip
    assert all(e.reward == 1.0 and len(e.turns) == 3 for e in episodes)
    assert engine.calls == [3, 6, 6]  # turn 0: n = 2 per task; then every episode's next turn at once


def test_async_runner_sleeps_until_a_reply_is_in(tool_tokenizer, tasks, monkeypatch):
    """The runner does not spin while replies are slow: it wakes at most once per report (a finished
    request, or a completion of a turn-0 request of n = 2), while a 0.5 ms poll would wake ~300
    times over the rollout's ~0.15 s; the episodes are the waves schedule's."""
    import toolbox.rl.episodes as module

    made = []

    class Counted(module.Arrivals):
        def __init__(self):
            super().__init__()
            made.append(self)

    monkeypatch.setattr(module, "Arrivals", Counted)
    engine = CallbackEngine(tool_tokenizer, delay=lambda ids: 0.01 + 0.02 * (len(ids) % 3))
    episodes, _ = run(tool_tokenizer, tasks[:3], {"name": "lookup_calculator", "max_tokens": 1000},
                      schedule="async", engine=engine)  # fmt: skip
    requests = sum(engine.calls)
    assert requests == 3 + 6 + 6 and len(made) == 1
    reports = requests + 3 * 2  # done callbacks, and the turn-0 requests' completion callbacks
    assert made[0].wakeups <= reports, (made[0].wakeups, reports)
    waves, _ = run(tool_tokenizer, tasks[:3], {"name": "lookup_calculator", "max_tokens": 1000})
    assert [e.ids for e in waves] == [e.ids for e in episodes]


def test_async_episodes_go_on_before_their_groups_first_request_is_done(tool_tokenizer, tasks):
    """Turn 0 is one request of n = G per task; under ``async`` each episode continues as soon as its
    own completion is in (the engine's completion callbacks), not when its group's longest is: the
    three first episodes' next turns reach the engine while the turn-0 requests are still running;
    the episodes are the waves schedule's."""
    env = {"name": "lookup_calculator", "max_tokens": 1000}
    engine = CallbackEngine(tool_tokenizer, delay=lambda ids: 0.3, early=True)
    episodes, _ = run(tool_tokenizer, tasks[:3], env, schedule="async", engine=engine)
    assert engine.calls[:2] == [3, 3]  # turn 0 of the 3 tasks; then turn 1 of each task's episode 0
    assert engine.first_running[0] is True
    assert [e.ids for e in episodes] == [e.ids for e in run(tool_tokenizer, tasks[:3], env)[0]]
