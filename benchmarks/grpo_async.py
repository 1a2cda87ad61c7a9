"""Asynchronous GRPO (``trainer.max_staleness``) vs synchronous GRPO on grpo_arith: the same work.

    .venv/bin/python benchmarks/grpo_async.py [--model SFT_MODEL_DIR] [--staleness 1] [--steps 8]
        [--warmup 2] [--prompts 8] [--generations 8] [--forward lean|exact|model] [--no-trl]
        [--rounds 3] [--threads 1] [--out F]

Both sides build ``experiment=grpo_arith`` (two-digit additions, the exact-answer reward, beta
0.04, temperature 1, one optimizer step per round) with the same overrides; the only difference is
``trainer.max_staleness`` (sync: null, the rollout inside the training loop; async: the producer
thread, round r generated with the policy after r − k updates, an engine on a copy of the policy).
Both generate the same number of rollouts (``--prompts`` × ``--generations`` completions of
``max_completion_length`` 6 tokens a round) and make the same number of updates. Dynamic sampling
is off on both sides (it draws a different number of prompt batches per round depending on the
rewards, which are not the same once the policies differ). Without ``--model`` the policy is a
random tiny Llama (the char tokenizer): the work is the same, the rewards are mostly 0. The README
row's model is ``outputs/sft_arith/model``, what ``toolbox train experiment=sft_arith`` writes.

Reported per side: seconds per round (median over the measured rounds, after ``--warmup``; wall and
CPU time of the process, which for async includes the producer thread), and for async the median
seconds the trainer waited for a round and the producer waited for weights. Ratios sync / async
(> 1: async faster) per alternating round, under the same process-wide torch settings
(benchmarks/harness). Both our sides compute log-probs with ``trainer.forward`` (``--forward``, default
lean). A third side, unless ``--no-trl``: TRL's GRPOTrainer (``trainer=trl_grpo``) on
the same work (its synchronous trainer; ``TRL_PEER`` below says why not its AsyncGRPOTrainer), its
generation timed around ``_generate_single_turn``. One JSON object.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

from harness import SIZES, Report, Rounds
from harness.grpo_fit import timed_fit
from harness.report import common_arguments, settings_from

# TRL's AsyncGRPOTrainer (trl/experimental/async_grpo) cannot be the peer here: it generates
# through a vLLM server (async_grpo_trainer.py: `VLLMClient(self.args.vllm_server_base_url, ...)`)
# and streams the weights to it over NCCL (weight_transfer.py: "Streams the trainer's weights into
# the vLLM server over NCCL"), a GPU-only transport; so the peer is its synchronous GRPOTrainer.
TRL_PEER = "TRL GRPOTrainer (synchronous; AsyncGRPOTrainer needs vLLM + NCCL)"


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


def _run(args, staleness: int | None, run_dir: str, trainer: str = "grpo") -> dict:
    from toolbox.experiment import ExperimentBuilder, load_config

    ours = [f"trainer.forward={args.forward}"]  # TRL computes log-probs with the model's forward
    overrides = _overrides(args, staleness, run_dir) + (ours if trainer == "grpo" else [f"trainer={trainer}"])
    parts = ExperimentBuilder.from_config(load_config(overrides)).build()
    fit = timed_fit(parts.trainer, args.warmup)
    waits = {
        name: statistics.median(m.get(f"async/{name}", 0.0) for m in fit.metrics)
        for name in ("trainer_wait_s", "producer_wait_s")
    }
    figures = fit.figures()
    if trainer == "grpo":  # ours: the median round's generation (TRL: the mean, as timed)
        figures["rollout_sec_per_step"] = statistics.median(fit.generate)
    return {**figures, **waits}


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
    p.add_argument(
        "--forward", choices=("lean", "exact", "model"), default="lean", help="our sides' trainer.forward"
    )
    p.add_argument("--no-trl", action="store_true", help="leave out TRL's GRPOTrainer (the slowest side)")
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
    peers = {"sync": "toolbox GRPO, synchronous"}
    if not args.no_trl:
        sides["trl"] = lambda: _run(args, None, f"{tmp}/trl{next(count)}", trainer="trl_grpo")
        peers["trl"] = TRL_PEER
    rounds = Rounds(sides, args.settings, args.rounds).run()
    ratios = {}
    for peer in peers:
        ratios[f"vs_{peer}"] = rounds.ratio("async", peer, "sec_per_step", higher_is_better=False)
        ratios[f"vs_{peer}_cpu"] = rounds.ratio("async", peer, "cpu_sec_per_step", higher_is_better=False)
    row = {
        "title": f"async GRPO (max_staleness {args.staleness}, forward {args.forward}) vs "
        "sync on grpo_arith, "
        f"{args.prompts} prompts x "
        f"{args.generations} generations",
        "figure": "steps_per_s",
        "unit": "steps/s",
        "ours": "async",  # the side in the "ours" column (both sides are toolbox)
        "peers": peers,
        "goal": ">= 1.6x synchronous on 2 cores, >= 2x TRL",
    }
    return report.finish(rounds, ratios, row)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
