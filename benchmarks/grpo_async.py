"""Asynchronous GRPO (``trainer.max_staleness``) vs synchronous GRPO on grpo_arith: the same work.

    .venv/bin/python benchmarks/grpo_async.py [--model SFT_MODEL_DIR] [--staleness 1] [--steps 8]
        [--warmup 2] [--prompts 8] [--generations 8] [--rounds 3] [--threads 1] [--out F]

Both sides build ``experiment=grpo_arith`` (two-digit additions, the exact-answer reward, beta
0.04, temperature 1, one optimizer step per round) with the same overrides; the only difference is
``trainer.max_staleness`` (sync: null, the rollout inside the training loop; async: the producer
thread, round r generated with the policy after r − k updates, an engine on a copy of the policy).
Both generate the same number of rollouts (``--prompts`` × ``--generations`` completions of
``max_completion_length`` 6 tokens a round) and make the same number of updates. Dynamic sampling
is off on both sides (it draws a different number of prompt batches per round depending on the
rewards, which are not the same once the policies differ). Without ``--model`` the policy is a
random tiny Llama (the char tokenizer): the work is the same, the rewards are mostly 0.

Reported per side: seconds per round (median over the measured rounds, after ``--warmup``; wall and
CPU time of the process, which for async includes the producer thread), and for async the median
seconds the trainer waited for a round and the producer waited for weights. Ratios sync / async
(> 1: async faster) per alternating round, under the same process-wide torch settings
(benchmarks/harness). One JSON object.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from harness import SIZES, Report, Rounds
from harness.report import common_arguments, settings_from


def _overrides(args, staleness: int | None, run_dir: str) -> list[str]:
    model = (
        [f"model.path={args.model}", f"tokenizer.path={args.model}"]
        if args.model
        else [
            "model=tiny_llama",
            "~model.path",
            "tokenizer=char",
            "~tokenizer.path",
            *SIZES[args.size].model(),
        ]
    )
    return [
        "experiment=grpo_arith",
        *model,
        "eval.exact_match.max_examples=1",  # the end-of-run evaluation, after the timed rounds
        "callbacks=none",
        "device=cpu",
        *args.settings.overrides(),
        "data.source.num_train=2000",
        "data.source.num_test=10",
        f"trainer.max_steps={args.warmup + args.steps}",
        f"trainer.prompts_per_step={args.prompts}",
        f"trainer.num_generations={args.generations}",
        "trainer.dynamic_sampling=false",
        "trainer.eval_every=0",
        "trainer.save_every=0",
        f"trainer.max_staleness={'null' if staleness is None else staleness}",
        "scheduler.warmup_steps=0",
        f"run_dir={run_dir}",
    ]


def _run(args, staleness: int | None, run_dir: str) -> dict:
    from toolbox.core.events import Event
    from toolbox.experiment import ExperimentBuilder, load_config

    parts = ExperimentBuilder.from_config(load_config(_overrides(args, staleness, run_dir))).build()
    t = parts.trainer
    stamps: list[float] = [time.perf_counter()]
    cpu: list[float] = [time.process_time()]
    waits: dict[str, list[float]] = {"async/trainer_wait_s": [], "async/producer_wait_s": []}
    rollout: list[float] = []

    def on_end(d):
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
        rollout.append(d.metrics["rollout_time"])
        for key, values in waits.items():
            values.append(d.metrics.get(key, 0.0))

    t.bus.subscribe(Event.STEP_END, on_end)

    def setup(orig=t.setup):
        orig()  # starts the producer thread: its first rounds count in the first (warm-up) steps
        stamps[0], cpu[0] = time.perf_counter(), time.process_time()

    t.setup = setup
    t.fit()
    steps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)][args.warmup :]
    cpu_steps = [b - a for a, b in zip(cpu, cpu[1:], strict=False)][args.warmup :]
    return {
        "sec_per_step": statistics.median(steps),
        "steps_per_s": 1.0 / statistics.median(steps),
        "cpu_sec_per_step": statistics.median(cpu_steps),
        "rollout_sec_per_step": statistics.median(rollout[args.warmup :]),
        "trainer_wait_s": statistics.median(waits["async/trainer_wait_s"][args.warmup :]),
        "producer_wait_s": statistics.median(waits["async/producer_wait_s"][args.warmup :]),
        "measured_steps": len(steps),
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--model", help="a save_pretrained folder (grpo_arith's SFT start); default: a random tiny Llama"
    )
    p.add_argument("--staleness", type=int, default=1, help="the async side's trainer.max_staleness")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--generations", type=int, default=8)
    common_arguments(p)
    args = p.parse_args(argv)
    if args.staleness < 1:
        p.error(f"--staleness {args.staleness}: the async side needs >= 1 (0 is the synchronous schedule)")
    args.settings = settings_from(args)
    report = Report("grpo_async", args, args.settings)
    report.add("size", "--model " + args.model if args.model else SIZES[args.size].as_json())
    tmp = tempfile.mkdtemp(prefix="grpo_async_bench_")
    count = iter(range(10**6))
    sides = {
        "async": lambda: _run(args, args.staleness, f"{tmp}/async{next(count)}"),
        "sync": lambda: _run(args, None, f"{tmp}/sync{next(count)}"),
    }
    rounds = Rounds(sides, args.settings, args.rounds).run()
    ratios = {
        "vs_sync": rounds.ratio("async", "sync", "sec_per_step", higher_is_better=False),
        "vs_sync_cpu": rounds.ratio("async", "sync", "cpu_sec_per_step", higher_is_better=False),
    }
    row = {
        "title": f"async GRPO (max_staleness {args.staleness}) vs sync on grpo_arith, {args.prompts} prompts x "
        f"{args.generations} generations",
        "figure": "steps_per_s",
        "unit": "steps/s",
        "ours": "async",  # the side in the "ours" column (both sides are toolbox)
        "peers": {"sync": "toolbox GRPO, synchronous"},
        "goal": ">= 1.6x synchronous on 2 cores",
    }
    return report.finish(rounds, ratios, row)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
