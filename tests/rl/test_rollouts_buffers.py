"""Text rollouts from engine outputs (layout, truncation masking, minibatches) and the buffers."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from toolbox.rl.advantages import GAE
from toolbox.rl.buffers import RolloutBuffer, RolloutQueue
from toolbox.rl.rollouts import TextRollout
from toolbox.serving.engine import Completion, RequestOutput


def _outputs():
    return [
        RequestOutput(
            [1, 5, 6],
            [
                Completion([7, 2], "a", "stop", [-0.1, -0.2]),
                Completion([8, 9, 9], "bcc", "length", [-0.3, -0.4, -0.5]),
            ],
        ),
        RequestOutput(
            [1, 5], [Completion([2], "", "stop", [-0.6]), Completion([7, 7, 2], "aa", "stop", [-1, -1, -1])]
        ),
    ]


def test_layout_left_padded_prompts_right_padded_completions():
    r = TextRollout.from_outputs(
        _outputs(), prompts=["p0", "p1"], fields={"answer": ["x", "y"]}, pad_token_id=0
    )
    assert len(r) == 4 and r.num_generations == 2
    assert r.prompt_ids.tolist() == [[1, 5, 6], [1, 5, 6], [0, 1, 5], [0, 1, 5]]
    assert r.prompt_mask.tolist() == [[1, 1, 1], [1, 1, 1], [0, 1, 1], [0, 1, 1]]
    assert r.completion_ids.tolist() == [[7, 2, 0], [8, 9, 9], [2, 0, 0], [7, 7, 2]]
    assert r.completion_mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]]
    assert r.fields["answer"] == ["x", "x", "y", "y"] and r.prompts == ["p0", "p0", "p1", "p1"]
    assert r.input_ids.shape == (4, 6)
    torch.testing.assert_close(r.sampling_logprobs[1], torch.tensor([-0.3, -0.4, -0.5]))


def test_mask_truncated_completions():
    r = TextRollout.from_outputs(_outputs(), pad_token_id=0, mask_truncated=True)
    assert r.completion_mask[1].tolist() == [0, 0, 0]  # finish_reason "length"
    assert r.attention_mask[1].tolist() == [1, 1, 1, 1, 1, 1]  # still attended
    assert r.metrics()["completions/clipped_ratio"] == 0.25


def test_from_rows_loss_masks_and_their_length_check():
    rows = {
        "prompts": [None] * 3,
        "completions": [""] * 3,
        "finish_reasons": ["stop", "length", "stop"],
        "fields": {},
    }
    prompts, completions = [[1, 5], [1], [4]], [[7, 2], [8, 9, 9], []]
    masks = [[1, 0], [1, 1, 0], []]  # per-token loss masks (an episode's own tokens); empty: no tokens
    r = TextRollout.from_rows(prompts, completions, rows, [None] * 3, masks, 0, 1, True, "cpu")
    assert r.completion_mask.tolist() == [[1, 0, 0], [0, 0, 0], [0, 0, 0]]  # row 1 truncated: masked
    assert r.completion_lengths.tolist() == [2, 3, 0] and r.sampling_logprobs is None
    with pytest.raises(ValueError, match="row 1: a loss mask of 2 tokens for 3 completion tokens"):
        TextRollout.from_rows(prompts, completions, rows, [None] * 3, [[1, 0], [1, 1], []], 0, 1, True, "cpu")


def test_minibatches_cover_every_row_once():
    r = TextRollout.from_outputs(_outputs(), pad_token_id=0, fields={"answer": ["x", "y"]})
    r.rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    seen = []
    for mb in r.minibatches(3, torch.Generator().manual_seed(0)):
        seen += mb.completion_ids.tolist()
        assert len(mb.fields["answer"]) == len(mb)
    assert sorted(seen) == sorted(r.completion_ids.tolist())
    sub = r.select([3, 0])
    assert sub.rewards.tolist() == [1.0, 1.0] and sub.completions == ["aa", "a"]
    assert sub.completion_lengths.tolist() == [3, 2]


def test_rollout_buffer_gae_and_minibatches():
    buf = RolloutBuffer(num_steps=4, num_envs=2, obs_shape=(3,))
    for t in range(4):
        buf.add(
            t,
            obs=torch.full((2, 3), float(t)),
            action=torch.tensor([t, t]),
            logprob=torch.zeros(2),
            reward=torch.ones(2),
            done=torch.zeros(2),
            value=torch.zeros(2),
        )
    adv, ret = buf.compute_advantages(GAE(gamma=1.0, lam=1.0), torch.zeros(2), torch.ones(2))
    assert adv[:, 0].tolist() == [4.0, 3.0, 2.0, 1.0]
    rows = sum(mb["obs"].shape[0] for mb in buf.minibatches(3, torch.Generator().manual_seed(0)))
    assert rows == 8
    with pytest.raises(KeyError):
        buf.add(0, bogus=1)


def test_rollout_queue_is_bounded_fifo():
    q = RolloutQueue(capacity=2)
    for i in range(3):
        q.put(i)
    assert len(q) == 2 and q.get() == 1 and q.get() == 2
    with pytest.raises(IndexError):
        q.get()


def test_informative_rows_are_the_groups_whose_rewards_differ():
    outs = _outputs() + _outputs()
    r = TextRollout.from_outputs(outs, pad_token_id=0)
    # groups: [1, 1] all right, [0, 1] informative, [nan, 1] one scored reward, [0, nan, ...]
    r.rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, float("nan"), 1.0, 0.5, 0.0])
    assert r.informative_rows() == [2, 3, 6, 7]
    r.rewards = None
    with pytest.raises(ValueError, match="score the rollout first"):
        r.informative_rows()


def test_concat_repads_prompts_left_and_completions_right():
    a = TextRollout.from_outputs(_outputs()[:1], prompts=["p0"], fields={"answer": ["x"]}, pad_token_id=0)
    b = TextRollout.from_outputs(_outputs()[1:], prompts=["p1"], fields={"answer": ["y"]}, pad_token_id=0)
    for part in (a, b):
        part.rewards = torch.arange(len(part), dtype=torch.float32)
        part.advantages = torch.ones(len(part))
    whole = TextRollout.from_outputs(
        _outputs(), prompts=["p0", "p1"], fields={"answer": ["x", "y"]}, pad_token_id=0
    )
    joined = TextRollout.concat([a, b], pad_token_id=0)
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "sampling_logprobs"):
        torch.testing.assert_close(getattr(joined, name), getattr(whole, name), msg=name)
    assert joined.fields["answer"] == ["x", "x", "y", "y"] and joined.prompts == ["p0", "p0", "p1", "p1"]
    assert joined.rewards.tolist() == [0.0, 1.0, 0.0, 1.0] and joined.completion_lengths.tolist() == [
        2,
        3,
        1,
        3,
    ]
    assert joined.attention_mask.tolist() == whole.attention_mask.tolist()
    with pytest.raises(ValueError, match="num_generations"):
        TextRollout.concat([a, replace(b, num_generations=1)])
    with pytest.raises(ValueError, match="different fields"):
        TextRollout.concat([a, TextRollout.from_outputs(_outputs()[1:], pad_token_id=0)])
    unscored = TextRollout.from_outputs(_outputs()[1:], fields={"answer": ["y"]}, pad_token_id=0)
    with pytest.raises(ValueError, match="rewards is set in some"):
        TextRollout.concat([a, unscored])
