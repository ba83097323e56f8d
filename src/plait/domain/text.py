"""What text plait accepts where it enters (model output, HTTP requests, the CLI).

Two kinds of text, one rule each:

- **Text** (messages, titles, notes, tool argument values): any Unicode text but a NUL
  character (PostgreSQL cannot store one, and no path or command may hold one) and lone
  surrogates (``\\udcff``: not Unicode characters, so no UTF-8 store can write them).
- **Identifiers** (call ids, session, run, message and approval ids, cursors, request ids):
  1 to :data:`MAX_ID_LENGTH` characters, none of them a control character (category Cc,
  NUL included) or a lone surrogate.

Each check returns the reason the value is refused (``None``: it is fine), worded to be
read by whoever sent it: a person, a client or the model (as a correction).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "MAX_ARGUMENTS_BYTES",
    "MAX_ID_LENGTH",
    "id_problem",
    "printable",
    "text_problem",
    "value_problem",
]

MAX_ID_LENGTH = 200
"""The longest identifier accepted (the HTTP API's limit for the ids it takes in bodies)."""

MAX_ARGUMENTS_BYTES = 1_000_000
"""The largest arguments (as JSON) one tool call may have."""

_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")
_BAD_ID = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")

ID_PATTERN = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"
"""The identifier rule as a regular expression, for API documents (lone surrogates
cannot travel in a URL or in valid JSON text anyway)."""
TEXT_PATTERN = "^[^\\u0000]*$"
"""The text rule as a regular expression, for API documents (as :data:`ID_PATTERN`)."""


def _describe(char: str, at: int) -> str:
    if char == "\x00":
        return f"a NUL character at offset {at}"
    if "\ud800" <= char <= "\udfff":
        return (
            f"a lone surrogate \\u{ord(char):04x} at offset {at} (not a Unicode character; "
            "send valid text)"
        )
    return f"a control character \\x{ord(char):02x} at offset {at}"


def _clean(text: str) -> bool:
    """No NUL and no lone surrogate in ``text``: the common case, told without the regular
    expression (which takes about 6 us per KB, read at every step for the model's text
    and every argument)."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")  # refuses a lone surrogate, and only that
    except UnicodeEncodeError:
        return False
    return True


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be accepted as text, or ``None``."""
    if _clean(text):
        return None
    found = _BAD_TEXT.search(text)
    if found is None:
        return None
    return "contains " + _describe(found.group(), found.start())


def id_problem(value: str, *, max_length: int = MAX_ID_LENGTH) -> str | None:
    """Why ``value`` cannot be accepted as an identifier, or ``None``."""
    if not value:
        return "is empty"
    if len(value) > max_length:
        return f"is {len(value)} characters long (at most {max_length})"
    found = _BAD_ID.search(value)
    if found is None:
        return None
    return "contains " + _describe(found.group(), found.start())


def value_problem(value: Any, path: str = "$") -> str | None:
    """The first string in a JSON value (keys included) that :func:`text_problem`
    refuses, as ``"$.path: reason"``, or ``None``."""
    if isinstance(value, str):
        problem = text_problem(value)
        return None if problem is None else f"{path} {problem}"
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if isinstance(key, str) else path
            if isinstance(key, str) and (problem := text_problem(key)) is not None:
                return f"key {_shown(key)} of {path} {problem}"
            if (problem := value_problem(item, where)) is not None:
                return problem
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if (problem := value_problem(item, f"{path}[{index}]")) is not None:
                return problem
    return None


def printable(text: str, limit: int | None = None) -> str:
    """``text`` with NUL characters and lone surrogates written as escapes (``\\x00``,
    ``\\udcff``), cut to ``limit`` characters with a note: safe to store and to send."""
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"... [{len(text) - limit} more characters]"
    if _clean(text):
        return text
    escaped = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return escaped.replace("\x00", "\\x00")


def _shown(key: str) -> str:
    """A key, printable whatever it holds."""
    return ascii(key[:50])
