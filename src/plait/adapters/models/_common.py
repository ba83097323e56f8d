"""What every provider converter shares: the model it talks to, opaque-state tagging,
how tool results and corrections read as plain text."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from plait.domain.context import Correction
from plait.domain.errors import ModelError, ModelErrorCode
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolResultMessage,
    ToolStatus,
    UserMessage,
    VendorState,
)
from plait.domain.record import record

__all__ = [
    "ADAPTER_VERSION",
    "FOREIGN_THOUGHT_SIGNATURE",
    "Target",
    "correction_text",
    "cut_off",
    "fresh_call_id",
    "iter_turns",
    "result_text",
    "same_family",
]

ADAPTER_VERSION = "1"

FOREIGN_THOUGHT_SIGNATURE = "skip_thought_signature_validator"
"""Google's documented stand-in signature for tool calls a Gemini 3 model did not make
itself (history from another vendor, or written before signatures were kept)."""

_DATE_SUFFIX = re.compile(r"(-\d{8}|-\d{4}-\d{2}-\d{2}|-latest|-0)$")


def same_family(model: str, other: str) -> bool:
    """``claude-sonnet-4-0`` and ``claude-sonnet-4-20250514`` are one model family;
    ``gpt-5`` and ``gpt-5-mini`` are not."""
    return _DATE_SUFFIX.sub("", model.lower()) == _DATE_SUFFIX.sub("", other.lower())


@record(kw_only=True)
class Target:
    """The model one converter talks to: ``vendor`` decides whose opaque state may be
    handed back, ``adapter`` which wire protocol it speaks."""

    vendor: str
    adapter: str
    model: str

    @property
    def version(self) -> str:
        return f"{self.adapter}/{ADAPTER_VERSION}"

    def state(self, **data: Any) -> VendorState | None:
        """Opaque state for the message just received, tagged with vendor, adapter
        version and model; ``None`` when there is nothing to keep."""
        kept = {k: v for k, v in data.items() if v}
        if not kept:
            return None
        return VendorState(
            vendor=self.vendor, version=self.version, data={"model": self.model, **kept}
        )

    def own_state(self, message: AssistantMessage) -> dict[str, Any] | None:
        """The message's opaque state if it was made by this vendor, adapter and model
        family (handed back verbatim); ``None`` for plain or foreign state, which is then
        dropped and the message sent as plain content."""
        state = message.vendor_state
        if state is None or state.vendor != self.vendor or state.version != self.version:
            return None
        model = state.data.get("model")
        if not isinstance(model, str) or not same_family(model, self.model):
            return None
        return state.data


def result_text(message: ToolResultMessage) -> str:
    """A tool result as the model reads it; a call that did not succeed says so."""
    result = message.result
    if result.status is ToolStatus.SUCCEEDED:
        return result.content
    head = f"[tool call {result.status.value}" + (f": {result.reason}]" if result.reason else "]")
    return f"{head}\n{result.content}" if result.content else head


def correction_text(correction: Correction) -> str:
    problems = "\n".join(f"- {p}" for p in correction.problems)
    return (
        "Your previous reply was rejected and nothing of it was executed:\n"
        f"{problems}\nReply again, fixing these problems."
    )


def iter_turns(
    items: Sequence[Message],
) -> Iterator[UserMessage | AssistantMessage | list[ToolResultMessage]]:
    """History grouped the way every provider wants it: consecutive tool results of one
    assistant message come as one list."""
    results: list[ToolResultMessage] = []
    for item in items:
        if isinstance(item, ToolResultMessage):
            results.append(item)
            continue
        if results:
            yield results
            results = []
        yield item
    if results:
        yield results


def fresh_call_id(prefix: str) -> str:
    """For providers that send calls without ids (older Gemini, Gemini's OpenAI-compatible
    endpoint, which sends ``"id": ""``): a plait-made id."""
    return f"{prefix}_{uuid.uuid4().hex}"


def cut_off(provider: str, what: str) -> ModelError:
    """A stream that ended before the provider said it was complete: retryable, and
    nothing of it may be used (partial tool calls in particular)."""
    return ModelError(
        f"{provider}: the response stream ended before the response was complete ({what})",
        model_code=ModelErrorCode.TRANSIENT,
        status=None,
        body=None,
    )
