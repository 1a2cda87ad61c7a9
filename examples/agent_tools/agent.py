"""The agent of examples/agent_tools: a trained model answers arithmetic word problems by calling a
calculator tool through ``toolbox serve`` with the official ``openai`` client.

    python examples/agent_tools/agent.py --model work/agent_base/train/model \
        --traces work/agent_base/traces.sqlite --eval work/agent_base/agent_eval.json \
        [--train-problems 400] [--eval-problems 100] [--before-model DIR] \
        [--digits 3 --fixed-width --templates 3]   # the source settings the model was trained on
        [--eval-traces DIR]                        # trace the held-out runs too (failures.py reads them)

1. Training problems (none of them held out): ``toolbox serve --trace TRACES`` records every model
   call; the agent records its own run (an ``agent`` span per problem, a ``tool_call`` span per
   calculator call) into the same SQLite store and sends its trace context (``traceparent``), so
   the server's model calls are children of its run. The verifiable reward (the last number of the
   final answer equals the problem's answer) is the run's score ``correct``; ``tool_call_ok`` says
   whether the first reply called the calculator with an expression of the right value.
2. Held-out problems (the test split of the ``arithmetic_tools`` source the base model was trained
   on), greedy, through a server without tracing: ``tool_call_success`` (first reply is a well-formed
   calculator call of the right value) and ``answer_accuracy`` of the model, and of
   ``--before-model`` (the model it started from) when given, into ``--eval`` (JSON).

With ``--memory DIR`` the agent keeps an episodic memory (toolbox.memory, MiniLM embeddings unless
``--memory-embedder`` says otherwise): each training run is written into it as an episode (the
problem, its calculator calls and results, the final answer, ``success``: the verifiable reward),
and with ``--recall K`` every run (training and held-out) first retrieves the K most similar
successful episodes into a system message. Held-out runs read the memory but never write to it.

With ``--sample-seed N`` each sampled request of a training run carries a seed made from N, the run's
session and its turn (``request_seed``), which the server's engine samples that request with, and
each run's trace id is made from N and its session (``run_trace_id``): the training runs repeat for
the same model and problems whatever order the requests are batched in (up to the last bits of a
batched forward), and ``toolbox traces to-dataset``, which reads traces in trace-id order, writes the
same rows in the same order. Without it the server's own generator samples (the ``agent_endpoint_grpo`` trainer runs copies of this script on the same
tasks and needs them to sample differently).

With ``--base-url URL`` the training runs go to an endpoint already serving instead of a server
started here (nothing else changes): the ``agent_endpoint_grpo`` trainer runs this script so, and
its runs become its training episodes (``toolbox.trainer.agent_endpoint_grpo``).

The store is written as ``<stem>.partial.sqlite`` and renamed to TRACES once every writer has
closed, so a killed run leaves no store the workflow could take for a finished one. Servers listen
on a free 127.0.0.1 port and are stopped by PID.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

KEY = "sk-agent-tools-local-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AgentMemory:
    """The agent's episodic memory. Runs recall from the store as it was when they started (the
    agent's threads share it under one lock); the episodes of a batch of runs are written after it,
    in problem order, so what a run recalls does not depend on which concurrent run finished first.

    The store (``toolbox.memory.EpisodicMemory`` at ``path``) is opened, searched, written and
    closed on one thread of its own: its SQLite connections (rows, embedding cache) belong to the
    thread that opened them, and the runs call it from the agent's worker threads."""

    def __init__(self, path: str | Path, embedder: dict, recall_k: int = 0) -> None:
        from toolbox.memory import EpisodicMemory

        self.recall_k = recall_k
        self.lock = threading.Lock()
        self.pending: list[tuple[str, dict, list[str], str, bool]] = []
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="memory")
        self.memory = self._thread.submit(EpisodicMemory, path, embedder=embedder).result()

    def run(self, fn, *args, **kwargs):
        """``fn(store, *args, **kwargs)`` on the memory's thread."""
        return self._thread.submit(fn, self.memory, *args, **kwargs).result()

    def recall(self, question: str) -> str:
        from toolbox.memory.episodes import recall

        with self.lock:
            if not self.recall_k or self.run(len) == 0:  # (a filter on a key no item has yet is an error)
                return ""
            return self.run(recall, question, k=self.recall_k, filters={"success": True})

    def remember(self, session: str, problem: dict, steps: list[str], final: str, correct: bool) -> None:
        with self.lock:
            self.pending.append((session, problem, steps, final, correct))

    def commit(self) -> int:
        """Write the pending episodes (in session order); return how many."""
        from toolbox.memory.episodes import write_episode

        def write(store, done) -> None:
            for _, problem, steps, final, correct in done:
                write_episode(store, problem["question"], final or "(no answer)", steps, success=correct,
                              metadata={"answer": problem["answer"]})  # fmt: skip
            store.flush()

        with self.lock:
            done = sorted(self.pending, key=lambda e: (len(e[0]), e[0]))
            self.run(write, done)
            self.pending.clear()
        return len(done)

    def close(self) -> None:
        self.run(lambda store: store.close())
        self._thread.shutdown()


def publish_store(partial: Path, path: Path) -> None:
    """Move a finished SQLite store to its final name: its write-ahead log folded in first (every
    writer has closed), then one rename."""
    db = sqlite3.connect(partial)
    busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    db.close()  # the last connection: SQLite removes the emptied log
    log = partial.with_name(partial.name + "-wal")
    if busy or log.exists():
        raise RuntimeError(f"{partial}: its write-ahead log could not be folded in (a writer still open?)")
    os.replace(partial, path)


class Server:
    """``toolbox serve`` of a model folder in a subprocess (optionally with ``--trace``)."""

    def __init__(self, model: str, trace: str | None, log: Path) -> None:
        self.port = free_port()
        cmd = [sys.executable, "-m", "toolbox.cli", "serve", f"model={model}", "engine.num_threads=1",
               "--served-model-name", "agent", "--port", str(self.port), "--api-key", KEY]  # fmt: skip
        if trace:
            cmd += ["--trace", trace]
        self.log = open(log, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        import httpx

        deadline = time.monotonic() + 300
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"toolbox serve exited with {self.proc.returncode}; see {log}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"toolbox serve did not become ready in 300 s; see {log}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def request_seed(sample_seed: int | None, session: str, turn: int) -> int | None:
    """The sampling seed of a run's request at ``turn`` (None: unseeded, the server's generator)."""
    if sample_seed is None:
        return None
    digest = hashlib.blake2b(f"{sample_seed}:{session}:{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # the API's seeds are 0..2**63 - 1


def run_trace_id(sample_seed: int | None, session: str) -> dict[str, str]:
    """The trace id of a seeded run (32 hex digits, as the tracer's own), as span fields; none unseeded."""
    if sample_seed is None:
        return {}
    return {"trace_id": hashlib.blake2b(f"{sample_seed}:{session}".encode(), digest_size=16).hexdigest()}


def solve(
    client,
    problem: dict,
    tracer=None,
    session: str = "",
    temperature: float = 0.0,
    max_turns: int = 3,
    max_tokens: int = 32,
    memory: AgentMemory | None = None,
    sample_seed: int | None = None,
) -> dict:
    """One agent run: ask, execute the calculator calls, until a reply without a call. A request the
    server refuses (a conversation grown past the model's context) ends the run as not correct.
    With ``memory``, the recalled episodes open the conversation as a system message, and the run
    is kept as an episode for ``memory.commit()``.

    Traced, each model call is the child of a ``decision`` span ``turn`` (its ``traceparent``),
    scored ``step_ok``: its calls all returned the answer, or its final answer is right. The run's
    ``agent`` span gets ``correct`` and ``tool_call_ok`` (the first turn called the calculator with
    an expression of the answer's value). ``sample_seed``: each request seeded (``request_seed``), the trace id made from it (``run_trace_id``)."""
    messages = [{"role": "user", "content": problem["question"]}]
    recalled = memory.recall(problem["question"]) if memory is not None else ""
    if recalled:
        messages.insert(0, {"role": "system", "content": recalled})
    steps: list[str] = []
    if tracer is None:
        out = _turns(client, problem, None, None, session, temperature, max_turns, max_tokens, messages,
                     steps, sample_seed)  # fmt: skip
    else:
        with tracer.span("agent", "solve", session_id=session, inputs={"question": problem["question"]},
                         metadata={"answer": problem["answer"]}, **run_trace_id(sample_seed, session)) as span:  # fmt: skip
            out = _turns(client, problem, tracer, span, session, temperature, max_turns, max_tokens,
                         messages, steps, sample_seed)  # fmt: skip
            span.outputs = out["final"]
        tracer.score(span.id, "correct", out["correct"], source="reward")
        tracer.score(span.id, "tool_call_ok", out["tool_call_ok"], source="reward")
    if memory is not None:
        memory.remember(session, problem, steps, out["final"], out["correct"])
    return out


def _turns(
    client, problem, tracer, span, session, temperature, max_turns, max_tokens, messages, steps, sample_seed
) -> dict:
    """The model calls of one run (see ``solve``); appends to ``messages`` and ``steps``."""
    import openai

    from toolbox.data.sources.arithmetic_tools import TOOLS, call_expression, final_answer, run_call

    def answer_of(result: str) -> bool:
        return result == problem["answer"]

    def execute(call) -> str:
        expression = call_expression(call.function.arguments)
        context = (
            tracer.span("tool_call", call.function.name, inputs={"expression": expression}, metadata={"tool_call_id": call.id})
            if tracer is not None
            else nullcontext()
        )  # fmt: skip
        with context as t:
            result = run_call(call.function.name, call.function.arguments)[1]
            if t is not None:
                t.outputs = result
        steps.append(f"{call.function.name}({expression}) -> {result}")
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return result

    tool_ok, final = False, ""
    for turn in range(max_turns):
        with (
            tracer.span("decision", "turn", inputs={"turn": turn})
            if tracer is not None
            else nullcontext() as step
        ):
            headers = {"X-Session-Id": session}
            if step is not None:  # the server's record of this model call becomes the turn's child
                headers["traceparent"] = f"00-{step.trace_id}-{step.id}-01"
            try:
                reply = client.chat.completions.create(model="agent", messages=messages, tools=TOOLS, max_tokens=max_tokens,
                                                       temperature=temperature, extra_headers=headers,
                                                       seed=request_seed(sample_seed, session, turn))  # fmt: skip
            except openai.BadRequestError as e:
                if span is not None:
                    span.error = f"BadRequestError: {e.message}"
                final, calls = "", None
            else:
                message = reply.choices[0].message
                calls = message.tool_calls or []
                if not calls:
                    final = message.content or ""
                    ok = final_answer(final) == problem["answer"]
                else:
                    messages.append({"role": "assistant", "content": message.content or "",
                                     "tool_calls": [c.model_dump(exclude_none=True) for c in calls]})  # fmt: skip
                    right = [c.function.name == "calculator" and answer_of(execute(c)) for c in calls]
                    ok = all(right)
                    tool_ok = tool_ok or (turn == 0 and any(right))
        if calls is None:  # refused: no reply to score
            break
        if step is not None:  # this model call's own verifiable reward (to-dataset --where step_ok==true)
            tracer.score(step.id, "step_ok", ok, source="reward")
        if not calls:
            break
    return {"correct": final_answer(final) == problem["answer"], "tool_call_ok": tool_ok, "final": final}


def run_all(
    base_url: str,
    problems: list[dict],
    tracer=None,
    temperature: float = 0.0,
    prefix: str = "p",
    memory: AgentMemory | None = None,
    sample_seed: int | None = None,
) -> list[dict]:
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=2, timeout=300)
    with ThreadPoolExecutor(4) as pool:  # the engine batches concurrent requests
        futures = [
            pool.submit(
                solve, client, p, tracer, f"{prefix}{i}", temperature, memory=memory, sample_seed=sample_seed
            )
            for i, p in enumerate(problems)
        ]
        return [f.result() for f in futures]


def metrics(results: list[dict]) -> dict:
    n = max(len(results), 1)
    return {
        "problems": len(results),
        "tool_call_success": sum(r["tool_call_ok"] for r in results) / n,
        "answer_accuracy": sum(r["correct"] for r in results) / n,
    }


def paired(after: list[dict], before: list[dict]) -> dict:
    """Per metric, over the same held-out problems in the same order: how many the trained model
    solved and its start did not (``won``), the reverse (``lost``), and the standard error of the
    gain from the per-problem differences (paired: tighter than two independent proportions')."""
    out = {}
    for metric, key in (("tool_call_success", "tool_call_ok"), ("answer_accuracy", "correct")):
        d = [int(bool(x[key])) - int(bool(y[key])) for x, y in zip(after, before, strict=True)]
        n, mean = len(d), sum(d) / max(len(d), 1)
        var = sum((x - mean) ** 2 for x in d) / (n - 1) if n > 1 else 0.0
        out[metric] = {"won": d.count(1), "lost": d.count(-1), "se": round((var / n) ** 0.5, 6) if n else 0.0}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", help="the model folder to serve (not needed with --base-url)")
    p.add_argument(
        "--base-url",
        help="the endpoint of the training runs, already serving (e.g. the agent_endpoint_grpo trainer's); "
        "default: a toolbox serve of --model started here",
    )
    p.add_argument("--traces", required=True, help="the SQLite trace store to write")
    p.add_argument("--eval", required=True, help="the metrics JSON to write")
    p.add_argument("--before-model", help="also evaluate this model (the one this run started from)")
    p.add_argument("--train-problems", type=int, default=400)
    p.add_argument("--eval-problems", type=int, default=100)
    p.add_argument("--temperature", type=float, default=0.7, help="sampling of the training runs")
    p.add_argument("--digits", type=int, default=3, help="as the source of the model's training data")
    p.add_argument("--fixed-width", action="store_true", help="as the source (operands of exactly --digits)")
    p.add_argument("--templates", type=int, default=0, help="as the source (0: all its templates)")
    p.add_argument("--seed", type=int, default=1, help="draw of the training problems")
    p.add_argument("--sample-seed", type=int, default=None,
                   help="seed every sampled request from this, its run and its turn (the training runs repeat); "
                        "default: the server's generator")  # fmt: skip
    p.add_argument("--eval-traces", help="also trace the held-out runs: DIR/after.sqlite, DIR/before.sqlite")
    p.add_argument("--memory", help="an episodic memory store (folder): training runs are written into it")
    p.add_argument(
        "--recall", type=int, default=0, help="runs retrieve this many successful episodes (needs --memory)"
    )
    p.add_argument("--memory-embedder", default="minilm", help="the memory's embedder (a registered name)")
    a = p.parse_args(argv)
    if a.recall and not a.memory:
        p.error("--recall needs --memory (the store to recall from)")
    if not a.model and not a.base_url:
        p.error("--model is needed (the model to serve), or --base-url (an endpoint already serving)")

    from toolbox.core.atomic import atomic_write_text
    from toolbox.data.sources.arithmetic_tools import arithmetic_tools, draw
    from toolbox.tracing import Tracer

    # the source's test split (it depends only on these settings and the source's seed 0, not on
    # how many training problems the model saw), so the held-out problems are the model's own
    source = {"digits": a.digits, "fixed_width": a.fixed_width, "templates": a.templates}
    held_out = [
        {k: r[k] for k in ("question", "expression", "answer")}
        for r in arithmetic_tools(num_train=1, num_test=max(a.eval_problems, 1), **source).test
    ]
    held_out = held_out[: a.eval_problems]
    questions = {q["question"] for q in held_out}
    train = [
        q
        for q in draw(a.train_problems + len(held_out), 0, seed=a.seed, **source)[0]
        if q["question"] not in questions
    ]
    train = train[: a.train_problems]
    traces = Path(a.traces)
    traces.parent.mkdir(parents=True, exist_ok=True)
    # written under a temporary name and renamed once complete: a killed run leaves no store that
    # the workflow (Snakemake, DVC) could take for finished
    partial = traces.with_name(f"{traces.stem}.partial{traces.suffix}")
    for name in (traces.name, partial.name):
        for stale in traces.parent.glob(name + "*"):
            stale.unlink()
    log = traces.with_suffix(".serve.log")
    out: dict = {"model": a.model}
    start = time.perf_counter()
    memory = None
    if a.memory:
        memory = AgentMemory(a.memory, {"name": a.memory_embedder}, a.recall)
    try:
        tracer = Tracer(partial, flush_every=32)  # the agent's runs, beside the server's model calls
        server = Server(a.model, str(partial), log) if not a.base_url else None
        try:
            base_url = a.base_url or server.base_url
            results = run_all(
                base_url, train, tracer, a.temperature, memory=memory, sample_seed=a.sample_seed
            )
            if memory is not None:
                out["memory"] = {"written": memory.commit(), "recall": a.recall, "path": a.memory}
        finally:
            tracer.close()
            if server is not None:
                server.stop()
        publish_store(partial, traces)
        out["train_runs"] = metrics(results)
        held: dict[str, list[dict]] = {}
        for name, model in (("after", a.model), ("before", a.before_model)):
            if not model or not held_out:
                continue
            store = None
            if a.eval_traces:  # the held-out runs traced too, for examples/agent_tools/failures.py
                store = Path(a.eval_traces) / f"{name}.sqlite"
                store.parent.mkdir(parents=True, exist_ok=True)
                for stale in store.parent.glob(store.name + "*"):
                    stale.unlink()
            eval_tracer = Tracer(store, flush_every=32) if store else None
            server = Server(model, str(store) if store else None, log)
            try:
                results = run_all(server.base_url, held_out, eval_tracer, prefix="eval", memory=memory)
            finally:
                if eval_tracer is not None:
                    eval_tracer.close()
                server.stop()
            if memory is not None:
                memory.pending.clear()  # held-out runs read the memory, never write to it
            out[name], held[name] = metrics(results), results
    finally:
        if memory is not None:
            memory.close()
    if "before" in out:  # what training on the traces changed (toolbox check reads gain/...)
        out["gain"] = {
            k: round(out["after"][k] - out["before"][k], 6) for k in ("tool_call_success", "answer_accuracy")
        }
        out["paired"] = paired(held["after"], held["before"])
    out["minutes"] = round((time.perf_counter() - start) / 60, 2)
    atomic_write_text(a.eval, json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
