"""The one model adapter both harnesses call: greedy generation and log-likelihoods of a toolbox model.

A :class:`HarnessModel` wraps an inference engine (``toolbox.serving``): ``hf`` (transformers
``generate``, the default) or ``torch`` (ours) around the model in process, or ``http`` to a running
``toolbox serve`` (``engine={name: http, base_url: http://127.0.0.1:8000/v1}``). A prompt is the
tokenizer's bos followed by the prompt's tokens, as toolbox's own ``exact_match`` evaluator feeds
it, so the two score the same generations. Log-likelihoods need the weights in process: the OpenAI
completions API of ``toolbox serve`` has no ``echo`` of prompt log-probs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from toolbox.core.errors import ConfigError


class HarnessModel:
    """Greedy text generation and continuation log-likelihoods for an evaluation harness.

    Args:
        engine: an ``InferenceEngine`` to generate with.
        tokenizer: the model's tokenizer (the engine's when omitted).
        model: the causal LM in process, for log-likelihoods (the engine's when omitted).
    """

    def __init__(self, engine: Any, tokenizer: Any = None, model: Any = None) -> None:
        self.engine = engine
        self.tokenizer = tokenizer if tokenizer is not None else getattr(engine, "tokenizer", None)
        self.model = model if model is not None else getattr(engine, "model", None)

    # -- generation --------------------------------------------------------------------------------
    def prompt_ids(self, text: str) -> list[int]:
        bos = getattr(self.tokenizer, "bos_token_id", None)
        return [*([bos] if bos is not None else []), *self.tokenizer.encode(text, add_special_tokens=False)]

    def generate(self, prompts: Sequence[str], max_tokens: int, stop: Sequence[str] = ()) -> list[str]:
        """Greedy completions of ``prompts``, cut before the first of ``stop``."""
        from toolbox.serving.engine import SamplingParams

        if not prompts:
            return []
        stop = [s for s in stop if s]
        # the stop strings are cut here, not by the engine: HF generate's stop-string matching fails on
        # tokenizers whose tokens do not render alone (a character tokenizer: "substring not found")
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
        # token ids (bos first) where the tokenizer is here; the text where only the server has it
        inputs = [self.prompt_ids(p) for p in prompts] if self.tokenizer is not None else list(prompts)
        outputs = self.engine.generate(inputs, params)
        return [_cut(out.completions[0].text, stop) for out in outputs]

    # -- log-likelihoods ---------------------------------------------------------------------------
    def _weights(self) -> Any:
        if self.model is None or self.tokenizer is None:
            raise ConfigError(
                "this task scores log-likelihoods, which need the model in process; evaluate with "
                "engine=hf or engine=torch (an OpenAI endpoint returns no prompt log-probs)."
            )
        return self.model

    @torch.no_grad()
    def loglikelihood(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[float, bool]]:
        """For each (context, continuation): the continuation's summed log-prob after the context, and
        whether greedy decoding would have produced exactly it."""
        self._weights()  # before any tokenizing: over http there may be no tokenizer either
        results = []
        for context, continuation in pairs:
            ctx = self.prompt_ids(context)
            cont = self.tokenizer.encode(continuation, add_special_tokens=False)
            results.append(self._score(ctx, cont))
        return results

    @torch.no_grad()
    def loglikelihood_rolling(self, texts: Sequence[str]) -> list[float]:
        """Each text's summed log-prob, every token after bos (one window: the tiny models' context)."""
        self._weights()
        bos = self.prompt_ids("")
        return [self._score(bos, self.tokenizer.encode(t, add_special_tokens=False))[0] for t in texts]

    def _score(self, context: list[int], continuation: list[int]) -> tuple[float, bool]:
        model = self._weights()
        if not continuation:
            return 0.0, True
        if not context:  # no bos: the first token is given, not scored
            context, continuation = continuation[:1], continuation[1:]
            if not continuation:
                return 0.0, True
        device = next(model.parameters()).device
        ids = torch.tensor([context + continuation], dtype=torch.long, device=device)
        was_training = model.training
        model.eval()
        try:
            logits = model(input_ids=ids).logits[0, len(context) - 1 : -1].float()
        finally:
            model.train(was_training)
        logprobs = torch.log_softmax(logits, dim=-1)
        target = torch.tensor(continuation, device=logprobs.device)
        total = float(logprobs.gather(1, target[:, None]).sum())
        greedy = bool((logprobs.argmax(dim=-1) == target).all())
        return total, greedy


def _cut(text: str, stop: Sequence[str]) -> str:
    cuts = [text.find(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text


def harness_model(
    engine: Mapping[str, Any] | None = None, model: Any = None, tokenizer: Any = None
) -> HarnessModel:
    """The adapter for ``engine`` (a spec of ``toolbox.serving``'s ``ENGINES``; default ``hf``) around
    ``model`` and ``tokenizer`` (``http`` needs neither: the server has the model)."""
    from toolbox.core.registries import ENGINES

    spec = dict(engine or {"name": "hf"})
    if spec.get("name") != "http" and model is None and not spec.get("path"):
        raise ConfigError(
            "the harness model: give a model in process, engine.path=DIR, or engine={name: http, base_url: ...}."
        )
    given = {k: v for k, v in {"model": model, "tokenizer": tokenizer}.items() if v is not None}
    return HarnessModel(ENGINES.build(spec, "engine", **given), tokenizer=tokenizer, model=model)
