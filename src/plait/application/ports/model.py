"""Ports of the models: what a model client is, what it is asked and what it answers, and
the token meters that count for it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from plait.domain.messages import Usage
from plait.domain.record import record

if TYPE_CHECKING:
    from plait.domain.context import Context
    from plait.domain.messages import Message, VendorState
    from plait.domain.tools import ToolSpec

__all__ = [
    "ModelCapabilities",
    "ModelClient",
    "ModelRequest",
    "ModelResponse",
    "ModelRole",
    "RawToolCall",
    "TextSink",
    "TokenMeter",
]


ModelRole = Literal["assistant", "reviewer", "summarizer"]


@record(kw_only=True)
class ModelCapabilities:
    """What an adapter can do. A run checks what it needs when it starts."""

    tool_calls: bool = True
    structured_output: bool = False
    streaming: bool = False
    parallel_tool_calls: bool = True
    context_window: int | None = None
    max_output_tokens: int | None = None
    reasoning: bool = False
    price_input_per_mtok: float | None = None
    """USD per million input tokens; ``None`` when unknown (a cost ceiling then fails)."""
    price_output_per_mtok: float | None = None
    price_cached_input_per_mtok: float | None = None


TextSink = Callable[[str], None]
"""Receives model text as it streams in (deltas, in order). Display only: the persisted
message is the complete, validated response."""


@record(kw_only=True)
class ModelRequest:
    role: ModelRole
    context: Context[Any]
    max_output_tokens: int | None = None
    on_text: TextSink | None = None
    """Set to stream: adapters that can stream call it with each text delta."""


@record(kw_only=True)
class RawToolCall:
    """A tool call as the model produced it, before validation. ``arguments`` is the raw
    JSON text (or an already decoded value, for providers that send objects)."""

    id: str | None
    name: str
    arguments: str | dict[str, Any]


@record(kw_only=True)
class ModelResponse:
    text: str = ""
    tool_calls: tuple[RawToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    vendor_state: VendorState | None = None
    structured: Any = None
    """For roles that expect a structured value (reviewer, summarizer): the decoded JSON."""


class ModelClient(Protocol):
    """Turns a Context into a response. Raises :class:`~plait.domain.errors.ModelError`
    with a normalized ``model_code`` for provider failures."""

    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> ModelCapabilities: ...

    async def complete(self, request: ModelRequest) -> ModelResponse: ...


class TokenMeter(Protocol):
    """Counts tokens the way one model family does (exact where its tokenizer is available
    offline, otherwise a conservative estimate). Callers cache per-message counts."""

    @property
    def name(self) -> str: ...

    @property
    def exact(self) -> bool: ...

    def count_text(self, text: str) -> int: ...

    def count_message(self, message: Message) -> int: ...

    def count_tools(self, tools: tuple[ToolSpec, ...]) -> int: ...
