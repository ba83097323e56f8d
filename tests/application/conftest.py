"""Builders for loop tests: a service over the in-memory store and fakes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.ports import ModelRequest, ModelResponse, RawToolCall, Tool
from plait.application.service import AgentService
from plait.domain.errors import PlaitError
from plait.domain.messages import Usage
from plait.domain.runs import Budget
from plait.domain.session import StoredMessage
from plait.domain.tools import EffectClass, ToolSpec
from plait.testing import FixedClock, FunctionModel, RecordingTool, SequentialIds

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def call(name: str, args: dict[str, Any] | str, id: str | None) -> RawToolCall:
    return RawToolCall(id=id, name=name, arguments=args)


def reply(text: str = "", *calls: RawToolCall, tokens: tuple[int, int] = (10, 5)) -> ModelResponse:
    return ModelResponse(
        text=text, tool_calls=calls, usage=Usage(input_tokens=tokens[0], output_tokens=tokens[1])
    )


@dataclass
class Turns:
    """A model answering from a queue; each item is a response, an exception to raise,
    or a function of the request."""

    items: list[ModelResponse | BaseException | Callable[[ModelRequest], Any]]
    requests: list[ModelRequest] = field(default_factory=list)

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if not self.items:
            raise AssertionError("the model was asked more often than scripted")
        item = self.items.pop(0)
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            result = item(request)
            if asyncio.iscoroutine(result):
                result = await result
            assert isinstance(result, ModelResponse)
            return result
        return item


def spec(name: str, effect: EffectClass = EffectClass.READ_ONLY) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=f"the {name} tool",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        },
        effect=effect,
    )


@dataclass
class Rig:
    service: AgentService
    store: MemoryStore
    clock: FixedClock
    turns: Turns

    def history(self, session_id: str) -> list[StoredMessage]:
        return run(self.store.read_messages(session_id))


def make_rig(
    items: Sequence[ModelResponse | BaseException | Callable[[ModelRequest], Any]],
    tools: Sequence[Tool | RecordingTool] = (),
    *,
    budget: Budget | None = None,
    store: MemoryStore | None = None,
    clock: FixedClock | None = None,
    ids: SequentialIds | None = None,
    **kwargs: Any,
) -> Rig:
    store = store or MemoryStore()
    clock = clock or FixedClock()
    turns = Turns(list(items))
    service = AgentService.build(
        store=store,
        artifacts=store,
        model=FunctionModel(turns, name="fn"),
        tools=[t.tool if isinstance(t, RecordingTool) else t for t in tools],
        clock=clock,
        ids=ids or SequentialIds(),
        budget=budget,
        owner="worker-test",
        **kwargs,
    )
    return Rig(service, store, clock, turns)


def shape(history: Sequence[StoredMessage]) -> list[tuple[Any, ...]]:
    """A compact, complete view of a history for whole-history assertions."""
    out: list[tuple[Any, ...]] = []
    for sm in history:
        m = sm.message
        if m.kind == "user":
            out.append((sm.seq, "user", m.text))
        elif m.kind == "assistant":
            calls = tuple((c.id, c.name, c.arguments_json) for c in m.tool_calls)
            out.append((sm.seq, "assistant", m.text, calls))
        else:
            r = m.result
            out.append((sm.seq, "tool_result", r.call_id, r.status.value, r.content))
    return out


def raises_code(exc: BaseException) -> str:
    assert isinstance(exc, PlaitError)
    return exc.code
