"""examples/agent_tools: the word-problem source, the calculator, and one agent run against a
scripted client (the loop through a real `toolbox serve` is the workflow's agent stage)."""

from __future__ import annotations

import importlib.util
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

from toolbox.data.sources.arithmetic_tools import arithmetic_tools, calculate, final_answer, run_call
from toolbox.tracing import MemoryStore, Tracer

HERE = Path(__file__).parent
spec = importlib.util.spec_from_file_location("agent_tools_agent", HERE / "agent.py")
agent = importlib.util.module_from_spec(spec)
spec.loader.exec_module(agent)
spec = importlib.util.spec_from_file_location("agent_tools_failures", HERE / "failures.py")
failures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(failures)
spec = importlib.util.spec_from_file_location("agent_tools_seeds", HERE / "seeds.py")
seeds = importlib.util.module_from_spec(spec)
spec.loader.exec_module(seeds)


def test_calculator_and_disjoint_splits():
    assert [calculate(e) for e in ("412+75", "9-12", "-3*4", "7 * 8")] == ["487", "-3", "-12", "56"]
    assert calculate("2**8").startswith("error")
    # a model's call executed and its final answer read, as the agent and the tool_calls evaluator do
    assert run_call("calculator", '{"expression":"12+30"}') == ("12+30", "42")
    assert run_call("calculator", "{not json")[0] == "" and run_call("calculator", "[1]")[1].startswith(
        "error"
    )
    assert run_call("search", '{"expression":"1+1"}') == ("1+1", "error: unknown tool")
    assert (final_answer("The answer is -3."), final_answer("12 and then 47"), final_answer("none")) == (
        "-3",
        "47",
        None,
    )
    s = arithmetic_tools(num_train=300, num_test=50)
    assert not {r["question"] for r in s.train} & {r["question"] for r in s.test}
    r = s.train[0]
    call = r["messages"][1]["tool_calls"][0]
    assert (
        calculate(json.loads(call["function"]["arguments"])["expression"])
        == r["answer"]
        == r["messages"][2]["content"]
    )
    expected = {"name": "calculator", "arguments": {"expression": r["expression"]}}
    assert r["tool_call_text"] == "<tool_call>" + json.dumps(expected, separators=(",", ":")) + "</tool_call>"


class ScriptedClient:
    """Answers like a served model: first a calculator call, then the tool's result as the answer."""

    def __init__(self, expression: str, answer: str | None = None) -> None:
        self.expression, self.answer, self.requests = expression, answer, []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **request):
        self.requests.append(request)
        if request["messages"][-1]["role"] == "user":
            call = SimpleNamespace(id="call_1", function=SimpleNamespace(name="calculator", arguments=json.dumps({"expression": self.expression})),
                                   model_dump=lambda **_: {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": self.expression})}})  # fmt: skip
            message = SimpleNamespace(content=None, tool_calls=[call])
        else:
            message = SimpleNamespace(
                content=f"The answer is {self.answer or request['messages'][-1]['content']}.", tool_calls=None
            )
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])


def test_an_agent_run_is_traced_and_scored_by_its_verifiable_reward():
    problem = {
        "question": "Tom has 12 coins and finds 30 more. How many coins does he have?",
        "expression": "12+30",
        "answer": "42",
    }
    store = MemoryStore()
    tracer = Tracer(store, flush_every=1)
    client = ScriptedClient("12+30")
    out = agent.solve(client, problem, tracer, session="p0")
    assert out == {"correct": True, "tool_call_ok": True, "final": "The answer is 42."}
    run = next(r for r in store.records if r.kind == "agent")
    turns = [r for r in store.records if r.kind == "decision"]
    tool = next(r for r in store.records if r.kind == "tool_call")
    assert [t.parent_id for t in turns] == [run.id, run.id] and tool.parent_id == turns[0].id
    assert tool.outputs == "42" and [t.score("step_ok").value for t in turns] == [True, True]
    assert run.score("correct").value is True and run.score("tool_call_ok").value is True
    for request, turn in zip(client.requests, turns, strict=True):  # the model call is the turn's child
        assert request["extra_headers"] == {
            "X-Session-Id": "p0",
            "traceparent": f"00-{run.trace_id}-{turn.id}-01",
        }
    assert client.requests[1]["messages"][2] == {"role": "tool", "tool_call_id": "call_1", "content": "42"}

    wrong = agent.solve(ScriptedClient("12*30"), problem, tracer, session="p1")
    assert wrong["correct"] is False and wrong["tool_call_ok"] is False
    # the right call, then a wrong answer: the call's turn is right, the answer's is not
    slip = agent.solve(ScriptedClient("12+30", answer="43"), problem, tracer, session="p2")
    assert slip == {"correct": False, "tool_call_ok": True, "final": "The answer is 43."}
    runs = {r.session_id: r for r in store.records if r.kind == "agent"}
    steps = {
        s: [
            t.score("step_ok").value
            for t in store.records
            if t.kind == "decision" and t.parent_id == runs[s].id
        ]
        for s in runs
    }
    assert steps == {"p0": [True, True], "p1": [False, False], "p2": [True, False]}


def test_the_agent_recalls_its_successful_episodes_into_the_prompt(tmp_path):
    coins = {"question": "Tom has 12 coins and finds 30 more. How many coins does he have?", "expression": "12+30", "answer": "42"}  # fmt: skip
    apples = {"question": "Ann has 5 apples and buys 7 more. How many apples does she have?", "expression": "5+7", "answer": "12"}  # fmt: skip
    memory = agent.AgentMemory(tmp_path / "memory", {"name": "hashing"}, recall_k=2)
    first = ScriptedClient("12+30")
    assert agent.solve(first, coins, session="p0", memory=memory)["correct"]
    assert first.requests[0]["messages"][0]["role"] == "user"  # nothing to recall yet
    assert agent.solve(ScriptedClient("5*7"), apples, session="p1", memory=memory)["correct"] is False
    assert memory.run(len) == 0 and memory.commit() == 2 and memory.run(len) == 2

    again = ScriptedClient("12+30")
    with ThreadPoolExecutor(1) as pool:  # as run_all calls it: from a worker thread
        pool.submit(agent.solve, again, coins, session="p2", memory=memory).result()
    system, user = again.requests[0]["messages"][:2]
    assert system["role"] == "system" and user == {"role": "user", "content": coins["question"]}
    assert system["content"].startswith("Relevant memories:")
    assert (
        f"Task: {coins['question']}\nStep 1: calculator(12+30) -> 42\nOutcome: The answer is 42."
        in system["content"]
    )
    assert "5*7" not in system["content"]  # the failed episode is not recalled
    [episode] = [
        it for it in memory.run(lambda m: m.search(coins["question"], k=2)) if it.metadata["success"]
    ]
    assert episode.metadata == {
        "kind": "agent_episode",
        "task": coins["question"],
        "success": True,
        "answer": "42",
    }
    memory.close()


def test_failures_classifies_each_first_call_against_the_question(tmp_path):
    from toolbox.tracing import ActionRecord, Score, chat_to_messages, open_store

    kinds = [failures.kind_of(e, 42, 46, "*") for e in ("42*46", "45*46", "42*56", "42*13", "41*47", "46*42", "42+46", "4d", None)]  # fmt: skip
    assert kinds == [
        "right",
        "units",
        "tens",
        "two digits",
        "both",
        "swapped",
        "operator",
        "malformed",
        "no call",
    ]
    question = "There are {a} bags with {b} marbles in each. How many marbles are there in all?"
    records = []
    for i, (expression, correct) in enumerate((("42*46", True), ("45*46", False), (None, False))):
        call = {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})}}  # fmt: skip
        reply = {"role": "assistant", "content": "", "tool_calls": [call]} if expression else {"role": "assistant", "content": "<tool_call>{"}  # fmt: skip
        root = ActionRecord("agent", "solve", id=f"r{i}", trace_id=f"t{i}", inputs={"question": question.format(a=42, b=46)},
                            scores=[Score("correct", correct)])  # fmt: skip
        model_call = ActionRecord("llm_call", "chat", parent_id=root.id, trace_id=root.trace_id, outputs=chat_to_messages([reply]))  # fmt: skip
        records += [root, model_call]
    with open_store(tmp_path / "t.jsonl") as store:
        store.write(records)
    table = failures.classify(str(tmp_path / "t.jsonl"))
    assert table == {"*": {"runs": 3, "right": 1, "answer": 1, "units": 1, "no call": 1}}
    text = failures.markdown("runs", table).markdown()
    assert "| * | 3 | 0.333 | 0.333 | 1 | 0 | 0 | 0 | 0 | 0 | 0 | 1 |" in text


def test_seeds_configures_a_point_and_resumes_it(tmp_path):
    import os

    import yaml

    forwards = frozenset({"agent_base", "agent_sft"})
    expect = seeds.configure(tmp_path, 2, "exact", "agent_sft", forwards)
    path = tmp_path / "config" / "config.yaml"
    runs = yaml.safe_load(path.read_text())["runs"]
    for run in ("agent_base", "agent_sft"):
        assert runs[run]["overrides"][-2:] == ["seed=2", "trainer.forward=exact"]
    assert expect["gain/tool_call_success"] == {"min": 0.1}
    assert "seed=2" not in runs["agent_grpo"]["overrides"]  # not in agent_sft's chain
    os.utime(path, (0, 0))  # unchanged: not written again (Snakemake would rerun everything)
    seeds.configure(tmp_path, 2, "exact", "agent_sft", forwards)
    assert path.stat().st_mtime == 0
    # agent_grpo's chain: the seed everywhere, the forward only where the trainer has the field
    # (GRPO's has none: composing trainer.forward= there would fail)
    original = yaml.safe_load((seeds.ROOT / seeds.CONFIG).read_text())["runs"]
    assert seeds.chain(original, "agent_grpo") == ["agent_base", "agent_sft", "agent_grpo"]
    assert [seeds.has_forward(original, r) for r in ("agent_sft", "agent_grpo")] == [True, False]
    expect = seeds.configure(tmp_path, 2, "exact", "agent_grpo", forwards)
    runs = yaml.safe_load(path.read_text())["runs"]
    assert runs["agent_sft"]["overrides"][-2:] == ["seed=2", "trainer.forward=exact"]
    assert runs["agent_grpo"]["overrides"][-1:] == ["seed=2"]
    assert expect == original["agent_grpo"]["expect"]
    seeds.configure(tmp_path, 1, "exact", "agent_sft", forwards)
    assert path.stat().st_mtime > 0 and "seed=1" in path.read_text()
    # an interrupted attempt: its Snakemake log started 12:00:00 and was last written 12:10:00;
    # the killed job wrote under work/ until 12:15:00
    log = tmp_path / ".snakemake" / "log" / "2026-12-05T120000.000000.snakemake.log"
    log.parent.mkdir(parents=True)
    log.write_text("")
    start = seeds.datetime(2026, 12, 5, 12).timestamp()
    os.utime(log, (start + 600, start + 600))
    metrics = tmp_path / "work" / "run" / "metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("")
    os.utime(metrics, (start + 900, start + 900))
    unlock = log.with_name("2026-12-05T121500.000000.snakemake.log")
    unlock.write_text("Unlocked working directory.\n")
    assert seeds.attempt_minutes(tmp_path) == [15.0]
    assert seeds.attempt_minutes(tmp_path / "fresh") == []


def test_paired_gain_counts_problems_won_and_lost_and_its_standard_error():
    import statistics

    after = [{"tool_call_ok": t, "correct": c} for t, c in [(1, 1), (1, 0), (1, 1), (0, 0), (1, 0)]]
    before = [{"tool_call_ok": t, "correct": c} for t, c in [(0, 0), (1, 0), (0, 1), (1, 0), (1, 0)]]
    got = agent.paired(after, before)
    d = [1, 0, 1, -1, 0]
    assert got["tool_call_success"]["won"] == 2 and got["tool_call_success"]["lost"] == 1
    assert abs(got["tool_call_success"]["se"] - statistics.stdev(d) / 5**0.5) < 1e-6
    assert got["answer_accuracy"] == {
        "won": 1,
        "lost": 0,
        "se": round(statistics.stdev([1, 0, 0, 0, 0]) / 5**0.5, 6),
    }


def test_the_trace_store_gets_its_name_only_once_complete(tmp_path):
    """agent.py writes TRACES as <stem>.partial.sqlite (a killed run leaves nothing the workflow
    takes for finished) and publishes it by one rename, its write-ahead log folded in."""
    from toolbox.tracing import open_store

    partial, final = tmp_path / "traces.partial.sqlite", tmp_path / "traces.sqlite"
    tracer = Tracer(partial, flush_every=1)
    for i in range(3):
        with tracer.span("agent", f"run{i}"):
            pass
    tracer.close()
    agent.publish_store(partial, final)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traces.sqlite"]
    store = open_store(final, readonly=True)
    assert sorted(r.name for r in store.query()) == ["run0", "run1", "run2"]
    store.close()
