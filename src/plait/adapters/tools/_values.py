"""Values the built-in tools' argument models share with their executors."""

from __future__ import annotations

import re

__all__ = ["ABSENT", "MAX_COMMAND_CHARS", "plain_sha256"]

ABSENT = "absent"
"""write_file's expected_sha256 for a file that must not exist yet."""

MAX_COMMAND_CHARS = 32_000
"""The longest command line: at 4 bytes a character it stays under Linux's limit of
128 KiB for one argument of a program (``sh -c COMMAND``); the schema says so, so a
longer one is a correction for the model, not a failed start."""


def plain_sha256(value: str) -> str:
    """write_file's ``expected_sha256`` as its executor compares it: lower-case hex without
    the ``sha256:`` prefix, or :data:`ABSENT`; a ValueError for anything else."""
    value = value.lower().removeprefix("sha256:")
    if value != ABSENT and not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError("expected_sha256 must be 64 hex digits or 'absent'")
    return value
