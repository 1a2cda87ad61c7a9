"""Decision training data: each labelled record becomes the readout prompts of some option orders.

The ``decision`` dataset factory renders a record (a state, a question, its options, the label) the
way ``DecisionReader`` reads it: the options in a base order (the order given, or a seeded shuffle),
then ``rotations`` cyclic shifts of it, each prompt tokenized as the reader tokenizes it. The
``decision`` collator stacks them into one right-padded batch of ``B * R`` rows; the decision
objectives (``toolbox.decision.objectives``) read the label tokens at each row's last position.

With ``hints`` each row also records where each option's text starts (``option_pos``): the
auxiliary targets of ``decision_ce`` (``hint_weight``, ``bind_weight``) read there.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Literal

import torch

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import COLLATORS, DATASETS
from toolbox.data.base import Example, Record
from toolbox.decision.calibrate import cyclic_shifts
from toolbox.decision.prompt import (
    DEFAULT_SYSTEM,
    PromptFormat,
    render_state,
    resolve_labels,
    rotation_prompt,
)
from toolbox.decision.question import Question

RAW_FIELDS = ("text", "label", "options", "question")


@DATASETS.register("decision")
class DecisionDataset:
    """Records {state, question, options, label} -> the token ids of R option orders each.

    Example keys: ``rotation_ids`` (R lists of token ids), ``label_ids`` (R x K: the label token of
    each position), ``perms`` (R x K: the option at each position), ``target`` (the label's option
    index), plus the record's raw fields (``text``, ``label``, ``options``, ``question``).

    Args:
        tokenizer: the run's tokenizer (injected); it needs a chat template (``prompt_format=chat``).
        state_field: the record field holding the state (text, or chat messages).
        options_field: the record field holding the options (a list of strings).
        label_field: the record field holding the label: an option index or the option itself.
        question_field: the record field holding the question text.
        question: the question text when records have none.
        rotations: cyclic shifts of the base order per record (1: the base order alone; null: all K).
        order: the base order: "shuffle" (a seeded shuffle of the options), "turn" (the order
            given or its reverse, cyclically shifted: a seeded one of these 2K listings) or "given".
        first_bias: probability that the base order puts the labelled option first: a planted
            position bias (the examples train a biased model with it, then remove the bias).
        system: the readout's system message.
        prompt_format: "chat" (the tokenizer's chat template) or "plain".
        max_length: a prompt longer than this is a DataError.
        seed: seed of the shuffles.
        repeats: each record becomes this many examples, each with its own base order (drawn
            independently, ``first_bias`` applied to each): more option orders per message
            without spreading the label over every position as ``rotations`` does.
        hints: also record ``option_pos`` (R x K: the row position of the first token of the option
            shown at position j), which ``decision_ce``'s auxiliary targets need.
    """

    def __init__(
        self,
        tokenizer: Any,
        state_field: str = "text",
        options_field: str = "options",
        label_field: str = "label",
        question_field: str = "question",
        question: str = "Which option applies?",
        rotations: int | None = 1,
        order: Literal["shuffle", "turn", "given"] = "shuffle",
        first_bias: float = 0.0,
        system: str = DEFAULT_SYSTEM,
        prompt_format: PromptFormat = "chat",
        max_length: int = 1024,
        seed: int = 0,
        repeats: int = 1,
        hints: bool = False,
    ) -> None:
        if rotations is not None and rotations < 1:
            raise ConfigError(f"data.dataset.rotations: {rotations}; use 1 or more (null: all K).")
        if order not in ("shuffle", "turn", "given"):
            raise ConfigError(f"data.dataset.order: {order!r}; use shuffle, turn or given.")
        if repeats < 1:
            raise ConfigError(f"data.dataset.repeats: {repeats}; use 1 or more.")
        if not 0.0 <= first_bias <= 1.0:
            raise ConfigError(f"data.dataset.first_bias: {first_bias}; use a probability in [0, 1].")
        self.tokenizer = tokenizer
        self.fields = (state_field, options_field, label_field, question_field)
        self.question = question
        self.rotations = rotations
        self.order = order
        self.first_bias = first_bias
        self.system = system
        self.prompt_format = prompt_format
        self.max_length = max_length
        self.seed = seed
        self.hints = hints
        self.repeats = repeats
        self._labels: dict[tuple, tuple[list[str], list[int]]] = {}

    def _record(self, record: Record, index: int) -> tuple[str, Question, int]:
        state_field, options_field, label_field, question_field = self.fields
        for key in (state_field, options_field, label_field):
            if key not in record:
                raise DataError(
                    f"record {index} has no field '{key}' (its keys: {', '.join(map(str, record))}); "
                    "set data.dataset.state_field / options_field / label_field to the fields holding them."
                )
        q = Question.choice(str(record.get(question_field) or self.question), list(record[options_field]))
        label = record[label_field]
        target = q.options.index(label) if isinstance(label, str) and label in q.options else label
        if not isinstance(target, int) or not 0 <= target < q.k:
            raise DataError(
                f"record {index}: label {label!r} is neither an option nor an index in [0, {q.k})."
            )
        return render_state(record[state_field]), q, target

    def _base_order(self, k: int, target: int, rng: random.Random) -> list[int]:
        first = bool(self.first_bias) and rng.random() < self.first_bias
        if self.order == "turn":
            listing = list(range(k)) if rng.random() < 0.5 else list(range(k))[::-1]
            start = listing.index(target) if first else rng.randrange(k)
            return listing[start:] + listing[:start]
        base = list(range(k))
        if self.order == "shuffle":
            rng.shuffle(base)
        if first:
            base.remove(target)
            base.insert(0, target)
        return base

    def __call__(self, records: Sequence[Record]) -> list[Example]:
        rng = random.Random(self.seed)
        examples = []
        for index, record in [(i, r) for _ in range(self.repeats) for i, r in enumerate(records)]:
            state, q, target = self._record(record, index)
            base = self._base_order(q.k, target, rng)
            key = (q.kind, q.k)
            if key not in self._labels:
                self._labels[key] = resolve_labels(self.tokenizer, q)
            perms = [[base[i] for i in shift] for shift in cyclic_shifts(q.k, self.rotations)]
            rows, label_ids, option_pos = [], [], []
            for perm in perms:
                prompt, ids = rotation_prompt(
                    self.tokenizer, state, q, perm, self._labels[key], self.system, self.prompt_format
                )
                tokens = self.tokenizer.encode(prompt.text, add_special_tokens=False)
                if len(tokens) > self.max_length:
                    raise DataError(
                        f"record {index}: the decision prompt has {len(tokens)} tokens, more than "
                        f"data.dataset.max_length={self.max_length}; raise it"
                    )
                rows.append(tokens)
                label_ids.append(ids)
                if self.hints:
                    option_pos.append(
                        self._option_positions(prompt.text, q, perm, self._labels[key][0], index)
                    )
            example = {
                **{k: record[k] for k in RAW_FIELDS if k in record},
                "rotation_ids": rows,
                "label_ids": label_ids,
                "perms": perms,
                "target": target,
            }
            if self.hints:
                example["option_pos"] = option_pos
            examples.append(example)
        return examples

    def _option_positions(
        self, text: str, q: Question, perm: list[int], labels: list[str], index: int
    ) -> list[int]:
        """Token index of the first character of each listed option's text (position order)."""
        offsets = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)[
            "offset_mapping"
        ]
        positions, at = [], 0
        for j, i in enumerate(perm):
            line = f"\n{labels[j]}. {q.options[i]}"
            found = text.find(line, at)
            if found < 0:
                raise DataError(f"record {index}: option line {line.strip()!r} not found in its prompt")
            char = found + len(line) - len(q.options[i])
            token = next((t for t, (a, b) in enumerate(offsets) if a <= char < b), None)
            if token is None:
                raise DataError(f"record {index}: no token covers option {q.options[i]!r} in its prompt")
            positions.append(token)
            at = found + len(line)
        return positions


@COLLATORS.register("decision_batch")
class DecisionCollator:
    """``decision`` examples -> one right-padded batch of their rotations (B items x R rows).

    Batch keys: ``input_ids`` / ``attention_mask`` ``[B*R, T]`` (item-major), ``last`` ``[B*R]`` (each
    row's last token), ``label_ids`` ``[B*R, K]``, ``perms`` ``[B, R, K]``, ``target`` ``[B]``, and
    ``teacher`` ``[B, K]`` when the examples carry a teacher distribution, ``option_pos`` ``[B*R, K]``
    when they carry option positions (``hints``).

    Args:
        tokenizer: the run's tokenizer (injected); its pad token fills the padding.
    """

    def __init__(self, tokenizer: Any) -> None:
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else tokenizer.eos_token_id

    def __call__(self, examples: Sequence[Example]) -> dict[str, torch.Tensor]:
        if not examples or "rotation_ids" not in examples[0]:
            raise DataError(
                "collator 'decision_batch' needs examples of the 'decision' dataset (data.dataset.name=decision)."
            )
        shapes = {(len(ex["perms"]), len(ex["perms"][0])) for ex in examples}
        if len(shapes) != 1:
            raise DataError(
                f"collator 'decision_batch': a batch mixes (rotations, options) shapes {sorted(shapes)}; give every "
                "record the same number of options, or use batch_size 1"
            )
        rows = [r for ex in examples for r in ex["rotation_ids"]]
        t = max(len(r) for r in rows)
        ids = torch.full((len(rows), t), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), t), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, : len(r)] = 1
        batch = {
            "input_ids": ids,
            "attention_mask": mask,
            "last": torch.tensor([len(r) - 1 for r in rows], dtype=torch.long),
            "label_ids": torch.tensor([lab for ex in examples for lab in ex["label_ids"]], dtype=torch.long),
            "perms": torch.tensor([ex["perms"] for ex in examples], dtype=torch.long),
            "target": torch.tensor([ex["target"] for ex in examples], dtype=torch.long),
        }
        if "option_pos" in examples[0]:
            batch["option_pos"] = torch.tensor(
                [pos for ex in examples for pos in ex["option_pos"]], dtype=torch.long
            )
        if "teacher" in examples[0]:
            batch["teacher"] = torch.tensor([ex["teacher"] for ex in examples], dtype=torch.float32)
        return batch
