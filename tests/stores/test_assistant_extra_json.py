"""An assistant message's stored ``extra`` JSON is written from a template
(``codec.assistant_extra_json``): it must be exactly the text of the general path,
``dumps(assistant_extra(message))``, for every message, and fail the same way where that
one fails."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.adapters.stores.shared import codec, rows
from plait.domain.messages import AssistantMessage, ToolCall, Usage, VendorState

_texts = st.text()  # any character: quotes, backslashes, controls, non-ASCII, surrogates
_counts = st.integers(min_value=0, max_value=2**70) | st.just(0)
_odd_counts = st.booleans() | st.floats(allow_nan=False, allow_infinity=False)


def _call(id: str, name: str, arguments_json: str) -> ToolCall:
    made: ToolCall = rows._call(id, name, arguments_json)  # the store's unchecked builder
    return made


@st.composite
def _messages(draw: st.DrawFn) -> AssistantMessage:
    calls = tuple(
        _call(draw(_texts), draw(_texts), draw(_texts))
        for _ in range(draw(st.integers(min_value=0, max_value=3)))
    )
    count = _counts | _odd_counts if draw(st.booleans()) else _counts
    usage = draw(
        st.none()
        | st.builds(
            Usage,
            input_tokens=count,
            output_tokens=count,
            cached_input_tokens=count,
            reasoning_tokens=count,
        )
    )
    vendor = draw(
        st.none()
        | st.builds(
            VendorState, vendor=_texts, version=_texts, data=st.dictionaries(_texts, _texts)
        )
    )
    output = draw(st.none() | st.dictionaries(_texts, st.integers()))
    made: AssistantMessage = rows._assistant(
        "m1", "", 1.0, calls, None, 1, None, usage, vendor, output
    )
    return made


def _general(message: AssistantMessage) -> str | None:
    extra = codec.assistant_extra(message)
    return None if extra is None else codec.dumps(extra)


@settings(max_examples=400)
@given(_messages())
def test_the_template_writes_the_general_paths_text(message: AssistantMessage) -> None:
    assert codec.assistant_extra_json(message) == _general(message)


def test_a_step_s_message_takes_the_template() -> None:
    calls = (ToolCall(id="c1", name="echo", arguments_json='{"text": "é \\" \\\\ \\n"}'),)
    message = AssistantMessage(
        id="m1",
        text="",
        created_at=1.0,
        tool_calls=calls,
        usage=Usage(input_tokens=100, output_tokens=10, reasoning_tokens=3),
    )
    text = codec.assistant_extra_json(message)
    assert text == _general(message)
    assert text is not None and '"cached_input_tokens"' not in text  # zero: not written
    assert codec.loads(text)["tool_calls"] == [["c1", "echo", calls[0].arguments_json]]


def test_nothing_to_write_is_none() -> None:
    assert codec.assistant_extra_json(AssistantMessage(id="m1", text="hi", created_at=1.0)) is None


@pytest.mark.parametrize("bad", [math.nan, math.inf, object()])
def test_a_count_json_cannot_hold_fails_as_the_general_path_does(bad: Any) -> None:
    message = AssistantMessage(
        id="m1", text="", created_at=1.0, usage=Usage(input_tokens=bad, output_tokens=1)
    )
    with pytest.raises((ValueError, TypeError)) as general:
        _general(message)
    with pytest.raises(general.type, match=str(general.value).split(":")[0]):
        codec.assistant_extra_json(message)
