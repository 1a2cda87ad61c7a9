"""The decision reader: (states, questions) -> decisions at a level, from one prefill per prompt.

    reader = DecisionReader(TorchDecisionBackend.from_engine(engine))
    q = Question.choice("Which intent?", ["balance", "transfer", "lost card"])
    [[d]] = reader.decide(["I can't find my card"], [q], level="L0")
    d.argmax, d.distribution, d.require("L0")

``raw``: the options in the order given, the softmax restricted to the label tokens. ``L0``: every
cyclic rotation of the options (two phrasings for yes/no; score levels keep their order), a
label-free prior divided out (``prior="batch"``: the running mean over the states read, after
``min_prior_n`` of them, at strength 0.75; ``"content_free"``: content-free probes; ``"none"``),
and the rotations combined in log space. ``L1``/``L2`` need ``fit_l1``/``fit_l2`` first.

Every prompt of one ``decide`` call (all states, questions and rotations) goes to the backend in one
call, deduplicated; prompts whose prefix is shared (the rotations of one state and question) go as
groups, which a backend like ``torch`` prefills once. The arithmetic is AnyJev's (0.3.0), checked
against it in ``tests/decision/test_parity_anyjev.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import toolbox.decision.calibrate as cal
from toolbox.decision.backends.base import DecisionBackend, Encoded, Group
from toolbox.decision.levels import LinearHead, TemperatureScaler, candidate_layers, fit_head
from toolbox.decision.prompt import (
    DEFAULT_SYSTEM,
    Prompt,
    PromptFormat,
    render_state,
    resolve_labels,
    rotation_prompt,
)
from toolbox.decision.question import Question
from toolbox.decision.result import LEVELS, Decision, check_level

PRIORS = ("batch", "content_free", "none")


class DecisionReader:
    """Reads decisions from a backend.

    Args:
        backend: a ``DecisionBackend`` (``torch``, ``hf``, ``http``, ``anyjev``).
        level: the default level ("raw", "L0", "L1", "L2").
        prior: L0's label prior: "batch", "content_free" or "none".
        min_prior_n: states of a question read before the batch prior is used.
        prior_strength: the prior's exponent (null: 0.75 for batch, 1.0 for content-free).
        max_rotations: rotations read at L0 (null: all K).
        probes: the content-free states.
        system: the system message.
        prompt_format: "chat" (the tokenizer's chat template; an error without one) or "plain".
        share_prefix: send the rotations of one state as prefix groups (one prefix prefill).
    """

    def __init__(
        self,
        backend: DecisionBackend,
        level: str = "L0",
        prior: str = "batch",
        min_prior_n: int = 8,
        prior_strength: float | None = None,
        max_rotations: int | None = None,
        probes: Sequence[str] = cal.CONTENT_FREE_PROBES,
        system: str = DEFAULT_SYSTEM,
        prompt_format: PromptFormat = "chat",
        share_prefix: bool = True,
    ) -> None:
        if prior not in PRIORS:
            raise ValueError(f"prior={prior!r}: use one of {', '.join(PRIORS)}")
        if prior_strength is not None and not 0.0 <= prior_strength <= 1.0:
            raise ValueError(f"prior_strength={prior_strength}: use a value in [0, 1]")
        self.backend = backend
        self.tokenizer = backend.tokenizer
        self.level = check_level(level)
        self.prior = prior
        self.min_prior_n = min_prior_n
        self.strength = cal.DEFAULT_STRENGTH[prior] if prior_strength is None else prior_strength
        self.max_rotations = max_rotations
        self.probes = tuple(probes)
        self.system = system
        self.prompt_format = prompt_format
        self.share_prefix = share_prefix
        self.stats = {"backend_calls": 0, "flat_prompts": 0, "groups": 0, "grouped_prompts": 0}
        self._labels: dict[tuple, tuple[list[str], list[int]]] = {}
        self._running: dict[str, tuple[torch.Tensor, int]] = {}  # question key -> (sum [P, K], n)
        self._content_free: dict[str, torch.Tensor] = {}  # question key -> [P, K]
        self._l1: dict[str, TemperatureScaler] = {}
        self._l2: dict[str, LinearHead] = {}
        self._token_cache: dict[str, tuple[int, ...]] = {}

    # public --------------------------------------------------------------------------------------
    def decide(
        self,
        states: Sequence[Any],
        questions: Sequence[Question],
        level: str | None = None,
        require: str | None = None,
    ) -> list[list[Decision]]:
        """Every question about every state: ``out[state][question]``; ``require`` raises ``LevelError``
        for a decision read at a weaker level."""
        level = check_level(level or self.level)
        texts = [render_state(s) for s in states]
        out = [[None] * len(questions) for _ in texts]
        if level == "L2":
            for qi, q in enumerate(questions):
                for si, d in enumerate(self._read_l2(texts, q)):
                    out[si][qi] = d
        else:
            self._read(texts, list(questions), level, out)
        if require:
            for row in out:
                for d in row:
                    d.require(require)
        return out  # type: ignore[return-value]

    def decide_batch(
        self, states: Sequence[Any], question: Question, level: str | None = None, require: str | None = None
    ) -> list[Decision]:
        """One question about many states."""
        return [row[0] for row in self.decide(states, [question], level, require)]

    def running_prior(self, question: Question) -> torch.Tensor | None:
        """The batch prior ``[P, K]`` (by position) accumulated for this question, or None before ``min_prior_n``."""
        entry = self._running.get(question.key)
        if entry is None or entry[1] < self.min_prior_n:
            return None
        return cal.batch_prior((entry[0] / entry[1]).unsqueeze(0))

    def fit_l1(self, question: Question, states: Sequence[Any], labels: Sequence[int]) -> TemperatureScaler:
        """L1 for ``question``: a temperature over its L0 distribution, fitted on labelled states
        (labels: option indices). The prior is estimated on these states alone and frozen."""
        saved = self._running.pop(question.key, None)
        try:
            decisions = self.decide_batch(states, question, level="L0")
        finally:
            mine = self._running.pop(question.key, None)
            if saved is not None and mine is not None and saved[0].shape == mine[0].shape:
                self._running[question.key] = (saved[0] + mine[0], saved[1] + mine[1])
            elif saved is not None or mine is not None:
                self._running[question.key] = saved if saved is not None else mine  # type: ignore[assignment]
        scaler = TemperatureScaler.fit(np.stack([d.probs for d in decisions]), labels)
        prior = decisions[0].diagnostics.get("prior")
        scaler.prior = None if prior is None else np.asarray(prior)
        self._l1[question.key] = scaler
        return scaler

    def fit_l2(
        self,
        question: Question,
        states: Sequence[Any],
        labels: Sequence[int],
        layers: Sequence[int] | None = None,
        kinds: Sequence[str] = ("lda", "ridge"),
        n_folds: int = 5,
        seed: int = 0,
    ) -> LinearHead:
        """L2 for ``question``: a closed-form head on the last hidden state of the prompt (options in
        the order given), at the block (of ``layers``, default 50-100 % of depth) and head kind with
        the lowest out-of-fold NLL."""
        y = np.asarray(labels, dtype=int)
        if len(y) != len(states):
            raise ValueError(f"fit_l2: {len(states)} states but {len(y)} labels; give one label per state")
        if len(y) and (y.min() < 0 or y.max() >= question.k):
            raise ValueError(f"fit_l2: labels must be option indices in [0, {question.k})")
        layers = list(layers) if layers is not None else candidate_layers(self.backend.num_layers)
        feats = self._features([render_state(s) for s in states], question, layers).numpy()
        best = None
        for kind in kinds:
            try:
                head = fit_head(feats, y, question.k, kind, layers, n_folds, seed)
            except (ValueError, np.linalg.LinAlgError):
                continue
            if best is None or head.cv["oof_nll"] < best.cv["oof_nll"]:
                best = head
        if best is None:
            raise ValueError(
                f"no L2 head could be fitted for {question.id}: it needs at least max(8, 2K) labels"
            )
        self._l2[question.key] = best
        return best

    # prompts ---------------------------------------------------------------------------------------
    def labels(self, question: Question) -> tuple[list[str], list[int]]:
        key = (question.kind, question.k)
        if key not in self._labels:
            self._labels[key] = resolve_labels(self.tokenizer, question)
        return self._labels[key]

    def rotations(self, question: Question, level: str) -> list[list[int]]:
        if level == "raw" or question.ordered:
            return [list(range(question.k))]
        if question.kind == "yes_no":
            return [[0, 1], [1, 0]]
        return cal.cyclic_shifts(question.k, self.max_rotations)

    def prompt(self, state_text: str, question: Question, perm: Sequence[int]) -> tuple[Prompt, list[int]]:
        """The rendered prompt for one rotation and its label ids in position order."""
        return rotation_prompt(
            self.tokenizer, state_text, question, perm, self.labels(question), self.system, self.prompt_format
        )

    def _tokens(self, text: str) -> tuple[int, ...]:
        ids = self._token_cache.get(text)
        if ids is None:
            self._tokenize([text])
            ids = self._token_cache[text]
        return ids

    def _tokenize(self, texts: Sequence[str]) -> None:
        """Tokenize the texts not cached yet, in one batch call of the tokenizer."""
        todo = list(dict.fromkeys(t for t in texts if t not in self._token_cache))
        if not todo:
            return
        if len(self._token_cache) + len(todo) > 65536:
            self._token_cache.clear()
        for text, ids in zip(todo, self.tokenizer(todo, add_special_tokens=False)["input_ids"], strict=True):
            self._token_cache[text] = tuple(ids)

    def score(self, prompts: Sequence[Prompt], label_ids: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Label log-probs of each prompt, in one flat call and one grouped call at most (duplicates once)."""
        index: dict[str, int] = {}
        unique: list[int] = []
        for i, p in enumerate(prompts):
            if p.text not in index:
                index[p.text] = len(unique)
                unique.append(i)
        groups: dict[tuple, list[int]] = {}
        flat: list[int] = []
        grouping = self.share_prefix and self.backend.shares_prefix
        for u, i in enumerate(unique):
            p = prompts[i]
            if grouping and p.suffix:
                groups.setdefault((p.prefix, tuple(label_ids[i])), []).append(u)
            else:
                flat.append(u)
        self._tokenize(
            [t for i in unique for t in (prompts[i].text, prompts[i].prefix, prompts[i].suffix) if t]
            if grouping
            else [prompts[i].text for i in unique]
        )
        scored: list[torch.Tensor | None] = [None] * len(unique)
        plan: list[tuple[Encoded, list[int], list[Encoded]]] = []
        for (prefix, _), members in groups.items():
            pre = self._tokens(prefix)
            sufs = [self._tokens(prompts[unique[u]].suffix) for u in members]
            exact = len(members) >= 2 and all(
                self._tokens(prompts[unique[u]].text) == pre + s for u, s in zip(members, sufs, strict=True)
            )
            if not exact:  # the tokenizer merges across the split (or nothing to share): whole prompts
                flat.extend(members)
                continue
            plan.append(
                (
                    Encoded(prefix, pre),
                    members,
                    [Encoded(prompts[unique[u]].suffix, s) for u, s in zip(members, sufs, strict=True)],
                )
            )
        if flat:
            self.stats["backend_calls"] += 1
            self.stats["flat_prompts"] += len(flat)
            encoded = [Encoded(prompts[unique[u]].text, self._tokens(prompts[unique[u]].text)) for u in flat]
            for u, lp in zip(
                flat, self.backend.label_logprobs(encoded, [label_ids[unique[u]] for u in flat]), strict=True
            ):
                scored[u] = lp
        if plan:
            self.stats["backend_calls"] += 1
            self.stats["groups"] += len(plan)
            self.stats["grouped_prompts"] += sum(len(m) for _, m, _ in plan)
            groups_in = [
                Group(pre, tuple(sufs), tuple(tuple(label_ids[unique[u]]) for u in members))
                for pre, members, sufs in plan
            ]
            for (_, members, _), lps in zip(plan, self.backend.score_groups(groups_in), strict=True):
                for u, lp in zip(members, lps, strict=True):
                    scored[u] = lp
        return [scored[index[p.text]] for p in prompts]  # type: ignore[misc]

    # reading ---------------------------------------------------------------------------------------
    def _read(self, texts: list[str], questions: list[Question], level: str, out: list[list[Any]]) -> None:
        prompts: list[Prompt] = []
        ids: list[list[int]] = []
        plan: dict[tuple[int, int], list[int]] = {}
        for qi, q in enumerate(questions):
            perms = self.rotations(q, level)
            for si, text in enumerate(texts):
                rows = []
                for perm in perms:
                    prompt, lab = self.prompt(text, q, perm)
                    rows.append(len(prompts))
                    prompts.append(prompt)
                    ids.append(lab)
                plan[(si, qi)] = rows
        need_cf = level in ("L0", "L1") and self.prior == "content_free"
        cf_plan: dict[int, list[list[int]]] = {}
        cf_prompts: list[Prompt] = []
        cf_ids: list[list[int]] = []
        if need_cf:  # probes in their own call, so the real prompts' batches never depend on the cache
            for qi, q in enumerate(questions):
                if q.key in self._content_free:
                    continue
                cf_plan[qi] = []
                for perm in self.rotations(q, level):
                    row = []
                    for probe in self.probes:
                        prompt, lab = self.prompt(probe, q, perm)
                        row.append(len(cf_prompts))
                        cf_prompts.append(prompt)
                        cf_ids.append(lab)
                    cf_plan[qi].append(row)
        logprobs = self.score(prompts, ids)
        cf_logprobs = self.score(cf_prompts, cf_ids) if cf_prompts else []

        for qi, q in enumerate(questions):
            perms = self.rotations(q, level)
            perm_t = torch.tensor(perms, dtype=torch.long)
            lp = torch.stack(
                [torch.stack([logprobs[r] for r in plan[(si, qi)]]) for si in range(len(texts))]
            )  # [N, P, K]
            p_raw = torch.softmax(lp, dim=-1)
            if qi in cf_plan:
                self._content_free[q.key] = torch.stack(
                    [
                        cal.content_free_prior(
                            torch.softmax(torch.stack([cf_logprobs[r] for r in row]), dim=-1)
                        )
                        for row in cf_plan[qi]
                    ]
                )
            prior = None
            if level == "L1":
                scaler = self._l1.get(q.key)
                if scaler is None:
                    raise ValueError(
                        f"no L1 calibration for question {q.id!r}; call reader.fit_l1(question, states, labels) first"
                    )
                prior = None if scaler.prior is None else torch.as_tensor(scaler.prior, dtype=torch.float64)
            elif level == "L0":
                total, n = self._running.get(q.key, (torch.zeros(p_raw.shape[1:], dtype=torch.float64), 0))
                self._running[q.key] = (total + p_raw.sum(dim=0), n + len(texts))
                if self.prior == "batch":
                    prior = self.running_prior(q)
                elif self.prior == "content_free":
                    prior = self._content_free[q.key]
            for si in range(len(texts)):
                raw = cal.marginalize(p_raw[si, :1], perm_t[:1])
                diag: dict[str, Any] = {
                    "raw_probs": raw.numpy(),
                    "rotations": perms,
                    "p_by_position": p_raw[si].numpy(),
                    "answer_mass": float(lp[si].exp().sum(dim=-1).mean()),
                }
                if level == "raw":
                    probs = raw
                else:
                    corrected = (
                        cal.divide_prior(p_raw[si], prior, self.strength) if prior is not None else p_raw[si]
                    )
                    probs = cal.marginalize(corrected, perm_t)
                    diag.update(
                        prior=None if prior is None else prior.numpy(),
                        prior_method=self.prior if prior is not None else "none",
                        flip_raw=cal.flip_rate(p_raw[si], perms),
                        flip_l0=cal.flip_rate(corrected, perms),
                        l0_probs=probs.numpy(),
                    )
                    if level == "L1":
                        probs = torch.as_tensor(self._l1[q.key].apply(probs.numpy()))
                        diag["temperature"] = self._l1[q.key].temperature
                out[si][qi] = Decision(q, probs.numpy(), level, diag)

    def _features(self, texts: list[str], question: Question, layers: Sequence[int]) -> torch.Tensor:
        perm = list(range(question.k))
        encoded = []
        for text in texts:
            prompt, _ = self.prompt(text, question, perm)
            encoded.append(Encoded(prompt.text, self._tokens(prompt.text)))
        self.stats["backend_calls"] += 1
        self.stats["flat_prompts"] += len(encoded)
        return self.backend.hidden_states(encoded, layers)

    def _read_l2(self, texts: list[str], question: Question) -> list[Decision]:
        head = self._l2.get(question.key)
        if head is None:
            raise ValueError(
                f"no L2 head for question {question.id!r}; call reader.fit_l2(question, states, labels) first"
            )
        probs = head.probs(self._features(texts, question, [head.layer])[:, 0].numpy())
        diag = {"head": head.kind, "layer": head.layer, "temperature": head.temperature}
        return [Decision(question, probs[i], "L2", dict(diag)) for i in range(len(texts))]


__all__ = ["LEVELS", "PRIORS", "DecisionReader"]
