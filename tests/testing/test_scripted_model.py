"""What each scripted turn produces: responses, raised errors, malformed output."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from plait.application.arguments import argument_errors
from plait.application.ports import (
    ModelCapabilities,
    ModelClient,
    ModelRequest,
    ModelResponse,
    RawToolCall,
)
from plait.domain.errors import ModelError, ScriptError
from plait.domain.messages import Usage
from plait.domain.tools import ToolSpec
from plait.testing import ScriptedModel

from ._builders import READ_FILE, ask, assistant, context, history, user, write

ECHO = ToolSpec(name="echo", description="Echo.", parameters={"type": "object", "properties": {}})
FIXED = {"usage": {"input_tokens": 10, "output_tokens": 2}}


def scripted(*assistant_turns: dict[str, Any], **roles: list[dict[str, Any]]) -> ScriptedModel:
    return ScriptedModel({"version": 1, "assistant": list(assistant_turns), **roles})


def test_is_a_model_client() -> None:
    model: ModelClient = ScriptedModel({"version": 1, "capabilities": {"streaming": True}})

    assert model.name == "scripted"
    assert model.capabilities == ModelCapabilities(
        tool_calls=True,
        structured_output=True,
        streaming=True,
        parallel_tool_calls=True,
        context_window=128_000,
        max_output_tokens=8_192,
    )


def test_text_turn() -> None:
    model = scripted({"text": "Hello there.", **FIXED})

    assert ask(model) == ModelResponse(
        text="Hello there.", usage=Usage(input_tokens=10, output_tokens=2), model="scripted"
    )


def test_model_name_comes_from_the_script_then_the_instance() -> None:
    named = ScriptedModel({"version": 1, "model": "demo-1", "assistant": [{"text": ""}]})
    unnamed = ScriptedModel({"version": 1, "assistant": [{"text": ""}]}, name="fake")

    assert (ask(named).model, named.name) == ("demo-1", "scripted:demo-1")
    assert (ask(unnamed).model, unnamed.name) == ("fake", "fake")


def test_tool_calls_with_given_generated_missing_ids_and_raw_arguments() -> None:
    model = scripted(
        {"text": "first", "tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}]},
        {
            "text": "",
            "tool_calls": [
                {"name": "read_file", "arguments": {"path": "b"}, "id": "call_b"},
                {"name": "read_file", "arguments": {"path": "c"}},
                {"name": "read_file", "raw_arguments": '{"path": "d"}', "id": None},
            ],
            "rejected": False,
            **FIXED,
        },
    )
    ask(model, context([user(0)]))

    response = ask(model, context([user(0), assistant(1)]))

    assert response == ModelResponse(
        text="",
        tool_calls=(
            RawToolCall(id="call_b", name="read_file", arguments={"path": "b"}),
            RawToolCall(id="call_2_2", name="read_file", arguments={"path": "c"}),
            RawToolCall(id=None, name="read_file", arguments='{"path": "d"}'),
        ),
        usage=Usage(input_tokens=10, output_tokens=2),
        model="scripted",
    )
    assert model.requests[0].context.items == [user(0)]


def test_generated_ids_are_unique_across_turns() -> None:
    call = {"name": "read_file", "arguments": {"path": "x"}}
    model = scripted({"tool_calls": [call, call]}, {"tool_calls": [call]})

    ids = [c.id for c in ask(model, context(history(0))).tool_calls]
    ids += [c.id for c in ask(model, context(history(1))).tool_calls]

    assert ids == ["call_1_1", "call_1_2", "call_2_1"]


def test_arguments_are_a_fresh_copy_each_time() -> None:
    model = scripted({"tool_calls": [{"name": "read_file", "arguments": {"path": "x"}}]})
    first = ask(model).tool_calls[0].arguments
    assert isinstance(first, dict)
    first["path"] = "mutated"

    assert ask(model).tool_calls[0].arguments == {"path": "x"}
    assert model.script.assistant[0].tool_calls[0].arguments == {"path": "x"}


def test_structured_turns_for_reviewer_and_summarizer() -> None:
    model = scripted(
        reviewer=[
            {"structured": {"decision": "allow", "reason": "read only"}, **FIXED},
            {"structured": None, "text": "no opinion", **FIXED},
        ],
        summarizer=[{"structured": {"goal": "ship", "constraints": []}, **FIXED}],
    )

    responses = [
        ask(model, role="reviewer"),
        ask(model, role="summarizer"),
        ask(model, role="reviewer"),
    ]

    usage = Usage(input_tokens=10, output_tokens=2)
    assert responses == [
        ModelResponse(
            text='{"decision":"allow","reason":"read only"}',
            structured={"decision": "allow", "reason": "read only"},
            usage=usage,
            model="scripted",
        ),
        ModelResponse(
            text='{"goal":"ship","constraints":[]}',
            structured={"goal": "ship", "constraints": []},
            usage=usage,
            model="scripted",
        ),
        ModelResponse(text="no opinion", structured=None, usage=usage, model="scripted"),
    ]


@pytest.mark.parametrize(
    ("error", "code", "status", "message"),
    [
        (
            "context_window_exceeded",
            "CONTEXT_WINDOW_EXCEEDED",
            400,
            "scripted CONTEXT_WINDOW_EXCEEDED error (assistant turn 1 of <script>)",
        ),
        ("rate_limited", "RATE_LIMITED", 429, None),
        ("AUTHENTICATION", "AUTHENTICATION", 401, None),
        ("transient", "TRANSIENT", 503, None),
        ("invalid_request", "INVALID_REQUEST", 400, None),
        (
            {"code": "rate_limited", "message": "slow down", "status": 503},
            "RATE_LIMITED",
            503,
            "slow down",
        ),
    ],
)
def test_error_turns_raise_model_error(
    error: object, code: str, status: int, message: str | None
) -> None:
    model = scripted({"error": error})

    with pytest.raises(ModelError) as info:
        ask(model)

    expected = message or f"scripted {code} error (assistant turn 1 of <script>)"
    assert info.value.message == expected
    assert info.value.model_code == code
    assert info.value.details == {
        "model_code": code,
        "status": status,
        "body": {"error": {"type": code.lower(), "message": expected, "scripted": True}},
    }
    assert len(model.requests) == 1


def test_error_body_can_be_given() -> None:
    body = {"type": "error", "error": {"type": "overloaded_error"}}
    model = scripted({"error": {"code": "transient", "body": body}})

    with pytest.raises(ModelError) as info:
        ask(model)

    assert info.value.details["body"] == body


@pytest.mark.parametrize(
    ("kind", "calls"),
    [
        (
            "bad_json",
            (RawToolCall(id="call_1_1", name="read_file", arguments='{"__truncated__": "'),),
        ),
        ("unknown_tool", (RawToolCall(id="call_1_1", name="no_such_tool", arguments={}),)),
        (
            "schema_mismatch",
            (RawToolCall(id="call_1_1", name="read_file", arguments={"__unexpected__": 1}),),
        ),
        (
            "duplicate_ids",
            (
                RawToolCall(id="call_1_dup", name="read_file", arguments={}),
                RawToolCall(id="call_1_dup", name="read_file", arguments={}),
            ),
        ),
        ("missing_id", (RawToolCall(id=None, name="read_file", arguments={}),)),
    ],
)
def test_malformed_kinds(kind: str, calls: tuple[RawToolCall, ...]) -> None:
    model = scripted({"malformed": kind, "text": "oops", **FIXED})

    response = ask(model, context(tools=(READ_FILE, ECHO)))

    assert response == ModelResponse(
        text="oops",
        tool_calls=calls,
        usage=Usage(input_tokens=10, output_tokens=2),
        model="scripted",
    )


def test_malformed_output_really_is_invalid_for_the_context() -> None:
    tools = {spec.name: spec for spec in (READ_FILE, ECHO)}
    outputs = {}
    for kind in ("unknown_tool", "schema_mismatch"):
        (call,) = ask(
            scripted({"malformed": kind}), context(tools=tuple(tools.values()))
        ).tool_calls
        outputs[kind] = call

    assert outputs["unknown_tool"].name not in tools
    assert argument_errors(tools["read_file"], outputs["schema_mismatch"].arguments) != []


def test_unknown_tool_avoids_a_context_tool_with_the_same_name() -> None:
    clash = ToolSpec(name="no_such_tool", description="", parameters={"type": "object"})

    (call,) = ask(scripted({"malformed": "unknown_tool"}), context(tools=(clash,))).tool_calls

    assert call.name == "no_such_tool_"


def test_malformed_output_that_needs_a_tool_fails_clearly_without_one() -> None:
    model = scripted({"malformed": "bad_json"})

    with pytest.raises(ScriptError) as info:
        ask(model, context(tools=()))

    assert info.value.message == (
        "malformed 'bad_json' in assistant turn 1 of <script> needs a tool in the context, "
        "and the context has none"
    )


def test_exhausted_script_is_a_clear_error() -> None:
    model = scripted({"text": "only one"}, reviewer=[])

    with pytest.raises(ScriptError) as info:
        ask(model, context(history(1)))
    with pytest.raises(ScriptError) as reviewer:
        ask(model, role="reviewer")

    assert (
        info.value.message
        == "script exhausted: assistant turn 2 requested, script has 1 (<script>)"
    )
    assert info.value.details == {"file": "<script>", "role": "assistant", "turn": 2}
    assert reviewer.value.message == (
        "script exhausted: reviewer turn 1 requested, script has 0 (<script>)"
    )


def test_records_every_request_in_order() -> None:
    model = scripted({"error": "transient"}, {"text": "ok"}, reviewer=[{"structured": 1}])
    requests = [
        ModelRequest(role="assistant", context=context()),
        ModelRequest(role="assistant", context=context(), max_output_tokens=5),
        ModelRequest(role="reviewer", context=context()),
    ]

    async def run() -> None:
        for request in requests:
            with contextlib.suppress(ModelError):
                await model.complete(request)

    asyncio.run(run())

    assert model.requests == requests


def test_assert_complete_lists_unused_turns_per_role() -> None:
    model = scripted(
        {"text": "one"},
        {"tool_calls": [{"name": "read_file"}]},
        {"text": "a long final answer that goes on and on and on"},
        reviewer=[{"structured": {"decision": "allow"}}, {"error": "rate_limited"}],
    )
    ask(model)
    ask(model, role="reviewer")

    with pytest.raises(AssertionError) as info:
        model.assert_complete()

    assert str(info.value) == (
        "scripted model <script> has unused turns: assistant turns "
        "2 (calls read_file), 3 (text 'a long final answer that goes on and ...') of 3; "
        "reviewer turn 2 (error rate_limited) of 2"
    )


def test_assert_complete_passes_when_every_turn_was_reached() -> None:
    model = scripted({"text": "one"}, {"text": "two"}, reviewer=[{"structured": True}])
    ask(model, role="reviewer")
    # A new process resuming at step 2 never saw turn 1, but reaching turn 2 uses it.
    ask(model, context(history(1)))

    model.assert_complete()


def test_from_file(tmp_path: Path) -> None:
    path = write(tmp_path, "s.yml", "version: 1\nassistant:\n  - text: from a file\n")

    model = ScriptedModel.from_file(path, name="file-model")

    assert (ask(model).text, model.name, model.script.source) == (
        "from a file",
        "file-model",
        str(path),
    )
