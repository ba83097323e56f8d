"""Typed final answers: the JSON Schema a run's final answer must match.

A run that carries an :class:`OutputSchema` ends only with an answer that parses as JSON
and validates against it; the validated value is stored with the final assistant message
(``AssistantMessage.output``). The schema is kept as canonical JSON text, so a stored run
can never be mutated in place. Validation (JSON Schema Draft 2020-12, the ``jsonschema``
library's) is the application's: :mod:`plait.application.answers` checks the schema when
the run is asked for and each answer against it; here, the answer's text is decoded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from plait.domain.errors import ValidationError
from plait.domain.record import record

__all__ = ["OutputSchema", "decode_answer"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(?P<body>.*?)\n?```$", re.DOTALL)


@record(kw_only=True)
class OutputSchema:
    """``schema_json``: the JSON Schema as canonical JSON text; ``name``: what providers
    call it (OpenAI's schema name, Anthropic's answer tool is ``final_answer``)."""

    schema_json: str
    name: str = "answer"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValidationError(
                f"output schema name {self.name!r} must match {_NAME.pattern}", field="name"
            )
        try:
            schema = json.loads(self.schema_json)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"the output schema is not JSON: {exc}", field="schema") from exc
        if not isinstance(schema, dict):
            raise ValidationError("the output schema must be a JSON object", field="schema")

    @classmethod
    def create(cls, schema: Mapping[str, Any], *, name: str | None = None) -> OutputSchema:
        """From a schema dict; ``name`` defaults to the schema's ``title`` (if usable)."""
        if not isinstance(schema, Mapping):
            raise ValidationError("the output schema must be a JSON object", field="schema")
        try:
            text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"the output schema is not JSON: {exc}", field="schema") from exc
        title = schema.get("title")
        if name is None and isinstance(title, str) and _NAME.match(title):
            name = title
        return cls(schema_json=text, name=name or "answer")

    def schema(self) -> dict[str, Any]:
        """A fresh copy of the schema."""
        value = json.loads(self.schema_json)
        assert isinstance(value, dict)
        return value


def decode_answer(text: str, structured: Any = None) -> tuple[Any, list[str]]:
    """The answer's value and the problems decoding it (empty: decoded). ``structured`` is
    the value a provider's native mode already decoded; otherwise ``text`` is parsed (a
    Markdown code fence around the JSON is accepted, nothing else around it)."""
    if structured is None:
        body = text.strip()
        fenced = _FENCE.match(body)
        if fenced:
            body = fenced.group("body").strip()
        if not body:
            return None, ["the final answer is empty; reply with only a JSON value"]
        try:
            structured = json.loads(body)
        except ValueError as exc:
            return None, [f"the final answer is not valid JSON ({exc}); reply with only JSON"]
    return structured, []
