"""FunctionModel: answers computed by a plain or async function."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from plait.application.ports import ModelCapabilities, ModelClient, ModelRequest, ModelResponse
from plait.domain.errors import ModelError, ModelErrorCode
from plait.testing import FunctionModel

from ._builders import ask, context, history


def test_sync_function() -> None:
    def answer(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=f"{request.role}: {len(request.context.items)} items")

    model: ModelClient = FunctionModel(answer)

    assert ask(model, context(history(2))) == ModelResponse(text="assistant: 5 items")
    assert (model.name, model.capabilities) == (
        "function",
        ModelCapabilities(structured_output=True, context_window=128_000),
    )  # a window like the scripted model's: a run with compaction on can measure it


def test_async_function_and_settings() -> None:
    async def answer(request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(0)
        return ModelResponse(structured={"decision": "allow"}, model="judge")

    capabilities = ModelCapabilities(tool_calls=False, context_window=1_000)
    model = FunctionModel(answer, name="judge", capabilities=capabilities)

    assert ask(model, role="reviewer") == ModelResponse(
        structured={"decision": "allow"}, model="judge"
    )
    assert (model.name, model.capabilities) == ("judge", capabilities)


def test_records_requests_even_when_the_function_raises() -> None:
    def fail(request: ModelRequest) -> ModelResponse:
        raise ModelError("boom", model_code=ModelErrorCode.TRANSIENT)

    model = FunctionModel(fail)
    ctx = context()

    with pytest.raises(ModelError, match="boom"):
        ask(model, ctx)

    assert model.requests == [ModelRequest(role="assistant", context=ctx)]


def test_a_function_returning_something_else_is_a_type_error() -> None:
    def wrong(request: ModelRequest) -> Any:
        return "just text"

    with pytest.raises(TypeError, match="must return a ModelResponse, got str"):
        ask(FunctionModel(wrong))
