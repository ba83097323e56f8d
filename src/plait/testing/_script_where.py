"""Where a value sits in a scripted-model file, and the checks that name it in their
errors (unknown keys with a suggestion, wrong types, values JSON cannot carry)."""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any, Final, NoReturn

from plait.domain.errors import ScriptError
from plait.domain.record import record

__all__ = ["Where", "check_json", "check_keys", "expect", "suggest", "type_name"]


@record
class Where:
    """Where a value sits in the script, for messages and error details."""

    source: str
    role: str | None = None
    turn: int | None = None
    call: int | None = None
    section: str | None = None
    """A sub-mapping: "capabilities", "usage", "error"."""

    def __str__(self) -> str:
        parts = []
        if self.section is not None:
            parts.append(f"the {self.section} of" if self.role else f"{self.section!r} of")
        if self.call is not None:
            parts.append(f"tool call {self.call} of")
        if self.role is not None:
            parts.append(f"{self.role} turn {self.turn} of")
        parts.append(self.source)
        return " ".join(parts)

    def inside(self, section: str) -> Where:
        return Where(self.source, self.role, self.turn, self.call, section)

    def fail(self, message: str, **details: Any) -> NoReturn:
        context = {
            "file": self.source,
            "role": self.role,
            "turn": self.turn,
            "call": self.call,
            "section": self.section,
        }
        context.update(details)
        raise ScriptError(message, **{k: v for k, v in context.items() if v is not None})


def suggest(word: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not close and len(word) >= 3:  # a truncated key: 'input' for 'input_tokens'
        close = [c for c in choices if c.startswith(word)][:1]
    return f"; did you mean {close[0]!r}?" if close else ""


def check_keys(value: Mapping[Any, Any], allowed: tuple[str, ...], where: Where) -> None:
    for key in value:
        if key not in allowed:
            where.fail(f"unknown key {key!r} in {where}{suggest(str(key), allowed)}", key=str(key))


_TYPE_WORDS: Final[Mapping[type, str]] = {
    str: "a string",
    int: "an integer",
    bool: "a boolean",
    list: "a list",
    dict: "a mapping",
}


def type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def expect(value: object, kind: type, key: str, where: Where) -> None:
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        where.fail(
            f"{key!r} in {where} must be {_TYPE_WORDS[kind]}, got {type_name(value)}", key=key
        )


def check_json(value: object, key: str, where: Where) -> None:
    """YAML can produce values JSON cannot carry (dates, sets, non-string keys, NaN)."""
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if math.isfinite(value):
            return
    elif isinstance(value, list):
        for item in value:
            check_json(item, key, where)
        return
    elif isinstance(value, dict):
        for item_key, item in value.items():
            if not isinstance(item_key, str):
                where.fail(f"{key!r} in {where} has a non-string key {item_key!r}", key=key)
            check_json(item, key, where)
        return
    where.fail(f"{key!r} in {where} is not a JSON value: {value!r} ({type_name(value)})", key=key)
