"""ScriptedModel: a ModelClient that replays a script of turns per role, with no network.

The script format is described in ``docs/scripted-model.md``. In short:

* The **assistant** position is derived from the request's context, not from a counter in
  memory: the step is the number of :class:`~plait.domain.messages.AssistantMessage` in
  ``context.items``. Each step owns the script's *rejected* turns (errors, malformed
  output, invalid calls) up to and including its next *answer* turn. Within a step the
  attempt is ``max(len(context.corrections), rejected turns already served for the step)``,
  and an answer turn is sticky: asking again for the same step returns the same answer. So
  a new process (``plait send`` in a fresh CLI) continues where the session is, and a call
  repeated after a crash gets the same turn.
* **reviewer** and **summarizer** turns are served in order from an in-memory counter.
* A turn without ``usage`` reports a plausible estimate (characters / 4), computed
  incrementally: each message is measured once, by id.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from plait.application.ports import (
    ModelCapabilities,
    ModelRequest,
    ModelResponse,
    ModelRole,
    RawToolCall,
)
from plait.domain.context import Context
from plait.domain.errors import ModelError, ScriptError
from plait.domain.messages import AssistantMessage, Message, ToolResultMessage, Usage
from plait.domain.tools import ToolSpec
from plait.testing._script import (
    DEFAULT_STATUS,
    Script,
    ScriptedCall,
    ScriptedError,
    Turn,
    load_script,
    parse_script,
)

__all__ = ["Script", "ScriptedModel", "load_script", "parse_script"]

_CHARS_PER_TOKEN = 4
_BROKEN_JSON = '{"__truncated__": "'
_SCHEMA_MISMATCH: Mapping[str, Any] = {"__unexpected__": 1}


def _message_chars(message: Message) -> int:
    """Characters of a message the model would read. Called once per message id."""
    if isinstance(message, AssistantMessage):
        calls = sum(len(c.name) + len(c.arguments_json) for c in message.tool_calls)
        return len(message.text) + calls
    if isinstance(message, ToolResultMessage):
        result = message.result
        return len(message.tool_name) + len(result.content) + len(result.reason or "")
    return len(message.text)


def _spec_chars(spec: ToolSpec) -> int:
    shape = {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
    return len(json.dumps(shape, separators=(",", ":"), ensure_ascii=False, default=_plain))


def _plain(value: object) -> object:
    """``json.dumps`` fallback for read-only mappings and tuples inside a schema."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple | frozenset):
        return list(value)
    return repr(value)


def _tokens(chars: int) -> int:
    return max(1, math.ceil(chars / _CHARS_PER_TOKEN))


class ScriptedModel:
    """Replays a :class:`Script`; implements :class:`~plait.application.ports.ModelClient`.

    ``script`` is a :class:`Script` (from :func:`load_script`) or the decoded mapping of a
    script file. Every request is recorded in :attr:`requests`, errors included. One
    instance scripts one conversation: reviewer and summarizer positions are shared by
    every session that uses it.
    """

    def __init__(self, script: Script | Mapping[str, Any], *, name: str | None = None) -> None:
        self.script = script if isinstance(script, Script) else parse_script(dict(script))
        self.requests: list[ModelRequest] = []
        self._name = name or (f"scripted:{self.script.model}" if self.script.model else "scripted")
        self._served: dict[str, int] = {"reviewer": 0, "summarizer": 0}
        self._reached = -1
        """Highest assistant turn index served so far (for :meth:`assert_complete`)."""
        self._attempts: dict[int, int] = {}
        """Rejected turns served per assistant step, in this process."""
        self._steps = _partition(self.script.assistant)
        self._item_chars: dict[str, int] = {}
        self._spec_chars: dict[int, tuple[ToolSpec, int]] = {}

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, name: str | None = None) -> ScriptedModel:
        return cls(load_script(path), name=name)

    @property
    def name(self) -> str:
        return self._name

    @property
    def capabilities(self) -> ModelCapabilities:
        return self.script.capabilities

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        context = request.context
        assistants, item_chars = self._scan(context.items)
        if context.compacted is not None:  # a summary stands in for earlier turns
            assistants += context.compacted.omitted_assistant_messages
        if request.role == "assistant":
            index, step, attempt = self._assistant_position(assistants, len(context.corrections))
        else:
            index, step, attempt = self._served[request.role], -1, 0
            self._served[request.role] = index + 1
        turns = self.script.turns(request.role)
        if index >= len(turns):
            raise ScriptError(
                f"script exhausted: {request.role} turn {index + 1} requested, "
                f"script has {len(turns)} ({self.script.source})",
                file=self.script.source,
                role=request.role,
                turn=index + 1,
            )
        turn = turns[index]
        if request.role == "assistant":
            self._reached = max(self._reached, index)
            if turn.rejected:
                self._attempts[step] = attempt + 1
        if turn.error is not None:
            raise self._model_error(turn.error, request.role, index)
        input_chars = len(context.instructions) + item_chars
        input_chars += sum(self._tool_chars(spec) for spec in context.tools)
        input_chars += sum(
            len(c.rejected_text) + sum(len(p) for p in c.problems) for c in context.corrections
        )
        return self._response(turn, index, context, input_chars)

    def assert_complete(self) -> None:
        """Raise AssertionError listing the turns no request reached, per role."""
        unused: list[str] = []
        positions: tuple[tuple[ModelRole, int], ...] = (
            ("assistant", self._reached + 1),
            ("reviewer", self._served["reviewer"]),
            ("summarizer", self._served["summarizer"]),
        )
        for role, first in positions:
            turns = self.script.turns(role)
            if first < len(turns):
                described = ", ".join(
                    f"{n} ({_describe(turns[n - 1])})" for n in range(first + 1, len(turns) + 1)
                )
                noun = "turn" if first + 1 == len(turns) else "turns"
                unused.append(f"{role} {noun} {described} of {len(turns)}")
        if unused:
            raise AssertionError(
                f"scripted model {self.script.source} has unused turns: " + "; ".join(unused)
            )

    # --- position -------------------------------------------------------------------------

    def _assistant_position(self, step: int, corrections: int) -> tuple[int, int, int]:
        """(turn index, step, attempt) for the next assistant call."""
        if step >= len(self._steps):
            return len(self.script.assistant) + step - len(self._steps), step, 0
        start, end, answered = self._steps[step]
        attempt = max(self._attempts.get(step, 0), corrections)
        index = start + attempt
        if answered and index > end:
            index = end
        return index, step, attempt

    # --- usage ----------------------------------------------------------------------------

    def _scan(self, items: Sequence[Message]) -> tuple[int, int]:
        """(assistant messages, characters) of the history; measures only new messages."""
        cache = self._item_chars
        assistants = chars = 0
        for message in items:
            if message.kind == "assistant":
                assistants += 1
            count = cache.get(message.id)
            if count is None:
                count = cache[message.id] = _message_chars(message)
            chars += count
        return assistants, chars

    def _tool_chars(self, spec: ToolSpec) -> int:
        # Keyed by identity; the entry keeps the spec alive so its id is never reused.
        cached = self._spec_chars.get(id(spec))
        if cached is None or cached[0] is not spec:
            cached = self._spec_chars[id(spec)] = (spec, _spec_chars(spec))
        return cached[1]

    # --- building responses ---------------------------------------------------------------

    def _response(
        self, turn: Turn, index: int, context: Context[Any], input_chars: int
    ) -> ModelResponse:
        number = index + 1
        if turn.malformed is not None:
            calls = _malformed_calls(turn.malformed, number, context, self.script.source)
        else:
            calls = tuple(_raw_call(call, number, k) for k, call in enumerate(turn.tool_calls, 1))
        structured = turn.structured if turn.has_structured else None
        if turn.text is not None:
            text = turn.text
            output_chars = len(text) + (len(_dumps(structured)) if turn.has_structured else 0)
        else:
            text = _dumps(structured) if turn.has_structured else ""
            output_chars = len(text)
        output_chars += sum(
            len(c.name) + len(c.arguments if isinstance(c.arguments, str) else _dumps(c.arguments))
            for c in calls
        )
        usage = Usage(
            input_tokens=(
                turn.input_tokens if turn.input_tokens is not None else _tokens(input_chars)
            ),
            output_tokens=(
                turn.output_tokens if turn.output_tokens is not None else _tokens(output_chars)
            ),
        )
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage=usage,
            model=self.script.model or self._name,
            structured=json.loads(_dumps(structured)) if turn.has_structured else None,
        )

    def _model_error(self, error: ScriptedError, role: str, index: int) -> ModelError:
        message = error.message or (
            f"scripted {error.code} error ({role} turn {index + 1} of {self.script.source})"
        )
        body = error.body
        if body is None:
            body = {"error": {"type": error.code.lower(), "message": message, "scripted": True}}
        status = error.status if error.status is not None else DEFAULT_STATUS[error.code]
        return ModelError(message, model_code=error.code, status=status, body=body)


def _partition(turns: Sequence[Turn]) -> list[tuple[int, int, bool]]:
    """Split the assistant turns into steps: ``(start, end, answered)``, where each step is
    its rejected turns followed by one answer turn (``answered`` is False only for trailing
    rejected turns at the end of the script)."""
    steps: list[tuple[int, int, bool]] = []
    start = 0
    for index, turn in enumerate(turns):
        if not turn.rejected:
            steps.append((start, index, True))
            start = index + 1
    if start < len(turns):
        steps.append((start, len(turns) - 1, False))
    return steps


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _raw_call(call: ScriptedCall, number: int, index: int) -> RawToolCall:
    call_id = f"call_{number}_{index}" if call.auto_id else call.id
    if call.raw_arguments is not None:
        return RawToolCall(id=call_id, name=call.name, arguments=call.raw_arguments)
    # A fresh decoded copy each time: the caller may keep or mutate what it receives.
    arguments: dict[str, Any] = json.loads(_dumps(call.arguments))
    return RawToolCall(id=call_id, name=call.name, arguments=arguments)


def _malformed_calls(
    kind: str, number: int, context: Context[Any], source: str
) -> tuple[RawToolCall, ...]:
    names = {spec.name for spec in context.tools}
    if kind == "unknown_tool":
        name = "no_such_tool"
        while name in names:
            name += "_"
        return (RawToolCall(id=f"call_{number}_1", name=name, arguments={}),)
    if not context.tools:
        raise ScriptError(
            f"malformed {kind!r} in assistant turn {number} of {source} needs a tool in the "
            "context, and the context has none",
            file=source,
            role="assistant",
            turn=number,
        )
    tool = context.tools[0].name
    if kind == "bad_json":
        return (RawToolCall(id=f"call_{number}_1", name=tool, arguments=_BROKEN_JSON),)
    if kind == "schema_mismatch":
        return (RawToolCall(id=f"call_{number}_1", name=tool, arguments=dict(_SCHEMA_MISMATCH)),)
    if kind == "duplicate_ids":
        same = f"call_{number}_dup"
        return (
            RawToolCall(id=same, name=tool, arguments={}),
            RawToolCall(id=same, name=tool, arguments={}),
        )
    assert kind == "missing_id", kind
    return (RawToolCall(id=None, name=tool, arguments={}),)


def _describe(turn: Turn) -> str:
    if turn.error is not None:
        return f"error {turn.error.code.lower()}"
    if turn.malformed is not None:
        return f"malformed {turn.malformed}"
    parts: list[str] = []
    if turn.text:
        parts.append(f"text {_short(turn.text)}")
    if turn.tool_calls:
        parts.append("calls " + ", ".join(c.name for c in turn.tool_calls))
    if turn.has_structured:
        parts.append(f"structured {_short(_dumps(turn.structured))}")
    return "; ".join(parts) or "empty text"


def _short(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
