"""Store URLs without their secrets, for messages and logs."""

from __future__ import annotations

import re

__all__ = ["redact_url"]

_SECRET_PARAMETER = re.compile(r"(?i)((?:^|[?&])(?:ssl)?password=)[^&#]*")
_SECRET_KEYWORD = re.compile(r"(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)")


def redact_url(url: str) -> str:
    """``url`` with the password of its user part and every ``password=`` or
    ``sslpassword=`` parameter replaced by ``***`` (the whole user part's password up
    to its last ``@``, so a password holding ``@``, ``/`` or ``:`` is hidden whole). A
    libpq ``key=value`` connection string has its password keywords hidden likewise."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _SECRET_KEYWORD.sub(r"\1***", url)
    query_at = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    before, after = rest[:query_at], rest[query_at:]
    user, at, hosts = before.rpartition("@")
    if at and ":" in user:
        before = f"{user.split(':', 1)[0]}:***@{hosts}"
    after = _SECRET_PARAMETER.sub(r"\1***", after)
    return f"{scheme}://{before}{after}"
