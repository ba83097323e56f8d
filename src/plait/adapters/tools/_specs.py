"""What the model is told about the workspace tools, declared once: each tool's arguments
are a typed model; its JSON schema (what the model sees and every call is checked
against) and the value its executor receives both come from that model."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from plait.application.typed_tools import ToolArguments, arguments_schema
from plait.domain.tools import EffectClass, ToolSpec

__all__ = [
    "ABSENT",
    "SPECS",
    "EditFile",
    "ListDir",
    "ReadFile",
    "SearchText",
    "WriteFile",
]

_WHERE = " Relative to the workspace root (an absolute path must lie inside it)."
ABSENT = "absent"


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
        if value is None:
            return None
        value = value.lower().removeprefix("sha256:")
        if value != ABSENT and not re.fullmatch(r"[0-9a-f]{64}", value):
            raise ValueError("expected_sha256 must be 64 hex digits or 'absent'")
        return value


class EditFile(ToolArguments):
    path: str = _path("File to edit.")
    old_string: str = Field(
        min_length=1, description="Text to replace, exactly as in the file, whitespace included."
    )
    new_string: str = Field(description="Replacement text (may be empty, to delete).")
    replace_all: bool = Field(False, description="Replace every occurrence instead of exactly one.")


_READ, _WRITE = EffectClass.READ_ONLY, EffectClass.SIDE_EFFECT

_DESCRIPTIONS: list[tuple[str, str, type[ToolArguments], EffectClass]] = [
    (
        "read_file",
        "Read a UTF-8 text file of the workspace, whole or a range of lines. Returns the "
        "content as is (no line numbers), then one bracketed line saying which lines were "
        "shown, whether more follows (and the offset_line to continue with) and, when the "
        "end was reached, the file's sha256 (usable as write_file's expected_sha256). "
        "Binary files are refused.",
        ReadFile,
        _READ,
    ),
    (
        "list_dir",
        "List a workspace directory, one entry per line, sorted. Directories end in '/', "
        "symbolic links in '@'. Recursive listings show paths relative to the listed "
        "directory, do not enter .git or links, and stop after a bounded number of entries "
        "(said at the end).",
        ListDir,
        _READ,
    ),
    (
        "search_text",
        "Find lines containing a string (or matching a regular expression, RE2 syntax: "
        "Python's without lookaround and backreferences) in the "
        "workspace's text files. Returns 'path:line: text' per matching line, paths relative "
        "to the workspace root. Skips binary files, .git and symbolic links; stops after "
        "max_results matches and says so.",
        SearchText,
        _READ,
    ),
    (
        "write_file",
        "Create or overwrite a workspace file with the given UTF-8 content, creating missing "
        "parent directories; the write is atomic. Pass expected_sha256 to make it a "
        "compare-and-write: it happens only if the file still has that sha256 (or, with "
        "'absent', does not exist yet) — and if the file already holds exactly this content "
        "the call succeeds as 'already written', so retrying is safe. Returns the bytes "
        "written and the new sha256.",
        WriteFile,
        _WRITE,
    ),
    (
        "edit_file",
        "Replace an exact string in a UTF-8 workspace file. old_string must occur exactly "
        "once (include surrounding lines to make it unique) unless replace_all is true. The "
        "file is rewritten atomically. Returns the number of replacements and the new sha256.",
        EditFile,
        _WRITE,
    ),
]

SPECS: list[tuple[ToolSpec, type[ToolArguments]]] = [
    (
        ToolSpec(name=name, description=text, parameters=arguments_schema(model), effect=effect),
        model,
    )
    for name, text, model, effect in _DESCRIPTIONS
]
"""Each workspace tool's spec, and the model its arguments are parsed into."""
