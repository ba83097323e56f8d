"""Checking a model's output before anything of it is stored as a tool request.

Invalid output (unknown tool, arguments that are not a JSON object or do not match the
schema, missing or repeated call ids, ids already used in the session, call ids or
argument strings that are not acceptable text: see :mod:`plait.domain.text`, arguments
larger than :data:`~plait.domain.text.MAX_ARGUMENTS_BYTES`, response text holding a NUL or a
lone surrogate) is never persisted; the loop asks the model for a correction a bounded
number of times instead.
"""

from __future__ import annotations

import json
from collections.abc import Container, Mapping

from plait.application.arguments import argument_errors
from plait.application.ports import ModelResponse
from plait.domain.messages import ToolCall
from plait.domain.record import record
from plait.domain.text import MAX_ARGUMENTS_BYTES, id_problem, text_problem, value_problem
from plait.domain.tools import ToolSpec

__all__ = ["CheckedOutput", "check_output"]


@record
class CheckedOutput:
    calls: tuple[ToolCall, ...]
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_loads = json.JSONDecoder().decode


def check_output(
    response: ModelResponse,
    tools: Mapping[str, ToolSpec],
    used_call_ids: Container[str],
) -> CheckedOutput:
    """Validate the tool calls of ``response``. Returns the calls as domain values, or the
    problems (each naming the call and what is wrong) to send back as a correction."""
    problems: list[str] = []
    if (problem := text_problem(response.text)) is not None:
        problems.append(f"the message text {problem}")
    calls: list[ToolCall] = []
    seen: set[str] = set()
    for number, raw in enumerate(response.tool_calls, 1):
        if not raw.id:
            problems.append(f"tool call {number}: missing call id")
            continue
        if (problem := id_problem(raw.id)) is not None:
            problems.append(f"tool call {number}: call id {raw.id[:60]!a} {problem}")
            continue
        where = f"tool call {number} ({raw.id})"
        if raw.id in seen:
            problems.append(f"{where}: call id {raw.id!r} is repeated in this message")
            continue
        seen.add(raw.id)
        if raw.id in used_call_ids:
            problems.append(f"{where}: call id {raw.id!r} was already used in this session")
            continue
        spec = tools.get(raw.name)
        if spec is None:
            known = ", ".join(sorted(tools)) or "none"
            problems.append(f"{where}: unknown tool {raw.name[:100]!r} (available: {known})")
            continue
        if isinstance(raw.arguments, str):
            if len(raw.arguments) > MAX_ARGUMENTS_BYTES:  # before parsing it
                problems.append(
                    f"{where}: arguments are {len(raw.arguments)} characters long (at most "
                    f"{MAX_ARGUMENTS_BYTES} bytes of JSON); pass less at once"
                )
                continue
            text = raw.arguments.strip() or "{}"
            try:
                args = _loads(text)
            except ValueError as exc:
                problems.append(f"{where}: arguments are not valid JSON ({exc})")
                continue
        else:
            args = raw.arguments
            text = ""
        if not isinstance(args, dict):
            problems.append(f"{where}: arguments must be a JSON object")
            continue
        # Every string decoded from JSON text without a \u escape is made of the text's
        # own characters: clean text, clean strings (the common case: no walk).
        if (not text or "\\u" in text or text_problem(text) is not None) and (
            problem := value_problem(args)
        ) is not None:
            problems.append(f"{where}: argument {problem}")
            continue
        errors = argument_errors(spec, args)
        if errors:
            problems.append(
                f"{where}: arguments for {raw.name!r} do not match its schema: " + "; ".join(errors)
            )
            continue
        arguments_json = text if text.startswith("{") else _dumps(args)
        # A character is at most 4 bytes of UTF-8: most texts need no encoding to tell.
        if (
            len(arguments_json) * 4 > MAX_ARGUMENTS_BYTES
            and len(arguments_json.encode("utf-8")) > MAX_ARGUMENTS_BYTES
        ):
            problems.append(
                f"{where}: arguments are {len(arguments_json.encode('utf-8'))} bytes of JSON "
                f"(at most {MAX_ARGUMENTS_BYTES}); pass less at once"
            )
            continue
        calls.append(
            ToolCall.checked(
                id=raw.id, name=raw.name, arguments_json=arguments_json, arguments=args
            )
        )
    return CheckedOutput(tuple(calls), tuple(problems))
