"""Conversations rendered with the tokenizer's chat template, scored on the assistant's turns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import DATASETS
from toolbox.data.base import Example, Record
from toolbox.data.datasets.tokenized import TokenizedFactory

ASSISTANT = "assistant"


@DATASETS.register("chat")
class Chat(TokenizedFactory):
    """A list of {role, content} messages through ``apply_chat_template``; assistant turns scored.

    Tool-calling conversations in TRL's format work too: assistant turns with ``tool_calls``,
    ``role: tool`` replies, and the record's ``tools`` (a list or its JSON). They are rendered as
    ``toolbox serve`` renders them (``toolbox.data.hermes.calls.template_messages``): passed to a
    template that renders tools and calls itself, else written into the messages in the Hermes
    form the served model answers in (``<tools>`` system message, ``<tool_call>`` content).

    The conversation is rendered one turn at a time and each new piece of text is tokenized on its
    own, as at generation time: the text the template adds for an assistant turn beyond its
    generation prompt (the reply and its end-of-turn marker, eos for the tokenizers trained here)
    gets ``completion_mask`` 1, everything else 0. ``prompt_ids`` is the conversation up to the
    last assistant reply (with the generation prompt). Conversations longer than ``max_length``
    are skipped, with one warning per call counting them.

    ``last_turn_weight`` weights the loss on the last assistant turn's tokens (its reply and
    end-of-turn marker; in a tool-calling conversation the answer after the tool's reply): the
    examples then carry ``loss_weights`` (that weight there, 1.0 on the other tokens), which the
    ``pad`` and ``packing`` collators batch and the ``causal_lm`` loss multiplies into each scored
    token's cross entropy (the sum is still divided by the number of scored tokens). At 1.0 (the
    default) no weights are carried and the loss is the unweighted one, bit for bit.

    Args:
        tokenizer: the run's tokenizer (injected); it needs a chat template.
        max_length: the most tokens of a rendered conversation.
        field: the record field holding the list of messages.
        last_turn_weight: the loss weight of the last assistant turn's tokens (> 0).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        max_length: int = 512,
        field: str = "messages",
        last_turn_weight: float = 1.0,
    ) -> None:
        super().__init__(tokenizer, max_length)
        if not tokenizer.chat_template:
            raise DataError(
                "dataset 'chat' needs a tokenizer with a chat template; the char, bpe and pretrained "
                "tokenizers of toolbox provide one."
            )
        if not float(last_turn_weight) > 0:
            raise ConfigError(
                f"data.dataset.last_turn_weight: {last_turn_weight}; set a positive number "
                "(1.0 weighs the last assistant turn like every other scored token)."
            )
        self.field = field
        self.last_turn_weight = float(last_turn_weight)

    def render(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = False, tools: Any = None
    ) -> str:
        from toolbox.data.hermes.calls import template_messages  # as toolbox serve renders them

        messages, tools = template_messages(messages, tools, str(self.tokenizer.chat_template or ""))
        return self.tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    def __call__(self, records: Sequence[Record]) -> list[Example]:
        self.start()
        examples = []
        for i, record in enumerate(records):
            ids, mask, prompt_length = self.tokenize(self.messages(record, i), i, record_tools(record))
            if len(ids) > self.max_length:
                self.num_skipped += 1
                continue
            example = {
                **self.raw(record),
                "input_ids": ids,
                "completion_mask": mask,
                "prompt_ids": ids[:prompt_length],
            }
            if self.last_turn_weight != 1.0:
                example["loss_weights"] = last_turn_weights(ids, mask, prompt_length, self.last_turn_weight)
            examples.append(example)
        self.report(len(records), "conversation")
        return examples

    def tokenize(
        self, messages: list[dict[str, Any]], index: int, tools: Any = None
    ) -> tuple[list[int], list[int], int]:
        """(ids, completion mask, length of the prompt before the last assistant reply, or of all)."""
        ids: list[int] = []
        mask: list[int] = []
        done = ""
        prompt_length = 0

        def extend(text: str, scored: int) -> str:
            if not text.startswith(done):
                raise DataError(
                    f"record {index}: the tokenizer's chat template renders a conversation differently "
                    "from its first turns (a prefix changes as turns are added), so assistant turns "
                    "cannot be located; use a template that only appends text per turn."
                )
            new = self.encode(text[len(done) :])
            ids.extend(new)
            mask.extend([scored] * len(new))
            return text

        for k, message in enumerate(messages):
            if message["role"] == ASSISTANT:
                done = extend(self.render(messages[:k], add_generation_prompt=True, tools=tools), 0)
                prompt_length = len(ids)
                done = extend(self.render(messages[: k + 1], tools=tools), 1)
        extend(self.render(messages, tools=tools), 0)
        return ids, mask, prompt_length or len(ids)

    def messages(self, record: Record, index: int) -> list[dict[str, Any]]:
        messages = record.get(self.field)
        ok = (
            isinstance(messages, list)
            and messages
            and all(
                isinstance(m, dict)
                and isinstance(m.get("role"), str)
                and (isinstance(m.get("content"), str) or (m.get("content") is None and m.get("tool_calls")))
                for m in messages
            )
        )
        if not ok:
            raise DataError(
                f"record {index}: field '{self.field}' must be a non-empty list of "
                f"{{'role': str, 'content': str}} messages (an assistant turn may carry 'tool_calls' "
                f"instead of content; its keys: {', '.join(map(str, record))}); "
                "set data.dataset.field to the field holding them."
            )
        return messages


def last_turn_weights(ids: list[int], mask: list[int], prompt_length: int, weight: float) -> list[float]:
    """1.0 per token, ``weight`` on the scored tokens from ``prompt_length`` on (the last assistant turn)."""
    return [weight if k >= prompt_length and mask[k] else 1.0 for k in range(len(ids))]


def record_tools(record: Record) -> Any:
    """The record's ``tools`` (TRL's column: a list of function schemas, or that list as JSON)."""
    import json

    tools = record.get("tools")
    return json.loads(tools) if isinstance(tools, str) else tools
