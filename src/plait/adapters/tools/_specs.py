"""What the model is told about the workspace tools: names, descriptions, argument
schemas and declared effect classes."""

from __future__ import annotations

from typing import Any

from plait.domain.tools import EffectClass

__all__ = ["SPECS"]

_WHERE = " Relative to the workspace root (an absolute path must lie inside it)."


def _object(required: list[str], **properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _p(type_: str, description: str, **extra: Any) -> dict[str, Any]:
    if type_ == "path":
        return {"type": "string", "minLength": 1, "description": description + _WHERE, **extra}
    return {"type": type_, "description": description, **extra}


_READ, _WRITE = EffectClass.READ_ONLY, EffectClass.SIDE_EFFECT


SPECS: list[tuple[str, str, dict[str, Any], EffectClass]] = [
    (
        "read_file",
        "Read a UTF-8 text file of the workspace, whole or a range of lines. Returns the "
        "content as is (no line numbers), then one bracketed line saying which lines were "
        "shown, whether more follows (and the offset_line to continue with) and, when the "
        "end was reached, the file's sha256 (usable as write_file's expected_sha256). "
        "Binary files are refused.",
        _object(
            ["path"],
            path=_p("path", "File to read."),
            offset_line=_p("integer", "First line to return, 1-based.", minimum=1, default=1),
            max_lines=_p(
                "integer",
                "Return at most this many lines (default: to the end, within the size limit).",
                minimum=1,
            ),
        ),
        _READ,
    ),
    (
        "list_dir",
        "List a workspace directory, one entry per line, sorted. Directories end in '/', "
        "symbolic links in '@'. Recursive listings show paths relative to the listed "
        "directory, do not enter .git or links, and stop after a bounded number of entries "
        "(said at the end).",
        _object(
            [],
            path=_p("path", "Directory to list (default: the workspace root).", default="."),
            recursive=_p("boolean", "Also list everything below, depth first.", default=False),
        ),
        _READ,
    ),
    (
        "search_text",
        "Find lines containing a string (or matching a regular expression, RE2 syntax: "
        "Python's without lookaround and backreferences) in the "
        "workspace's text files. Returns 'path:line: text' per matching line, paths relative "
        "to the workspace root. Skips binary files, .git and symbolic links; stops after "
        "max_results matches and says so.",
        _object(
            ["pattern"],
            pattern=_p(
                "string",
                "Text to find (a regular expression if regex is true), within single lines.",
                minLength=1,
            ),
            path=_p("path", "File or directory to search (default: the root).", default="."),
            regex=_p(
                "boolean",
                "Treat pattern as a regular expression (RE2: no lookaround, no backreferences).",
                default=False,
            ),
            ignore_case=_p("boolean", "Match regardless of case.", default=False),
            glob=_p(
                "string",
                "Only search files matching this fnmatch pattern, e.g. '*.py': matched against "
                "the file name, or against the path from the workspace root if it has a '/'.",
                minLength=1,
            ),
            max_results=_p(
                "integer",
                "Stop after this many matching lines.",
                minimum=1,
                maximum=1000,
                default=100,
            ),
        ),
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
        _object(
            ["path", "content"],
            path=_p("path", "File to write."),
            content=_p("string", "The complete new content."),
            expected_sha256=_p(
                "string",
                "sha256 (hex) of the content the file must have now, or 'absent' if it must "
                "not exist yet.",
                pattern="^((sha256:)?[0-9a-fA-F]{64}|absent)$",
            ),
        ),
        _WRITE,
    ),
    (
        "edit_file",
        "Replace an exact string in a UTF-8 workspace file. old_string must occur exactly "
        "once (include surrounding lines to make it unique) unless replace_all is true. The "
        "file is rewritten atomically. Returns the number of replacements and the new sha256.",
        _object(
            ["path", "old_string", "new_string"],
            path=_p("path", "File to edit."),
            old_string=_p(
                "string",
                "Text to replace, exactly as in the file, whitespace included.",
                minLength=1,
            ),
            new_string=_p("string", "Replacement text (may be empty, to delete)."),
            replace_all=_p(
                "boolean", "Replace every occurrence instead of exactly one.", default=False
            ),
        ),
        _WRITE,
    ),
]
