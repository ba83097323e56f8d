"""What ``search_text`` matches lines with: a literal, a case-folded literal, or a regular
expression on RE2.

Regular expressions run on RE2 (the ``google-re2`` package), not Python's ``re``: ``re``
can backtrack for hours on a pattern such as ``(a+)+$`` and holds the GIL while it does,
which freezes the whole event loop, lease heartbeat included. RE2 matches in time linear in
the text and releases the GIL while matching; the size of the compiled pattern is capped so
that one block of text takes a few seconds at most even for adversarial patterns. RE2's
syntax is Python's without lookaround and backreferences (as in ripgrep).

Each matcher answers for a single line and, much faster, for a block of whole lines at
once: a block answer may be a false alarm (a match across lines) but never misses a
line's match, so blocks without a match are skipped without looking at their lines.
"""

from __future__ import annotations

from typing import Protocol

import re2  # type: ignore[import-untyped]

from plait.domain.errors import ToolError

__all__ = ["MAX_PROGRAM_SIZE", "Matcher", "matcher"]

MAX_PROGRAM_SIZE = 5000
"""Largest compiled RE2 program accepted. Matching 64 KiB costs at worst about a
microsecond per program instruction (measured with adversarial patterns, where RE2's DFA
gives up and its NFA runs), so a search overruns its deadline by a few seconds at most.
Everyday patterns compile to under 300 instructions; a Unicode class such as ``\\pL`` to
about 1,200."""

_NO_MATCH = (-1, -1)


class Matcher(Protocol):
    def block(self, data: bytes, whole_lines: bool) -> bool:
        """Whether some line of ``data`` may match. ``whole_lines``: ``data`` holds only
        whole lines (no piece of a line longer than a read)."""
        ...

    def line(self, piece: bytes) -> bool:
        """Whether the line ``piece`` (with its line ending, if any) matches."""
        ...


class _Literal:
    def __init__(self, pattern: str) -> None:
        self.needle = pattern.encode("utf-8", "surrogatepass")

    def block(self, data: bytes, whole_lines: bool) -> bool:
        return self.needle in data

    def line(self, piece: bytes) -> bool:
        return self.needle in piece.rstrip(b"\r\n")


class _Folded:
    def __init__(self, pattern: str) -> None:
        self.folded = pattern.casefold()

    def block(self, data: bytes, whole_lines: bool) -> bool:
        return self.folded in data.decode("utf-8", "replace").casefold()

    def line(self, piece: bytes) -> bool:
        return self.folded in piece.decode("utf-8", "replace").rstrip("\r\n").casefold()


class _Regex:
    def __init__(self, pattern: str, ignore_case: bool) -> None:
        # (?m): ^ and $ also match at the line breaks inside a block; a line has none.
        self.match = _compile("(?m)" + pattern, pattern, ignore_case)._regexp.Match
        self.anchor = re2._re2.RE2.Anchor.UNANCHORED
        # \A and \z, or multi-line mode turned off, mean something else in a block.
        self.blockwise = not any(s in pattern for s in ("\\A", "\\z", "-m"))
        self.at_ends = "^" in pattern or "$" in pattern

    def block(self, data: bytes, whole_lines: bool) -> bool:
        if not self.blockwise:
            return True
        if self.at_ends and (not whole_lines or b"\r" in data):
            return True  # a line's ends are not where ^ and $ match in the block
        return bool(self.match(self.anchor, data, 0, len(data))[0] != _NO_MATCH)

    def line(self, piece: bytes) -> bool:
        text = piece.rstrip(b"\r\n")
        return bool(self.match(self.anchor, text, 0, len(text))[0] != _NO_MATCH)


def _compile(source: str, pattern: str, ignore_case: bool) -> re2._Regexp:
    options = re2.Options()
    options.never_capture = True  # a yes/no answer lets RE2 use its fast DFA
    options.log_errors = False
    options.case_sensitive = not ignore_case
    try:
        compiled = re2.compile(source, options)
    except re2.error as exc:
        said = exc.args[0].decode("utf-8", "replace") if exc.args else str(exc)
        raise ToolError(
            f"invalid regular expression: {said} (RE2 syntax: Python's, without lookaround "
            "and backreferences)",
            pattern=pattern,
        ) from None
    if compiled.programsize > MAX_PROGRAM_SIZE:
        raise ToolError(
            f"regular expression too complex ({compiled.programsize} RE2 instructions, at "
            f"most {MAX_PROGRAM_SIZE}): use fewer or smaller counted repetitions, e.g. "
            "'+' instead of '{1,100}'",
            pattern=pattern,
        )
    return compiled


def matcher(pattern: str, *, regex: bool, ignore_case: bool) -> Matcher:
    if regex:
        return _Regex(pattern, ignore_case)
    return _Folded(pattern) if ignore_case else _Literal(pattern)
