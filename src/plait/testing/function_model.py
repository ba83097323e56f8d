"""FunctionModel: a ModelClient backed by a plain function, for tests that compute answers."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from plait.application.ports import ModelCapabilities, ModelRequest, ModelResponse

__all__ = ["FunctionModel", "ModelFunction"]

ModelFunction = Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]]
"""``fn(request) -> ModelResponse``, plain or ``async``."""

DEFAULT_CAPABILITIES = ModelCapabilities(structured_output=True, context_window=128_000)
"""Without ``capabilities``: structured output and a 128,000-token window (like the
scripted model's default), so a run with compaction on can measure it."""


class FunctionModel:
    """Implements :class:`~plait.application.ports.ModelClient` by calling ``fn``.

    Every request is recorded in :attr:`requests` before ``fn`` runs, so a request that
    makes ``fn`` raise (e.g. a :class:`~plait.domain.errors.ModelError` to simulate a
    provider failure) is recorded too.
    """

    def __init__(
        self,
        fn: ModelFunction,
        *,
        name: str = "function",
        capabilities: ModelCapabilities | None = None,
    ) -> None:
        self._fn = fn
        self._name = name
        self._capabilities = capabilities or DEFAULT_CAPABILITIES
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def capabilities(self) -> ModelCapabilities:
        return self._capabilities

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        result: object = self._fn(request)
        if type(result) is not ModelResponse and inspect.isawaitable(result):
            result = await result  # (the exact type first: no ABC check for a plain answer)
        if not isinstance(result, ModelResponse):
            raise TypeError(
                f"FunctionModel {self._name!r}: the function must return a ModelResponse, "
                f"got {type(result).__name__}"
            )
        return result
