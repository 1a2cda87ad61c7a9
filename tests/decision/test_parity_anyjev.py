"""Our raw and L0 distributions equal anyjev 0.3.0's Decider (HF backend) on the same tiny model."""

from __future__ import annotations

import numpy as np
import pytest

from toolbox.decision import DecisionReader, Question
from toolbox.decision.backends.hf import HFDecisionBackend
from toolbox.decision.backends.torch import TorchDecisionBackend

anyjev = pytest.importorskip("anyjev")

STATES = [
    "I lost my card yesterday",
    "what is my balance",
    "please send money to my brother",
    "I want a refund for this",
    "my card is gone",
    "how much is left on the account",
    "transfer 50 to savings",
    "give me my money back",
    "card stolen",
    "",
]
OURS = [
    Question.choice("Which intent is this?", ["lost card", "balance", "transfer", "refund"]),
    Question.yes_no("Is the customer angry?"),
    Question.score("How urgent is it?", ["low", "medium", "high"]),
    Question.score("How urgent is it?", 4, scale=(0.0, 1.0)),
]


def theirs(q: Question):
    from anyjev import Question as AQ

    if q.kind == "choice":
        return AQ.choice(q.text, list(q.options))
    if q.kind == "yes_no":
        return AQ.noul(q.text)
    if q.described:
        return AQ.score(q.text, levels=list(q.options))
    return AQ.score(q.text, bins=q.k, scale=q.scale)


@pytest.fixture(scope="module")
def anyjev_backend(tiny_model):
    from anyjev.backends.hf import HFBackend

    return HFBackend(tiny_model[2], device="cpu", dtype="float32")


@pytest.mark.parametrize("backend_name", ["torch", "hf"])
@pytest.mark.parametrize("prior", ["batch", "content_free", "none"])
def test_raw_and_l0_equal_anyjev(tiny_model, anyjev_backend, backend_name, prior):
    from anyjev import Decider

    model, tok, _ = tiny_model
    backend = TorchDecisionBackend(model, tok) if backend_name == "torch" else HFDecisionBackend(model, tok)
    for q in OURS:
        ours = DecisionReader(backend, prior=prior, min_prior_n=4)
        ref = Decider(anyjev_backend, prior=prior, min_prior_n=4, shared_prefix=True)
        aq = theirs(q)
        # two calls: the running batch prior carries over from the first (3 states, below min_prior_n)
        for chunk in (STATES[:3], STATES[3:]):
            for level in ("raw", "L0"):
                got = np.stack([d.probs for d in ours.decide_batch(chunk, q, level=level)])
                want = np.stack([d.probs for d in ref.decide_batch(chunk, aq, level=level)])
                assert got.shape == want.shape == (len(chunk), q.k)
                np.testing.assert_allclose(got, want, atol=1e-5, rtol=0, err_msg=f"{q.kind} {level} {prior}")
        # the readout depends on the state: a parity test on constant distributions would prove little
        assert np.ptp(got[:, 0]) > 0.01


def test_many_questions_one_call_equal_anyjev(tiny_model, anyjev_backend):
    """Several questions about one state in one call (anyjev's decide) give the same numbers."""
    from anyjev import Decider

    model, tok, _ = tiny_model
    ours = DecisionReader(TorchDecisionBackend(model, tok), prior="none")
    ref = Decider(anyjev_backend, prior="none")
    for state in STATES[:4]:
        got = ours.decide([state], OURS, level="L0")[0]
        want = list(ref.decide(state, [theirs(q) for q in OURS], level="L0"))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g.probs, w.probs, atol=1e-5, rtol=0)
    assert (
        ours.stats["backend_calls"] == 2 * 4
    )  # per decide: one flat call (yes/no, score) and one grouped call


def test_anyjev_backend_under_our_reader(tiny_model, anyjev_backend):
    """AnyJev's HF backend behind our reader gives the torch backend's numbers."""
    from toolbox.decision.backends import backend_for

    model, tok, _ = tiny_model
    theirs_backend = backend_for(anyjev_backend)
    assert theirs_backend.name == "anyjev"
    q = OURS[0]
    a = np.stack([d.probs for d in DecisionReader(theirs_backend).decide_batch(STATES, q, level="L0")])
    b = np.stack(
        [
            d.probs
            for d in DecisionReader(TorchDecisionBackend(model, tok)).decide_batch(STATES, q, level="L0")
        ]
    )
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
