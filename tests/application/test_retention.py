"""The loop with expired history: a forced policy may expire messages a run will read
again (the retained tail). The context sent to the model then holds the tombstones, with
their placeholder, never the old content, and every tool call still pairs with its
result, so the provider accepts the request."""

from __future__ import annotations

import asyncio

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.ports import ModelCapabilities, ModelRequest, ModelResponse
from plait.application.retention import RetentionRequest, RetentionService
from plait.domain.messages import AssistantMessage, ToolResultMessage, UserMessage
from plait.domain.retention import EXPIRED_TEXT
from plait.runtime import Runtime
from plait.testing import FixedClock, FunctionModel, SequentialIds
from tests.contract.retention_contract import NOW, history, seed


def test_a_context_built_over_expired_messages_keeps_units_and_no_content() -> None:
    seen: list[ModelRequest] = []

    async def answer(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(text="noted")

    async def go() -> None:
        store = MemoryStore()
        await seed(store, summarized=None)
        report = await RetentionService(store=store, clock=FixedClock(NOW)).apply(
            RetentionRequest(older_than_days=30, force=True)
        )
        assert len(report.expired) == 6
        caps = ModelCapabilities(
            context_window=100_000, max_output_tokens=1_000, structured_output=True
        )
        rt = Runtime(
            store=store,
            artifacts=store,
            model=FunctionModel(answer, name="m", capabilities=caps),
            tools=[],
            clock=FixedClock(NOW),
            ids=SequentialIds(),
        )
        result = await rt.service.send("s1", "and now?")
        assert result.run.status.value == "completed"
        await rt.close()

    asyncio.run(go())
    items = seen[0].context.items
    old = [m.id for m in history()]
    sent = {m.id: m for m in items if m.id in old}
    assert list(sent) == old  # every tombstone keeps its place
    rendered = repr(items)
    for m in history():
        text = m.result.content if isinstance(m, ToolResultMessage) else m.text
        assert text not in rendered, text
    first, call, result = sent["m1"], sent["m2"], sent["m3"]
    assert isinstance(first, UserMessage) and first.text == EXPIRED_TEXT
    assert isinstance(call, AssistantMessage) and isinstance(result, ToolResultMessage)
    assert [c.id for c in call.tool_calls] == [result.call_id] == ["c1"]
    assert isinstance(items[-1], UserMessage) and items[-1].text == "and now?"
