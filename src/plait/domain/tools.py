"""What the model sees of a tool: name, description, argument schema and effect class."""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from plait.domain.errors import ValidationError
from plait.domain.record import record

__all__ = ["EffectClass", "ToolSpec"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


class EffectClass(StrEnum):
    """How safe a call is to repeat after a crash
    (docs/design.md#recovery-without-repeating-side-effects)."""

    READ_ONLY = "read_only"
    """No effect outside the call: re-executed on recovery."""
    IDEMPOTENT = "idempotent"
    """Repeating with the same idempotency key has the effect of one execution."""
    SIDE_EFFECT = "side_effect"
    """Cannot prove a repeat is safe: settled as ``unknown`` on recovery."""


@record(kw_only=True)
class ToolSpec:
    """A tool's contract. No executor and no credentials live here.

    ``parameters`` is a JSON Schema (Draft 2020-12) for the arguments object. It is
    checked and compiled when its tool is registered (see
    :mod:`plait.application.arguments`), so a schema plait cannot enforce fails there
    rather than being ignored.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    effect: EffectClass = EffectClass.SIDE_EFFECT

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
        object.__setattr__(self, "effect", EffectClass(self.effect))
