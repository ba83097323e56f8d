"""What every file tool shares: the limits of one call."""

from __future__ import annotations

import dataclasses

from plait.domain.record import record

__all__ = ["CHUNK", "MiB", "WorkspaceLimits", "plural"]

MiB = 1024 * 1024
CHUNK = 64 * 1024  # longest piece of a line read at once


@record(kw_only=True)
class WorkspaceLimits:
    """Bounds on what one call may read or produce."""

    max_read_bytes: int = 2 * MiB
    """read_file returns at most this many bytes of content."""
    max_edit_bytes: int = 8 * MiB
    """edit_file refuses larger files (it holds the whole file in memory)."""
    max_list_entries: int = 1000
    max_search_matches: int = 1000
    """Upper bound of search_text's ``max_results``."""
    max_scan_bytes: int = 256 * MiB
    """Bytes read to skip lines (read_file), hash a file, or search (search_text)."""
    max_walk_entries: int = 100_000
    max_dir_entries: int = 50_000
    """Names read from one directory (they are sorted in memory)."""
    max_depth: int = 64
    max_call_seconds: int = 600
    """A call stops (failing, or search_text with what it found) after this long even when
    the run sets no tool timeout; with a timeout it stops at that timeout."""

    def __post_init__(self) -> None:
        for spec in dataclasses.fields(self):
            name, value = spec.name, getattr(self, spec.name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"WorkspaceLimits.{name} must be a positive int")


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"
