"""Tracing cost: our tracer vs the OpenTelemetry SDK and vs a bare json.dumps + write; SQLite store
throughput with 1 and 4 writer processes; ``to-dataset`` on a million records.

1. Per record (one model call with a user message in, an assistant message out, model, token
   counts), ``--records`` spans each, ``--rounds`` alternating rounds, the median round counts:
   - ``ours_jsonl``: ``Tracer`` into a JSONL store (redacted with the built-in redactor, serialised,
     written) — what an agent pays to have its call on disk;
   - ``ours_jsonl_no_redact``: the same with ``redact=None``;
   - ``ours_memory``: ``Tracer`` into a ``MemoryStore`` (redacted, not serialised);
   - ``otel_memory``: the OTel SDK's tracer, ``SimpleSpanProcessor(InMemorySpanExporter())``, the
     GenAI attributes set on the span (the messages as JSON strings, as the conventions want);
   - ``bare``: ``json.dumps`` of the same record as a dict + ``write`` to a file.
   Ratios: ours / otel (goal <= 1.0) and ours / bare (goal <= 2.0).
2. SQLite: ``--sqlite-records`` records written in batches of 256 (the tracer's flush) by 1
   process, then by 4 processes at once into one store; records per second overall, timed from
   the first write to the last close (not the interpreters' start-up).
3. ``to-dataset``: a SQLite store of ``--dataset-records`` records (agent runs of four records: a
   root scored ``correct``, two model calls, a tool call), converted to SFT rows with the filter
   ``correct==true`` in a fresh process; seconds (wall and the process's CPU, which a loaded
   machine does not inflate) and that process's peak RSS, and the same for a store a quarter the
   size (memory bounded: the peak should not grow with the store); then ``--near-dup-records``
   with near-duplicate removal at Jaccard 0.9 (the runs' rows are alike: the worst case for LSH).

The load average at the start and end is in the JSON (``load_avg_*``, and per conversion): the
machine is shared, and a wall time means little without it.

    python benchmarks/tracing.py [--records 20000] [--rounds 5] [--dataset-records 1000000] [--out F]
    python benchmarks/tracing.py --dataset-records 0 --near-dup-records 0   # the per-record part only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUESTION = "Tom has 12 apples and buys 15 more. How many apples does he have now?"
ANSWER = "He has 27 apples."


def _messages():
    from toolbox.tracing import text_message

    return [text_message("user", QUESTION)], [text_message("assistant", ANSWER)]


def bench_ours(n: int, path: str | None, redact: bool) -> float:
    from toolbox.tracing import MemoryStore, Tracer
    from toolbox.tracing.redact import default_redactor

    inputs, outputs = _messages()
    tracer = Tracer(path if path else MemoryStore(), redact=default_redactor if redact else None)
    start = time.perf_counter()
    for _ in range(n):
        with tracer.span("llm_call", "chat", inputs=inputs, model="tiny") as r:
            r.outputs = outputs
            r.input_tokens = 17
            r.output_tokens = 5
            r.finish_reason = "stop"
    tracer.close()
    return (time.perf_counter() - start) / n * 1e6


def bench_otel(n: int) -> float:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    inputs, outputs = _messages()
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    start = time.perf_counter()
    for _ in range(n):
        with tracer.start_as_current_span("chat tiny") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.request.model", "tiny")
            span.set_attribute("gen_ai.input.messages", json.dumps(inputs))
            span.set_attribute("gen_ai.output.messages", json.dumps(outputs))
            span.set_attribute("gen_ai.usage.input_tokens", 17)
            span.set_attribute("gen_ai.usage.output_tokens", 5)
            span.set_attribute("gen_ai.response.finish_reasons", ["stop"])
    took = (time.perf_counter() - start) / n * 1e6
    assert len(exporter.get_finished_spans()) == n
    provider.shutdown()
    return took


def bench_bare(n: int, path: str) -> float:
    inputs, outputs = _messages()
    with open(path, "w", encoding="utf-8") as f:
        start = time.perf_counter()
        for i in range(n):
            t = time.time()
            record = {
                "id": f"{i:016x}", "parent_id": None, "trace_id": f"{i:032x}", "session_id": None,
                "kind": "llm_call", "name": "chat", "inputs": inputs, "outputs": outputs, "model": "tiny",
                "input_tokens": 17, "output_tokens": 5, "finish_reason": "stop", "start_time": t,
                "end_time": time.time(),
            }  # fmt: skip
            f.write(json.dumps(record) + "\n")
        return (time.perf_counter() - start) / n * 1e6


SQLITE_WRITER = """
import sys, time
sys.path.insert(0, {root!r})
from toolbox.tracing import ActionRecord, text_message
from toolbox.tracing.stores.sqlite import SqliteStore
path, worker, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
inputs, outputs = [text_message("user", {q!r})], [text_message("assistant", {a!r})]
store = SqliteStore(path)
batch = []
start = time.time()
for i in range(n):
    batch.append(ActionRecord("llm_call", "chat", inputs=inputs, outputs=outputs, model="tiny",
                              input_tokens=17, output_tokens=5, start_time=time.time(), end_time=time.time()))
    if len(batch) == 256:
        store.write(batch); batch = []
store.write(batch)
store.close()
print(start, time.time())
"""


def bench_sqlite(n: int, writers: int, tmp: str) -> dict:
    path = os.path.join(tmp, f"w{writers}.sqlite")
    code = SQLITE_WRITER.format(root=str(ROOT), q=QUESTION, a=ANSWER)
    from toolbox.tracing.stores.sqlite import SqliteStore

    SqliteStore(path).close()  # the schema, so that the processes time writing only
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, path, str(w), str(n)], stdout=subprocess.PIPE, text=True
        )
        for w in range(writers)
    ]
    spans = [tuple(map(float, p.communicate()[0].split())) for p in procs]
    assert [p.returncode for p in procs] == [0] * writers
    took = max(e for _, e in spans) - min(s for s, _ in spans)  # first write to last close, no start-up
    with SqliteStore(path, readonly=True) as store:
        count = store.count()
    assert count == n * writers, count
    return {
        "writers": writers,
        "records": count,
        "seconds": round(took, 3),
        "records_per_s": round(count / took),
    }


MAKE_STORE = """
import sys, time
sys.path.insert(0, {root!r})
from toolbox.tracing import ActionRecord, Score, chat_to_messages
from toolbox.tracing.stores.sqlite import SqliteStore
path, runs = sys.argv[1], int(sys.argv[2])
tools = [{{"type": "function", "function": {{"name": "calculator", "parameters": {{"type": "object"}}}}}}]
store = SqliteStore(path)
batch, t0 = [], 1.8e9
for i in range(runs):
    a, b = i % 997, (i * 7) % 991
    chat = [{{"role": "user", "content": f"Tom has {{a}} apples and buys {{b}} more. How many? (run {{i}})"}},
            {{"role": "assistant", "content": "", "tool_calls": [{{"id": f"c{{i}}", "type": "function",
              "function": {{"name": "calculator", "arguments": f'{{{{"expression": "{{a}}+{{b}}"}}}}'}}}}]}},
            {{"role": "tool", "tool_call_id": f"c{{i}}", "content": str(a + b)}},
            {{"role": "assistant", "content": f"He has {{a + b}}."}}]
    root = ActionRecord("agent", "solve", session_id=f"s{{i % 5000}}", start_time=t0 + i, end_time=t0 + i + 0.5,
                        scores=[Score("correct", i % 4 != 0, source="reward", timestamp=t0)])
    tid, sid = root.trace_id, root.session_id
    batch += [root,
        ActionRecord("llm_call", "chat", parent_id=root.id, trace_id=tid, session_id=sid, inputs=chat_to_messages(chat[:1]),
                     outputs=chat_to_messages(chat[1:2]), tools=tools, model="tiny", start_time=t0 + i + 0.1),
        ActionRecord("tool_call", "calculator", parent_id=root.id, trace_id=tid, session_id=sid,
                     inputs={{"expression": f"{{a}}+{{b}}"}}, outputs=str(a + b), start_time=t0 + i + 0.2),
        ActionRecord("llm_call", "chat", parent_id=root.id, trace_id=tid, session_id=sid, inputs=chat_to_messages(chat[:3]),
                     outputs=chat_to_messages(chat[3:]), tools=tools, model="tiny", start_time=t0 + i + 0.3)]
    if len(batch) >= 20000:
        store.write(batch); batch = []
store.write(batch)
store.close()
"""

CONVERT = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from toolbox.tracing.dataset import to_dataset
from toolbox.tracing.record_filters import RecordFilter
start = time.perf_counter()
card = to_dataset(sys.argv[1], sys.argv[2], format="sft", filters=RecordFilter(scores=["correct==true"]),
                  near_dup=float(sys.argv[3]) if len(sys.argv) > 3 else None)
took = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"seconds": round(took, 2), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
                  "peak_rss_mb": round(usage.ru_maxrss / 1024), "records_in": card["records_in"],
                  "rows_out": card["rows_out"], "removed": card["removed"]}}))
"""


def bench_to_dataset(records: int, tmp: str, near_dup: float | None = None) -> dict:
    path = os.path.join(tmp, f"d{records}.sqlite")
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", MAKE_STORE.format(root=str(ROOT)), path, str(records // 4)], check=True
    )
    made = time.perf_counter() - start
    args = [sys.executable, "-c", CONVERT.format(root=str(ROOT)), path, os.path.join(tmp, f"out{records}")]
    if near_dup is not None:
        args.append(str(near_dup))
    load = os.getloadavg()[0]
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["load_1min"] = [round(load, 2), round(os.getloadavg()[0], 2)]  # before, after
    result.update({"store_mb": round(os.path.getsize(path) / 2**20), "store_build_s": round(made, 1)})
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sqlite-records", type=int, default=20000)
    parser.add_argument("--dataset-records", type=int, default=1_000_000)
    parser.add_argument("--near-dup-records", type=int, default=100_000)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-tracing-")
    try:
        result = _run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


def _run(args: argparse.Namespace, tmp: str) -> dict:
    import toolbox.core.json_codec as codec

    load_start = os.getloadavg()
    runs = {k: [] for k in ("ours_jsonl", "ours_jsonl_no_redact", "ours_memory", "otel_memory", "bare")}
    for r in range(args.rounds):  # alternating, so that load changes hit every variant alike
        runs["ours_jsonl"].append(bench_ours(args.records, os.path.join(tmp, f"o{r}.jsonl"), True))
        runs["otel_memory"].append(bench_otel(args.records))
        runs["ours_jsonl_no_redact"].append(bench_ours(args.records, os.path.join(tmp, f"n{r}.jsonl"), False))
        runs["bare"].append(bench_bare(args.records, os.path.join(tmp, f"b{r}.jsonl")))
        runs["ours_memory"].append(bench_ours(args.records, None, True))
    per_record = {k: round(statistics.median(v), 2) for k, v in runs.items()}
    result = {
        "per_record_us": per_record,
        "per_record_us_rounds": {k: [round(x, 2) for x in v] for k, v in runs.items()},
        "ratio_ours_jsonl_vs_otel_memory": round(per_record["ours_jsonl"] / per_record["otel_memory"], 3),
        "ratio_ours_memory_vs_otel_memory": round(per_record["ours_memory"] / per_record["otel_memory"], 3),
        "ratio_ours_jsonl_vs_bare": round(per_record["ours_jsonl"] / per_record["bare"], 3),
        "ratio_ours_jsonl_no_redact_vs_bare": round(
            per_record["ours_jsonl_no_redact"] / per_record["bare"], 3
        ),
        "sqlite": [bench_sqlite(args.sqlite_records, w, tmp) for w in (1, 4)],
    }
    if args.dataset_records:
        result["to_dataset"] = bench_to_dataset(args.dataset_records, tmp)
        result["to_dataset_quarter"] = bench_to_dataset(args.dataset_records // 4, tmp)
    if args.near_dup_records:
        result["to_dataset_near_dup_0.9"] = bench_to_dataset(args.near_dup_records, tmp, near_dup=0.9)
    result["goals_met"] = {
        "ours_jsonl_vs_otel_memory<=1": result["ratio_ours_jsonl_vs_otel_memory"] <= 1.0,
        "ours_jsonl_vs_bare<=2": result["ratio_ours_jsonl_vs_bare"] <= 2.0,
    }
    if "to_dataset" in result:
        result["goals_met"]["to_dataset_s<60"] = result["to_dataset"]["seconds"] < 60
    result["settings"] = vars(args)
    result["cpus"] = os.cpu_count()
    result["orjson"] = codec.orjson is not None
    result["load_avg_start"] = [round(x, 2) for x in load_start]
    result["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


if __name__ == "__main__":
    main()
