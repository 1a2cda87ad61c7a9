"""schemathesis against ``toolbox serve``'s OpenAPI document: generated requests (valid and invalid)
to every operation never get a 500. Bounded: ``MAX_EXAMPLES`` per operation."""

from __future__ import annotations

import pytest
from conftest import free_port
from server_util import start_server

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

MAX_EXAMPLES = 40


def test_no_server_errors(model_dir, tmp_path):
    from hypothesis import given

    srv = start_server(model_dir, free_port(), tmp_path / "log", "engine.max_batch_size=64")
    try:
        schema = schemathesis.openapi.from_url(f"{srv.root}/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 5
        for op in operations:

            @given(case=op.as_strategy())
            @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
            def check(case):
                case.call_and_validate(checks=[not_a_server_error], timeout=60)

            check()
    finally:
        assert srv.stop() == 0
    assert "Traceback" not in srv.log.read_text(), srv.log.read_text()[-3000:]
