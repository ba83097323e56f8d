"""Input and output at the edge of the CLI: printing (text or ``--json``), reading a
message from a file or stdin, and refusing bytes that are not UTF-8."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from plait.application.answers import output_schema_of
from plait.domain.answers import OutputSchema
from plait.domain.errors import ConfigError
from plait.entrypoints.cli._options import UsageError

__all__ = [
    "InputError",
    "Out",
    "check_argv",
    "decode_utf8",
    "printable",
    "read_message",
    "terminal_safe",
]


class InputError(ConfigError):
    """Input the command cannot use: not UTF-8, an unreadable file, an empty message."""

    code = "invalid_input"


class Out:
    """Where a command prints: text for people, or one JSON document with ``--json``."""

    def __init__(self, as_json: bool) -> None:
        self.json = as_json

    def emit(self, data: Any, text: str | Callable[[], str]) -> None:
        if self.json:
            print(json.dumps(data, ensure_ascii=False, indent=2))
        else:
            print(terminal_safe(text if isinstance(text, str) else text()))

    @staticmethod
    def line(data: Any) -> None:
        """One JSON line, flushed at once (for streams a reader follows live)."""
        print(json.dumps(data, ensure_ascii=False), flush=True)


_CONTROLS = re.compile("\r\n|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    return "\n" if char == "\r\n" else char.encode("unicode_escape").decode("ascii")


def terminal_safe(text: str) -> str:
    """``text`` with every terminal control character (ESC and so every CSI/OSC sequence,
    the C1 controls, BEL, backspace, a lone CR, DEL...) shown as a visible ``\\xNN``
    escape, so tool output, file contents or model text cannot set the title, clear the
    screen or overwrite a line; newlines and tabs are kept. Every human renderer passes
    its text through this."""
    return _CONTROLS.sub(_shown, text)


def printable(text: str) -> str:
    """``text`` with undecodable bytes (kept by Python as lone surrogates) shown as
    ``\\xNN`` escapes, so it can be printed and stored."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _bad_byte(raw: bytes) -> tuple[int, int]:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start, raw[error.start]
    return -1, 0


def check_argv(argv: Sequence[str]) -> None:
    """Refuse an argument that is not valid UTF-8 (Python keeps its bytes as surrogates)."""
    for number, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raw = arg.encode("utf-8", "surrogateescape")
            at, byte = _bad_byte(raw)
            raise UsageError(
                f"argument {number} ('{printable(arg)}') is not valid UTF-8 (byte 0x{byte:02x} "
                f"at offset {at}); pass UTF-8 text, or a long message with --file or stdin",
                argument=number,
            ) from None


def decode_utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(
            f"{what} is not valid UTF-8 (byte 0x{raw[error.start]:02x} at offset {error.start}); "
            "convert it to UTF-8 (e.g. with iconv) and try again",
            offset=error.start,
        ) from None


def read_message(text: str | None, file: str | None) -> str:
    """The message of ``send``: TEXT, ``--file PATH``, or stdin (TEXT ``-``, or no TEXT
    with stdin not a terminal)."""
    if file is not None:
        if text is not None:
            raise UsageError("give the message as TEXT or with --file, not both")
        try:
            raw = Path(file).read_bytes()
        except OSError as error:
            raise InputError(
                f"cannot read --file {file!r}: {error.strerror or type(error).__name__}", path=file
            ) from None
        return _non_empty(decode_utf8(raw, f"--file {file!r}"), f"--file {file!r}")
    if text == "-" or (text is None and not sys.stdin.isatty()):
        try:
            raw = sys.stdin.buffer.read()
        except (OSError, ValueError, AttributeError) as error:
            raise InputError(
                f"cannot read the message from standard input ({error}); give TEXT or --file PATH"
            ) from None
        return _non_empty(decode_utf8(raw, "standard input"), "stdin")
    if text is None:
        raise UsageError("no message: give TEXT, --file PATH, or pipe it on standard input")
    return text


def read_output_schema(path: str | None) -> OutputSchema | None:
    """``send --output-schema FILE``: the JSON Schema the final answer must match."""
    if path is None:
        return None
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise InputError(
            f"cannot read --output-schema {path!r}: {error.strerror or type(error).__name__}",
            path=path,
        ) from None
    try:
        schema = json.loads(decode_utf8(raw, f"--output-schema {path!r}"))
    except ValueError as error:
        raise InputError(f"--output-schema {path!r} is not JSON: {error}", path=path) from None
    return output_schema_of(OutputSchema.create(schema))  # a schema that is no JSON Schema: now


def _non_empty(text: str, where: str) -> str:
    if not text.strip():
        raise InputError(f"the message from {where} is empty; write the message there")
    return text
