"""DPO step throughput: toolbox's preference trainer vs TRL's DPOTrainer on the same work.

Same tiny Llama (random init, same seed, same weights in both), same char tokenizer, the same
arithmetic preference pairs (right vs wrong result), batch size, learning rate, beta, sigmoid loss,
a frozen reference model computed on the fly (no precomputation) in both, fp32 on CPU. TRL runs
with the settings of docs/notes for CPU (bf16=False, gradient checkpointing off, report_to none,
no use_cpu). Each trainer's optimizer steps are timed from inside its own loop, after a few
warm-up steps, in wall and CPU time; the two run in alternating rounds under the same
process-wide torch settings (benchmarks/harness), figures as min/median/max, ratios from unrounded
values. ``--size 85m`` takes the 85M model and the 30k WordPiece vocabulary. MFU counts the
policy's forward and backward (6 x params) and the reference's forward (2 x params) per real token.
Prints one JSON object.

    python benchmarks/dpo_vs_trl.py [--size tiny|85m] [--steps 60] [--rounds 3] [--precompute] [--out F]
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile

from harness import SIZES, Report, Rounds, StepClock, mfu, model_flop_params
from harness.report import common_arguments, settings_from

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build(args):
    from toolbox.experiment import ExperimentBuilder, load_config

    size = SIZES[args.size]
    overrides = [
        *size.model(),
        *size.tokenizer(),
        *args.settings.overrides(),
        "data=arithmetic_pairs",
        *(
            ["data.collator.name=preference_packed", f"data.collator.max_length={args.pack_length}"]
            if args.packing
            else []
        ),
        "trainer=preference",
        "objective=dpo",
        f"objective.beta={args.beta}",
        f"trainer.max_steps={args.steps}",
        f"trainer.batch_size={args.batch_size}",
        "trainer.eval_every=0",
        "trainer.save_every=0",
        f"trainer.precompute_ref_logprobs={str(args.precompute).lower()}",
        "callbacks=none",
        "eval=none",
        "device=cpu",
        "scheduler=constant",
        f"optimizer.lr={args.lr}",
        "optimizer.weight_decay=0.0",
        f"run_dir={tempfile.mkdtemp()}",
        "trainer.max_grad_norm=1.0",
        "data.source.max_train=2000",
        "data.source.max_test=64",
    ]
    return ExperimentBuilder.from_config(load_config(overrides)).build()


def bench_toolbox(parts, args, clock: StepClock) -> None:
    from toolbox.core.events import Event

    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: clock.step_done())
    parts.trainer.fit()


def bench_trl(parts, initial_state, args, clock: StepClock) -> None:
    import datasets
    from transformers import TrainerCallback
    from trl import DPOConfig, DPOTrainer

    model = copy.deepcopy(parts.model)
    model.load_state_dict(initial_state)
    rows = [
        {"prompt": r["prompt"], "chosen": r["chosen"], "rejected": r["rejected"]} for r in parts.splits.train
    ]

    class Clock(TrainerCallback):
        def on_step_end(self, *a, **k):
            clock.step_done()

    config = DPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=args.batch_size,
        max_steps=args.steps,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=args.beta,
        loss_type=["sigmoid"],
        logging_steps=10**6,
        save_strategy="no",
        report_to="none",
        bf16=False,
        gradient_checkpointing=False,
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
        max_length=SIZES[args.size].max_length or 32,
        precompute_ref_log_probs=args.precompute,
        padding_free=args.packing,  # TRL's own way of not computing on padding
    )
    # TRL builds its reference by reloading the policy's hub id; a model built from a config has none,
    # so it gets the same frozen copy of the initial weights that ours makes
    reference = None if args.precompute else copy.deepcopy(model).eval()
    trainer = DPOTrainer(
        model=model,
        ref_model=reference,
        args=config,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=parts.tokenizer,
        callbacks=[Clock()],
    )
    trainer.train()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=None, help="default: 16 (tiny), 8 (85m)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--precompute", action="store_true", help="both precompute the reference log-probs")
    parser.add_argument(
        "--packing", action="store_true", help="ours with preference_packed, TRL with padding_free=True"
    )
    parser.add_argument(
        "--pack-length",
        type=int,
        default=None,
        help="tokens per packed row (ours; default: tiny 64, 85m 512)",
    )
    common_arguments(parser)
    args = parser.parse_args(argv)
    args.batch_size = args.batch_size or (16 if args.size == "tiny" else SIZES[args.size].batch_size)
    args.pack_length = args.pack_length or SIZES[args.size].max_length or 64
    args.settings = settings_from(args)
    report = Report("dpo_vs_trl", args, args.settings)

    parts = build(args)
    initial_state = copy.deepcopy(parts.model.state_dict())
    examples = parts.train_data
    tokens_per_pair = sum(
        2 * len(e["prompt_ids"]) + len(e["chosen_ids"]) + len(e["rejected_ids"]) for e in examples
    ) / len(examples)
    tokens_per_step = tokens_per_pair * args.batch_size
    flop_params = model_flop_params(parts.model)
    passes = 6 if args.precompute else 8  # policy forward + backward, and the reference's forward
    report.add("size", SIZES[args.size].as_json())
    report.add(
        "work",
        {
            "pairs": len(examples),
            "tokens_per_pair": tokens_per_pair,
            "tokens_per_step": tokens_per_step,
            "flop_params": flop_params,
            "flop_passes_per_token": passes,
            "data": "arithmetic preference pairs (right vs wrong result)",
        },
    )
    report.measure_peak()

    def side(fn):
        def run() -> dict:
            clock = StepClock(args.warmup)
            fn(clock)
            return clock.figures({"tokens": tokens_per_step})

        return run

    def ours(clock: StepClock) -> None:  # a fresh build every round: the trainer fits once
        bench_toolbox(build(args), args, clock)

    sides = {"toolbox": side(ours), "trl": side(lambda c: bench_trl(parts, initial_state, args, c))}
    rounds = Rounds(sides, args.settings, args.rounds).run()
    report.measure_peak()
    for figures in (f for each in rounds.each.values() for f in each):
        figures["mfu"] = mfu(flop_params, tokens_per_step, figures["sec_per_step"], report.peak, passes)
    ratios = {
        "vs_trl": rounds.ratio("toolbox", "trl", "steps_per_s"),
        "vs_trl_cpu": rounds.ratio("toolbox", "trl", "tokens_per_cpu_s"),
    }
    row = {
        "title": f"DPO, {args.size} model, batch {args.batch_size}, "
        + ("precomputed reference" if args.precompute else "per-batch reference")
        + (f", packed in rows of {args.pack_length} (TRL padding-free)" if args.packing else ""),
        "figure": "steps_per_s",
        "unit": "steps/s",
        "mfu": True,
        "peers": {"trl": "TRL DPOTrainer"},
        "goal": "tiny: >= 2.5x TRL; 85m: >= 1.2x TRL",
    }
    return report.finish(rounds, ratios, row)


if __name__ == "__main__":
    main()
