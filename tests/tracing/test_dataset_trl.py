"""TRL's SFTTrainer takes a tool-calling dataset made from traces (its own file: TRL imports slowly)."""

from __future__ import annotations

from datasets import load_from_disk


def test_trl_sft_trainer_accepts_the_dataset(sft_dir, tmp_path, tool_tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    ds = load_from_disk(str(sft_dir))
    tok = tool_tokenizer(ds["train"])
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=1,
                                         intermediate_size=64, pad_token_id=tok.pad_token_id))  # fmt: skip
    args = SFTConfig(output_dir=str(tmp_path / "trl"), max_steps=2, per_device_train_batch_size=2, bf16=False,
                     report_to="none", use_cpu=True, activation_checkpointing=False, logging_steps=1, save_strategy="no",
                     max_length=512, dataset_num_proc=None)  # fmt: skip
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds["train"], processing_class=tok)
    first = trainer.train_dataset[0]
    text = tok.decode(first["input_ids"])
    assert "<call>calculator" in text and "<|tool|>" in text  # the template saw tool_calls and the tool turn
    result = trainer.train()
    assert result.global_step == 2
