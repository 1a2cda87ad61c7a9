"""TRL's SFTTrainer under torchrun on CPU: does it really train as 2 processes?

``python -m torch.distributed.run --nproc-per-node 2 trl_sft_worker.py OUT.json``. HF Trainer (and so
TRL) on CPU trains every rank alone, as world size 1, unless ``use_cpu=True``; this script trains a
tiny Llama a few steps with ``use_cpu=True`` and writes, from rank 0, what the ranks saw: the world
size from torch.distributed, from the Trainer and from accelerate, and whether the ranks' final
weights are identical (they are only if gradients were averaged across ranks).
"""

from __future__ import annotations

import json
import sys
import tempfile

import torch
import torch.distributed as dist


def main(out: str) -> None:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from toolbox.core.registries import MODELS
    from toolbox.experiment import ExperimentBuilder, load_config

    cfg = load_config(["data.source.num_train=64", "data.source.num_test=8", "device=cpu"])
    splits, tokenizer = ExperimentBuilder.from_config(cfg).build_data()
    texts = [t for t in splits.texts()][:64]
    torch.manual_seed(0)
    model = MODELS.build(
        {"name": "tiny_llama", "hidden_size": 64, "num_layers": 1, "num_heads": 2, "intermediate_size": 128},
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    common = dict(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=4, max_steps=3, learning_rate=1e-3,
        bf16=False, report_to="none", save_strategy="no", logging_steps=1, max_length=32,
        dataset_text_field="text", activation_checkpointing=False, seed=0,
    )  # fmt: skip
    without_cpu_flag = SFTConfig(**common).world_size  # the silent pitfall: 1 under torchrun on CPU
    args = SFTConfig(**common, use_cpu=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_dict({"text": texts}),
                         processing_class=tokenizer)  # fmt: skip
    trainer.train()
    flat = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    sums = [None] * dist.get_world_size()
    dist.all_gather_object(sums, float(flat.double().sum()))
    result = {
        "dist_world_size": dist.get_world_size(),
        "trainer_world_size": args.world_size,
        "accelerate_processes": trainer.accelerator.num_processes,
        "without_use_cpu_world_size": without_cpu_flag,
        "steps": trainer.state.global_step,
        "epoch": trainer.state.epoch,
        "num_examples": len(texts),
        "rank_weight_sums": sums,
        "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
    }
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
