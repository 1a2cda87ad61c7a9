"""schemathesis against ``toolbox serve``'s published OpenAPI document, with every check it has
(server errors, status codes, content types, response schemas, negative data rejected, positive
data accepted, ...). Bounded: ``MAX_EXAMPLES`` per operation, derandomized (a fixed seed).

One allowance, written here rather than hidden: a schema-valid request can still be one this server
cannot serve for reasons a JSON schema does not state: it exceeds what the model holds (a prompt
longer than the context, more completions than one request may ask for, a token id past the
vocabulary), combines fields that are each valid but not together (``top_logprobs`` without
``logprobs``, ``best_of`` other than ``n``), or carries a JSON schema in ``response_format`` that is
not one. Those are answered 400 with the codes in ``NOT_IN_A_SCHEMA``, and the positive-data check
accepts exactly those."""

from __future__ import annotations

import pytest
from conftest import free_port
from server_util import start_server

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

MAX_EXAMPLES = 12
NOT_IN_A_SCHEMA = {
    "context_length_exceeded",
    "too_many_completions",
    "token_out_of_vocabulary",
    "invalid_combination",
    "invalid_schema",
}


def _within_model_limits(ctx, response, case):
    """positive_data_acceptance, except for a 400 with a code of ``NOT_IN_A_SCHEMA`` (see above)."""
    if response.status_code == 400:
        try:
            code = response.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = None
        if code in NOT_IN_A_SCHEMA:
            return None
    return positive_data_acceptance(ctx, response, case)


def test_schemathesis_all_checks(model_dir, tmp_path):
    from hypothesis import given

    srv = start_server(model_dir, free_port(), tmp_path / "log", "engine.max_batch_size=64")
    try:
        schema = schemathesis.openapi.from_url(f"{srv.root}/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 5
        for op in operations:

            @given(case=op.as_strategy())
            @settings(
                max_examples=MAX_EXAMPLES,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def check(case):
                if case.body is not None and isinstance(case.body, dict):
                    case.body.setdefault("max_tokens", 4)  # bounded work: the limit is checked anyway
                case.call_and_validate(
                    excluded_checks=[positive_data_acceptance],
                    additional_checks=[_within_model_limits],
                    timeout=60,
                )

            check()
    finally:
        assert srv.stop() == 0
    assert "Traceback" not in srv.log.read_text(), srv.log.read_text()[-3000:]
