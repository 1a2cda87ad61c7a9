"""Supervised fine-tuning throughput: toolbox vs transformers' Trainer vs TRL's SFTTrainer.

Same Llama (random init, same seed, ``--size`` tiny or 85m), same tokenized data (generated
arithmetic through characters, or GSM8K through a 30k WordPiece vocabulary), same batch size,
learning rate and number of steps, completion-only loss in all three, fp32 on CPU, under the same
process-wide torch settings (benchmarks/harness). Each trainer's optimizer steps are timed from
inside its own loop (callbacks), after a few warm-up steps, in wall and CPU time; the three run in
alternating rounds and every figure is reported as min/median/max, ratios from unrounded values.
Useful tokens are the non-padding input tokens; MFU is 6 x parameters x useful tokens per step over
the step time, against this core's float32 GEMM peak measured in the same run. One JSON object.

    python benchmarks/sft_throughput.py [--size tiny|85m] [--steps 60] [--rounds 3] [--out F]
"""

from __future__ import annotations

import argparse
import os
import tempfile

from harness import SIZES, Report, Rounds, StepClock, mfu, model_flop_params
from harness.report import common_arguments, settings_from

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def setup(args, *extra: str):
    from toolbox.experiment import ExperimentBuilder, load_config

    size = SIZES[args.size]
    overrides = [
        *size.model(),
        *size.tokenizer(),
        *size.sft_data(),
        *args.settings.overrides(),
        f"trainer.max_steps={args.steps}",
        f"trainer.batch_size={args.batch_size}",
        "trainer.eval_every=0",
        "trainer.save_every=0",
        "callbacks=none",
        "eval=none",
        "device=cpu",
        "scheduler=constant",
        f"optimizer.lr={args.lr}",
        f"run_dir={tempfile.mkdtemp()}",
        "trainer.max_grad_norm=1.0",
        *extra,
    ]
    return ExperimentBuilder.from_config(load_config(overrides))


def bench_toolbox(args, clock: StepClock) -> None:
    from toolbox.core.events import Event

    packing = []
    if (
        args.packing
    ):  # several examples a row, attention kept to each (no compute on padding but the rows' ends)
        packing = [
            "data.collator.name=packing",
            f"data.collator.max_length={SIZES[args.size].max_length or 32}",
        ]
    parts = setup(args, f"trainer.forward={args.forward}", *packing).build()
    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: clock.step_done())
    parts.trainer.fit()


def hf_collate(pad: int):
    def collate(batch):
        import torch

        width = max(len(b["input_ids"]) for b in batch)
        ids = torch.full((len(batch), width), pad)
        labels = torch.full((len(batch), width), -100)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, b in enumerate(batch):
            n = len(b["input_ids"])
            ids[i, :n] = torch.tensor(b["input_ids"])
            labels[i, :n] = torch.tensor(b["labels"])
            mask[i, :n] = 1
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}

    return collate


def hf_arguments(args) -> dict:
    return dict(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=args.batch_size,
        max_steps=args.steps,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        logging_steps=10**6,
        save_strategy="no",
        report_to="none",
        bf16=False,
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
        use_cpu=True,
    )


def clock_callback(clock: StepClock):
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def on_step_end(self, *a, **k):
            clock.step_done()

    return Clock()


def bench_hf_trainer(args, clock: StepClock) -> None:
    import datasets
    from transformers import Trainer, TrainingArguments

    parts = setup(args).build(with_trainer=False)
    rows = [
        {
            "input_ids": ex["input_ids"],
            "labels": [t if m else -100 for t, m in zip(ex["input_ids"], ex["completion_mask"], strict=True)],
        }
        for ex in parts.train_data
    ]
    trainer = Trainer(
        model=parts.model,
        args=TrainingArguments(**hf_arguments(args)),
        train_dataset=datasets.Dataset.from_list(rows),
        data_collator=hf_collate(parts.tokenizer.pad_token_id),
        callbacks=[clock_callback(clock)],
    )
    trainer.train()


def bench_trl_sft(args, clock: StepClock) -> None:
    import datasets
    from trl import SFTConfig, SFTTrainer

    parts = setup(args).build(with_trainer=False)
    rows = [{"prompt": r["prompt"], "completion": r["completion"]} for r in parts.splits.train]
    config = SFTConfig(
        **hf_arguments(args),
        activation_checkpointing=False,
        completion_only_loss=True,
        # padding-free TRL refuses a max_length it would not enforce (our tokenized examples fit it anyway)
        max_length=None if args.packing else SIZES[args.size].max_length or 64,
        packing=False,
        padding_free=args.packing,  # TRL's own way of not computing on padding
    )
    trainer = SFTTrainer(
        model=parts.model,
        args=config,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=parts.tokenizer,
        callbacks=[clock_callback(clock)],
    )
    trainer.train()


PEERS = {"hf_trainer": ("HF Trainer", bench_hf_trainer), "trl_sft": ("TRL SFTTrainer", bench_trl_sft)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=None, help="default: the size's (tiny 32, 85m 8)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument(
        "--forward", default="lean", choices=["lean", "exact", "model"], help="toolbox's trainer.forward"
    )
    parser.add_argument(
        "--packing",
        action="store_true",
        help="ours with the packing collator, TRL with padding_free=True (HF Trainer stays padded)",
    )
    parser.add_argument("--peers", nargs="+", choices=sorted(PEERS), default=sorted(PEERS))
    common_arguments(parser)
    args = parser.parse_args(argv)
    args.batch_size = args.batch_size or SIZES[args.size].batch_size
    args.settings = settings_from(args)
    report = Report("sft_throughput", args, args.settings)

    # useful (non-padding) tokens per step are the same for every trainer: the same examples and batch size
    parts = setup(args).build(with_trainer=False)
    examples = parts.train_data
    tokens_per_example = sum(len(e["input_ids"]) for e in examples) / len(examples)
    tokens_per_step = tokens_per_example * args.batch_size
    flop_params = model_flop_params(parts.model)
    del parts
    report.add("size", SIZES[args.size].as_json())
    report.add(
        "work",
        {
            "useful_tokens_per_step": tokens_per_step,
            "flop_params": flop_params,
            "steps_timed": args.steps - args.warmup,
        },
    )
    report.measure_peak()

    def side(fn):
        def run() -> dict:
            clock = StepClock(args.warmup)
            fn(args, clock)
            return clock.figures({"tokens": tokens_per_step})

        return run

    sides = {"toolbox": side(bench_toolbox), **{name: side(PEERS[name][1]) for name in args.peers}}
    rounds = Rounds(sides, args.settings, args.rounds).run()
    report.measure_peak()
    for figures in (f for each in rounds.each.values() for f in each):
        figures["mfu"] = mfu(flop_params, tokens_per_step, figures["sec_per_step"], report.peak)
    ratios = {}
    for name in args.peers:
        ratios[f"vs_{name}"] = rounds.ratio("toolbox", name, "tokens_per_s")
        ratios[f"vs_{name}_cpu"] = rounds.ratio("toolbox", name, "tokens_per_cpu_s")
    row = {
        "title": f"SFT, {args.size} model, batch {args.batch_size}, `trainer.forward={args.forward}`"
        + (", packed (TRL padding-free)" if args.packing else ""),
        "figure": "tokens_per_s",
        "unit": "useful tok/s",
        "mfu": True,
        "peers": {name: PEERS[name][0] for name in args.peers},
        "goal": "tiny: >= 2x HF Trainer and TRL; 85m: >= 1.2x, MFU >= 80 % of the GEMM peak",
    }
    return report.finish(rounds, ratios, row)


if __name__ == "__main__":
    main()
