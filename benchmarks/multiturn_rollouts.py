"""Multi-turn episode rollouts vs single-turn rollouts of the same total length: generated tokens/s.

The multi-turn side is ``toolbox.rl.episodes.EpisodeRunner`` (what ``trainer=agent_grpo`` rolls out
with) on an environment of ``--turns`` replies: after each reply it answers with a short user turn
(text the engine prefills), and the episode is done after the last. Replies end at a stop token
whose logit is raised by log((V - 1) / (R - 1)) (V the vocabulary, R ``--reply-tokens``): a reply of
about R tokens where the random tiny model samples near-uniformly (its measured mean is in ``runs``;
``--max-reply-tokens`` caps a reply, and a reply cut by it ends its episode, counted). Episodes at different turns share the
engine's running batch (``waves`` and ``async`` schedules both timed).

The single-turn side asks, for each of the same episodes, one request from the same opening prompt
for exactly as many tokens as that episode's replies had in all (eos ignored), every request in one
batch: the same model tokens generated, without the turns. Both count only the model's own tokens
(the episodes' mask), time the median of ``--repeats`` interleaved runs, and report tokens/s and
the ratio multi / single. Prints one JSON object (``--out`` writes it too), with the load average:
other processes share these cores, so the numbers are this run's, not a claim.

    python benchmarks/multiturn_rollouts.py                          # 16 episodes x 4 turns x ~16 tokens
    python benchmarks/multiturn_rollouts.py --episodes 64 --turns 6 --threads 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

from toolbox.core.registries import TEXT_ENVS
from toolbox.rl.text_env import Opening, Step, TextEnv


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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--reply-tokens", type=int, default=16, help="mean reply length")
    parser.add_argument("--max-reply-tokens", type=int, default=96)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)

    import torch

    from toolbox.core.registries import ENGINES, MODELS, TOKENIZERS
    from toolbox.rl.episodes import EpisodeRunner
    from toolbox.serving.engine import SamplingParams

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    tokenizer = TOKENIZERS.build({"name": "char"}, corpus=["abcdefghijklmnopqrstuvwxyz0123456789 ?+-*/=()."])
    torch.manual_seed(args.seed)
    model = MODELS.build(
        {"name": "tiny_llama", "hidden_size": args.hidden_size, "num_layers": args.num_layers, "num_heads": 2,
         "intermediate_size": 4 * args.hidden_size, "max_position_embeddings": 4096},
        vocab_size=len(tokenizer),
    ).to(args.device).eval()  # fmt: skip
    engine = ENGINES.build(
        {"name": "torch", "max_batch_size": args.episodes, "device": args.device},
        model=model, tokenizer=tokenizer,
    )  # fmt: skip
    stop = tokenizer.convert_tokens_to_ids(".")
    vocab = len(tokenizer)
    bias = math.log(max(vocab - 1, 1) / max(args.reply_tokens - 1, 1))  # p(stop) ~ 1 / reply_tokens
    params = SamplingParams(temperature=1.0, stop_token_ids=[stop], logit_bias={stop: bias})
    tasks = [{"prompt": f"question {i}: what is {i} + {2 * i}?"} for i in range(args.episodes)]
    env = {"name": "_bench_turns", "max_turns": args.turns}
    runners = {s: EpisodeRunner(engine, tokenizer, env, args.max_reply_tokens, s) for s in ("waves", "async")}

    def multi(schedule: str, seed: int) -> tuple[float, list]:
        start = time.perf_counter()
        episodes = runners[schedule].run(tasks, 1, params, seed)
        return time.perf_counter() - start, episodes

    def single(episodes: list, seed: int) -> float:
        reqs = [
            (e.prompt_ids, SamplingParams(max_tokens=max(sum(e.mask), 1), temperature=1.0, ignore_eos=True,
                                          seed=seed + k))
            for k, e in enumerate(episodes)
        ]  # fmt: skip
        start = time.perf_counter()
        handles = [engine.submit_request(p, q, stream=False, queue_limit=False) for p, q in reqs]
        outputs = [h.result() for h in handles]
        elapsed = time.perf_counter() - start
        made = sum(len(o.completions[0].token_ids) for o in outputs)
        assert made == sum(max(sum(e.mask), 1) for e in episodes), "single-turn made another length"
        return elapsed

    multi("waves", 10_000)  # warm-up
    rows: dict[str, list[float]] = {"waves": [], "async": [], "single": []}
    shapes = []
    for r in range(args.repeats):
        for schedule in ("waves", "async"):
            seconds, episodes = multi(schedule, args.seed * 1000 + r)
            tokens = sum(sum(e.mask) for e in episodes)
            rows[schedule].append(tokens / seconds)
            if schedule == "waves":
                rows["single"].append(tokens / single(episodes, args.seed * 1000 + r))
                shapes.append({
                    "model_tokens": tokens,
                    "env_tokens": sum(len(e.mask) - sum(e.mask) for e in episodes),
                    "turns_mean": statistics.mean(len(e.turns) for e in episodes),
                    "reply_tokens_mean": round(tokens / sum(len(e.turns) for e in episodes), 2),
                    "cut_by_length": sum(e.finish_reason == "length" for e in episodes),
                })  # fmt: skip
    engine.shutdown()
    median = {k: statistics.median(v) for k, v in rows.items()}
    out = {
        "benchmark": "multiturn_rollouts",
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "tokens_per_s": {k: round(v, 1) for k, v in median.items()},
        "ratio_waves_over_single": round(median["waves"] / median["single"], 3),
        "ratio_async_over_single": round(median["async"] / median["single"], 3),
        "runs": shapes,
        "torch_threads": torch.get_num_threads(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "note": "one machine's run, shared with other processes: not a claim",
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        from toolbox.core.atomic import atomic_write_text

        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, text + "\n")
    return out


if __name__ == "__main__":
    main()
