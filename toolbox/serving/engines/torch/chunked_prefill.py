"""Chunked prefill (vLLM's ``--enable-chunked-prefill``): a prompt longer than the chunk budget is
prefilled a chunk per scheduler iteration, between the decode steps of the running batch, so that
one long prompt arriving delays the token streams already running by about one chunk's time per
step instead of stalling them for the whole prompt.

The scheduler (``scheduler.py``) keeps at most one ``PartialPrefill`` at a time, first come first
served. The long prompt's keys and values are written into a slot reserved at the top of the slot
range (``slot``: ``max_batch_size - n``; the running batch, packed at ``0 .. B-1``, is never let
grow into it); each iteration ``step`` runs the next chunk through ``SlotRunner.prefill_at``. After
the last chunk the request's ``n`` completions join the running batch: the cached prompt is copied
into their slots and each samples its first token from the returned logits, as after an unchunked
prefill. Short prompts (at most a chunk's worth of padded tokens per iteration) are still admitted
beside the chunks, so a small request arriving behind a long one waits an iteration, not the long
prompt's whole prefill.

When the current long prompt's last chunk leaves part of the budget, the next long prompt waiting
starts in it, in the same iteration (``_next`` in the scheduler: its slot is reserved beside the
current one's, whose completions are copied out first), so a queue of long prompts uses every
iteration's whole budget. Chunk boundaries thus depend on what came before; the numbers agree with
a one-forward prefill up to float rounding, as a batched prefill's already do (greedy tokens are
the same: tests/serving/engines/torch/test_chunked_prefill.py). Weights updated between two chunks
(``update_weights``) apply from the next chunk on: the chunks cached before keep the keys and
values of the old weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(eq=False)
class PartialPrefill:
    """A long prompt being prefilled: ``done`` of its tokens are cached in ``slot``."""

    request: Any  # the scheduler's _Request
    slot: int
    done: int = 0

    @property
    def prompt(self) -> list[int]:
        return self.request.prompt

    @property
    def remaining(self) -> int:
        return len(self.prompt) - self.done

    def next_len(self, chunk_tokens: int) -> int:
        """Tokens the next ``step`` runs."""
        return min(chunk_tokens, self.remaining)

    def step(self, runner: Any, chunk_tokens: int) -> torch.Tensor | None:
        """Prefill the next chunk; the last prompt token's logits ``[1, V]`` once the prompt is
        cached whole, else None."""
        if self.done == 0:  # grow the cache once for the whole prompt, not by doubling chunk by chunk
            runner.ensure_capacity(len(self.prompt))
        end = self.done + self.next_len(chunk_tokens)
        logits = runner.prefill_at(self.slot, self.prompt[self.done : end], self.done)
        self.done = end
        return logits if self.remaining == 0 else None


def is_long(prompt_len: int, chunk_tokens: int | None) -> bool:
    """Whether a prompt of ``prompt_len`` tokens is prefilled in chunks (``None``: chunking off)."""
    return chunk_tokens is not None and prompt_len > chunk_tokens
