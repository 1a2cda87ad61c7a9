"""Logits processing and sampling for a batch whose rows have their own sampling parameters.

One step of generation turns the model's next-token logits ``[B, V]`` into ``B`` tokens:

0. ``logit_bias`` (added to the named token ids' logits), then the allowed-token mask of a row under
   constrained decoding (``structured.py``: every other token gets -inf);
1. repetition penalty (HF semantics: a seen token's logit is divided by the penalty when positive,
   multiplied when negative; "seen" = prompt + generated so far), then OpenAI's presence and
   frequency penalties over the generated tokens (``logit -= presence * [count > 0] + frequency *
   count``, as OpenAI documents and vLLM implements);
2. temperature (``0`` means greedy: the row takes the argmax and skips the rest);
3. top-k, then top-p (the smallest set of tokens whose probability reaches ``top_p``), then min-p
   (drop tokens less likely than ``min_p`` times the most likely one);
4. a draw from the remaining distribution. A row with a ``seed`` draws from its own
   ``torch.Generator``, so its output does not depend on what else is in the batch.

The draw uses the exponential race ``argmax(p / E)``, ``E ~ Exp(1)`` i.i.d., which picks token ``i``
with probability ``p_i`` and lets each row take its noise from its own generator.

Log-probs (``token_logprobs``) are ``log_softmax`` of the raw logits by default (what vLLM returns),
or of the processed logits; ``logprobs_and_top`` adds the ``k`` most likely tokens of each row (only
computed for a batch in which some row asks for them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from toolbox.serving.engine import SamplingParams

#: no vocabulary is larger: a bigger top_k is this one (every token kept)
MAX_TOP_K = 2**31 - 1


def make_generator(seed: int | None, device: str | torch.device = "cpu") -> torch.Generator | None:
    """A generator seeded with ``seed`` (``None``: no generator, the draw uses the engine's)."""
    if seed is None:
        return None
    g = torch.Generator(device=device)
    g.manual_seed(int(seed) % 2**63)
    return g


@dataclass
class SamplingTensors:
    """The sampling parameters of a batch, one row per sequence, as tensors."""

    temperature: torch.Tensor  # [B] float; 0 = greedy
    top_k: torch.Tensor  # [B] long; 0 = off
    top_p: torch.Tensor  # [B] float; 1 = off
    min_p: torch.Tensor  # [B] float; 0 = off
    repetition_penalty: torch.Tensor  # [B] float; 1 = off
    presence_penalty: torch.Tensor  # [B] float; 0 = off
    frequency_penalty: torch.Tensor  # [B] float; 0 = off
    # (rows, token ids, biases): every row's logit_bias, flattened (one index_put a step, not one op
    # per row: 64 rows with a stop-token bias cost 0.13 ms a step that way); None: no row has one
    logit_bias: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None
    greedy: torch.Tensor  # [B] bool
    all_greedy: bool
    any_top_k: bool
    any_top_p: bool
    any_min_p: bool
    any_penalty: bool
    any_output_penalty: bool  # presence or frequency penalty on some row
    any_logprobs: bool
    max_top_logprobs: int  # the largest top_logprobs of a row that asks for logprobs; 0 = none

    @classmethod
    def from_params(
        cls, params: Sequence[SamplingParams], device: str | torch.device = "cpu"
    ) -> SamplingTensors:
        check_params(params)
        temperature = torch.tensor([float(p.temperature) for p in params], dtype=torch.float32, device=device)
        # a top_k past any vocabulary keeps every token, as apply_top_k's clamp does; capped here
        # so that one (2**64 from a client) fits a long and cannot fail the whole batch's step
        top_k = torch.tensor([min(int(p.top_k), MAX_TOP_K) for p in params], dtype=torch.long, device=device)
        top_p = torch.tensor([float(p.top_p) for p in params], dtype=torch.float32, device=device)
        min_p = torch.tensor([float(p.min_p) for p in params], dtype=torch.float32, device=device)
        penalty = torch.tensor(
            [float(p.repetition_penalty) for p in params], dtype=torch.float32, device=device
        )
        presence = torch.tensor(
            [float(p.presence_penalty) for p in params], dtype=torch.float32, device=device
        )
        frequency = torch.tensor(
            [float(p.frequency_penalty) for p in params], dtype=torch.float32, device=device
        )
        biased = [(row, int(token), float(value)) for row, p in enumerate(params)
                  for token, value in (p.logit_bias or {}).items()]  # fmt: skip
        bias = None
        if biased:
            rows, tokens, values = zip(*biased, strict=True)
            bias = (
                torch.tensor(rows, dtype=torch.long, device=device),
                torch.tensor(tokens, dtype=torch.long, device=device),
                torch.tensor(values, dtype=torch.float32, device=device),
            )
        greedy = temperature <= 0
        return cls(
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            repetition_penalty=penalty,
            presence_penalty=presence,
            frequency_penalty=frequency,
            logit_bias=bias,
            greedy=greedy,
            all_greedy=bool(greedy.all()),
            **_flags(params),
        )

    def select(self, rows: Sequence[int], params: Sequence[SamplingParams]) -> SamplingTensors:
        """The rows ``rows`` of this batch (the running batch after some completions finished);
        ``params[j]`` is row ``rows[j]``'s. The values ``from_params(params)`` builds, taken by
        indexing the tensors instead of rebuilding them from Python lists (at the tiny GRPO size,
        0.05 ms a decode step instead of 0.25). A batch with a ``logit_bias`` is rebuilt."""
        if self.logit_bias is not None:
            return SamplingTensors.from_params(params, device=self.temperature.device)
        idx = torch.tensor(rows, dtype=torch.long, device=self.temperature.device)
        greedy = self.greedy[idx]
        return SamplingTensors(
            temperature=self.temperature[idx],
            top_k=self.top_k[idx],
            top_p=self.top_p[idx],
            min_p=self.min_p[idx],
            repetition_penalty=self.repetition_penalty[idx],
            presence_penalty=self.presence_penalty[idx],
            frequency_penalty=self.frequency_penalty[idx],
            logit_bias=None,
            greedy=greedy,
            all_greedy=bool(greedy.all()),
            **_flags(params),
        )


def _flags(params: Sequence[SamplingParams]) -> dict[str, bool | int]:
    """The batch-wide switches of ``SamplingTensors`` (which processing steps some row needs; but
    ``all_greedy``, read from the tensor); rows of one request share its parameters object, looked at once."""
    params = list({id(p): p for p in params}.values())
    return {
        "any_top_k": any(p.top_k > 0 for p in params),
        "any_top_p": any(p.top_p < 1.0 for p in params),
        "any_min_p": any(p.min_p > 0.0 for p in params),
        "any_penalty": any(p.repetition_penalty != 1.0 for p in params),
        "any_output_penalty": any(p.presence_penalty != 0.0 or p.frequency_penalty != 0.0 for p in params),
        "any_logprobs": any(p.logprobs for p in params),
        "max_top_logprobs": max((p.top_logprobs for p in params if p.logprobs), default=0),
    }


MAX_PENALTY = 2.0  # OpenAI's range of presence_penalty and frequency_penalty: [-2, 2]
MAX_LOGIT_BIAS = 100.0  # and of a logit_bias value: [-100, 100]


def check_params(params: Sequence[SamplingParams], vocab_size: int | None = None) -> None:
    """Reject values no sampler can honour, naming the parameter (a server answers 400).

    With ``vocab_size``, ``logit_bias`` keys must be token ids of the vocabulary."""
    for p in params:
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(p, name)
            if not -MAX_PENALTY <= value <= MAX_PENALTY:  # also refuses NaN
                raise ValueError(f"{name} must be in [-2, 2], got {value}")
        for token, bias in p.logit_bias.items():
            if not isinstance(token, int) or token < 0 or (vocab_size is not None and token >= vocab_size):
                raise ValueError(
                    f"logit_bias: {token!r} is not a token id of this model's vocabulary "
                    f"(0..{vocab_size - 1 if vocab_size else 'vocab size - 1'})"
                )
            if not -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS:
                raise ValueError(f"logit_bias[{token}] must be in [-100, 100], got {bias}")
        if p.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {p.temperature}")
        if not 0.0 < p.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {p.top_p}")
        if p.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {p.top_k}")
        if not 0.0 <= p.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {p.min_p}")
        if p.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {p.repetition_penalty}")
        if p.n < 1:
            raise ValueError(f"n must be >= 1, got {p.n}")
        if p.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {p.max_tokens}")
        if p.top_logprobs < 0:
            raise ValueError(f"top_logprobs must be >= 0, got {p.top_logprobs}")


# the processors -----------------------------------------------------------------------------------
def apply_repetition_penalty(
    logits: torch.Tensor, history: Sequence[Sequence[int] | None], penalty: torch.Tensor
) -> torch.Tensor:
    """HF's repetition penalty over the tokens in ``history[i]`` (prompt + generated) of each row."""
    out = logits.clone()
    for i, ids in enumerate(history):
        p = float(penalty[i])
        if p == 1.0 or not ids:
            continue
        idx = torch.tensor(sorted(set(ids)), dtype=torch.long, device=logits.device)
        seen = out[i, idx]
        out[i, idx] = torch.where(seen > 0, seen / p, seen * p)
    return out


def apply_output_penalties(
    logits: torch.Tensor,
    outputs: Sequence[Sequence[int] | None],
    presence: torch.Tensor,
    frequency: torch.Tensor,
) -> torch.Tensor:
    """OpenAI's presence and frequency penalties: ``logit[t] -= presence * [c_t > 0] + frequency * c_t``
    with ``c_t`` the count of token ``t`` among the row's generated tokens ``outputs[i]``."""
    counts = torch.zeros_like(logits)
    rows = [i for i, ids in enumerate(outputs) if ids]
    if not rows:
        return logits
    row_idx = torch.cat(
        [torch.full((len(outputs[i]),), i, dtype=torch.long) for i in rows]  # type: ignore[arg-type]
    ).to(logits.device)
    tok_idx = torch.tensor([t for i in rows for t in outputs[i]], dtype=torch.long, device=logits.device)  # type: ignore[union-attr]
    counts.index_put_((row_idx, tok_idx), torch.ones_like(tok_idx, dtype=logits.dtype), accumulate=True)
    return logits - frequency.unsqueeze(1) * counts - presence.unsqueeze(1) * (counts > 0).to(logits.dtype)


def apply_logit_bias(
    logits: torch.Tensor, bias: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None
) -> torch.Tensor:
    """Add each row's ``logit_bias`` values to its named token ids (``SamplingTensors.logit_bias``:
    a (row, token) pair appears once, so each logit gets one addition, as ``out[row, ids] += v``)."""
    if bias is None:
        return logits
    rows, ids, values = bias
    out = logits.clone()
    out.index_put_((rows, ids), values.to(out.dtype), accumulate=True)
    return out


def apply_temperature(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """Divide each row by its temperature (rows with temperature 0 are left as they are)."""
    t = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    return logits / t.unsqueeze(1)


def apply_top_k(logits: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Keep the ``top_k[i]`` largest logits of row ``i`` (ties at the boundary are kept); 0 = all."""
    vocab = logits.shape[-1]
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    kth = logits.sort(dim=-1, descending=True).values.gather(1, (k - 1).unsqueeze(1))
    return logits.masked_fill(logits < kth, float("-inf"))


def apply_top_p(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose probability reaches ``top_p`` (at least one)."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # probability mass strictly ahead of each token
    drop_sorted = before >= top_p.unsqueeze(1)
    drop_sorted[:, 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Drop tokens whose probability is below ``min_p[i]`` times the row's largest probability."""
    probs = logits.softmax(dim=-1)
    threshold = probs.max(dim=-1, keepdim=True).values * min_p.unsqueeze(1)
    return logits.masked_fill(probs < threshold, float("-inf"))


def process_logits(
    logits: torch.Tensor,
    t: SamplingTensors,
    history: Sequence[Sequence[int] | None] | None = None,
    outputs: Sequence[Sequence[int] | None] | None = None,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logit bias, allowed-token mask, penalties, temperature, top-k, top-p, min-p: the logits a row
    samples from (float32). ``history[i]``: prompt + generated ids of row ``i`` (for the repetition
    penalty); ``outputs[i]``: its generated ids (presence/frequency); ``allowed``: ``[B, V]`` bool."""
    logits = apply_logit_bias(logits.float(), t.logit_bias)
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    if t.any_penalty:
        if history is None:
            raise ValueError("repetition_penalty needs the token history of every row")
        logits = apply_repetition_penalty(logits, history, t.repetition_penalty)
    if t.any_output_penalty:
        if outputs is None:
            raise ValueError("presence_penalty and frequency_penalty need the generated tokens of every row")
        logits = apply_output_penalties(logits, outputs, t.presence_penalty, t.frequency_penalty)
    if t.all_greedy:
        return logits
    logits = apply_temperature(logits, t.temperature)
    if t.any_top_k:
        logits = apply_top_k(logits, t.top_k)
    if t.any_top_p:
        logits = apply_top_p(logits, t.top_p)
    if t.any_min_p:
        logits = apply_min_p(logits, t.min_p)
    return logits


def sample(
    processed: torch.Tensor,
    t: SamplingTensors,
    generators: Sequence[torch.Generator | None] | None = None,
    default_generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row: argmax for greedy rows, a draw from ``softmax(processed)`` for the others.

    ``generators[i]`` (if not None) supplies row ``i``'s randomness; the other rows share
    ``default_generator`` (or torch's global generator).
    """
    greedy_tokens = processed.argmax(dim=-1)
    if t.all_greedy:
        return greedy_tokens
    probs = processed.softmax(dim=-1)
    noise = torch.empty_like(probs)
    noise.exponential_(generator=default_generator)
    if generators is not None:  # the rows as views from one call (64 ``noise[i]`` cost 0.05 ms)
        for row, g in zip(noise.unbind(0), generators, strict=True):
            if g is not None:
                row.exponential_(generator=g)
    drawn = (probs / noise).argmax(dim=-1)
    return torch.where(t.greedy, greedy_tokens, drawn)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[i, tokens[i]]`` for each row, in float32."""
    return logits.float().log_softmax(dim=-1).gather(1, tokens.view(-1, 1)).squeeze(1)


def logprobs_and_top(
    logits: torch.Tensor, tokens: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The chosen tokens' ``log_softmax`` (``[B]``) and, when ``k > 0``, the ``k`` largest log-probs of
    each row with their token ids (``[B, k]`` each, most likely first), from one ``log_softmax``."""
    logprobs = logits.float().log_softmax(dim=-1)
    chosen = logprobs.gather(1, tokens.view(-1, 1)).squeeze(1)
    if k <= 0:
        return chosen, None, None
    values, ids = logprobs.topk(min(k, logprobs.shape[-1]), dim=-1)
    return chosen, values, ids
