"""Every registry a config can select from, with the modules that fill it.

The modules are imported on the first lookup, so ``import toolbox`` stays cheap. A new built-in
component goes into one of these modules; a third-party one comes through the entry-point group
``toolbox.<kind>`` (for example ``toolbox.model``).
"""

from __future__ import annotations

from toolbox.core.registry import Registry

MODELS = Registry(
    "model", modules=("toolbox.nn.models", "toolbox.rewards.learned"), renamed={"causal_lm": "hf_causal_lm"}
)
LAYERS = Registry("layer", modules=("toolbox.nn.layers",))
ADAPTERS = Registry("adapter", modules=("toolbox.nn.adapters",))
TOKENIZERS = Registry(
    "tokenizer", modules=("toolbox.data.tokenizers",), renamed={"pretrained": "hf_tokenizer"}
)
SOURCES = Registry(
    "source", modules=("toolbox.data.sources", "toolbox.data.prepared"), renamed={"local": "local_files"}
)
DATASETS = Registry(
    "dataset",
    modules=("toolbox.data.datasets", "toolbox.decision.data"),
    renamed={"preference": "preference_pairs"},
)
COLLATORS = Registry(
    "collator",
    modules=("toolbox.data.collators", "toolbox.decision.data"),
    renamed={
        "decision": "decision_batch",
        "graph": "graph_batch",
        "preference": "preference_pad",
        "unpaired_preference": "unpaired_preference_pad",
    },
)
OBJECTIVES = Registry(
    "objective",
    modules=(
        "toolbox.objectives.supervised",
        "toolbox.objectives.preference",
        "toolbox.objectives.kto",
        "toolbox.objectives.dpo_family",
        "toolbox.objectives.policy",
        "toolbox.objectives.graph",
        "toolbox.objectives.actor_critic",
        "toolbox.decision.objectives",
    ),
    renamed={"grpo": "clipped_policy"},
)
OPTIMIZERS = Registry("optimizer", modules=("toolbox.trainer.optim",))
SCHEDULERS = Registry("scheduler", modules=("toolbox.trainer.optim",))
PRECISIONS = Registry("precision", modules=("toolbox.trainer.precision",))
TRAINERS = Registry(
    "trainer",
    modules=(
        "toolbox.trainer.supervised",
        "toolbox.trainer.preference",
        "toolbox.trainer.trl.dpo",
        "toolbox.trainer.grpo",
        "toolbox.trainer.agent_grpo",
        "toolbox.trainer.agent_endpoint_grpo",
        "toolbox.trainer.trl.sft",
        "toolbox.trainer.trl.grpo",
        "toolbox.trainer.ppo_env",
    ),
)
CALLBACKS = Registry(
    "callback",
    modules=(
        "toolbox.trainer.callbacks",
        "toolbox.trainer.callbacks.memory_writer",
        "toolbox.eval.harness.callback",
    ),
)
STRATEGIES = Registry(
    "strategy", modules=("toolbox.distributed.single", "toolbox.distributed.ddp", "toolbox.distributed.fsdp")
)
LAUNCHERS = Registry(
    "launcher",
    modules=(
        "toolbox.launch.local",
        "toolbox.launch.torchrun",
        "toolbox.launch.slurm",
        "toolbox.launch.srun",
    ),
)
ENGINES = Registry("engine", modules=("toolbox.serving.engines",))
REWARDS = Registry("reward", modules=("toolbox.rewards",))
ADVANTAGES = Registry("advantage", modules=("toolbox.rl.advantages",))
EVALUATORS = Registry(
    "evaluator",
    modules=(
        "toolbox.eval.evaluators",
        "toolbox.eval.decision",
        "toolbox.eval.graph",
        "toolbox.eval.episodes",
        "toolbox.eval.tool_calls",
        "toolbox.eval.env_episodes",
        "toolbox.eval.harness.evaluators",
    ),
    renamed={"decision": "decision_metrics", "graph": "graph_metrics"},
)
EMBEDDERS = Registry("embedder", modules=("toolbox.memory.embedders",))
VECTOR_INDEXES = Registry("vector_index", modules=("toolbox.memory.index",))
ENVS = Registry("env", modules=("toolbox.rl.envs",))
TEXT_ENVS = Registry("text_env", modules=("toolbox.rl.text_envs",))
