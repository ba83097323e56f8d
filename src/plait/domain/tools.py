"""What the model sees of a tool: name, description, argument schema and effect class."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from plait.domain._jsonschema import SchemaError, Validator, compile_schema
from plait.domain.errors import ValidationError

__all__ = ["EffectClass", "ToolSpec"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


class EffectClass(StrEnum):
    """How safe a call is to repeat after a crash (DESIGN §4)."""

    READ_ONLY = "read_only"
    """No effect outside the call: re-executed on recovery."""
    IDEMPOTENT = "idempotent"
    """Repeating with the same idempotency key has the effect of one execution."""
    SIDE_EFFECT = "side_effect"
    """Cannot prove a repeat is safe: settled as ``unknown`` on recovery."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """A tool's contract. No executor and no credentials live here.

    ``parameters`` is a JSON Schema for the arguments object; it is compiled once at
    construction, so a schema plait cannot enforce fails here rather than being ignored.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    effect: EffectClass = EffectClass.SIDE_EFFECT
    validator: Validator | None = field(default=None, repr=False, compare=False)
    """Checks arguments instead of plait's built-in validator (which refuses keywords it
    cannot enforce): set by adapters that take schemas from elsewhere, e.g. MCP servers."""
    _validator: Validator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValidationError(
                f"tool name {self.name!r} must match {_NAME.pattern}", tool=str(self.name)
            )
        if self.parameters.get("type", "object") != "object":
            raise ValidationError(
                f"tool {self.name!r}: the parameters schema must describe an object",
                tool=self.name,
            )
        try:
            validator = self.validator or compile_schema(self.parameters)
        except SchemaError as e:
            raise ValidationError(
                f"tool {self.name!r}: invalid parameters schema: {e}", tool=self.name
            ) from e
        object.__setattr__(self, "effect", EffectClass(self.effect))
        object.__setattr__(self, "_validator", validator)

    def check_arguments(self, arguments: object) -> list[str]:
        """Errors of ``arguments`` against the schema; empty when valid."""
        return self._validator(arguments)
