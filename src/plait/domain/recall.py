"""What full-text search over raw history matches: the same rule in every store.

A query is split on whitespace into terms; a message matches when every term occurs in
its searchable text, ignoring case (substring match, so it works for text without word
breaks such as Chinese). The searchable text is what the model read of the message.
"""

from __future__ import annotations

from plait.domain.errors import ValidationError
from plait.domain.messages import AssistantMessage, Message, ToolResultMessage

__all__ = ["MAX_TERMS", "QUERY_PATTERN", "matches", "search_terms", "search_text"]

MAX_TERMS = 16

QUERY_PATTERN = rf"^\s*\S+(?:\s+\S+){{0,{MAX_TERMS - 1}}}\s*$"
"""A query :func:`search_terms` accepts, as a regular expression (for API documents)."""


def search_text(message: Message) -> str:
    if isinstance(message, AssistantMessage):
        calls = " ".join(f"{c.name} {c.arguments_json}" for c in message.tool_calls)
        return f"{message.text} {calls}" if calls else message.text
    if isinstance(message, ToolResultMessage):
        result = message.result
        parts = [message.tool_name, result.content]
        if result.reason:
            parts.append(result.reason)
        if result.artifact is not None:
            parts.append(result.artifact.id)
        return " ".join(parts)
    return message.text


def search_terms(query: str) -> list[str]:
    """The query's terms (case-folded, de-duplicated); a clear error when it has none."""
    if not isinstance(query, str) or not query.strip():
        raise ValidationError("the search query is empty; give one or more words to look for")
    words = query.split()
    if len(words) > MAX_TERMS:
        raise ValidationError(f"the search query has {len(words)} terms; use at most {MAX_TERMS}")
    terms: list[str] = []
    for word in words:
        term = word.casefold()
        if term not in terms:
            terms.append(term)
    return terms


def matches(terms: list[str], message: Message) -> bool:
    text = search_text(message).casefold()
    return all(t in text for t in terms)
