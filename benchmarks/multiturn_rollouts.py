"""Multi-turn episode rollouts vs single-turn rollouts of the same total length: generated tokens/s.

    python benchmarks/multiturn_rollouts.py [--size agent|tiny] [--rounds 3] [--threads 1]
        [--prefix-cache-gib G] [--out F]

The multi-turn side is ``toolbox.rl.episodes.EpisodeRunner`` (what ``trainer=agent_grpo`` rolls out
with) through the torch engine, on an environment of ``turns`` replies: after each reply it answers
with a short user turn (text the engine prefills), and the episode is done after the last. Replies
end at a stop token whose logit is raised by log((V - 1) / (R - 1)) (V the vocabulary, R the size's
``reply_tokens``): replies of about R tokens where the random model samples near-uniformly (a reply
cut by ``max_reply_tokens`` ends its episode, counted in ``cut_by_length``). Both schedules run:
``waves`` (the trainer's default, deterministic: every round rolls out the same episodes) and
``async``.

The single-turn side asks, for each episode of a warm-up ``waves`` rollout (the same seed as the
timed ones), one request from the same opening prompt for exactly as many tokens as that episode's
replies had in all (eos ignored), all in one engine step: the same model tokens generated, without
the turns. Every side counts only the model's own tokens (the episodes' mask), and records the
prompt tokens it sent, how many of them the engine prefilled and how many its prefix cache restored
(``engine.stats()``; ``--prefix-cache-gib 0`` turns the cache off: every turn prefills the whole
conversation again, the engine before the prefix cache).

Sizes: ``agent`` (the default: a 2-layer Llama of width 128, 8 tasks x 8 episodes, 4 turns, the stop
aimed at 24 tokens a reply: 16.5 on average as sampled) and ``tiny`` (width 64, 2 x 2 episodes, 3
turns aimed at 6 tokens: the test's). The sides run in alternating rounds under the same
process-wide torch settings (benchmarks/harness); ratios multi / single of tokens per wall second
(and per CPU second of the process, the engine thread included), round by round. ``chain_tokens``: the tokens one after another that bound a side's
decode steps (waves: the sum over turns of each wave's longest reply; async: the longest episode's
replies; single: the longest request), since a decode step of this small model costs about the same
whatever the batch. One JSON object.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

from harness import Report, Rounds
from harness.report import common_arguments, settings_from

from toolbox.core.registries import TEXT_ENVS
from toolbox.rl.text_env import Opening, Step, TextEnv


@dataclass(frozen=True)
class Shape:
    hidden_size: int
    num_layers: int
    num_heads: int
    tasks: int
    generations: int  # episodes per task
    turns: int
    reply_tokens: (
        int  # the reply length the stop token's bias aims at (the sampled mean is lower: see the JSON)
    )
    max_reply_tokens: int


SHAPES = {
    "agent": Shape(128, 2, 2, tasks=8, generations=8, turns=4, reply_tokens=24, max_reply_tokens=96),
    "tiny": Shape(64, 2, 2, tasks=2, generations=2, turns=3, reply_tokens=6, max_reply_tokens=32),
}
SEED = 1234  # every timed waves rollout (and the warm-up the single side copies) uses it


@TEXT_ENVS.register("_bench_turns")
class TurnsEnv(TextEnv):
    """``max_turns`` replies, each answered by a short user turn; done (reward 0) after the last."""

    def __init__(self, max_turns: int = 4, max_tokens: int = 4096) -> None:
        super().__init__(max_turns=max_turns + 1, max_tokens=max_tokens)  # (the runner's limit after)
        self.turns = max_turns
        self.replies = 0

    def reset(self, task: dict[str, Any]) -> Opening:
        return Opening([{"role": "user", "content": task["prompt"]}])

    def step(self, message: dict[str, Any]) -> Step:
        self.replies += 1
        if self.replies >= self.turns:
            return Step(done=True, reward=0.0)
        return Step(messages=[{"role": "user", "content": f"and then {self.replies}?"}])


class Bench:
    """One engine and model for every side; each side's call times one rollout and counts its work."""

    def __init__(self, shape: Shape, prefix_cache_gib: float | None) -> None:
        import torch

        from toolbox.core.registries import ENGINES, MODELS, TOKENIZERS
        from toolbox.rl.episodes import EpisodeRunner
        from toolbox.serving.engine import SamplingParams

        self.shape = shape
        chars = "abcdefghijklmnopqrstuvwxyz0123456789 ?+-*/=()."
        self.tokenizer = tokenizer = TOKENIZERS.build({"name": "char"}, corpus=[chars])
        torch.manual_seed(0)
        model = MODELS.build(
            {"name": "tiny_llama", "hidden_size": shape.hidden_size, "num_layers": shape.num_layers,
             "num_heads": shape.num_heads, "intermediate_size": 4 * shape.hidden_size,
             "max_position_embeddings": 4096},
            vocab_size=len(tokenizer),
        ).eval()  # fmt: skip
        spec: dict[str, Any] = {
            "name": "torch",
            "max_batch_size": shape.tasks * shape.generations,
            "device": "cpu",
        }
        if prefix_cache_gib is not None:
            spec["prefix_cache_gib"] = prefix_cache_gib
        self.engine = ENGINES.build(spec, model=model, tokenizer=tokenizer)
        stop = tokenizer.convert_tokens_to_ids(".")
        vocab = len(tokenizer)
        bias = math.log(max(vocab - 1, 1) / max(shape.reply_tokens - 1, 1))  # p(stop) ~ 1 / reply_tokens
        self.params = SamplingParams(temperature=1.0, stop_token_ids=[stop], logit_bias={stop: bias})
        self.tasks = [{"prompt": f"question {i}: what is {i} + {2 * i}?"} for i in range(shape.tasks)]
        env = {"name": "_bench_turns", "max_turns": shape.turns}
        self.runners = {
            s: EpisodeRunner(self.engine, tokenizer, env, shape.max_reply_tokens, s)
            for s in ("waves", "async")
        }
        warm = self.runners["waves"].run(self.tasks, shape.generations, self.params, SEED)
        self.single_requests = [
            (e.prompt_ids, SamplingParams(max_tokens=max(sum(e.mask), 1), temperature=1.0, ignore_eos=True,
                                          seed=SEED + k))
            for k, e in enumerate(warm)
        ]  # fmt: skip
        self.shapes = self.episode_shape(warm)
        self.single()  # warm-up

    @staticmethod
    def episode_shape(episodes: list) -> dict:
        tokens = sum(sum(e.mask) for e in episodes)
        replies = sum(len(e.turns) for e in episodes)
        return {
            "episodes": len(episodes),
            "model_tokens": tokens,
            "env_tokens": sum(len(e.mask) - sum(e.mask) for e in episodes),
            "turns_mean": replies / len(episodes),
            "reply_tokens_mean": tokens / replies,
            "cut_by_length": sum(e.finish_reason == "length" for e in episodes),
        }

    def timed(self, work) -> tuple[dict, Any]:
        """Time ``work()`` (its result, the model tokens it made and the prompt tokens it sent); the
        prompt tokens the engine restored from its prefix cache, from ``engine.stats()`` (0 for an
        engine without one)."""
        before = self.engine.stats()
        wall, cpu = time.perf_counter(), time.process_time()
        result, tokens, prompt = work()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        after = self.engine.stats()
        if "prompt_tokens" in after:
            counted = after["prompt_tokens"] - before["prompt_tokens"]
            assert counted == prompt, f"the engine prefilled prompts of {counted} tokens, not {prompt}"
        cached = after.get("prefix_cache_hit_tokens", 0) - before.get("prefix_cache_hit_tokens", 0)
        figures = {
            "tokens_per_s": tokens / wall,
            "tokens_per_cpu_s": tokens / cpu,
            "wall_s": wall,
            "cpu_s": cpu,
            "model_tokens": tokens,
            "prompt_tokens": prompt,
            "prefilled_tokens": prompt - cached,
            "prefix_cache_hit_tokens": cached,
        }
        return figures, result

    def multi(self, schedule: str) -> dict:
        def work():
            episodes = self.runners[schedule].run(self.tasks, self.shape.generations, self.params, SEED)
            # turn 0 is one request of n = generations per task: its prompt is prefilled once
            prompts = sum(t.prompt_tokens for e in episodes for t in e.turns[1:])
            prompts += sum(len(e.prompt_ids) for e in episodes if e.index == 0)
            return episodes, sum(sum(e.mask) for e in episodes), prompts

        figures, episodes = self.timed(work)
        shape = self.episode_shape(episodes)
        figures["turns_mean"] = shape["turns_mean"]
        figures["cut_by_length"] = shape["cut_by_length"]
        if schedule == "waves":  # a wave lasts as long as its longest reply
            turns = max(len(e.turns) for e in episodes)
            chain = sum(
                max(e.turns[t].reply_tokens for e in episodes if len(e.turns) > t) for t in range(turns)
            )
        else:  # at best, the longest episode's replies back to back
            chain = max(sum(t.reply_tokens for t in e.turns) for e in episodes)
        figures["chain_tokens"] = chain
        return figures

    def single(self) -> dict:
        def work():
            handles = self.engine.submit_requests(self.single_requests, stream=False, queue_limit=False)
            outputs = [h.result() for h in handles]
            made = sum(len(o.completions[0].token_ids) for o in outputs)
            wanted = sum(p.max_tokens for _, p in self.single_requests)
            assert made == wanted, f"the single-turn side made {made} tokens, not {wanted}"
            return outputs, made, sum(len(ids) for ids, _ in self.single_requests)

        figures, _ = self.timed(work)
        figures["chain_tokens"] = max(p.max_tokens for _, p in self.single_requests)
        return figures


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=sorted(SHAPES), default="agent", help="the model and episode shape")
    p.add_argument(
        "--prefix-cache-gib",
        type=float,
        default=None,
        help="the engine's prefix cache (default: the engine's; 0: off, every turn re-prefills)",
    )
    common_arguments(p, sizes=False)
    args = p.parse_args(argv)
    args.settings = settings_from(args)
    report = Report("multiturn_rollouts", args, args.settings)
    shape = SHAPES[args.size]
    bench = Bench(shape, args.prefix_cache_gib)
    report.add("size", {"name": args.size, **asdict(shape), "tokenizer": "characters"})
    cache = getattr(bench.engine.batcher, "prefix_cache", None)  # (None: an engine before it had one)
    report.add(
        "engine",
        {
            "max_batch_size": bench.engine.max_batch_size,
            "max_model_len": bench.engine.max_model_len,
            "prefix_cache_bytes": cache.budget_bytes if cache is not None else 0,
        },
    )
    report.add("warmup_episodes", bench.shapes)
    sides = {
        "waves": lambda: bench.multi("waves"),
        "async": lambda: bench.multi("async"),
        "single": bench.single,
    }
    rounds = Rounds(sides, args.settings, args.rounds).run()
    bench.engine.shutdown()
    ratios = {
        "vs_single": rounds.ratio("waves", "single", "tokens_per_s"),
        "vs_single_cpu": rounds.ratio("waves", "single", "tokens_per_cpu_s"),
        "async_vs_single": rounds.ratio("async", "single", "tokens_per_s"),
    }
    cache = "prefix cache off" if args.prefix_cache_gib == 0 else "prefix cache on"
    row = {
        "title": f"multi-turn rollouts (EpisodeRunner, waves) vs single-turn of the same length, torch engine, "
        f"{shape.tasks}x{shape.generations} episodes x {shape.turns} turns, replies of "
        f"{bench.shapes['reply_tokens_mean']:.1f} tokens on average, width {shape.hidden_size}, {cache}",
        "figure": "tokens_per_s",
        "unit": "tokens/s",
        "ours": "waves",
        "peers": {"single": "single-turn rollouts"},
        "goal": ">= 0.8x single-turn",
    }
    return report.finish(rounds, ratios, row)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
