"""Decision objectives read the same distributions as the reader, and their losses are the stated ones."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from toolbox.decision import DecisionReader, Question
from toolbox.decision.backends.hf import HFDecisionBackend
from toolbox.decision.data import DecisionCollator, DecisionDataset
from toolbox.decision.objectives import DecisionCE, DecisionDistill, label_logprobs

OPTIONS = ["lost card", "balance", "transfer", "refund"]
TEXTS = ["I lost my card", "what is my balance", "send money", "refund me", "card gone", "balance?",
         "transfer 5", "money back", "stolen card", "how much"]  # fmt: skip
RECORDS = [
    {"text": t, "label": i % 4, "options": OPTIONS, "question": "Which intent?"} for i, t in enumerate(TEXTS)
]


def batch_of(tok, rotations):
    data = DecisionDataset(tok, rotations=rotations, order="given")
    return DecisionCollator(tok)(data(RECORDS))


def test_batch_readout_equals_reader_raw_and_l0(tiny_model):
    model, tok, _ = tiny_model
    batch = batch_of(tok, rotations=None)
    assert batch["input_ids"].shape[0] == len(TEXTS) * 4 and batch["perms"].shape == (len(TEXTS), 4, 4)
    with torch.no_grad():
        logp = label_logprobs(model, batch)  # [B, R, K] by option
        teacher = DecisionDistill(min_prior_n=8).teacher(logp, batch["perms"]).exp().numpy()
    q = Question.choice("Which intent?", OPTIONS)
    reader = DecisionReader(HFDecisionBackend(model, tok), prior="batch", min_prior_n=8)
    raw = np.stack([d.probs for d in reader.decide_batch(TEXTS, q, level="raw")])
    np.testing.assert_allclose(logp[:, 0].exp().numpy(), raw, atol=1e-5)
    l0 = np.stack(
        [d.probs for d in reader.decide_batch(TEXTS, q, level="L0")]
    )  # fresh prior: these 10 states
    np.testing.assert_allclose(teacher, l0, atol=1e-5)


def test_decision_ce_is_cross_entropy_of_restricted_softmax(tiny_model):
    model, tok, _ = tiny_model
    batch = batch_of(tok, rotations=2)
    out = DecisionCE()(model, batch)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"]).logits[torch.arange(20), batch["last"]]
        restricted = logits.gather(-1, batch["label_ids"])  # by position
        inverse = torch.argsort(batch["perms"].view(20, 4), dim=-1)
        by_option = restricted.gather(-1, inverse)
        want = F.cross_entropy(by_option, batch["target"].repeat_interleave(2), reduction="sum")
    assert out.num_items == 20
    assert abs(float(out.loss_sum.detach()) - float(want)) < 1e-4
    out.loss_sum.backward()
    assert model.lm_head.weight.grad is not None and float(model.lm_head.weight.grad.abs().sum()) > 0
    model.zero_grad(set_to_none=True)


def test_distill_loss_is_kl_to_l0_plus_consistency(tiny_model):
    model, tok, _ = tiny_model
    batch = batch_of(tok, rotations=None)
    objective = DecisionDistill(consistency=0.5)
    out = objective(model, batch)
    with torch.no_grad():
        logp = label_logprobs(model, batch)
        teacher = objective.teacher(logp, batch["perms"])
        kl = F.kl_div(logp[:, 0], teacher, log_target=True, reduction="sum")
        consensus = torch.log_softmax(logp.mean(1), -1)
        cons = sum(F.kl_div(logp[:, r], consensus, log_target=True, reduction="sum") for r in range(4)) / 4
    assert out.num_items == len(TEXTS)
    assert abs(float(out.loss_sum.detach()) - float(kl + 0.5 * cons)) < 1e-4
    assert out.metrics["distill_kl"] > 0 and out.metrics["consistency_kl"] > 0
    sharp = DecisionDistill(consistency=0.5, teacher_temperature=0.5)(model, batch)
    with torch.no_grad():
        kl_sharp = F.kl_div(logp[:, 0], torch.log_softmax(2 * teacher, -1), log_target=True, reduction="sum")
    assert abs(float(sharp.loss_sum.detach()) - float(kl_sharp + 0.5 * cons)) < 1e-4


def test_frozen_teacher_is_the_model_as_it_was_at_the_first_step(tiny_model):
    model, tok, _ = tiny_model
    model = copy.deepcopy(model)  # the fixture's model stays as it is
    batch = batch_of(tok, rotations=None)
    frozen, live = DecisionDistill(teacher_model="frozen"), DecisionDistill()
    first = frozen(model, batch)
    assert abs(float(first.loss_sum.detach()) - float(live(model, batch).loss_sum.detach())) < 1e-5
    with torch.no_grad():
        teacher_before = live.teacher(label_logprobs(model, batch), batch["perms"])
        model.lm_head.weight.mul_(3.0).add_(0.05)  # a "trained" student: sharper, shifted readouts
        logp = label_logprobs(model, batch)
        kl_frozen = F.kl_div(logp[:, 0], teacher_before, log_target=True, reduction="sum")
        consensus = torch.log_softmax(logp.mean(1), -1)
        cons = sum(F.kl_div(logp[:, r], consensus, log_target=True, reduction="sum") for r in range(4)) / 4
    later = frozen(model, batch)
    assert abs(float(later.loss_sum.detach()) - float(kl_frozen + cons)) < 1e-4
    assert abs(float(later.loss_sum.detach()) - float(live(model, batch).loss_sum.detach())) > 1e-3
    assert all(not p.requires_grad for p in frozen._frozen.parameters())
    with pytest.raises(ValueError, match="teacher_model='old'"):
        DecisionDistill(teacher_model="old")


def test_distill_needs_rotations(tiny_model):
    model, tok, _ = tiny_model
    with pytest.raises(ValueError, match="at least 2 option orders"):
        DecisionDistill()(model, batch_of(tok, rotations=1))


def test_decision_ce_hint_and_bind_targets(tiny_model):
    model, tok, _ = tiny_model
    data = DecisionDataset(tok, rotations=2, order="shuffle", hints=True, seed=1)
    batch = DecisionCollator(tok)(data(RECORDS))
    plain = DecisionCE()(model, batch)
    with pytest.raises(ValueError, match="hints=true"):
        DecisionCE(hint_weight=1.0)(model, batch_of(tok, rotations=2))
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], output_hidden_states=True)
        rows = torch.arange(20)
        perms, pos, ids = batch["perms"].view(20, 4), batch["option_pos"], batch["input_ids"]
        target = batch["target"].repeat_interleave(2)
        # the labelled option's first token, where the row lists it
        shown = torch.tensor([perms[i].tolist().index(int(target[i])) for i in range(20)])
        hint_token = ids[rows, pos[rows, shown]]
        for token, t in zip(hint_token.tolist(), target.tolist(), strict=True):
            piece = tok.decode([token]).strip()
            assert piece and OPTIONS[t].startswith(piece)

        def ce(logits, where, tokens):
            return float(F.cross_entropy(logits[rows, where], tokens, reduction="sum"))

        def bind_ce(logits):
            return sum(ce(logits, pos[:, j], batch["label_ids"][:, j]) for j in range(4))

        final = out.logits
        layer1 = model.lm_head(model.model.norm(out.hidden_states[1]))
    got = DecisionCE(hint_weight=0.5, bind_weight=0.25)(model, batch)
    want = float(plain.loss_sum) + 0.5 * ce(final, batch["last"] - 1, hint_token) + 0.25 * bind_ce(final)
    assert abs(float(got.loss_sum.detach()) - want) < 1e-3 * abs(want)
    assert got.metrics["correct"] == plain.metrics["correct"]
    got = DecisionCE(hint_weight=0.5, bind_weight=0.25, hint_layer=1)(model, batch)
    hint = ce(layer1, batch["last"] - 1, hint_token) + ce(layer1, batch["last"], hint_token)
    want = float(plain.loss_sum) + 0.5 * hint + 0.25 * bind_ce(layer1)
    assert abs(float(got.loss_sum.detach()) - want) < 1e-3 * abs(want)
    with pytest.raises(ValueError, match="has 2 layers"):
        DecisionCE(hint_weight=1.0, hint_layer=3)(model, batch)
