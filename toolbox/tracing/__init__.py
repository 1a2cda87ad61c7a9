"""Agent traces: ActionRecord (OpenTelemetry GenAI fields), Tracer, trace stores, trace → dataset.

    from toolbox.tracing import Tracer
    with Tracer("traces.sqlite") as tracer, tracer.span("llm_call", "chat", inputs=msgs) as rec:
        rec.outputs = ...

``toolbox traces ls|show|stats|export|to-dataset`` reads the stores (docs/tracing.md).
"""

from toolbox.tracing.record import (
    SCHEMA_VERSION,
    ActionRecord,
    Score,
    TraceError,
    chat_to_messages,
    messages_to_chat,
    text_message,
)
from toolbox.tracing.redact import Redactor, default_redactor
from toolbox.tracing.stores import MemoryStore, Query, TraceStore, open_store
from toolbox.tracing.tracer import Tracer, current_record

__all__ = [
    "SCHEMA_VERSION",
    "ActionRecord",
    "MemoryStore",
    "Query",
    "Redactor",
    "Score",
    "TraceError",
    "TraceStore",
    "Tracer",
    "chat_to_messages",
    "current_record",
    "default_redactor",
    "messages_to_chat",
    "open_store",
    "text_message",
]
