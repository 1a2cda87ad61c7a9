"""The OpenTelemetry bridge, both ways.

In: ``StoreSpanExporter(store)`` is an OTel SDK ``SpanExporter``: add it to a ``TracerProvider``
(``BatchSpanProcessor(StoreSpanExporter(store))``) and every span of an OTel-instrumented agent
lands in our store as an ActionRecord, its ``gen_ai.*`` attributes mapped as
``toolbox.tracing.record`` lists; attributes with no field of their own go to ``metadata``.

Out: ``to_otlp_json(records)`` encodes records as an OTLP ``ExportTraceServiceRequest`` with the
exporter's own encoder (``opentelemetry-exporter-otlp-proto-common``) and writes it in the OTLP/JSON
encoding (protobuf's JSON mapping, enums as integers, trace and span ids as hex as the OTLP spec
requires), which an OTel collector's ``otlpjsonfile`` receiver and ``from_otlp_json`` read back.
Times are nanoseconds in OTLP: a record's seconds come back to within a microsecond.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from toolbox.tracing.record import KIND_OF_OPERATION, SCHEMA_VERSION, ActionRecord, Score
from toolbox.tracing.stores.base import TraceStore

KIND = "toolbox.kind"
SCHEMA = "toolbox.schema_version"
INPUTS, OUTPUTS = "toolbox.inputs", "toolbox.outputs"
SCORES, TAGS, METADATA = "toolbox.scores", "toolbox.tags", "toolbox.metadata"
ERROR = "toolbox.error"
ORIGINAL_ID, ORIGINAL_PARENT, ORIGINAL_TRACE = "toolbox.id", "toolbox.parent_id", "toolbox.trace_id"
_JSON_ATTRS = {
    ga.GEN_AI_INPUT_MESSAGES,
    ga.GEN_AI_OUTPUT_MESSAGES,
    ga.GEN_AI_TOOL_DEFINITIONS,
    ga.GEN_AI_TOOL_CALL_ARGUMENTS,
    ga.GEN_AI_TOOL_CALL_RESULT,
    INPUTS,
    OUTPUTS,
    SCORES,
    METADATA,
}
_MAPPED = _JSON_ATTRS | {
    KIND,
    SCHEMA,
    TAGS,
    ERROR,
    ORIGINAL_ID,
    ORIGINAL_PARENT,
    ORIGINAL_TRACE,
    ga.GEN_AI_OPERATION_NAME,
    ga.GEN_AI_CONVERSATION_ID,
    ga.GEN_AI_REQUEST_MODEL,
    ga.GEN_AI_USAGE_INPUT_TOKENS,
    ga.GEN_AI_USAGE_OUTPUT_TOKENS,
    ga.GEN_AI_RESPONSE_FINISH_REASONS,
    ga.GEN_AI_TOOL_NAME,
    ga.GEN_AI_AGENT_NAME,
    error_attributes.ERROR_TYPE,
}


def _json(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


# -- records <-> attributes -----------------------------------------------------------------------
def record_attributes(r: ActionRecord) -> dict[str, Any]:
    """The OTel span attributes of a record (the module docstring of ``record`` has the table)."""
    a: dict[str, Any] = {KIND: r.kind, SCHEMA: r.schema_version}
    if r.operation_name:
        a[ga.GEN_AI_OPERATION_NAME] = r.operation_name
    if r.session_id is not None:
        a[ga.GEN_AI_CONVERSATION_ID] = r.session_id
    if r.model is not None:
        a[ga.GEN_AI_REQUEST_MODEL] = r.model
    if r.input_tokens is not None:
        a[ga.GEN_AI_USAGE_INPUT_TOKENS] = int(r.input_tokens)
    if r.output_tokens is not None:
        a[ga.GEN_AI_USAGE_OUTPUT_TOKENS] = int(r.output_tokens)
    if r.finish_reason is not None:
        a[ga.GEN_AI_RESPONSE_FINISH_REASONS] = [r.finish_reason]
    if r.kind == "llm_call":
        in_key, out_key = ga.GEN_AI_INPUT_MESSAGES, ga.GEN_AI_OUTPUT_MESSAGES
    elif r.kind == "tool_call":
        in_key, out_key = ga.GEN_AI_TOOL_CALL_ARGUMENTS, ga.GEN_AI_TOOL_CALL_RESULT
        a[ga.GEN_AI_TOOL_NAME] = r.name
    else:
        in_key, out_key = INPUTS, OUTPUTS
        if r.kind == "agent":
            a[ga.GEN_AI_AGENT_NAME] = r.name
    if r.inputs is not None:
        a[in_key] = _json(r.inputs)
    if r.outputs is not None:
        a[out_key] = _json(r.outputs)
    if r.tools is not None:
        a[ga.GEN_AI_TOOL_DEFINITIONS] = _json(r.tools)
    if r.error is not None:
        a[error_attributes.ERROR_TYPE] = r.error.split(":", 1)[0]
        a[ERROR] = r.error
    if r.scores:
        a[SCORES] = _json([s.to_dict() for s in r.scores])
    if r.tags:
        a[TAGS] = list(r.tags)
    if r.metadata:
        a[METADATA] = _json(r.metadata)
    return a


def record_from_attributes(
    name: str,
    attributes: dict[str, Any],
    span_id: str,
    trace_id: str,
    parent_id: str | None,
    start_ns: int,
    end_ns: int | None,
    status_error: str | None = None,
) -> ActionRecord:
    """An ActionRecord from an OTel span's parts (ours, or any GenAI-instrumented span)."""
    a = dict(attributes)
    for k in _JSON_ATTRS & a.keys():
        if isinstance(a[k], str):
            try:
                a[k] = json.loads(a[k])
            except ValueError:
                pass  # a foreign span may put plain text there
    operation = a.get(ga.GEN_AI_OPERATION_NAME)
    kind = a.get(KIND) or KIND_OF_OPERATION.get(operation or "", "custom")
    if kind == "llm_call":
        inputs, outputs = a.get(ga.GEN_AI_INPUT_MESSAGES), a.get(ga.GEN_AI_OUTPUT_MESSAGES)
    elif kind == "tool_call":
        inputs, outputs = a.get(ga.GEN_AI_TOOL_CALL_ARGUMENTS), a.get(ga.GEN_AI_TOOL_CALL_RESULT)
    else:
        inputs, outputs = a.get(INPUTS), a.get(OUTPUTS)
    reasons = a.get(ga.GEN_AI_RESPONSE_FINISH_REASONS)
    metadata = a.get(METADATA) if isinstance(a.get(METADATA), dict) else {}
    extra = {k: (list(v) if isinstance(v, tuple) else v) for k, v in a.items() if k not in _MAPPED}
    if extra:
        metadata = {**metadata, **extra}
    error = a.get(ERROR) or status_error
    if error is None and a.get(error_attributes.ERROR_TYPE):
        error = str(a[error_attributes.ERROR_TYPE])
    standard = {"chat": "llm_call", "execute_tool": "tool_call", "invoke_agent": "agent"}
    return ActionRecord(
        kind=kind,
        name=name,
        id=a.get(ORIGINAL_ID) or span_id,
        parent_id=a.get(ORIGINAL_PARENT) or parent_id,
        trace_id=a.get(ORIGINAL_TRACE) or trace_id,
        session_id=a.get(ga.GEN_AI_CONVERSATION_ID),
        inputs=inputs,
        outputs=outputs,
        tools=a.get(ga.GEN_AI_TOOL_DEFINITIONS),
        model=a.get(ga.GEN_AI_REQUEST_MODEL),
        operation=None if operation is None or standard.get(operation) == kind else operation,
        input_tokens=a.get(ga.GEN_AI_USAGE_INPUT_TOKENS),
        output_tokens=a.get(ga.GEN_AI_USAGE_OUTPUT_TOKENS),
        finish_reason=reasons[0] if reasons else None,
        error=error,
        start_time=start_ns / 1e9,
        end_time=None if end_ns is None else end_ns / 1e9,
        scores=[Score.from_dict(s) for s in a.get(SCORES) or ()],
        tags=list(a.get(TAGS) or ()),
        metadata=metadata,
        schema_version=int(a.get(SCHEMA, SCHEMA_VERSION)),
    )


# -- OTel SDK spans -------------------------------------------------------------------------------
def record_from_span(span: ReadableSpan) -> ActionRecord:
    ctx = span.context
    parent = span.parent
    error = span.status.description if span.status.status_code == StatusCode.ERROR else None
    return record_from_attributes(
        span.name,
        dict(span.attributes or {}),
        f"{ctx.span_id:016x}",
        f"{ctx.trace_id:032x}",
        f"{parent.span_id:016x}" if parent is not None else None,
        span.start_time or 0,
        span.end_time,
        error or (None if span.status.status_code != StatusCode.ERROR else "error"),
    )


class StoreSpanExporter(SpanExporter):
    """An OTel ``SpanExporter`` writing every span into a trace store as an ActionRecord.

    Args:
        store: the TraceStore (left open on shutdown unless ``close_store``).
        close_store: close the store when the provider shuts down.
    """

    def __init__(self, store: TraceStore, close_store: bool = False) -> None:
        self.store = store
        self.close_store = close_store

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.store.write([record_from_span(s) for s in spans])
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        if self.close_store:
            self.store.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.store.flush()
        return True


def _id_int(value: str, hex_len: int) -> tuple[int, bool]:
    """An id as OTel's integer; a non-canonical id (not ``hex_len`` hex digits) is hashed (True)."""
    if len(value) == hex_len:
        try:
            n = int(value, 16)
            if n:
                return n, False
        except ValueError:
            pass
    digest = hashlib.blake2b(value.encode(), digest_size=hex_len // 2).digest()
    return int.from_bytes(digest, "big") or 1, True


def record_to_span(r: ActionRecord, resource: Any = None, scope: Any = None) -> ReadableSpan:
    attributes = record_attributes(r)
    trace_id, hashed = _id_int(r.trace_id, 32)
    if hashed:
        attributes[ORIGINAL_TRACE] = r.trace_id
    span_id, hashed = _id_int(r.id, 16)
    if hashed:
        attributes[ORIGINAL_ID] = r.id
    parent = None
    if r.parent_id is not None:
        parent_int, hashed = _id_int(r.parent_id, 16)
        if hashed:
            attributes[ORIGINAL_PARENT] = r.parent_id
        parent = SpanContext(
            trace_id, parent_int, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)
        )
    status = Status(StatusCode.ERROR, r.error) if r.error is not None else Status(StatusCode.UNSET)
    kind = SpanKind.CLIENT if r.kind in ("llm_call",) else SpanKind.INTERNAL
    return ReadableSpan(
        name=r.name,
        context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)),
        parent=parent,
        resource=resource,
        attributes=attributes,
        kind=kind,
        status=status,
        start_time=round(r.start_time * 1e9),
        end_time=None if r.end_time is None else round(r.end_time * 1e9),
        instrumentation_scope=scope,
    )


# -- OTLP JSON ------------------------------------------------------------------------------------
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _ids(obj: Any, convert) -> None:
    """Rewrite the trace/span ids of an OTLP JSON object in place (base64 <-> hex)."""
    for rs in obj.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for span in ss.get("spans", ()):
                for key in _ID_KEYS:
                    if span.get(key):
                        span[key] = convert(span[key])
                for link in span.get("links", ()):
                    for key in _ID_KEYS:
                        if link.get(key):
                            link[key] = convert(link[key])


def to_otlp_dict(records: Iterable[ActionRecord], service_name: str = "toolbox") -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    from toolbox import __version__

    resource = Resource.create({"service.name": service_name})
    scope = InstrumentationScope("toolbox.tracing", __version__)
    request = encode_spans([record_to_span(r, resource, scope) for r in records])
    obj = MessageToDict(request, use_integers_for_enums=True)
    _ids(obj, lambda b64: base64.b64decode(b64).hex())
    return obj


def to_otlp_json(records: Iterable[ActionRecord], service_name: str = "toolbox") -> str:
    """Records as one OTLP/JSON ``ExportTraceServiceRequest``."""
    return json.dumps(to_otlp_dict(records, service_name), ensure_ascii=False)


def _any_value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, which)


def from_otlp_json(text: str | dict[str, Any]) -> list[ActionRecord]:
    """The records of an OTLP/JSON traces request (ours or any GenAI-instrumented exporter's); a
    string of several lines is read as JSON lines, one request each (the otlpjsonfile layout)."""
    if isinstance(text, str) and "\n" in text.strip():
        return [r for line in text.splitlines() if line.strip() for r in from_otlp_json(line)]
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    obj = json.loads(text) if isinstance(text, str) else json.loads(json.dumps(text))
    _ids(obj, lambda h: base64.b64encode(bytes.fromhex(h)).decode())
    request = ParseDict(obj, ExportTraceServiceRequest())
    records = []
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                attributes = {kv.key: _any_value(kv.value) for kv in span.attributes}
                error = span.status.message or "error" if span.status.code == 2 else None
                records.append(
                    record_from_attributes(
                        span.name,
                        attributes,
                        span.span_id.hex(),
                        span.trace_id.hex(),
                        span.parent_span_id.hex() or None,
                        span.start_time_unix_nano,
                        span.end_time_unix_nano or None,
                        error,
                    )
                )
    return records
