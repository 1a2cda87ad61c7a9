"""GRPO over the episodes of a user's own agent program, run against an endpoint the trainer serves.

Each round the trainer serves its engine as an OpenAI-compatible endpoint on a free loopback port
(``toolbox.rl.agent_endpoint.AgentEndpoint``: ``toolbox serve``'s app, every model call recorded
with its tokens and log-probs) and runs ``num_generations`` copies of ``command`` at once, copy
``r`` with its base URL ``http://127.0.0.1:PORT/run{r}/v1``. The agent is unchanged but for that
URL: it draws its own tasks (the same ones in every copy, from ``{seed}``), sends ``X-Session-Id``
per task (the group of the advantage: a task's G episodes, one per copy) and writes its own trace
of each run (``{traces}``, a store per copy) with a score on the run's root span; the reward of an
episode is that score (``reward_score``; ``trace_reward`` is the function to override for
another). The episodes' rows, advantages, losses and checkpoints are the agent_grpo trainer's.

``command`` is a list of arguments; these placeholders are filled in each copy: ``{base_url}``,
``{api_key}``, ``{seed}`` (the round's: the same in every copy), ``{tasks}`` (prompts_per_step),
``{traces}`` (the copy's trace store, in ``agent_runs/step{N}/`` of the run folder), ``{folder}``
(that folder), ``{run}`` (the copy's index); a literal brace is ``{{`` or ``}}``. A first argument ``python`` is this interpreter. ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` are set too, for a client built without
arguments. A copy that exits non-zero, or runs past ``timeout_s`` (then it is stopped by PID),
fails the round with its log's path.

The round's records (``prompts_per_step`` of the data) are not the agent's tasks: the agent draws
its own; they only advance the data as in every GRPO round. Sampling is the agent's (its
temperature; the engine's RNG): rounds are not reproducible from the seed as agent_grpo's are.

One step's files, in order: ``trainer/agent_endpoint_grpo.py`` (``run_agents``: the copies of
``command``) → ``rl/agent_endpoint.py`` (the served app, the recorder, ``episodes_from_calls``) ·
``tracing/stores/sqlite.py`` (each copy's trace: the reward) · then agent_grpo's:
``rl/rollouts.py`` (``TextRollout.from_episodes``) · ``trainer/grpo.py`` (``train_step``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import TRAINERS
from toolbox.rl.rollouts import TextRollout
from toolbox.trainer.agent_grpo import AgentGRPOTrainer
from toolbox.trainer.grpo import GRPOTrainer

if TYPE_CHECKING:
    from toolbox.experiment.build import Components
    from toolbox.tracing.record import ActionRecord

API_KEY = "sk-toolbox-agent-endpoint"
PLACEHOLDERS = ("base_url", "api_key", "seed", "tasks", "traces", "folder", "run")


@TRAINERS.register("agent_endpoint_grpo")
class AgentEndpointGRPOTrainer(AgentGRPOTrainer):
    """GRPO over a user's agent program's episodes through a served endpoint (see the module docstring).

    Args:
        command: the agent program and its arguments (placeholders: see the module docstring).
        reward_score: the score of the agent's root span (per task session) that is the reward.
        max_tokens: the most tokens of an episode after its opening prompt (dr_grpo's L).
        served_model_name: the ``model`` the agent's requests name.
        timeout_s: the most seconds a round's agent programs may run.
        traces: the trace store in the run folder every episode is recorded into (null: none).
        grpo: every setting of the ``grpo`` trainer, except ``rewards`` and ``max_completion_length``.
    """

    config_excludes = ("rewards", "max_completion_length", "env", "max_reply_tokens", "schedule")

    def __init__(
        self,
        parts: Components,
        command: list[str] | None = None,
        reward_score: str = "correct",
        max_tokens: int = 256,
        served_model_name: str = "agent",
        timeout_s: float = 600.0,
        traces: str | None = "traces.sqlite",
        **grpo: Any,
    ) -> None:
        from toolbox.core.registry import validate_kwargs

        if not command or not all(isinstance(a, str | int | float) for a in command):
            raise ConfigError(
                "trainer.command: the agent program to run, as a list of arguments "
                "(e.g. [python, agent.py, --base-url, '{base_url}']); it is missing or not a list."
            )
        import string

        for arg in command:
            try:
                names = {f for _, f, _, _ in string.Formatter().parse(str(arg)) if f is not None}
            except ValueError as e:
                raise ConfigError(
                    f"trainer.command: {arg!r}: {e}; write a literal brace as {{{{ or }}}}."
                ) from None
            unknown = sorted(names - set(PLACEHOLDERS))
            if unknown:
                raise ConfigError(
                    f"trainer.command: {arg!r} names {{{unknown[0]}}}; the placeholders are "
                    f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)} (a literal brace: {{{{ or }}}})."
                )
        if max_tokens < 1 or timeout_s <= 0:
            raise ConfigError(f"trainer: max_tokens={max_tokens}, timeout_s={timeout_s}; both must be > 0.")
        for key in self.config_excludes:
            if key in grpo:
                raise ConfigError(
                    f"trainer.{key}: not a setting of agent_endpoint_grpo (the agent program decides); remove it."
                )
        validate_kwargs(GRPOTrainer, grpo, "trainer", "trainer 'agent_endpoint_grpo'", frozenset({"parts"}))
        GRPOTrainer.__init__(self, parts, **{**grpo, "max_completion_length": max_tokens})
        self.command = [str(a) for a in command]
        self.reward_score = reward_score
        self.served_model_name = served_model_name
        self.timeout_s = timeout_s
        self.env_name = "agent"
        self.traces = traces
        self.tracer: Any = None
        self.last_episodes = []
        self.endpoint: Any = None
        self.unchained = 0

    @classmethod
    def default_engine(cls, settings: dict[str, Any]) -> dict[str, Any]:
        rows = settings.get("prompts_per_step", 8) * settings.get("num_generations", 4)
        return {"name": "torch", "max_batch_size": rows}

    # one round ---------------------------------------------------------------------------------
    def run_agents(self, folder: Path, seed: int) -> list[Path]:
        """``num_generations`` copies of the agent program against the endpoint; their trace stores."""
        folder.mkdir(parents=True, exist_ok=True)
        procs, stores = [], []
        for r in range(self.num_generations):
            store = folder / f"run{r}.sqlite"
            for stale in folder.glob(f"run{r}*"):
                stale.unlink()
            values = {"base_url": self.endpoint.base_url(r), "api_key": API_KEY, "seed": seed,
                      "tasks": self.prompts_per_step, "traces": store, "run": r, "folder": folder}  # fmt: skip
            args = [a.format(**values) for a in self.command]
            if args[0] == "python":  # this interpreter (the one with toolbox installed)
                args[0] = sys.executable
            env = {**os.environ, "OPENAI_BASE_URL": values["base_url"], "OPENAI_API_KEY": API_KEY}
            log = open(folder / f"run{r}.log", "wb")  # noqa: SIM115 - closed below
            try:
                proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
            except OSError as e:
                log.close()
                for started, other in procs:
                    started.kill()
                    started.wait()
                    other.close()
                raise DataError(
                    f"trainer.command: cannot start {args[0]!r}: {e.strerror}; check the program's path."
                ) from None
            procs.append((proc, log))
            stores.append(store)
        deadline = time.monotonic() + self.timeout_s
        failed: tuple[int, str] | None = None
        try:
            for r, (proc, _) in enumerate(procs):
                try:
                    code = proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
                except subprocess.TimeoutExpired:
                    failed = (r, f"ran past trainer.timeout_s={self.timeout_s:g} s and was stopped")
                    break
                if code != 0:
                    failed = (r, f"exited with {code}")
                    break
        finally:
            for proc, log in procs:  # what is still running is stopped, by its PID
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        os.kill(proc.pid, signal.SIGKILL)
                        proc.wait()
                log.close()
        if failed is not None:
            r, why = failed
            raise DataError(f"trainer.command: agent program {r} {why}; see {folder / f'run{r}.log'}.")
        return stores

    def trace_reward(self, records: list[ActionRecord]) -> float | None:
        """The reward of one task session of one agent run, from the agent's own records of it: the
        ``reward_score`` of its root span (None: no such score)."""
        for record in records:
            if record.parent_id is None:
                score = record.score(self.reward_score)
                if score is not None:
                    return float(score.value)
        return None

    @torch.no_grad()
    def rollout(
        self, examples: list[dict[str, Any]], draw: int = 0, round_index: int | None = None
    ) -> TextRollout:
        from toolbox.rl.agent_endpoint import AgentEndpoint, episodes_from_calls
        from toolbox.tracing import Query, open_store

        if self.endpoint is None:
            self.endpoint = AgentEndpoint(self.engine, self.served_model_name)
        round_index = self.step if round_index is None else round_index
        seed = (self.context.seed * 1_000_003 + round_index * 10_007 + draw) % 2**31
        folder = Path(self.context.run_dir) / "agent_runs" / f"step{round_index + 1}"
        self.endpoint.recorder.take()
        with self.eval_mode(self.policy):
            stores = self.run_agents(folder, seed)
        chained = episodes_from_calls(self.endpoint.recorder.take())
        self.unchained = chained.unchained
        by_session: dict[str, dict[int, Any]] = {}
        for key, episode in chained.episodes.items():
            by_session.setdefault(chained.sessions[key], {}).setdefault(key[0], episode)
        groups = sorted(
            (s for s, runs in by_session.items() if len(runs) == self.num_generations),
            key=lambda s: (len(s), s),
        )
        if not groups:
            raise DataError(
                f"trainer.command: no task session has an episode in each of the {self.num_generations} "
                f"agent programs (sessions seen: {sorted(by_session)[:5]}); each copy must run the same "
                "tasks (from {seed}) and send X-Session-Id per task."
            )
        episodes = []
        for g, session in enumerate(groups):
            for r in range(self.num_generations):
                episode = by_session[session][r]
                episode.group = g
                reward = None
                if stores[r].is_file():  # (an agent that traced nothing: unscored)
                    with open_store(stores[r], readonly=True) as store:
                        reward = self.trace_reward(list(store.query(Query(session_id=session))))
                episode.scores = {"scored": reward is not None}
                episode.reward = 0.0 if reward is None else reward
                episodes.append(episode)
        rollout = TextRollout.from_episodes(
            episodes, self.num_generations, {"session": groups}, pad_token_id=self.pad_token_id,
            mask_truncated=self.mask_truncated, device=self.strategy.device,
        )  # fmt: skip
        rollout.rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
        self.last_episodes = episodes
        self._trace(episodes, round_index)
        return rollout

    def score(self, rollout: TextRollout) -> dict[str, float]:
        metrics = super().score(rollout)
        metrics["episodes/unchained_calls"] = float(self.unchained)
        metrics["episodes/groups"] = float(len(self.last_episodes) // self.num_generations)
        return metrics

    def teardown(self) -> None:
        if self.endpoint is not None:
            self.endpoint.close()
            self.endpoint = None
        super().teardown()
