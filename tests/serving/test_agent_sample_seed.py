"""examples/agent_tools/agent.py with ``--sample-seed``: each sampled request carries a seed made from
the sample seed, the run's session and its turn, so the agent's training runs repeat through a real
``toolbox serve`` (batched by the engine in whatever order the agent's threads send them); another
sample seed samples other runs."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from toolbox.tracing import Tracer, open_store

ROOT = Path(__file__).resolve().parents[2]


def load_agent():
    spec = importlib.util.spec_from_file_location("agent_tools_agent", ROOT / "examples/agent_tools/agent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_request_seed_is_a_function_of_the_sample_seed_session_and_turn():
    agent = load_agent()
    assert agent.request_seed(None, "p0", 0) is None  # unseeded: the server's generator
    seed = agent.request_seed(0, "p0", 0)
    assert seed == agent.request_seed(0, "p0", 0) and 0 <= seed < 2**63
    assert len({agent.request_seed(s, p, t) for s in (0, 1) for p in ("p0", "p1") for t in (0, 1)}) == 8
    assert agent.run_trace_id(None, "p0") == {}  # unseeded: the tracer draws the trace id
    trace = agent.run_trace_id(0, "p0")["trace_id"]
    assert len(trace) == 32 and int(trace, 16) >= 0 and trace != agent.run_trace_id(1, "p0")["trace_id"]


def test_seeded_training_runs_repeat_through_the_server(model_dir, tmp_path, monkeypatch):
    agent = load_agent()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    problems = [{"question": f"What is {a} plus {b}?", "answer": str(a + b)} for a, b in ((3, 4), (5, 6), (7, 1), (2, 2), (9, 8), (4, 6))]  # fmt: skip
    server = agent.Server(str(model_dir), None, tmp_path / "serve.log")
    try:

        def runs(sample_seed, store):
            tracer = Tracer(tmp_path / store)
            try:
                results = agent.run_all(server.base_url, problems, tracer, 1.0, sample_seed=sample_seed)
            finally:
                tracer.close()
            roots = {
                r.session_id: r.trace_id for r in open_store(tmp_path / store).query() if r.kind == "agent"
            }
            return [r["final"] for r in results], roots

        first, roots = runs(7, "a.jsonl")
        again, roots_again = runs(7, "b.jsonl")
        assert again == first  # the same seeds: the same samples, whatever the batching
        # each run's trace id is made from the seed and its session (to-dataset reads in that order)
        assert roots == roots_again == {f"p{i}": agent.run_trace_id(7, f"p{i}")["trace_id"] for i in range(6)}
        assert runs(8, "c.jsonl")[0] != first  # other seeds sample other runs
        assert len(set(first)) > 1  # the runs are samples, not one greedy reply
    finally:
        server.stop()
