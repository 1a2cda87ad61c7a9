"""Episode rollouts: G episodes per task through an ``InferenceEngine``, batched across episodes.

::

    episodes = EpisodeRunner(engine, tokenizer, env_spec, max_reply_tokens=32).run(
        tasks, num_generations=4, params=SamplingParams(temperature=1.0), seed=1234)
    rollout = episodes_to_rollout(episodes, num_generations=4, pad_token_id=0)

Turn 0 asks one request per task with ``n = num_generations`` (the G episodes of a task share
their opening prompt, as single-turn GRPO's completions of one prompt do, with the same seeds).
After each reply the episode's environment runs: the reply is parsed as the server parses it
(Hermes ``<tool_call>`` blocks, ``tool_calls.parse``), the environment answers (tool replies, a
user turn) and the episode asks again, one request per episode with a seed of its own. Every
episode that needs a reply is in the engine's running batch at once, whatever its turn, so
episodes at different turns share decode steps. ``schedule="waves"`` waits for every pending reply
before submitting the next ones (the batch's composition, and so the rollout, does not depend on
thread timing); ``schedule="async"`` resubmits an episode as soon as its reply is in: the runner
thread sleeps until the engine reports a finished request (``Arrivals``: the handles' done
callbacks; no polling, which took the engine thread's interpreter lock 2000 times a second), then
continues every episode whose reply is in and submits their next turns in one ``submit_requests``
call, so one engine step prefills them together. A turn-0 request's G replies are taken one by one
as each finishes (the handles' completion callbacks): an episode does not wait for the longest
first reply of its group (on the benchmark's 64 episodes, 156 engine steps instead of 175 for a
longest episode of 154 tokens). Each request
carries the whole conversation; the torch engine's prefix cache (``engine.prefix_cache_gib``)
recognises the previous turn's prompt and reply in it and prefills only the new tokens (an engine
without prefix caching prefills it all again).

Tokens: the opening prompt is the chat template's rendering of the opening (``Chat.render``, as
``toolbox serve`` and the ``chat`` dataset render it, tools in Hermes form for a template that
does not render them); then the model's own sampled tokens (kept as sampled, with the engine's
log-probs), then the text the template adds for the environment's messages and the next
generation prompt, tokenized on its own as the ``chat`` dataset tokenizes each new piece. So an
episode's ids are the ``chat`` dataset's ids of its conversation wherever the model's tokens are
its text's own tokenization. ``mask`` is 1 on the model's tokens only.

Limits: an episode ends (reward ``env.limit_reward()``, finish reason ``length``) when it has had
``env.max_turns`` replies without being done, when a reply is cut by its token limit before the
environment is done, or when the next piece would pass ``env.max_tokens`` (the tokens after the
opening prompt) or the engine's context.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import TEXT_ENVS
from toolbox.rl.text_env import Step, TextEnv
from toolbox.serving.engine import Completion, InferenceEngine, SamplingParams


@dataclass
class Turn:
    """One reply of the model and what the environment answered."""

    messages: list[dict[str, Any]]  # the conversation the model read
    message: dict[str, Any]  # its reply as an OpenAI assistant message
    text: str  # the reply as generated
    prompt_tokens: int
    reply_tokens: int
    finish_reason: str
    step: Step | None  # None: the episode ended before the environment answered
    start: float
    end: float


@dataclass
class Episode:
    """One episode: its conversation, its tokens after the opening prompt, its reward."""

    task: dict[str, Any]
    group: int  # the task's index in the round
    index: int  # the episode's index within its group
    env: TextEnv
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    prompt_ids: list[int]
    opening: int = 0  # how many of ``messages`` the episode opened with
    ids: list[int] = field(default_factory=list)  # after the prompt: replies and environment text
    mask: list[int] = field(default_factory=list)  # 1 on the model's own tokens
    logprobs: list[float] = field(default_factory=list)  # the engine's, 0.0 on environment tokens
    turns: list[Turn] = field(default_factory=list)
    rendered: str = ""  # the template's text of the conversation so far
    done: bool = False
    finish_reason: str = ""
    reward: float | None = None
    scores: dict[str, Any] = field(default_factory=dict)
    start: float = 0.0
    end: float = 0.0
    asked: float = 0.0  # when its pending reply was asked for

    @property
    def completion_text(self) -> str:
        """The replies' text, in order (what a single-turn reward would read)."""
        return "".join(t.text for t in self.turns)

    def all_ids(self) -> list[int]:
        return [*self.prompt_ids, *self.ids]


@dataclass(eq=False)
class Pending:
    """A request in flight and the episodes it answers (turn 0: a group's G, one per completion);
    ``taken``: the indices of the completions already handed to their episodes."""

    handle: Any
    group: list[Episode]
    taken: set[int] = field(default_factory=set)


class Arrivals:
    """The replies of an ``async`` rollout as they come in, for a runner thread that sleeps until
    one is in.

    ``watch(pending)`` asks a handle with ``add_done_callback`` (the torch engine's) to report here
    when it finishes, and, for a request of several completions, one with
    ``add_completion_callback`` to report each completion as it finishes. ``wait(pending)`` blocks
    on a condition until a reply not yet taken is in and returns all that are, as ``(pending,
    index, completion)`` (a batch: the turns they continue are submitted together). A handle
    without callbacks (an engine that offers only ``done``) is polled instead, every ``poll_s``.
    """

    poll_s = 0.0005

    def __init__(self) -> None:
        self._cv = threading.Condition()
        # by the handle itself (held, so that no later handle can come to share its id)
        self._finished: set[Any] = set()
        self._completions: dict[Any, list[tuple[int, Completion]]] = {}
        self.wakeups = 0  # how many times ``wait`` woke up (a test counts them: no spinning)

    def watch(self, pending: Pending) -> None:
        handle = pending.handle
        each = getattr(handle, "add_completion_callback", None)
        if each is not None and len(pending.group) > 1:
            each(self._completed)
        add = getattr(handle, "add_done_callback", None)
        if add is not None:
            add(self._arrived)

    def _completed(self, handle: Any, index: int, completion: Completion) -> None:  # engine thread
        with self._cv:
            self._completions.setdefault(handle, []).append((index, completion))
            self._cv.notify()

    def _arrived(self, handle: Any) -> None:  # engine thread
        with self._cv:
            self._finished.add(handle)
            self._cv.notify()

    def wait(self, pending: list[Pending]) -> list[tuple[Pending, int, Completion]]:
        polled = any(not hasattr(p.handle, "add_done_callback") for p in pending)
        with self._cv:
            while True:
                ready = []
                for p in pending:
                    fresh = {i: c for i, c in self._completions.pop(p.handle, []) if i not in p.taken}
                    if hasattr(p.handle, "add_done_callback"):
                        finished = p.handle in self._finished
                    else:
                        finished = getattr(p.handle, "done", True)
                    if finished:
                        self._finished.discard(p.handle)
                        for i, c in enumerate(EpisodeRunner._result(p.handle).completions):
                            if i not in p.taken:
                                fresh.setdefault(i, c)
                    p.taken.update(fresh)
                    ready += [(p, i, c) for i, c in sorted(fresh.items())]
                if ready:
                    return ready
                self._cv.wait(self.poll_s if polled else None)
                self.wakeups += 1


class EpisodeRunner:
    """Rolls out episodes of the environment ``env`` through ``engine`` (see the module docstring).

    Args:
        engine: the inference engine (the one ``toolbox serve`` would use).
        tokenizer: its tokenizer (with a chat template).
        env: the TEXT_ENVS spec of the environment (one built per episode).
        max_reply_tokens: the most tokens of one reply.
        schedule: ``waves`` (deterministic) or ``async`` (see the module docstring).
    """

    def __init__(
        self,
        engine: InferenceEngine,
        tokenizer: Any,
        env: dict[str, Any],
        max_reply_tokens: int = 32,
        schedule: str = "waves",
    ) -> None:
        from toolbox.data.datasets.chat import Chat

        if schedule not in ("waves", "async"):
            raise ConfigError(f"trainer.schedule: {schedule!r}; choose waves or async.")
        if max_reply_tokens < 1:
            raise ConfigError(f"trainer.max_reply_tokens: {max_reply_tokens}; it must be >= 1.")
        self.engine = engine
        self.chat = Chat(tokenizer, max_length=1 << 30)  # renders and tokenizes as the chat dataset
        self.env_spec = dict(env)
        TEXT_ENVS.validate(self.env_spec, "trainer.env")
        self.max_reply_tokens = max_reply_tokens
        self.schedule = schedule
        self.context = engine.max_model_len

    def make_env(self) -> TextEnv:
        env = TEXT_ENVS.build(self.env_spec, "trainer.env")
        if not isinstance(env, TextEnv):
            raise ConfigError(
                f"trainer.env: {self.env_spec['name']} built a {type(env).__name__}, not a TextEnv."
            )
        return env

    # one round ---------------------------------------------------------------------------------
    def run(
        self, tasks: list[dict[str, Any]], num_generations: int, params: SamplingParams, seed: int | None
    ) -> list[Episode]:
        """``num_generations`` episodes of each task, in task order (a group's episodes together)."""
        params = replace(params, logprobs=True, n=1)
        episodes = [self._open(task, g, j) for g, task in enumerate(tasks) for j in range(num_generations)]
        asks = []
        for g in range(len(tasks)):  # turn 0: one request of n = G per task
            group = episodes[g * num_generations : (g + 1) * num_generations]
            first = replace(params, n=num_generations, seed=None if seed is None else seed + g)
            asks.append((group[0], first, group))
        arrivals = Arrivals()
        pending = self._submit(asks, arrivals)
        while pending:
            ready, pending = self._wait(pending, arrivals)
            asked = []
            for episode, completion in ready:
                self._advance(episode, completion)
                if not episode.done:
                    asked.append(episode)
            seeds = [None if seed is None else self._seed(seed, e, num_generations) for e in asked]
            pending += self._submit(
                [(e, replace(params, seed=s), [e]) for e, s in zip(asked, seeds, strict=True)], arrivals
            )
        return episodes

    @staticmethod
    def _seed(seed: int, episode: Episode, num_generations: int) -> int:
        row = episode.group * num_generations + episode.index
        return (seed * 0x9E3779B97F4A7C15 + (row + 1) * 0xBF58476D1CE4E5B9 + len(episode.turns)) % 2**62

    def _open(self, task: dict[str, Any], group: int, index: int) -> Episode:
        env = self.make_env()
        opening = env.reset(task)
        text = self.chat.render(opening.messages, add_generation_prompt=True, tools=opening.tools)
        ids = self.chat.encode(text)
        if self.context is not None and len(ids) >= self.context:
            raise ConfigError(
                f"trainer.env: the opening prompt of task {group} has {len(ids)} tokens, and the "
                f"engine's context is {self.context}: no room for a reply; use a model with more "
                "positions (model.max_position_embeddings) or a shorter opening."
            )
        return Episode(
            task=task, group=group, index=index, env=env, messages=list(opening.messages),
            tools=opening.tools, prompt_ids=ids, opening=len(opening.messages),
            rendered=text, start=time.time(),
        )  # fmt: skip

    def _budget(self, episode: Episode) -> int:
        left = min(self.max_reply_tokens, episode.env.max_tokens - len(episode.ids))
        if self.context is not None:
            left = min(left, self.context - len(episode.prompt_ids) - len(episode.ids))
        return left

    def _submit(
        self, asks: list[tuple[Episode, SamplingParams, list[Episode]]], arrivals: Arrivals
    ) -> list[Pending]:
        """The replies ``(episode, params, its group)`` asks for, all joining one step of the engine
        (``submit_requests``): a wave's batch, and so its log-probs, do not depend on thread timing;
        under ``async``, the turns that became ready together are prefilled together. ``arrivals``
        hears of each finished handle (``async``)."""
        if not asks:
            return []
        requests = []
        for episode, params, group in asks:
            now = time.time()
            for asker in group:  # (turn 0 asks once for the whole group: n = G)
                asker.asked = now
            requests.append((episode.all_ids(), replace(params, max_tokens=self._budget(episode))))
        if self.engine.supports_submit:
            handles = self.engine.submit_requests(requests, stream=False, queue_limit=False)
        else:
            handles = [self.engine.generate([ids], params)[0] for ids, params in requests]
        pending = [Pending(handle, group) for handle, (_, _, group) in zip(handles, asks, strict=True)]
        if self.schedule == "async":
            for p in pending:
                arrivals.watch(p)
        return pending

    def _wait(
        self, pending: list[Pending], arrivals: Arrivals
    ) -> tuple[list[tuple[Episode, Completion]], list[Pending]]:
        """``(ready (episode, its reply), still pending)``: under ``waves`` every reply (their results
        block), in submission order; under ``async`` every reply in by now, waiting (asleep) until
        there is at least one: a turn-0 request's replies one by one as they finish, so that an
        episode does not wait for the longest first reply of its group."""
        if self.schedule == "waves" or not self.engine.supports_submit:
            ready: list[tuple[Episode, Completion]] = []
            for p in pending:
                ready += zip(p.group, self._result(p.handle).completions, strict=True)
            return ready, []
        ready = [(p.group[index], completion) for p, index, completion in arrivals.wait(pending)]
        return ready, [p for p in pending if len(p.taken) < len(p.group)]

    @staticmethod
    def _result(handle: Any) -> Any:
        return handle.result() if hasattr(handle, "result") else handle

    # one reply ---------------------------------------------------------------------------------
    def _advance(self, episode: Episode, completion: Completion) -> None:
        from toolbox.data.hermes.calls import parse

        tokens = list(completion.token_ids)
        logps = completion.logprobs or [0.0] * len(tokens)
        read = list(episode.messages)
        content, calls = parse(completion.text)
        message: dict[str, Any] = {"role": "assistant", "content": content or ""}
        if calls:
            message["tool_calls"] = [
                {"id": f"call_{len(episode.turns)}_{k}", "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for k, c in enumerate(calls)
            ]  # fmt: skip
        episode.ids += tokens
        episode.mask += [1] * len(tokens)
        episode.logprobs += [float(x) for x in logps[: len(tokens)]]
        episode.messages.append(message)
        prompt_tokens = len(episode.prompt_ids) + len(episode.ids) - len(tokens)
        step = episode.env.step(message)
        episode.turns.append(
            Turn(read, message, completion.text, prompt_tokens, len(tokens), completion.finish_reason,
                 step, episode.asked, time.time())
        )  # fmt: skip
        if step.done:
            self._finish(episode, step.reward, completion.finish_reason, step.scores)
            return
        if completion.finish_reason == "length" or len(episode.turns) >= episode.env.max_turns:
            self._finish(episode, None, "length", step.scores)
            return
        through = self.chat.render(episode.messages, tools=episode.tools)
        following = self.chat.render(
            [*episode.messages, *step.messages], add_generation_prompt=True, tools=episode.tools
        )
        if not (through.startswith(episode.rendered) and following.startswith(through)):
            raise DataError(
                "the tokenizer's chat template renders a conversation differently from its first turns "
                "(a prefix changes as turns are added), so an episode's turns cannot be appended; use a "
                "template that only appends text per turn."
            )
        piece = self.chat.encode(following[len(through) :])
        used = len(episode.ids) + len(piece)
        full = self.context is not None and len(episode.prompt_ids) + used >= self.context
        if used >= episode.env.max_tokens or full:  # no room left for a reply after it
            self._finish(episode, None, "length", step.scores)
            return
        episode.messages += step.messages
        episode.rendered = following
        episode.ids += piece
        episode.mask += [0] * len(piece)
        episode.logprobs += [0.0] * len(piece)

    @staticmethod
    def _finish(episode: Episode, reward: float | None, reason: str, scores: dict[str, Any]) -> None:
        episode.done = True
        episode.reward = episode.env.limit_reward() if reward is None else float(reward)
        episode.finish_reason = reason
        episode.scores = dict(scores)
        episode.end = time.time()
