"""What real OpenAI-compatible servers do that OpenAI does not, through the real SDK
against a loopback server: Gemini's endpoint sends tool calls with an empty id and no
stream index, Gemini 3 puts a thought signature in each call's ``extra_content``, which
must come back on the next request, and some servers refuse streaming with an empty
400."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest

from plait.adapters.models import open_model
from plait.adapters.models._common import FOREIGN_THOUGHT_SIGNATURE, Target
from plait.adapters.models._driver import STREAM_REFUSALS
from plait.adapters.models._openai_chat import build_request, parse_response
from plait.application.ports import ModelClient, ModelResponse
from plait.config import Config
from plait.domain.errors import ModelError, ModelErrorCode
from plait.domain.messages import Message
from plait.testing.fake_providers import FakeHttpServer, RecordedRequest, Reply
from tests.adapters._cassettes import assistant, context, results, tool, user
from tests.adapters._clients import ask

WEATHER = tool(
    "get_weather",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
SIGNATURE = "EjQKMgEMOdbHJChLX75QUCJjyYlmFAKE"


def _call(city: str, *, extra: bool = False) -> dict[str, Any]:
    """A tool call as Gemini's OpenAI endpoint sends it: ``"id": ""``, no index."""
    call: dict[str, Any] = {
        "id": "",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
    }
    if extra:
        call["extra_content"] = {"google": {"thought_signature": SIGNATURE}}
    return call


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "gemini-3-pro-preview",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }


def _plain(calls: list[dict[str, Any]]) -> Reply:
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    return Reply(body=_completion(message, "tool_calls"))


def _streamed(calls: list[dict[str, Any]]) -> Reply:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return None, {"id": "x", "object": "chat.completion.chunk", "choices": [choice]}

    events = [chunk({"role": "assistant"})]
    events += [chunk({"tool_calls": [c]}) for c in calls]  # each whole, without index
    events.append(chunk({}, "tool_calls"))
    return Reply(events=tuple(events))


def _model(server: FakeHttpServer, model: str = "gemini-3-pro-preview") -> ModelClient:
    spec = f"openai-compatible:{server.url}/v1beta/openai#{model}"
    return open_model(spec, config=Config(), env={})


def _complete(model: ModelClient, streamed: bool) -> ModelResponse:
    request = ask((WEATHER,), "Weather in Paris and Rome?")
    if streamed:
        request = replace(request, on_text=lambda _: None)
    return asyncio.run(model.complete(request))


@pytest.mark.slow
@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_empty_call_ids_get_plait_made_ids_that_come_back(streamed: bool) -> None:
    calls = [_call("Paris"), _call("Rome")]
    with FakeHttpServer([_streamed(calls) if streamed else _plain(calls)]) as server:
        model = _model(server, "gemini-2.5-flash")
        response = _complete(model, streamed)
    assert server.requests[0].body.get("stream", False) is streamed
    ids = [c.id for c in response.tool_calls]
    assert all(ids) and len(set(ids)) == 2
    assert [c.arguments for c in response.tool_calls] == ['{"city": "Paris"}', '{"city": "Rome"}']
    message = assistant(response, (WEATHER,))  # validation accepts the calls as they are
    assert [c.id for c in message.tool_calls] == ids
    items: list[Message] = [user("Weather?"), message, *results(message, ["sun", "rain"])]
    target = Target(vendor="openai-compatible:x", adapter="openai-chat", model="gemini-2.5-flash")
    sent = build_request(target, context("", (WEATHER,), items))["messages"]
    assert [c["id"] for c in sent[1]["tool_calls"]] == ids
    assert [m["tool_call_id"] for m in sent[2:]] == ids
    assert all("extra_content" not in c for c in sent[1]["tool_calls"])


@pytest.mark.slow
@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_gemini_3_thought_signature_is_kept_and_sent_back(streamed: bool) -> None:
    first = [_call("Paris", extra=True), _call("Rome")]  # only the first call is signed
    final = Reply(body=_completion({"role": "assistant", "content": "Sunny, rainy."}, "stop"))
    with FakeHttpServer([_streamed(first) if streamed else _plain(first), final]) as server:
        model = _model(server)
        response = _complete(model, streamed)
        state = response.vendor_state
        assert state is not None and state.vendor.startswith("openai-compatible:")
        message = assistant(response, (WEATHER,))
        items: list[Message] = [user("Weather?"), message, *results(message, ["sun", "rain"])]
        follow = ask((WEATHER,))
        follow = replace(follow, context=context("", (WEATHER,), items))
        asyncio.run(model.complete(follow))
    sent = server.requests[1].body["messages"]
    paris, rome = sent[1]["tool_calls"]
    assert paris["id"] == message.tool_calls[0].id
    assert paris["extra_content"] == {"google": {"thought_signature": SIGNATURE}}
    assert "extra_content" not in rome


def test_gemini_3_gets_the_stand_in_signature_for_history_it_did_not_make() -> None:
    other = Target(vendor="openai", adapter="openai-chat", model="gpt-4.1")
    made = parse_response(other, _plain([{**_call("Paris"), "id": "call_1"}]).body)
    message = assistant(made, (WEATHER,))
    items: list[Message] = [user("Weather?"), message, *results(message, ["sun"])]
    gemini3 = Target(vendor="openai-compatible:x", adapter="openai-chat", model="gemini-3-pro")
    (call,) = build_request(gemini3, context("", (WEATHER,), items))["messages"][1]["tool_calls"]
    assert call["extra_content"] == {"google": {"thought_signature": FOREIGN_THOUGHT_SIGNATURE}}
    qwen = Target(vendor="openai-compatible:x", adapter="openai-chat", model="qwen3")
    (call,) = build_request(qwen, context("", (WEATHER,), items))["messages"][1]["tool_calls"]
    assert "extra_content" not in call


# --- a server that refuses streaming ------------------------------------------------------

EMPTY_400 = Reply(status=400, body={"error": {"message": "", "code": 400}})


def _refuses_streaming(request: RecordedRequest) -> Reply:
    if request.body.get("stream"):
        return EMPTY_400
    return Reply(body=_completion({"role": "assistant", "content": "Hello there."}, "stop"))


@pytest.mark.slow
def test_a_server_that_refuses_streaming_is_called_plainly_once_refused() -> None:
    shown: list[str] = []
    with FakeHttpServer(reply_for=_refuses_streaming) as server:
        model = _model(server, "local-model")
        request = replace(ask(), on_text=shown.append)
        first = asyncio.run(model.complete(request))
        second = asyncio.run(model.complete(request))
    assert first.text == second.text == "Hello there."
    assert shown == ["Hello there.", "Hello there."]  # shown whole, once per answer
    assert [r.body.get("stream", False) for r in server.requests] == [True, False, False]
    refusal = getattr(model, "stream_refusal", None)
    assert refusal and "no error message" in refusal and not refusal.endswith(": ")


def test_a_forgotten_refusal_is_streamed_again() -> None:
    """The refusal is remembered per base URL and model for the process; ``forget``
    clears it (a later server at the same address may stream)."""
    with FakeHttpServer(reply_for=_refuses_streaming) as server:
        model = _model(server, "local-model")
        request = replace(ask(), on_text=lambda _: None)
        asyncio.run(model.complete(request))
        assert getattr(model, "stream_refusal", None)
        STREAM_REFUSALS.forget()
        assert getattr(model, "stream_refusal", None) is None
        asyncio.run(model.complete(request))
    assert [r.body.get("stream", False) for r in server.requests] == [True, False, True, False]


@pytest.mark.slow
def test_a_bad_request_that_is_not_about_streaming_is_not_remembered() -> None:
    bad = Reply(status=400, body={"error": {"message": "Invalid 'max_tokens': too large."}})
    with FakeHttpServer(reply_for=lambda _: bad) as server:
        model = _model(server, "local-model")
        request = replace(ask(), on_text=lambda _: None)
        for _ in range(2):
            with pytest.raises(ModelError) as info:
                asyncio.run(model.complete(request))
            assert info.value.model_code == ModelErrorCode.INVALID_REQUEST
            assert info.value.message.endswith("Invalid 'max_tokens': too large.")
    # each call: streamed, then once plainly; the plain call failed too, so nothing is kept
    assert [r.body.get("stream", False) for r in server.requests] == [True, False, True, False]
    assert getattr(model, "stream_refusal", None) is None
