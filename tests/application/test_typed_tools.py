"""Typed tools: ``@plait.tool`` turns an annotated function into a tool whose schema and
parsed arguments come from the same declaration."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field, field_validator

import plait
from plait.adapters.stores.memory.store import MemoryStore
from plait.application.arguments import argument_errors
from plait.application.ports import ModelRequest, Tool, ToolInvocation, ToolOutput
from plait.application.tool_runner import ToolRunner
from plait.application.typed_tools import ToolArguments, arguments_schema, parse_arguments
from plait.application.validation import check_output
from plait.domain.errors import ToolError
from plait.domain.messages import ToolCall, ToolStatus
from plait.domain.runs import RunStatus
from plait.domain.tools import EffectClass

from .conftest import call, make_rig, reply, run


class Point(BaseModel):
    x: int
    y: int = 0


def invocation(tool: Tool, arguments: dict[str, Any], workspace: str | None = None) -> Any:
    return ToolInvocation(
        call=ToolCall.create(id="c1", name=tool.spec.name, arguments=arguments),
        session_id="s",
        run_id="r",
        workspace=workspace,
        idempotency_key="key-1",
    )


def execute(tool: Tool, arguments: dict[str, Any], workspace: str | None = None) -> ToolOutput:
    return asyncio.run(tool.execute(invocation(tool, arguments, workspace)))


@plait.tool(effect="read_only")
def measure(
    path: str,
    unit: Literal["words", "lines"] = "words",
    limit: int | None = None,
    points: list[Point] | None = None,
    scale: Annotated[float, Field(gt=0, description="Multiply counts by this.")] = 1.0,
    context: ToolInvocation | None = None,
) -> dict[str, Any]:
    """Measure a file of the workspace.

    Counts are exact.

    Args:
        path: File to measure, relative to the
            workspace root.
        unit (str): What to count.
        limit: Stop after this many.
        context: Not an argument: the call's invocation.
    """
    assert context is not None
    return {
        "path": path,
        "unit": unit,
        "limit": limit,
        "points": [(p.x, p.y) for p in points or []],
        "scale": scale,
        "key": context.idempotency_key,
    }


def test_schema_and_description_come_from_the_hints_and_the_docstring() -> None:
    assert measure.spec.name == "measure"
    assert measure.spec.description == "Measure a file of the workspace."
    assert measure.spec.effect is EffectClass.READ_ONLY
    assert measure.spec.parameters == {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "File to measure, relative to the workspace root.",
            },
            "unit": {
                "type": "string",
                "description": "What to count.",
                "default": "words",
                "enum": ["words", "lines"],
            },
            "limit": {"type": "integer", "description": "Stop after this many."},
            "points": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "x": {"type": "integer"},
                        "y": {"type": "integer", "default": 0},
                    },
                    "required": ["x"],
                },
            },
            "scale": {
                "type": "number",
                "description": "Multiply counts by this.",
                "default": 1.0,
                "exclusiveMinimum": 0,
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }


def test_arguments_are_parsed_into_the_declared_types() -> None:
    out = execute(measure, {"path": "a.txt", "points": [{"x": 1}, {"x": 2, "y": 3}]})
    assert out.media_type == "application/json"
    assert out.content == (
        '{"path":"a.txt","unit":"words","limit":null,"points":[[1,0],[2,3]],'
        '"scale":1.0,"key":"key-1"}'
    )


def test_the_schema_the_model_sees_is_the_one_calls_are_checked_against() -> None:
    assert argument_errors(measure.spec, {"path": "a", "unit": "lines", "limit": 3}) == []
    assert argument_errors(measure.spec, {"path": "a", "unit": "bytes", "scale": 0}) == [
        "$.scale: 0 is not greater than exclusiveMinimum 0",
        "$.unit: 'bytes' is not one of ['words', 'lines']",
    ]
    assert argument_errors(measure.spec, {"path": "a", "context": {}}) == [
        "$: unexpected property 'context'"
    ]
    assert argument_errors(measure.spec, {"path": "a", "points": [{"y": 1}]}) == [
        "$.points[0]: missing required property 'x'"
    ]
    assert argument_errors(measure.spec, {"path": "a", "limit": None}) == [
        "$.limit: expected integer, got null"
    ]


def test_a_wrong_call_is_a_correction_for_the_model_and_never_runs() -> None:
    ran: list[str] = []

    @plait.tool(effect="side_effect")
    async def note(text: str, level: Literal["info", "warn"]) -> str:
        """Write a note."""
        ran.append(text)
        return "noted"

    rig = make_rig(
        [
            reply("", call("note", {"text": "x", "level": "loud"}, "c1")),
            reply("", call("note", {"text": "y", "level": "warn"}, "c2")),
            reply("done"),
        ],
        [note],
    )
    session = run(rig.service.create_session())
    result = run(rig.service.send(session.id, "go"))
    assert result.run.status is RunStatus.COMPLETED
    assert result.run.usage.corrections == 1
    correction = rig.turns.requests[1]
    assert "$.level: 'loud' is not one of ['info', 'warn']" in _texts(correction)
    assert ran == ["y"]
    results = [m.message for m in rig.history(session.id) if m.message.kind == "tool_result"]
    assert [(r.result.call_id, r.result.content) for r in results] == [("c2", "noted")]


def _texts(request: ModelRequest) -> str:
    return repr(request.context)


def test_sync_functions_run_in_a_thread_and_async_ones_on_the_loop() -> None:
    threads: dict[str, int] = {}

    @plait.tool(effect="read_only")
    def blocking(text: str) -> str:
        """Blocking."""
        threads["sync"] = threading.get_ident()
        return text.upper()

    @plait.tool(effect="read_only")
    async def awaiting(text: str) -> str:
        """Awaiting."""
        threads["async"] = threading.get_ident()
        return text.lower()

    async def both() -> tuple[ToolOutput, ToolOutput]:
        threads["loop"] = threading.get_ident()
        first = await blocking.execute(invocation(blocking, {"text": "a"}))
        second = await awaiting.execute(invocation(awaiting, {"text": "B"}))
        return first, second

    first, second = asyncio.run(both())
    assert (first.content, second.content) == ("A", "b")
    assert threads["async"] == threads["loop"] != threads["sync"]
    assert blocking.stoppable is False  # a thread cannot be stopped: a cancel waits for it
    assert awaiting.stoppable is True


def test_return_values_become_outputs() -> None:
    @plait.tool(effect="read_only")
    def give(kind: str) -> object:
        """Give."""
        values: dict[str, object] = {
            "text": "plain",
            "output": ToolOutput(content="as is", failed=True),
            "none": None,
            "model": Point(x=1),
            "list": [1, "a"],
        }
        return values[kind]

    outputs = {k: execute(give, {"kind": k}) for k in ("text", "output", "none", "model", "list")}
    assert outputs["text"] == ToolOutput(content="plain")
    assert outputs["output"] == ToolOutput(content="as is", failed=True)
    assert outputs["none"] == ToolOutput(content="")
    assert outputs["model"].content == '{"x":1,"y":0}'
    assert outputs["list"].content == '[1,"a"]'


def test_a_tool_error_is_a_failed_result_the_model_reads() -> None:
    @plait.tool(effect="read_only")
    def refuse(reason: str) -> str:
        """Refuse."""
        raise ToolError(f"refused: {reason}")

    runner = ToolRunner(MemoryStore())
    result = asyncio.run(
        runner.run(
            refuse,
            invocation(refuse, {"reason": "no"}),
            refuse.spec.effect,
            time_limit=None,
            on_cancel=lambda: None,
        )
    )
    assert (result.status, result.content) == (ToolStatus.FAILED, "refused: no")


def test_the_effect_class_is_required_and_checked() -> None:
    with pytest.raises(TypeError, match=r"needs effect='read_only', 'idempotent' or 'side_effect'"):
        plait.tool()
    with pytest.raises(TypeError, match=r"@plait.tool needs an effect class.*above bare"):

        @plait.tool  # type: ignore[arg-type]
        def bare(text: str) -> str:
            return text

    with pytest.raises(TypeError, match="effect must be 'read_only', 'idempotent' or"):
        plait.tool(effect="harmless")  # type: ignore[arg-type]
    assert plait.tool(effect=EffectClass.IDEMPOTENT)(_echo).spec.effect is EffectClass.IDEMPOTENT


def _echo(text: str) -> str:
    return text


def test_parameters_must_be_annotated_and_named() -> None:
    def untyped(text):  # type: ignore[no-untyped-def]
        return text

    def star(*texts: str) -> str:
        return ""

    with pytest.raises(TypeError, match="parameter 'text' needs a type annotation"):
        plait.tool(effect="read_only")(untyped)
    with pytest.raises(TypeError, match=r"\*args and \*\*kwargs cannot be tool arguments"):
        plait.tool(effect="read_only")(star)


def test_name_description_and_per_call_effect_can_be_given() -> None:
    @plait.tool(
        effect="side_effect",
        name="save",
        description="Save text.",
        effect_of=lambda text, expected=None: "idempotent" if expected else "side_effect",
    )
    async def save_text(text: str, expected: str | None = None) -> str:
        return "saved"

    assert (save_text.spec.name, save_text.spec.description) == ("save", "Save text.")
    assert save_text.effect_of is not None
    assert save_text.effect_of({"text": "a", "expected": "h"}) is EffectClass.IDEMPOTENT
    assert save_text.effect_of({"text": "a"}) is EffectClass.SIDE_EFFECT
    assert save_text.effect_of({"text": 3}) is EffectClass.SIDE_EFFECT  # unparsable: declared


def test_a_rule_the_schema_cannot_say_fails_the_call_naming_the_argument() -> None:
    class Window(ToolArguments):
        first: int = Field(ge=1, description="First line.")
        last: int = Field(ge=1, description="Last line.")

        @field_validator("last")
        @classmethod
        def _after_first(cls, last: int, info: Any) -> int:
            if last < info.data.get("first", 1):
                raise ValueError("must not be before first")
            return last

    assert arguments_schema(Window) == {
        "type": "object",
        "properties": {
            "first": {"type": "integer", "description": "First line.", "minimum": 1},
            "last": {"type": "integer", "description": "Last line.", "minimum": 1},
        },
        "required": ["first", "last"],
        "additionalProperties": False,
    }
    assert parse_arguments(Window, {"first": 2, "last": 3}) == Window(first=2, last=3)
    with pytest.raises(ToolError, match=r"invalid arguments: \$.last: must not be before first"):
        parse_arguments(Window, {"first": 5, "last": 3})


class Tree(BaseModel):
    name: str
    children: list[Tree] = []


def test_a_recursive_type_keeps_its_definition_and_is_enforced() -> None:
    @plait.tool(effect="read_only")
    def count(tree: Tree) -> int:
        """Count nodes."""

        def size(node: Tree) -> int:
            return 1 + sum(size(child) for child in node.children)

        return size(tree)

    schema = count.spec.parameters
    assert schema["properties"]["tree"] == {"$ref": "#/$defs/Tree"}
    assert set(schema["$defs"]) == {"Tree"}
    nested = {"tree": {"name": "a", "children": [{"name": "b", "children": [{"name": 1}]}]}}
    assert argument_errors(count.spec, nested) == [
        "$.tree.children[0].children[0].name: expected string, got integer"
    ]
    ok = {"tree": {"name": "a", "children": [{"name": "b"}, {"name": "c"}]}}
    assert execute(count, ok).content == "3"
    response = reply("", call("count", ok, "c1"))
    assert check_output(response, {"count": count.spec}, set()).ok


def test_a_typed_tool_runs_through_the_loop_with_its_context(tmp_path: Path) -> None:
    @plait.tool(effect="read_only")
    async def where(path: str, context: ToolInvocation) -> str:
        """Say where a path is."""
        return f"{context.workspace}/{path}"

    rig = make_rig([reply("", call("where", {"path": "a.txt"}, "c1")), reply("done")], [where])
    session = run(rig.service.create_session(workspace=str(tmp_path)))
    assert run(rig.service.send(session.id, "go")).run.status is RunStatus.COMPLETED
    [result] = [m.message for m in rig.history(session.id) if m.message.kind == "tool_result"]
    assert result.result.content == f"{tmp_path.resolve()}/a.txt"


def test_the_arguments_validation_decoded_are_the_ones_the_tool_reads() -> None:
    seen: list[dict[str, Any]] = []

    async def execute(invocation: ToolInvocation) -> ToolOutput:
        seen.append(invocation.call.arguments())
        return ToolOutput(content="ok")

    probe = Tool(spec=measure.spec, execute=execute)
    sent = {"path": "a.txt", "unit": "lines"}
    rig = make_rig([reply("", call("measure", sent, "c1")), reply("done")], [probe])
    session = run(rig.service.create_session())
    assert run(rig.service.send(session.id, "go")).run.status is RunStatus.COMPLETED
    assert seen == [sent]
    assert seen[0] is sent  # decoded once (here: by the provider), never parsed again
    [stored] = [m.message for m in rig.history(session.id) if m.message.kind == "assistant"][:1]
    assert stored.tool_calls[0].arguments_json == '{"path":"a.txt","unit":"lines"}'
