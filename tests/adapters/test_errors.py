"""Every recorded error payload classifies to its expected code, thrown and in a stream."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from plait.adapters.models._anthropic import MessagesStream
from plait.adapters.models._common import Target
from plait.adapters.models._errors import classify, retry_after_from
from plait.adapters.models._gemini import GenerateStream
from plait.adapters.models._openai_chat import ChatStream
from plait.adapters.models._openai_responses import ResponsesStream
from plait.domain.errors import ModelError, ModelErrorCode
from tests.adapters._cassettes import overflow_cases

CASES = overflow_cases()
T = Target(vendor="x", adapter="x", model="m")


def _ids(case: dict[str, Any]) -> str:
    return f"{case['provider']}-{case['protocol']}-{case['status']}-{case['expect']}"


def _error_of(case: dict[str, Any]) -> Any:
    if "body" in case:
        return case["body"]
    event = case["event"]
    return {"error": event.get("error") or event["response"]["error"]}


def _in_stream(case: dict[str, Any]) -> None:
    """Feed the case to the stream decoder of its protocol, as an in-band event."""
    protocol, provider = case["protocol"], case["provider"]
    if "event" in case:
        ResponsesStream(T).feed(case["event"])
    elif protocol == "responses":
        ResponsesStream(T).feed({"type": "error", **case["body"]})
    elif provider == "anthropic":
        MessagesStream(T).feed(case["body"])
    elif provider == "gemini":
        GenerateStream(T).feed(case["body"])
    else:
        body = case["body"]
        ChatStream(T).feed(body if "error" in body else {"error": body})


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_thrown(case: dict[str, Any]) -> None:
    status = case["status"] if case["status"] is not None else 400
    error = classify(case["provider"], status, _error_of(case))
    assert error.model_code == case["expect"]
    assert error.details["body"] == _error_of(case)
    assert error.details["status"] == status


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_in_stream(case: dict[str, Any]) -> None:
    with pytest.raises(ModelError) as info:
        _in_stream(case)
    assert info.value.model_code == case["expect"]
    assert info.value.details["status"] is None


def test_other_codes() -> None:
    assert classify("openai", 401, {"error": {"message": "bad key"}}).model_code == "AUTHENTICATION"
    assert classify(
        "anthropic", 529, {"type": "error", "error": {"type": "overloaded_error"}}
    ).model_code == (ModelErrorCode.TRANSIENT)
    assert classify("gemini", 503, {"error": {"status": "UNAVAILABLE"}}).model_code == "TRANSIENT"
    assert classify(
        "gemini", 400, {"error": {"status": "INVALID_ARGUMENT", "message": "bad"}}
    ).model_code == (ModelErrorCode.INVALID_REQUEST)
    assert classify("x", None, "not json at all").model_code == ModelErrorCode.TRANSIENT


def test_retry_after_from_headers_and_message() -> None:
    limited = classify(
        "openai", 429, {"error": {"message": "slow down"}}, headers={"Retry-After": "7"}
    )
    assert limited.retry_after == 7.0
    assert retry_after_from({"retry-after-ms": "1500"}) == 1.5
    assert retry_after_from({}, ["Please try again in 3s."]) == 3.0
    assert retry_after_from({"retry-after": "soon"}) is None
    invalid = classify("openai", 400, {"error": {"message": "x"}}, headers={"retry-after": "7"})
    assert invalid.retry_after is None


def test_errors_pickle_with_their_original_body() -> None:
    error = classify("openai", 429, CASES[-2]["body"], headers={"retry-after": "2"})
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, ModelError)
    assert copy.details == error.details and copy.model_code == ModelErrorCode.RATE_LIMITED


def test_gemini_retry_info_gives_the_wait() -> None:
    from plait.adapters.models._gemini_client import _retry_delay

    body = {"error": {"code": 429, "details": [{"@type": "RetryInfo", "retryDelay": "3s"}]}}
    assert _retry_delay(body) == 3.0
    assert _retry_delay({"error": {"code": 429}}) is None
    assert _retry_delay("not a dict") is None


@pytest.mark.parametrize(
    "body",
    [{"error": {"message": "", "code": 400}}, {"detail": " "}, {}, "", None, {"error": ""}],
    ids=["empty-message", "blank-detail", "empty-object", "empty-text", "no-body", "empty-error"],
)
def test_no_error_message_ends_empty(body: Any) -> None:
    error = classify("openai-compatible", 400, body)
    assert error.model_code == ModelErrorCode.INVALID_REQUEST
    _, _, said = error.message.partition("INVALID_REQUEST): ")
    assert said.strip() and "no error message" in said, error.message
