"""Typed final answers in the loop: what the model is asked, and the check of its answer.

A model whose capabilities declare ``structured_output`` gets the schema in the context,
and its adapter sends it in the provider's native mode. Every other model (the scripted
one, a provider without a native mode) gets it in its instructions: the validated
fallback. Either way the answer is parsed and validated here; an answer that does not
validate is sent back as a correction, like an invalid tool call, within the run's
``max_corrections`` and counted in its model-call budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from plait.application._run_state import RunResult
from plait.application.arguments import ArgumentSchema
from plait.application.ports import ModelResponse
from plait.domain.answers import OutputSchema, decode_answer
from plait.domain.context import Context
from plait.domain.errors import ConfigError, ValidationError
from plait.domain.messages import AssistantMessage

__all__ = ["OutputType", "ask_for_answer", "check_answer", "final_output", "output_schema_of"]


def fallback_instructions(schema: OutputSchema) -> str:
    return (
        "When you give your final answer (a reply without tool calls), reply with only a "
        "JSON value that matches this JSON Schema, with no other text around it:\n"
        + schema.schema_json
    )


def ask_for_answer(context: Context[Any], schema: OutputSchema, *, native: bool) -> Context[Any]:
    """``context`` asking for a final answer that matches ``schema``."""
    if native:
        return replace(context, output_schema=schema)
    instructions = context.instructions + "\n\n" if context.instructions else ""
    return replace(context, instructions=instructions + fallback_instructions(schema))


_checkers: dict[str, ArgumentSchema] = {}


def answer_schema(schema: OutputSchema) -> ArgumentSchema:
    """``schema`` compiled (Draft 2020-12, once per schema text); a schema that is not
    valid JSON Schema is a :class:`~plait.domain.errors.ValidationError` naming where."""
    checker = _checkers.get(schema.schema_json)
    if checker is None:
        try:
            checker = ArgumentSchema(schema.name, schema.schema())
        except ValidationError as exc:
            message = exc.message.replace(f"tool {schema.name!r}: invalid parameters schema", "")
            raise ValidationError(f"invalid output schema{message}", field="schema") from None
        if len(_checkers) > 1024:
            _checkers.clear()
        _checkers[schema.schema_json] = checker
    return checker


def check_answer(schema: OutputSchema, response: ModelResponse) -> tuple[Any, tuple[str, ...]]:
    """The final answer's validated value, or the problems to send back."""
    value, problems = decode_answer(response.text, response.structured)
    if problems:
        return None, tuple(problems)
    errors = answer_schema(schema).errors(value)
    if errors:
        return None, ("the final answer does not match the output schema: " + "; ".join(errors),)
    return value, ()


OutputType = OutputSchema | Mapping[str, Any] | type[Any]
"""What ``send(output_type=...)`` takes: an :class:`OutputSchema`, a JSON Schema dict, or
a pydantic model class (anything with ``model_json_schema`` and ``model_validate``)."""


def _is_model_class(output_type: object) -> bool:
    return isinstance(output_type, type) and all(
        callable(getattr(output_type, attr, None))
        for attr in ("model_json_schema", "model_validate")
    )


def output_schema_of(output_type: OutputType | None) -> OutputSchema | None:
    """The schema a run stores for ``output_type``; ConfigError for anything else."""
    if output_type is None:
        return None
    if isinstance(output_type, OutputSchema):
        schema = output_type
    elif isinstance(output_type, Mapping):
        schema = OutputSchema.create(output_type)
    elif _is_model_class(output_type):
        schema = OutputSchema.create(output_type.model_json_schema(), name=output_type.__name__)
    else:
        schema = None
    if schema is not None:
        answer_schema(schema)  # refused now, not when the answer comes
        return schema
    raise ConfigError(
        f"output_type must be a JSON Schema dict, an OutputSchema or a pydantic model class, "
        f"not {output_type!r}",
        output_type=repr(output_type),
    )


def final_output(result: RunResult, output_type: OutputType | None) -> RunResult:
    """``result`` with its typed answer: the final message's value, as an instance of
    ``output_type`` when that is a model class."""
    last = result.messages[-1].message if result.messages else None
    if not isinstance(last, AssistantMessage) or last.output is None:
        return result
    value = last.output
    if isinstance(output_type, type) and _is_model_class(output_type):
        value = output_type.model_validate(value)
    return replace(result, output=value)
