"""Text a store cannot keep (a lone surrogate, which has no UTF-8 encoding; a NUL in a
PostgreSQL ``TEXT`` column) is the caller's error, not the store's: ``invalid_value``
(HTTP 400, CLI exit 2), and nothing is written. The boundaries refuse such text first
(:mod:`plait.domain.text`); this is the last line."""

from __future__ import annotations

from plait.domain.errors import ValidationError

__all__ = ["unstorable"]


def unstorable(error: Exception, where: str) -> ValidationError:
    if isinstance(error, UnicodeEncodeError):
        detail = (
            f"it holds a lone surrogate \\u{ord(error.object[error.start]):04x}, which is not a "
            "Unicode character"
        )
    else:
        detail = str(error).strip() or type(error).__name__
    return ValidationError(f"{where}: a value cannot be stored: {detail}", store=where)
