r"""What every thin client shares: running a stream through its accumulator, and the one
shell that turns its SDK's failures into :class:`ModelError`\ s (transport failures such
as a connection reset, a cut-off body or a timeout into retryable ones)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol

from plait.application.ports import ModelResponse, TextSink
from plait.domain.errors import ConfigError, ModelError, ModelErrorCode, ModelTimeoutError

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "STREAM_REFUSALS",
    "Accumulator",
    "StreamRefusals",
    "Translate",
    "idle_watch",
    "is_transport_error",
    "mapped_errors",
    "missing_key",
    "run_stream",
    "transport_error",
]

DEFAULT_IDLE_TIMEOUT = 300.0
"""Seconds a model call may go without receiving a byte (``idle_timeout_seconds`` in a
model's table of plait.toml): long enough for a model that thinks before it writes, far
shorter than the SDKs' ten minutes."""

_TRANSPORT_MODULES = frozenset({"httpx", "httpx2", "httpcore", "aiohttp", "h11", "anyio"})


class Accumulator(Protocol):
    def feed(self, event: dict[str, Any]) -> str | None: ...

    def finish(self) -> ModelResponse: ...


async def run_stream(
    events: AsyncIterator[dict[str, Any]], acc: Accumulator, on_text: TextSink | None
) -> ModelResponse:
    """Feed every event; show text deltas; the complete response or a ModelError."""
    async for event in events:
        delta = acc.feed(event)
        if delta and on_text is not None:
            on_text(delta)
    return acc.finish()


def is_transport_error(exc: BaseException) -> bool:
    return any(c.__module__.split(".")[0] in _TRANSPORT_MODULES for c in type(exc).__mro__)


def transport_error(provider: str, exc: BaseException) -> ModelError:
    said = f"{type(exc).__name__}: {exc}" if str(exc).strip() else type(exc).__name__
    return ModelError(
        f"{provider}: connection failed or was cut off ({said})",
        model_code=ModelErrorCode.TRANSIENT,
        status=None,
        body=None,
        provider=provider,
    )


Translate = Callable[[Exception], ModelError | None]
"""A client's own SDK exceptions as ModelErrors (None: not one of them)."""


@asynccontextmanager
async def mapped_errors(provider: str, translate: Translate) -> AsyncIterator[None]:
    """Around one model call: an SDK exception leaves as the ModelError ``translate``
    makes of it, one from the transport layer as a retryable ``TRANSIENT``, each
    ``from`` the original; anything else passes through unchanged."""
    try:
        yield
    except Exception as exc:
        error = translate(exc)
        if error is None and is_transport_error(exc):
            error = transport_error(provider, exc)
        if error is None:
            raise
        raise error from exc


@asynccontextmanager
async def idle_watch(provider: str, seconds: float) -> AsyncIterator[Callable[[], None]]:
    """Around one attempt: it is abandoned with a :class:`ModelTimeoutError` (retryable)
    when ``seconds`` pass without the function yielded here being called; a streamed
    call calls it for every line it receives, a plain one never (its answer comes whole,
    so it must arrive within ``seconds``)."""
    loop = asyncio.get_running_loop()
    limit = asyncio.timeout(seconds)
    try:
        async with limit:
            yield lambda: limit.reschedule(loop.time() + seconds)
    except TimeoutError:
        if not limit.expired():
            raise
        raise ModelTimeoutError(
            f"{provider}: the model server sent nothing for {seconds:g} s "
            "(idle_timeout_seconds); the attempt was abandoned",
            model_code=ModelErrorCode.TRANSIENT,
            status=None,
            body=None,
            provider=provider,
            idle_timeout_seconds=seconds,
        ) from None


def missing_key(model: str, variable: str) -> ConfigError:
    return ConfigError(
        f"model {model!r} needs an API key: set {variable} (or name another variable "
        "with key_env in plait.toml)",
        model=model,
        variable=variable,
    )


def refuses_streaming(error: ModelError) -> bool:
    """A streamed call the server turned down as a bad request (or as not implemented):
    it may answer the same request sent plainly."""
    status = error.details.get("status")
    if not isinstance(status, int):
        return False  # an error inside a stream: the stream itself was accepted
    return status == 501 or (error.model_code == ModelErrorCode.INVALID_REQUEST and status < 500)


class StreamRefusals:
    """Servers (base URL and model) that refused a streamed call but answered the same
    call sent plainly, with the reason: for the rest of the process they are called
    plainly (the text then shows whole, once)."""

    def __init__(self) -> None:
        self._refused: dict[tuple[str, str], str] = {}

    def reason(self, key: tuple[str, str]) -> str | None:
        return self._refused.get(key)

    def forget(self) -> None:
        """Forget every refusal: the next call to each server tries streaming again
        (a server restarted or replaced at the same address may stream now)."""
        self._refused.clear()

    async def call(
        self,
        key: tuple[str, str],
        attempt: Callable[[bool], Awaitable[ModelResponse]],
        *,
        streaming: bool,
        on_text: TextSink | None,
    ) -> ModelResponse:
        """``attempt(streamed)`` once, streamed when asked and not known to be refused;
        a refused stream is retried once plainly, and remembered if that works."""
        if streaming and key not in self._refused:
            try:
                return await attempt(True)
            except ModelError as exc:
                if not refuses_streaming(exc):
                    raise
                refusal = exc
            response = await attempt(False)  # its own error, if it fails too, is the one
            self._refused[key] = refusal.message
        else:
            response = await attempt(False)
        if streaming and on_text is not None and response.text:
            on_text(response.text)
        return response


STREAM_REFUSALS = StreamRefusals()
