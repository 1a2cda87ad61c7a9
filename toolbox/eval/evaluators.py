"""Evaluators: ``evaluator(parts) -> {"eval/<metric>": value}`` over the held-out split.

They run inside training (every ``trainer.eval_every`` steps) and in ``toolbox eval``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from toolbox.core.registries import EVALUATORS

if TYPE_CHECKING:
    from toolbox.experiment.build import Components


@EVALUATORS.register("perplexity")
class Perplexity:
    """Mean loss of the objective over the held-out examples, and its exponential.

    A run whose examples are not token sequences (``prompt_only`` for GRPO, preference pairs) is
    scored on its held-out records' reference answers instead: the completion-only cross entropy
    of ``completion`` (else ``chosen``) after the prompt, formatted as ``prompt_completion`` does.

    Args:
        batch_size: examples per forward pass.
        max_examples: evaluate on the first this many examples (None: all).
    """

    def __init__(self, batch_size: int = 64, max_examples: int | None = None) -> None:
        self.batch_size = batch_size
        self.max_examples = max_examples

    def __call__(self, parts: Components) -> dict[str, float]:
        examples, objective, collator = parts.eval_data, parts.objective, parts.collator
        if len(examples) and "input_ids" not in examples[0] and "prompt_ids" in examples[0]:
            examples, objective, collator = _reference_answers(parts, self.max_examples)
        examples = examples[: self.max_examples] if self.max_examples else examples
        device = parts.strategy.device
        loss_sum, items, correct = 0.0, 0, 0.0
        for start in range(0, len(examples), self.batch_size):
            batch = collator(list(examples[start : start + self.batch_size]))
            batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
            with parts.precision.autocast():
                out = objective(parts.model, batch)
            loss_sum += float(out.loss_sum)
            items += out.num_items
            correct += out.metrics.get("correct", 0.0)
        loss = loss_sum / max(items, 1)
        return {
            "eval/loss": loss,
            "eval/perplexity": math.exp(min(loss, 50.0)),
            f"eval/{objective.accuracy_name}": correct / max(items, 1),
        }


def _reference_answers(parts: Components, max_examples: int | None) -> tuple[list, Any, Any]:
    """LM examples (bos + prompt + reference answer + eos), the causal LM loss and the pad collator,
    for a run whose own examples hold no answer tokens."""
    from toolbox.core.errors import ConfigError
    from toolbox.data.collators.pad import PadCollator
    from toolbox.data.datasets.prompt_completion import PromptCompletion
    from toolbox.objectives.supervised import CausalLMLoss

    records = parts.test_records[:max_examples] if max_examples else parts.test_records
    field = next((f for f in ("completion", "chosen") if len(records) and f in records[0]), None)
    if field is None:
        raise ConfigError(
            "eval.perplexity: the held-out records have no reference answer ('completion' or 'chosen') "
            "to score; remove the evaluator with eval.perplexity=null."
        )
    examples = PromptCompletion(parts.tokenizer, max_length=1 << 20, completion_field=field)(records)
    return examples, CausalLMLoss(), PadCollator(parts.tokenizer)


@EVALUATORS.register("exact_match")
class ExactMatch:
    """Greedy generation from each held-out prompt; the fraction whose output equals the reference.

    Outputs and references are compared after stripping whitespace. After each call,
    ``last_failures`` holds the examples it got wrong (``prompt``, ``reference``, ``output``), for
    callbacks such as the memory writer.

    Args:
        max_new_tokens: tokens generated per prompt.
        batch_size: prompts generated together (left-padded).
        max_examples: evaluate on the first this many examples (None: all).
        prompt_field: raw field holding the prompt.
        reference_field: raw field holding the expected output.
    """

    def __init__(
        self,
        max_new_tokens: int = 16,
        batch_size: int = 64,
        max_examples: int | None = None,
        prompt_field: str = "prompt",
        reference_field: str = "completion",
    ) -> None:
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.max_examples = max_examples
        self.prompt_field = prompt_field
        self.reference_field = reference_field
        self.last_failures: list[dict[str, str]] = []

    def __call__(self, parts: Components) -> dict[str, float]:
        from toolbox.eval.generation import greedy_generate

        records = parts.test_records[: self.max_examples] if self.max_examples else parts.test_records
        prompts = [r[self.prompt_field] for r in records]
        outputs = greedy_generate(
            parts.strategy.unwrap(parts.model),
            parts.tokenizer,
            prompts,
            self.max_new_tokens,
            self.batch_size,
            parts.strategy.device,
        )
        correct = [
            o.strip() == str(r[self.reference_field]).strip() for o, r in zip(outputs, records, strict=True)
        ]
        # what a tracing callback records of this evaluation (prompt, output, reference, correct), and
        # what the memory writer keeps of it (the failures)
        self.last_generations = [
            {"prompt": p, "output": o, "reference": str(r[self.reference_field]), "correct": c}
            for p, o, r, c in zip(prompts, outputs, records, correct, strict=True)
        ]
        self.last_failures = [
            {"prompt": g["prompt"], "reference": g["reference"], "output": g["output"]}
            for g in self.last_generations
            if not g["correct"]
        ]
        return {"eval/exact_match": sum(correct) / max(len(records), 1)}
