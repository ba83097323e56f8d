"""Schemathesis against the live server, from its own OpenAPI document: a bounded number
of generated requests per operation (valid and invalid), as a principal with a key. No
response may be a server error, and every response must match the documented schema."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from tests.http.conftest import Live

EXAMPLES = 10
"""Per operation and generation mode; the whole run stays around half a minute."""


def test_no_server_errors_and_conforming_responses(live: Live) -> None:
    schema = schemathesis.openapi.from_url(f"{live.url}/v1/openapi.json")
    headers = {"Authorization": f"Bearer {live.keys['alice']}"}
    checks = [not_a_server_error, response_schema_conformance, content_type_conformance]
    tried = []
    for result in schema.get_all_operations():
        op = result.ok()  # type: ignore[union-attr]  # Err raises: the schema is ours
        if op.path == "/v1/runs/{run_id}/events":
            continue  # a stream; its errors are JSON and covered by tests/http/test_api.py
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=op.as_strategy(generation_mode=mode))
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                database=None,
            )
            def check(case: Any) -> None:
                case.call_and_validate(base_url=live.url, headers=headers, checks=checks)

            try:
                check()
            except Unsatisfiable:
                # An operation without inputs has no invalid request to make.
                assert mode is GenerationMode.NEGATIVE, op.path
        tried.append(f"{op.method.upper()} {op.path}")
    assert len(tried) >= 9, tried
