"""Text rollouts: sampled completions with their ids, masks, log-probs, rewards and advantages.

The GRPO trainer turns the engine's ``RequestOutput`` list into one :class:`TextRollout`, fills
``rewards``/``advantages`` (and ``old_logprobs``/``ref_logprobs`` when it needs them), then takes
minibatches of it for its clipped updates::

    rollout = TextRollout.from_outputs(outputs, prompts, fields, pad_token_id=tok.pad_token_id,
                                       num_generations=4, mask_truncated=True)
    rollout.rewards = ...; rollout.advantages = estimator(rollout.rewards, rollout.num_generations)
    for mb in rollout.minibatches(8, generator):
        logps, _ = token_logprobs(model, mb.input_ids, mb.attention_mask, mb.completion_width)

Layout: prompts left-padded (``prompt_ids``/``prompt_mask`` ``[N, P]``), completions right-padded
(``completion_ids``/``completion_mask`` ``[N, T]``), so ``cat([prompt, completion])`` puts every
completion at the same columns and ``logits_to_keep=T`` scores exactly them. The ``N = prompts ×
num_generations`` rows keep each prompt's completions consecutive.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
from torch import Tensor


@dataclass
class TextRollout:
    prompt_ids: Tensor
    prompt_mask: Tensor
    completion_ids: Tensor
    completion_mask: Tensor
    num_generations: int = 1
    prompts: list[Any] = field(default_factory=list)  # one per row (repeated per generation)
    completions: list[str] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    fields: dict[str, list[Any]] = field(default_factory=dict)  # raw per-row fields (answer, ...)
    sampling_logprobs: Tensor | None = None  # [N, T], what the engine reported while sampling
    old_logprobs: Tensor | None = None  # [N, T], the policy before this round's updates
    ref_logprobs: Tensor | None = None  # [N, T], the frozen reference
    rewards: Tensor | None = None  # [N], the combined reward (NaN: unscorable)
    rewards_per_func: Tensor | None = None  # [N, K]
    advantages: Tensor | None = None  # [N] or [N, T]

    # shapes -------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.completion_ids.shape[0])

    @property
    def completion_width(self) -> int:
        return int(self.completion_ids.shape[1])

    @property
    def input_ids(self) -> Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> Tensor:
        # completion padding stays masked; a truncated completion's tokens are still attended
        generated = (
            torch.arange(self.completion_width, device=self.completion_ids.device)[None, :]
            < self.completion_lengths[:, None]
        ).long()
        return torch.cat([self.prompt_mask.long(), generated], dim=1)

    @property
    def completion_lengths(self) -> Tensor:
        """Generated tokens per row (independent of masking for truncation)."""
        return self._lengths

    # building -----------------------------------------------------------------------------------
    @classmethod
    def from_outputs(
        cls,
        outputs: Sequence[Any],
        prompts: Sequence[Any] | None = None,
        fields: dict[str, Sequence[Any]] | None = None,
        pad_token_id: int = 0,
        num_generations: int | None = None,
        mask_truncated: bool = False,
        device: torch.device | str = "cpu",
    ) -> TextRollout:
        """From the engine's ``RequestOutput`` per prompt (each with ``n`` completions).

        ``fields`` are per-*prompt* raw values, repeated per completion. ``mask_truncated`` zeroes the
        completion mask of every completion that hit the length limit (finish_reason "length"),
        so it contributes no gradient (DAPO's overlong filtering).
        """
        n = num_generations or len(outputs[0].completions)
        prompt_rows, completion_rows, texts, reasons, samp, row_prompts = [], [], [], [], [], []
        out_fields: dict[str, list[Any]] = {k: [] for k in (fields or {})}
        for i, out in enumerate(outputs):
            if len(out.completions) != n:
                raise ValueError(f"prompt {i} has {len(out.completions)} completions, expected {n}")
            prompt = list(out.prompt_token_ids)  # one list for the group: from_rows pads it once
            for c in out.completions:
                prompt_rows.append(prompt)
                completion_rows.append(list(c.token_ids))
                texts.append(c.text)
                reasons.append(c.finish_reason)
                samp.append(c.logprobs)
                row_prompts.append(prompts[i] if prompts is not None else None)
                for k, values in (fields or {}).items():
                    out_fields[k].append(values[i])
        rows = {"prompts": row_prompts, "completions": texts, "finish_reasons": reasons, "fields": out_fields}
        return cls.from_rows(
            prompt_rows, completion_rows, rows, samp, None, pad_token_id, n, mask_truncated, device
        )

    @classmethod
    def from_episodes(
        cls,
        episodes: Sequence[Any],
        num_generations: int,
        fields: dict[str, Sequence[Any]] | None = None,
        pad_token_id: int = 0,
        mask_truncated: bool = False,
        device: torch.device | str = "cpu",
    ) -> TextRollout:
        """From multi-turn episodes (``toolbox.rl.episodes.Episode``, a group's G together): the
        opening prompt is the prompt, everything after it (the model's replies and the environment's
        messages) the completion, whose mask is 1 on the model's own tokens only. ``fields`` are
        per-task values, repeated per episode. A one-turn episode gives the row ``from_outputs``
        gives its completion, bit for bit."""
        rows = {
            "prompts": [e.messages[: e.opening] for e in episodes],
            "completions": [e.completion_text for e in episodes],
            "finish_reasons": [e.finish_reason for e in episodes],
            "fields": {k: [v[e.group] for e in episodes] for k, v in (fields or {}).items()},
        }
        return cls.from_rows(
            [e.prompt_ids for e in episodes], [e.ids for e in episodes], rows,
            [e.logprobs for e in episodes], [e.mask for e in episodes], pad_token_id,
            num_generations, mask_truncated, device,
        )  # fmt: skip

    @classmethod
    def from_rows(
        cls,
        prompt_rows: Sequence[Sequence[int]],
        completion_rows: Sequence[Sequence[int]],
        rows: dict[str, Any],
        samp: Sequence[Sequence[float] | None],
        masks: Sequence[Sequence[int]] | None,
        pad_token_id: int,
        num_generations: int,
        mask_truncated: bool,
        device: torch.device | str,
    ) -> TextRollout:
        """The padded tensors of per-row token lists (``masks``: per-token loss masks, else all 1);
        ``rows``: the per-row ``prompts``, ``completions``, ``finish_reasons`` and ``fields``."""
        reasons = rows["finish_reasons"]
        p_len = max(len(p) for p in prompt_rows)
        c_len = max(1, max(len(c) for c in completion_rows))
        n_rows = len(prompt_rows)
        have_logps = all(s is not None for s in samp)
        # one tensor each from padded Python lists: much cheaper than several tensor copies per row
        pad = pad_token_id
        ids_p, mask_p, ids_c, mask_c, lens, logps = [], [], [], [], [], []
        padded: dict[int, tuple[list[int], list[int]]] = {}  # id(prompt row) -> its padded ids, mask
        for r, (p, c) in enumerate(zip(prompt_rows, completion_rows, strict=True)):
            n, room = len(c), c_len - len(c)
            if id(p) not in padded:  # rows sharing one prompt list (a group) share its padding
                padded[id(p)] = ([*[pad] * (p_len - len(p)), *p], [0] * (p_len - len(p)) + [1] * len(p))
            ids_p.append(padded[id(p)][0])
            mask_p.append(padded[id(p)][1])
            ids_c.append([*c, *[pad] * room])
            keep = 0 if (mask_truncated and reasons[r] == "length" and n) else 1
            if masks is None:
                mask_c.append([keep] * n + [0] * room)
            elif not n:
                mask_c.append([0] * room)
            elif len(masks[r]) != n:
                raise ValueError(f"row {r}: a loss mask of {len(masks[r])} tokens for {n} completion tokens")
            else:
                mask_c.append([int(m) * keep for m in masks[r]] + [0] * room)
            lens.append(n)
            if have_logps:
                logps.append([*samp[r][:n], *[0.0] * room])
        prompt_ids = torch.tensor(ids_p, dtype=torch.long).view(n_rows, p_len)
        prompt_mask = torch.tensor(mask_p, dtype=torch.long).view(n_rows, p_len)
        completion_ids = torch.tensor(ids_c, dtype=torch.long)
        completion_mask = torch.tensor(mask_c, dtype=torch.long)
        lengths = torch.tensor(lens, dtype=torch.long)
        sampling = torch.tensor(logps, dtype=torch.float32) if have_logps else None
        rollout = cls(
            prompt_ids=prompt_ids.to(device),
            prompt_mask=prompt_mask.to(device),
            completion_ids=completion_ids.to(device),
            completion_mask=completion_mask.to(device),
            num_generations=num_generations,
            prompts=list(rows["prompts"]),
            completions=list(rows["completions"]),
            finish_reasons=list(reasons),
            fields=rows["fields"],
            sampling_logprobs=None if sampling is None else sampling.to(device),
        )
        rollout._lengths = lengths.to(device)
        return rollout

    def __post_init__(self) -> None:
        self._lengths = self.completion_mask.sum(-1).long()

    # slicing ------------------------------------------------------------------------------------
    def select(self, index: Tensor | Sequence[int]) -> TextRollout:
        """The rows ``index`` (tensors, lists and fields alike). Every row in order (a round taken as
        one minibatch, one micro-batch): the same tensors, new lists, nothing indexed (0.1 ms)."""
        idx = torch.as_tensor(index, dtype=torch.long)
        if len(idx) == len(self) and torch.equal(idx, torch.arange(len(self))):
            out = copy.copy(self)
            for f in fields(self):
                v = getattr(self, f.name)
                if isinstance(v, list):
                    setattr(out, f.name, list(v))
                elif f.name == "fields":
                    setattr(out, f.name, {k: list(vals) for k, vals in v.items()})
            return out
        values: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if torch.is_tensor(v):
                values[f.name] = v[idx.to(v.device)]
            elif isinstance(v, list) and len(v) == len(self):
                values[f.name] = [v[i] for i in idx.tolist()]
            elif f.name == "fields":
                values[f.name] = {k: [vals[i] for i in idx.tolist()] for k, vals in v.items()}
        out = replace(self, **values)
        out._lengths = self._lengths[idx.to(self._lengths.device)]
        return out

    def informative_rows(self) -> list[int]:
        """The rows of the groups whose rewards differ (a group with one reward for every completion
        has zero advantage, so it gives the policy loss no gradient: DAPO's dynamic sampling keeps
        only the others). Unscorable (NaN) rewards are left out of the comparison."""
        if self.rewards is None:
            raise ValueError("score the rollout first: informative_rows needs its rewards")
        grouped = self.rewards.detach().float().cpu().view(-1, self.num_generations)
        rows: list[int] = []
        for g, rewards in enumerate(grouped):
            scored = rewards[~torch.isnan(rewards)]
            if len(scored) > 1 and bool((scored != scored[0]).any()):
                rows.extend(range(g * self.num_generations, (g + 1) * self.num_generations))
        return rows

    @classmethod
    def concat(cls, parts: Sequence[TextRollout], pad_token_id: int = 0) -> TextRollout:
        """One rollout from several with the same ``num_generations`` (rows in order): prompts are
        left-padded and completions right-padded again to the widest of the parts."""
        if not parts:
            raise ValueError("concat needs at least one rollout")
        if len({p.num_generations for p in parts}) != 1:
            raise ValueError("concat: the rollouts have different num_generations")
        p_len = max(p.prompt_ids.shape[1] for p in parts)
        c_len = max(p.completion_width for p in parts)

        def left(t: Tensor, value: float) -> Tensor:
            return torch.nn.functional.pad(t, (p_len - t.shape[1], 0), value=value)

        def right(t: Tensor, value: float = 0) -> Tensor:
            return torch.nn.functional.pad(t, (0, c_len - t.shape[1]), value=value)

        per_token = {"completion_mask", "sampling_logprobs", "old_logprobs", "ref_logprobs", "advantages"}

        values: dict[str, Any] = {}
        for f in fields(cls):
            vs = [getattr(p, f.name) for p in parts]
            if f.name in ("prompt_ids", "prompt_mask"):
                values[f.name] = torch.cat(
                    [left(v, pad_token_id if f.name == "prompt_ids" else 0) for v in vs]
                )
            elif f.name == "completion_ids":
                values[f.name] = torch.cat([right(v, pad_token_id) for v in vs])
            elif f.name == "num_generations":
                values[f.name] = vs[0]
            elif f.name == "fields":
                if any(v.keys() != vs[0].keys() for v in vs):
                    raise ValueError("concat: the rollouts have different fields")
                values[f.name] = {k: [x for v in vs for x in v[k]] for k in vs[0]}
            elif isinstance(vs[0], list):
                values[f.name] = [x for v in vs for x in v]
            elif all(torch.is_tensor(v) for v in vs):
                values[f.name] = torch.cat(
                    [right(v) if f.name in per_token and v.dim() == 2 else v for v in vs]
                )
            elif any(v is not None for v in vs):
                raise ValueError(f"concat: {f.name} is set in some rollouts and not in others")
            else:
                values[f.name] = None
        out = cls(**values)
        out._lengths = torch.cat([p._lengths for p in parts])
        return out

    def minibatches(self, size: int, generator: torch.Generator | None = None) -> Iterator[TextRollout]:
        """Rows in a random order (or in order without a generator), ``size`` at a time."""
        order = (
            torch.randperm(len(self), generator=generator)
            if generator is not None
            else torch.arange(len(self))
        )
        for start in range(0, len(self), size):
            yield self.select(order[start : start + size])

    def to(self, device: torch.device | str) -> TextRollout:
        moved = {
            f.name: getattr(self, f.name).to(device)
            for f in fields(self)
            if torch.is_tensor(getattr(self, f.name))
        }
        out = replace(self, **moved)
        out._lengths = self._lengths.to(device)
        return out

    # diagnostics --------------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        lengths = self._lengths.float()
        truncated = sum(r == "length" for r in self.finish_reasons)
        out = {
            "completions/mean_length": lengths.mean().item(),
            "completions/min_length": lengths.min().item(),
            "completions/max_length": lengths.max().item(),
            "completions/clipped_ratio": truncated / max(len(self), 1),
        }
        if self.rewards is not None:
            r = self.rewards.float()
            grouped = r.view(-1, self.num_generations)
            if self.num_generations > 1:
                zero_std = (torch.nan_to_num(grouped.std(1), nan=0.0) == 0).float().mean().item()
            else:
                zero_std = 1.0
            out.update(
                {
                    "reward": torch.nanmean(r).item(),
                    "reward_std": r[~torch.isnan(r)].std().item() if (~torch.isnan(r)).sum() > 1 else 0.0,
                    "frac_reward_zero_std": zero_std,
                }
            )
        return out
