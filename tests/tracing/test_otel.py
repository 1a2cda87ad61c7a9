"""The OpenTelemetry bridge: the SDK's own tracer into our store; our records as OTLP JSON and back."""

from __future__ import annotations

import json

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode

from toolbox.tracing import Tracer, open_store
from toolbox.tracing.otel import StoreSpanExporter, from_otlp_json, to_otlp_json


def test_an_otel_instrumented_snippet_lands_in_our_store(store_path):
    store = open_store(store_path)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(StoreSpanExporter(store, close_store=True)))
    otel = provider.get_tracer("my-agent")
    messages = [{"role": "user", "parts": [{"type": "text", "content": "2+2?"}]}]
    with otel.start_as_current_span("invoke_agent calc-agent") as agent:
        agent.set_attribute("gen_ai.operation.name", "invoke_agent")
        agent.set_attribute("gen_ai.agent.name", "calc-agent")
        agent.set_attribute("gen_ai.conversation.id", "conv-1")
        with otel.start_as_current_span("chat tiny") as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.set_attribute("gen_ai.request.model", "tiny")
            chat.set_attribute("gen_ai.usage.input_tokens", 7)
            chat.set_attribute("gen_ai.usage.output_tokens", 3)
            chat.set_attribute("gen_ai.response.finish_reasons", ["tool_calls"])
            chat.set_attribute("gen_ai.input.messages", json.dumps(messages))
            chat.set_attribute("gen_ai.provider.name", "toolbox")
        with otel.start_as_current_span("execute_tool calculator") as tool:
            tool.set_attribute("gen_ai.operation.name", "execute_tool")
            tool.set_attribute("gen_ai.tool.name", "calculator")
            tool.set_attribute("gen_ai.tool.call.arguments", '{"expression": "2+2"}')
            tool.set_status(Status(StatusCode.ERROR, "division by zero"))
    provider.shutdown()
    with open_store(store_path, readonly=True) as back:
        by_kind = {r.kind: r for r in back.query()}
    agent_r, chat_r, tool_r = by_kind["agent"], by_kind["llm_call"], by_kind["tool_call"]
    assert agent_r.name == "invoke_agent calc-agent" and agent_r.session_id == "conv-1"
    assert chat_r.parent_id == agent_r.id and chat_r.trace_id == agent_r.trace_id
    assert (chat_r.model, chat_r.input_tokens, chat_r.output_tokens) == ("tiny", 7, 3)
    assert chat_r.finish_reason == "tool_calls" and chat_r.inputs == messages
    assert chat_r.metadata == {"gen_ai.provider.name": "toolbox"}
    assert tool_r.inputs == {"expression": "2+2"} and tool_r.error == "division by zero"
    assert chat_r.latency_s is not None and chat_r.latency_s >= 0


def test_our_records_round_trip_through_otlp_json(tmp_path, record_runs):
    path = tmp_path / "t.sqlite"
    with Tracer(path) as tracer:
        record_runs(tracer, n=3)
        with tracer.span(
            "decision", "pick", inputs={"options": [1, 2]}, metadata={"k": [1, {"a": None}]}
        ) as d:
            d.outputs = 2
    with open_store(path, readonly=True) as store:
        records = list(store.query())
    text = to_otlp_json(records)
    obj = json.loads(text)
    span = obj["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16  # hex, as OTLP/JSON wants
    attrs = {a["key"] for s in obj["resourceSpans"][0]["scopeSpans"][0]["spans"] for a in s["attributes"]}
    assert {
        "gen_ai.operation.name",
        "gen_ai.request.model",
        "gen_ai.input.messages",
        "gen_ai.tool.call.arguments",
    } <= attrs
    back = from_otlp_json(text)
    assert len(back) == len(records)
    for a, b in zip(records, back, strict=True):
        da, db = a.to_dict(), b.to_dict()
        for t in ("start_time", "end_time", "latency_s"):
            assert abs(da.pop(t) - db.pop(t)) < 1e-6
        assert da == db
