"""The overrides of the tiny GRPO runs the trainer tests share (prompt-only arithmetic, 4 prompts x 4
generations of 4 tokens, no eval or checkpoints); each test adds its rewards and settings."""

GRPO = [
    "trainer=grpo",
    "objective=grpo",
    "data.dataset.name=prompt_only",
    "data.dataset.max_length=16",
    "eval=none",
    "trainer.prompts_per_step=4",
    "trainer.num_generations=4",
    "trainer.max_completion_length=4",
    "trainer.eval_every=0",
    "trainer.save_every=0",
]
