"""The http backend against a live ``toolbox serve``: label log-probs equal the torch backend's."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serving"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_http_backend_equals_torch(tiny_model, tmp_path):
    from server_util import start_server

    from toolbox.decision import DecisionReader, Question
    from toolbox.decision.backends import Encoded, backend_for
    from toolbox.decision.backends.torch import TorchDecisionBackend
    from toolbox.serving.engines.http_engine import HTTPEngine

    model, tok, path = tiny_model
    server = start_server(Path(path), _free_port(), tmp_path / "server.log")
    try:
        engine = HTTPEngine(base_url=server.base_url, tokenizer=tok)
        backend = backend_for(engine, top_logprobs=5)
        reader = DecisionReader(TorchDecisionBackend(model, tok))
        prompts = []
        for state in ["I lost my card", "what is my balance", "refund now"]:
            prompt, _ = reader.prompt(state, Question.yes_no("Is the customer angry?"), [0, 1])
            prompts.append(Encoded(prompt.text, tuple(tok.encode(prompt.text, add_special_tokens=False))))
        with torch.no_grad():  # the model's own two most likely next tokens, and one unlikely token
            full = [
                torch.log_softmax(model(input_ids=torch.tensor([p.ids])).logits[0, -1].double(), -1)
                for p in prompts
            ]
        ids = [[int(t) for t in f.topk(2).indices] + [int(f.argmin())] for f in full]
        got = backend.label_logprobs(prompts, ids)
        for g, f, i in zip(got, full, ids, strict=True):
            np.testing.assert_allclose(g[:2].numpy(), f[i[:2]].numpy(), atol=1e-4)  # in the top 5: exact
            assert f[i[2]] < g[2] <= f.topk(5).values[-1] + 1e-4  # outside: the 5th value, an upper bound
        assert (backend.read, backend.missing) == (9, 3)
    finally:
        server.stop()
