"""The built-in tools' arguments, declared once as typed models: the JSON schema each
tool shows the model (and every call is checked against) and the value its executor
receives both come from these. The schemas are precomputed into ``_schemas.json``
(``scripts/tool_schemas.py``; a test checks they are current), so that building the tools
does not import pydantic: this module is imported at a tool's first call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from plait.adapters.tools._values import MAX_COMMAND_CHARS, plain_sha256
from plait.application.typed_tools import ToolArguments

__all__ = [
    "MODELS",
    "SCHEMA_FILE",
    "EditFile",
    "ListDir",
    "ReadFile",
    "RunCommand",
    "RunTests",
    "SearchText",
    "WriteFile",
]

_WHERE = " Relative to the workspace root (an absolute path must lie inside it)."


def _path(description: str, **default: Any) -> Any:
    return Field(**default, min_length=1, description=description + _WHERE)


class ReadFile(ToolArguments):
    path: str = _path("File to read.")
    offset_line: int = Field(1, ge=1, description="First line to return, 1-based.")
    max_lines: int | None = Field(
        None,
        ge=1,
        description="Return at most this many lines (default: to the end, within the size limit).",
    )


class ListDir(ToolArguments):
    path: str = _path("Directory to list (default: the workspace root).", default=".")
    recursive: bool = Field(False, description="Also list everything below, depth first.")


class SearchText(ToolArguments):
    pattern: str = Field(
        min_length=1,
        description="Text to find (a regular expression if regex is true), within single lines.",
    )
    path: str = _path("File or directory to search (default: the root).", default=".")
    regex: bool = Field(
        False,
        description="Treat pattern as a regular expression (RE2: no lookaround, no "
        "backreferences).",
    )
    ignore_case: bool = Field(False, description="Match regardless of case.")
    glob: str | None = Field(
        None,
        min_length=1,
        description="Only search files matching this fnmatch pattern, e.g. '*.py': matched "
        "against the file name, or against the path from the workspace root if it has a '/'.",
    )
    max_results: int = Field(100, ge=1, le=1000, description="Stop after this many matching lines.")


class WriteFile(ToolArguments):
    path: str = _path("File to write.")
    content: str = Field(description="The complete new content.")
    expected_sha256: str | None = Field(
        None,
        pattern="^((sha256:)?[0-9a-fA-F]{64}|absent)$",
        description="sha256 (hex) of the content the file must have now, or 'absent' if it "
        "must not exist yet.",
    )

    @field_validator("expected_sha256")
    @classmethod
    def _plain_hex(cls, value: str | None) -> str | None:
        """Lower-case hex without the ``sha256:`` prefix, or ``absent``."""
        return None if value is None else plain_sha256(value)


class EditFile(ToolArguments):
    path: str = _path("File to edit.")
    old_string: str = Field(
        min_length=1, description="Text to replace, exactly as in the file, whitespace included."
    )
    new_string: str = Field(description="Replacement text (may be empty, to delete).")
    replace_all: bool = Field(False, description="Replace every occurrence instead of exactly one.")


_TIMEOUT = "Wall-clock limit in seconds; the whole process tree is killed at it."


class RunCommand(ToolArguments):
    command: str = Field(
        min_length=1,
        max_length=MAX_COMMAND_CHARS,
        description=f"Shell command line, run with /bin/sh -c (at most {MAX_COMMAND_CHARS} "
        "characters: write a longer script to a file first).",
    )
    cwd: str | None = Field(
        None,
        min_length=1,
        description="Directory to run in, relative to the workspace root (default: the root).",
    )
    timeout_seconds: float | None = Field(None, gt=0, description=_TIMEOUT)


class RunTests(ToolArguments):
    timeout_seconds: float | None = Field(None, gt=0, description=_TIMEOUT)


MODELS: dict[str, type[ToolArguments]] = {
    "read_file": ReadFile,
    "list_dir": ListDir,
    "search_text": SearchText,
    "write_file": WriteFile,
    "edit_file": EditFile,
    "run_command": RunCommand,
    "run_tests": RunTests,
}
"""Each built-in tool's arguments model, by tool name."""

SCHEMA_FILE = Path(__file__).with_name("_schemas.json")
"""Where the schemas of :data:`MODELS` are precomputed."""
