"""The readout prompt: a state and a question, with the options in one order, rendered for a model.

The layout is AnyJev's (``anyjev.readout.build_prompt``, 0.3.0), so that our distributions equal
its on the same model: a system line asking for the label only, then ``State:``, the state,
``Question:``, and the option lines. Everything up to the option lines is the same in every
rotation of one (state, question): that is the *prefix* the rotations share, prefilled once.

Answer labels: letters for choice, ``Yes``/``No`` for yes/no, digits for score (letters when a
tokenizer does not have every digit label as one token). Each label must be exactly one token: the
decision reads that token's log-probability at the answer position.
"""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from toolbox.core.errors import ToolboxError
from toolbox.decision.question import Question

LETTERS = string.ascii_uppercase
DEFAULT_SYSTEM = (
    "You are a decision function. You will be given a state and one question. "
    "Reply with the answer label only: no words, no punctuation, no explanation."
)
# an invisible separator put inside the user message to find where the rotation-specific part of
# the rendered prompt starts; chat templates pass message content through untouched
SPLIT_MARK = "\u2063TOOLBOX_SPLIT\u2063"

PromptFormat = Literal["chat", "plain"]


class LabelTokenError(ToolboxError, ValueError):
    """An answer label is not exactly one token for the tokenizer (or two labels share a token)."""


class ChatTemplateError(ToolboxError, ValueError):
    """The readout needs a chat template the tokenizer does not have."""


def render_state(state: Any) -> str:
    """A state as text: strings as they are, chat messages as ``role: content`` lines, else JSON."""
    if state is None:
        return ""
    if isinstance(state, str):
        return state
    if (
        isinstance(state, list)
        and state
        and all(isinstance(m, dict) and "role" in m and "content" in m for m in state)
    ):
        return "\n".join(f"{m['role']}: {m['content']}" for m in state)
    try:
        return json.dumps(state, indent=2, ensure_ascii=False, default=str)
    except TypeError:
        return str(state)


def answer_labels(question: Question) -> list[str]:
    """The label strings the model answers with (positional for choice and score)."""
    if question.kind == "yes_no":
        return ["Yes", "No"]
    if question.kind == "score":
        return [str(i + 1) for i in range(question.k)]
    return list(LETTERS[: question.k])


def label_token_ids(tokenizer: Any, labels: Sequence[str]) -> list[int]:
    """The one token id of each label (the bare string, else with a leading space)."""
    ids = []
    for label in labels:
        found = None
        for candidate in (label, " " + label):
            tokens = tokenizer.encode(candidate, add_special_tokens=False)
            if len(tokens) == 1:
                found = tokens[0]
                break
        if found is None:
            raise LabelTokenError(
                f"answer label {label!r} is not one token for this tokenizer (it encodes to "
                f"{tokenizer.encode(label, add_special_tokens=False)}); a decision reads one token per "
                "option: use a tokenizer whose vocabulary has the label as a token (byte-level BPE has "
                "every letter), or fewer options (score falls back to letters when digits are not tokens)"
            )
        ids.append(found)
    if len(set(ids)) != len(ids):
        raise LabelTokenError(
            f"answer labels share tokens {dict(zip(labels, ids, strict=True))}; use another tokenizer"
        )
    return ids


def resolve_labels(tokenizer: Any, question: Question) -> tuple[list[str], list[int]]:
    """(labels, their token ids): digits for a score fall back to letters if not all are tokens."""
    labels = answer_labels(question)
    try:
        return labels, label_token_ids(tokenizer, labels)
    except LabelTokenError:
        if question.kind != "score":
            raise
        letters = list(LETTERS[: question.k])
        return letters, label_token_ids(tokenizer, letters)


def positional(question: Question) -> bool:
    """Labels name positions (A = the option shown first); yes/no labels name the options."""
    return question.kind != "yes_no"


def ids_in_position_order(question: Question, ids: Sequence[int], perm: Sequence[int]) -> list[int]:
    """Token ids such that entry j is the label of the option shown at position j."""
    return list(ids) if positional(question) else [ids[i] for i in perm]


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt: ``prefix`` is shared by every rotation of one (state, question)."""

    prefix: str
    suffix: str

    @property
    def text(self) -> str:
        return self.prefix + self.suffix


def user_message(
    state_text: str, question: Question, perm: Sequence[int], labels: Sequence[str]
) -> tuple[str, str]:
    """(shared part, rotation part) of the user message; ``perm[j]`` is the option shown at position j."""
    head = ["State:", state_text if state_text else "(empty)", "", f"Question: {question.text}"]
    tail = []
    if question.kind == "yes_no":
        order = [labels[i] for i in perm]
        tail.append(f"Answer {order[0]} or {order[1]}.")
    elif question.kind == "score":
        if question.described:
            head.append("Pick the level that applies (the levels are ordered):")
        else:
            lo, hi = question.scale
            head.append(f"Answer on a scale from {lo:g} to {hi:g} by picking the closest bin:")
        tail += [f"{labels[j]}. {question.options[i]}" for j, i in enumerate(perm)]
        tail.append("Answer with the number only." if labels[0].isdigit() else "Answer with the letter only.")
    else:
        head.append("Options:")
        tail += [f"{labels[j]}. {question.options[i]}" for j, i in enumerate(perm)]
        tail.append("Answer with the letter only.")
    return "\n".join(head) + "\n", "\n".join(tail)


def render(
    tokenizer: Any,
    system: str,
    user: tuple[str, str],
    prompt_format: PromptFormat = "chat",
) -> Prompt:
    """The prompt as the model reads it, split where the rotation-specific part starts.

    ``chat``: the tokenizer's chat template with the generation prompt (an error if it has none);
    ``plain``: ``system``, a blank line, the user message and ``Answer:`` (AnyJev's fallback).
    """
    shared, rotated = user
    if prompt_format == "plain":
        return Prompt(f"{system}\n\n{shared}", f"{rotated}\nAnswer:")
    if prompt_format != "chat":
        raise ValueError(f"prompt_format={prompt_format!r}: use 'chat' or 'plain'")
    if not getattr(tokenizer, "chat_template", None):
        raise ChatTemplateError(
            "the tokenizer has no chat template, and the decision prompt is a chat (system + user, "
            "then the assistant's answer): set tokenizer.chat_template to the model's template, or read "
            "with prompt_format='plain' (system, user message, 'Answer:')"
        )
    marked = _chat(tokenizer, system, shared + SPLIT_MARK + rotated)
    if marked.count(SPLIT_MARK) != 1:  # a template that rewrites content: no shared prefix
        return Prompt(_chat(tokenizer, system, shared + rotated), "")
    prefix, suffix = marked.split(SPLIT_MARK)
    return Prompt(prefix, suffix)


def _chat(tokenizer: Any, system: str, user: str) -> str:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    try:
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
    except TypeError:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def rotation_prompt(
    tokenizer: Any,
    state_text: str,
    question: Question,
    perm: Sequence[int],
    labels: tuple[list[str], list[int]],
    system: str = DEFAULT_SYSTEM,
    prompt_format: PromptFormat = "chat",
) -> tuple[Prompt, list[int]]:
    """The prompt of one rotation (``perm[j]``: the option at position j) and its label ids by position.

    ``labels`` is ``resolve_labels(tokenizer, question)`` (resolved once per question shape)."""
    names, ids = labels
    message = user_message(state_text, question, perm, names)
    return render(tokenizer, system, message, prompt_format), ids_in_position_order(question, ids, perm)
