"""Values the built-in tools' argument models share with their executors."""

from __future__ import annotations

__all__ = ["ABSENT", "MAX_COMMAND_CHARS"]

ABSENT = "absent"
"""write_file's expected_sha256 for a file that must not exist yet."""

MAX_COMMAND_CHARS = 32_000
"""The longest command line: at 4 bytes a character it stays under Linux's limit of
128 KiB for one argument of a program (``sh -c COMMAND``); the schema says so, so a
longer one is a correction for the model, not a failed start."""
