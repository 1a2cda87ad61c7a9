"""Prefix caching (vLLM's automatic prefix caching, by whole finished sequences): a request whose
prompt starts with the tokens of a sequence that finished before reuses that sequence's keys and
values instead of prefilling them again.

Made for multi-turn rollouts (``rl/episodes.py``): an episode's next prompt is its previous prompt,
the reply the model sampled and the environment's answer, so all but the answer (and the reply's
last token, which was sampled but never run through the model) is cached already. Without this,
every turn prefills the whole conversation again.

When a completion finishes (a stop or its length; not an abort), the scheduler copies the keys and
values of its ``cache_len`` positions (prompt + completion but the last token) out of its slot into
an entry here, keyed by those tokens. When a request is admitted, the longest entry whose tokens are
a prefix of its prompt is taken out of the cache (an entry is used once, or once per completion that
finished with the same tokens: the conversation that continues it finishes into a longer entry),
copied into the request's slot, and only the rest of the prompt is prefilled after it
(``SlotRunner.extend``, or ``prefill_at`` for a long rest prefilled in chunks). Only a prompt that
extends an entry (is longer than its tokens) uses it: the same prompt asked again (an entry of a
one-token completion is its prompt) is prefilled afresh, so that it gives the same numbers whatever
finished before it (a GRPO round rolled out twice under the same weights gives the same log-probs,
tests/trainer/test_grpo_async.py).
The slot itself is freed when the completion finishes, as without the cache: entries are copies.

Bounded: entries hold at most ``budget_bytes`` of keys and values (``engine.prefix_cache_gib``); a
new entry evicts the least recently stored ones, and one larger than the budget is not kept. The
finished conversation of an episode stays until it is evicted or the weights change.

Weights: keys and values belong to the weights that computed them. Every entry carries the runner's
weights generation (``SlotRunner.generation``, bumped whenever the parameters changed); a lookup
under other weights empties the cache, and a completion whose weights changed while it ran is not
stored. So after a policy update (RL) the next round starts with an empty cache, as a fresh engine
(or a resumed run) does.

Numbers: a prefix restored and a rest prefilled after it give the numbers of prefilling the whole
prompt up to float rounding (as chunked prefill does; the cached completion's keys come from decode
steps), so greedy tokens are the same (tests/serving/engines/torch/test_prefix_cache.py). Sampling
stays deterministic for a fixed seed and history: whether a prompt hits depends only on the
requests that finished before it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(eq=False)
class CachedPrefix:
    """Keys and values ``[layers, 2, kv_heads, len(tokens), head_dim]`` of ``tokens``, computed under
    the runner's weights generation ``generation``."""

    tokens: tuple[int, ...]
    kv: torch.Tensor
    generation: int
    copies: int = 1  # completions that finished with these same tokens (each takes it once)

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()

    def usable(self, prompt_len: int) -> int:
        """Positions of this entry a prompt of ``prompt_len`` tokens starting with it reuses (its last
        token always runs)."""
        return min(len(self.tokens), prompt_len - 1)


class PrefixCache:
    """Finished sequences' keys and values by their tokens, at most ``budget_bytes`` of them."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.entries: OrderedDict[tuple[int, ...], CachedPrefix] = OrderedDict()
        self.lengths: dict[int, int] = {}  # entry length -> how many entries have it
        self.nbytes = 0
        self.generation = -1  # the weights generation of every entry held

    def __len__(self) -> int:
        return len(self.entries)

    def match(self, prompt: Sequence[int]) -> CachedPrefix | None:
        """The longest entry whose tokens begin ``prompt`` and are fewer (a continuation, not the same
        prompt again; None: none); it stays in the cache until ``take``."""
        for n in sorted(self.lengths, reverse=True):
            if n < len(prompt):
                entry = self.entries.get(tuple(prompt[:n]))
                if entry is not None:
                    return entry
        return None

    def take(self, entry: CachedPrefix) -> CachedPrefix:
        """Take ``entry`` (found by ``match``) out of the cache (one of its copies) and return it."""
        entry.copies -= 1
        if entry.copies == 0:
            self._remove(entry.tokens)
        return entry

    def put(self, tokens: Sequence[int], kv: torch.Tensor, generation: int) -> None:
        """Keep ``kv`` for ``tokens``, evicting the oldest entries to stay within the budget."""
        self.forget_other_weights(generation)
        entry = CachedPrefix(tuple(tokens), kv, generation)
        if entry.nbytes > self.budget_bytes or not entry.tokens:
            return
        held = self.entries.get(entry.tokens)
        if held is not None:  # another completion ended with the same tokens: one more taker
            held.copies += 1
            self.entries.move_to_end(entry.tokens)
            return
        while self.entries and self.nbytes + entry.nbytes > self.budget_bytes:
            self._remove(next(iter(self.entries)))
        self.entries[entry.tokens] = entry
        self.lengths[len(entry.tokens)] = self.lengths.get(len(entry.tokens), 0) + 1
        self.nbytes += entry.nbytes

    def forget_other_weights(self, generation: int) -> None:
        """Under weights ``generation`` from now on: the entries of other weights are dropped (every
        entry held was stored under ``self.generation``)."""
        if generation != self.generation:
            self.clear()
            self.generation = generation

    def clear(self) -> None:
        self.entries.clear()
        self.lengths.clear()
        self.nbytes = 0

    def _remove(self, tokens: tuple[int, ...]) -> None:
        entry = self.entries.pop(tokens)
        self.nbytes -= entry.nbytes
        left = self.lengths[len(tokens)] - 1
        if left:
            self.lengths[len(tokens)] = left
        else:
            del self.lengths[len(tokens)]
