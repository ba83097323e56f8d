"""A typed answer through the HTTP API: ``output_schema`` on the message, the validated
value on the final message as ``output``, the schema on the run."""

from __future__ import annotations

import pytest

from tests.http.conftest import Live
from tests.http.test_api import new_session, wait_terminal

SCHEMA = {
    "type": "object",
    "properties": {"echo": {"type": "string"}},
    "required": ["echo"],
    "additionalProperties": False,
}


@pytest.mark.slow
def test_a_message_with_an_output_schema_ends_with_a_validated_output(live: Live) -> None:
    with live.client() as c:
        sid = new_session(c)["session_id"]
        body = {"text": "typed please", "output_schema": SCHEMA}
        r = c.post(f"/v1/sessions/{sid}/messages", json=body)
        assert r.status_code == 202, r.text
        assert r.json()["output_schema"] == SCHEMA
        done = wait_terminal(c, r.json()["run_id"])
        assert done["status"] == "completed", done["error"]
        assert done["usage"]["corrections"] == 1 and done["output_schema"] == SCHEMA
        messages = c.get(f"/v1/sessions/{sid}/messages").json()["messages"]
        assert [(m["kind"], m.get("output")) for m in messages] == [
            ("user", None),
            ("assistant", {"echo": "typed please"}),
        ]


@pytest.mark.slow
def test_an_output_schema_that_is_not_json_schema_is_refused(live: Live) -> None:
    with live.client() as c:
        sid = new_session(c)["session_id"]
        body = {"text": "typed", "output_schema": {"type": "frobnicate"}}
        r = c.post(f"/v1/sessions/{sid}/messages", json=body)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "invalid_value" and "frobnicate" in error["message"]
        assert c.get(f"/v1/sessions/{sid}/messages").json()["messages"] == []
