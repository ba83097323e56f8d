"""Sub-agents: named agents a run delegates a task to, each task a durable child run.

A :class:`SubAgent` is configuration (instructions, model, tool subset, policy, budget
share). A
delegation is one tool call of the parent run; the child is a session and a run of its
own whose ids derive from the call's idempotency key (:func:`child_ids`), so a call
executed again after a crash finds the child it started instead of starting another.
The child run records the call it answers (:class:`ParentCall`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from plait.domain.errors import ValidationError
from plait.domain.record import record

__all__ = ["ParentCall", "SubAgent", "child_ids"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,47}$")
_CONTEXTS = ("fresh", "fork")


@record(kw_only=True)
class ParentCall:
    """The call of a parent run that a child run answers."""

    session_id: str
    run_id: str
    call_id: str
    agent: str = ""
    """The sub-agent's name: which configuration continues the child run."""


@record(kw_only=True)
class SubAgent:
    """A named sub-agent. ``model``: a model spec (None: the parent's model); ``tools``:
    the names of the parent's tools it may use (None: all of them); the ``max_*`` fields
    are its budget share, each capped by what the parent has left when it starts."""

    name: str
    instructions: str
    description: str = ""
    model: str | None = None
    tools: tuple[str, ...] | None = None
    max_model_calls: int | None = None
    max_total_tokens: int | None = None
    max_steps: int | None = None
    context: str = "fresh"
    """``fresh``: the child starts from the task alone; ``fork``: from a fork of the
    parent's session at its last complete point before the delegating call (needs a
    store that can fork)."""
    policy: str | None = None
    """A policy file (docs/policy.md) deciding the child's tool calls; None: the parent's
    policy. Its approval requests reach the same inbox either way."""

    def __post_init__(self) -> None:
        if self.context not in _CONTEXTS:
            raise ValidationError(
                f"sub-agent {self.name!r}: context must be 'fresh' or 'fork', not {self.context!r}",
                field="context",
            )
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValidationError(
                f"sub-agent name {self.name!r} must match {_NAME.pattern}", field="name"
            )
        if not isinstance(self.instructions, str) or not self.instructions.strip():
            raise ValidationError(
                f"sub-agent {self.name!r} needs instructions", field="instructions"
            )
        for field in ("max_model_calls", "max_total_tokens", "max_steps"):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValidationError(
                    f"sub-agent {self.name!r}: {field} must be a positive integer", field=field
                )

    @classmethod
    def from_mapping(cls, name: str, table: Mapping[str, Any]) -> SubAgent:
        """From a ``[agents.NAME]`` table; an unknown key or a wrong type is an error
        naming it."""
        types: dict[str, type | tuple[type, ...]] = {
            "instructions": str,
            "description": str,
            "model": str,
            "tools": list,
            "max_model_calls": int,
            "max_total_tokens": int,
            "max_steps": int,
            "context": str,
            "policy": str,
        }
        for key, value in table.items():
            if key not in types:
                raise ValidationError(
                    f"[agents.{name}]: unknown key {key!r}; known: {', '.join(types)}",
                    key=key,
                )
            if not isinstance(value, types[key]) or isinstance(value, bool):
                raise ValidationError(f"[agents.{name}]: {key} has the wrong type", key=key)
        tools = table.get("tools")
        if tools is not None and not all(isinstance(t, str) for t in tools):
            raise ValidationError(f"[agents.{name}]: tools must be tool names", key="tools")
        return cls(
            name=name,
            instructions=table.get("instructions", ""),
            description=table.get("description", ""),
            model=table.get("model"),
            tools=None if tools is None else tuple(tools),
            max_model_calls=table.get("max_model_calls"),
            max_total_tokens=table.get("max_total_tokens"),
            max_steps=table.get("max_steps"),
            context=table.get("context", "fresh"),
            policy=table.get("policy"),
        )

    @property
    def tool_name(self) -> str:
        """The tool the parent delegates through."""
        return f"delegate_{self.name}"


def child_ids(idempotency_key: str) -> tuple[str, str]:
    """(session id, run id) of the child started by the call with this key."""
    digest = hashlib.sha256(("delegate\x1f" + idempotency_key).encode()).hexdigest()[:24]
    return f"ses_sub_{digest}", f"run_sub_{digest}"
