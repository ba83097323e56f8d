"""ModelCaller: one model call for a role, with the error-code policy of docs/design.md#models.

- ``RATE_LIMITED`` and ``TRANSIENT``: retried with exponential backoff and full jitter
  (:class:`RetryPolicy`); a provider's ``retry_after`` hint is honoured as the wait. Every
  attempt is charged to the run first (:class:`AttemptBudget`), so retries spend the
  run's model-call budget, and no wait runs past the run's deadline.
- ``CONTEXT_WINDOW_EXCEEDED``: handed to the overflow hook, which may return a smaller
  context to try once more (compaction fills it in); the default hook gives up.
- ``AUTHENTICATION``, ``INVALID_REQUEST`` (and retries used up): the
  :class:`~plait.domain.errors.ModelError` is raised with the provider's message kept;
  the driver ends the run ``failed`` with the code in lower case.

A spent budget or a reached deadline raises
:class:`~plait.domain.errors.BudgetExhaustedError` (``details["limit"]`` names which).
Sleep, clock and jitter are injected, so tests run with no real time.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from plait.application.ports import (
    Clock,
    ModelCapabilities,
    ModelClient,
    ModelRequest,
    ModelResponse,
    ModelRole,
    TextSink,
)
from plait.domain.context import Context
from plait.domain.errors import BudgetExhaustedError, ConfigError, ModelError, ModelErrorCode
from plait.domain.record import record

__all__ = [
    "AttemptBudget",
    "ModelCaller",
    "OverflowHook",
    "RetryPolicy",
    "check_cost_ceiling",
    "cost_usd",
    "no_overflow",
]

RETRYABLE = frozenset({ModelErrorCode.RATE_LIMITED, ModelErrorCode.TRANSIENT})


@record(kw_only=True)
class RetryPolicy:
    """``max_attempts`` per call (the first one included); the n-th retry waits a random
    time in ``[0, min(max_delay, base_delay * 2**(n-1))]``, or exactly the provider's
    ``retry_after`` when it gave one (capped at ``max_retry_after``; a longer hint is not
    retried)."""

    max_attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 30.0
    max_retry_after: float = 120.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError("RetryPolicy.max_attempts must be at least 1")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ConfigError("RetryPolicy delays must not be negative")

    def delay(self, retry: int, error: ModelError, jitter: float) -> float | None:
        """Seconds to wait before retry number ``retry`` (1-based), or None: give up."""
        hint = error.retry_after
        if hint is not None:
            return max(hint, 0.0) if hint <= self.max_retry_after else None
        return jitter * min(self.max_delay, self.base_delay * 2.0 ** (retry - 1))


class AttemptBudget(Protocol):
    """The run's side of a model call: charged before every attempt."""

    def spend(self, role: ModelRole, attempt: int) -> None:
        """Count one model call; raise BudgetExhaustedError when none is left."""
        ...

    def settled(
        self, role: ModelRole, attempt: int, model: str, outcome: ModelResponse | ModelError
    ) -> None:
        """An attempt came back with a response or a ModelError (telemetry)."""
        ...

    @property
    def deadline(self) -> float | None:
        """The run's deadline on the clock's monotonic scale, or None."""
        ...


OverflowHook = Callable[[ModelRole, Context[Any], ModelError], Awaitable[Context[Any] | None]]
"""Given the role, the context that did not fit and the error: a smaller context to try
once more, or None to give up."""


async def no_overflow(
    role: ModelRole, context: Context[Any], error: ModelError
) -> Context[Any] | None:
    """The default overflow hook: nothing to shrink, the call fails."""
    return None


def cost_usd(caps: ModelCapabilities, input_tokens: int, output_tokens: int) -> float | None:
    """What the tokens cost at the model's declared prices (input tokens at the full input
    price, so cached input is over- rather than under-counted); None without prices."""
    if caps.price_input_per_mtok is None or caps.price_output_per_mtok is None:
        return None
    return (
        input_tokens * caps.price_input_per_mtok + output_tokens * caps.price_output_per_mtok
    ) / 1_000_000


def check_cost_ceiling(
    model: ModelClient, max_cost_usd: float | None, spec: str | None = None
) -> None:
    """A cost ceiling needs the model's prices: ConfigError naming the model (its ``spec``
    too, when known) and the fix otherwise."""
    if max_cost_usd is None:
        return
    if cost_usd(model.capabilities, 0, 0) is None:
        named = repr(model.name) + ("" if spec in (None, model.name) else f" ({spec})")
        raise ConfigError(
            f"a cost ceiling of ${max_cost_usd:g} (--max-cost, Budget.max_cost_usd) needs the "
            f"model's prices, but model {named} declares none; declare "
            "price_input_per_mtok and price_output_per_mtok for it (a [models.NAME] table in "
            "plait.toml, or a scripted model's capabilities) or drop the ceiling",
            model=model.name,
            max_cost_usd=max_cost_usd,
        )


class ModelCaller:
    """Calls the model for a role. ``model`` may be None for a service that only reads;
    :attr:`model` then raises a ConfigError naming the fix. ``role_models`` gives a role
    its own model (the Reviewer's ``[reviewer] model``); every other role, and a role
    without one, uses ``model``. Either way the call is charged to the same run budget."""

    def __init__(
        self,
        model: ModelClient | None,
        *,
        clock: Clock,
        policy: RetryPolicy | None = None,
        on_overflow: OverflowHook = no_overflow,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
        role_models: Mapping[ModelRole, ModelClient] | None = None,
    ) -> None:
        self._model = model
        self.role_models: dict[ModelRole, ModelClient] = dict(role_models or {})
        self.clock = clock
        self.policy = policy or RetryPolicy()
        self.on_overflow = on_overflow
        self._sleep = sleep
        self._jitter = jitter

    @property
    def model(self) -> ModelClient:
        if self._model is None:
            raise ConfigError(
                "no model chosen: pass --model or set PLAIT_MODEL (e.g. scripted:PATH)"
            )
        return self._model

    @property
    def has_model(self) -> bool:
        return self._model is not None

    def model_for(self, role: ModelRole) -> ModelClient:
        """The model a call in ``role`` goes to."""
        return self.role_models.get(role) or self.model

    def with_model(self, model: ModelClient) -> ModelCaller:
        """The same policy, hooks, clock and role models over another model."""
        return ModelCaller(
            model,
            clock=self.clock,
            policy=self.policy,
            on_overflow=self.on_overflow,
            sleep=self._sleep,
            jitter=self._jitter,
            role_models=self.role_models,
        )

    async def call(
        self,
        role: ModelRole,
        context: Context[Any],
        budget: AttemptBudget,
        *,
        on_text: TextSink | None = None,
        max_output_tokens: int | None = None,
        on_overflow: OverflowHook | None = None,
    ) -> ModelResponse:
        """One call; ``on_overflow`` replaces the caller's overflow hook for this call
        (compaction passes one bound to the run)."""
        model = self.model_for(role)
        retry = 0
        overflowed = False
        attempt = 0
        while True:
            attempt += 1
            budget.spend(role, attempt)
            request = ModelRequest(
                role=role, context=context, max_output_tokens=max_output_tokens, on_text=on_text
            )
            try:
                response = await self._attempt(model, request, budget.deadline)
            except ModelError as exc:
                budget.settled(role, attempt, model.name, exc)
                code = exc.model_code
                if code == ModelErrorCode.CONTEXT_WINDOW_EXCEEDED and not overflowed:
                    smaller = await (on_overflow or self.on_overflow)(role, context, exc)
                    if smaller is None:
                        raise
                    context, overflowed = smaller, True
                    continue
                if code not in RETRYABLE:
                    raise
                retry += 1
                if retry >= self.policy.max_attempts:
                    raise
                wait = self.policy.delay(retry, exc, self._jitter())
                if wait is None:
                    raise
                await self._wait(wait, budget.deadline, exc)
            else:
                budget.settled(role, attempt, model.name, response)
                return response

    async def _attempt(
        self, model: ModelClient, request: ModelRequest, deadline: float | None
    ) -> ModelResponse:
        if deadline is None:
            return await model.complete(request)
        left = deadline - self.clock.monotonic()
        if left <= 0:
            raise BudgetExhaustedError(
                "the run reached its deadline before the model call", limit="deadline"
            )
        try:
            async with asyncio.timeout(left):
                return await model.complete(request)
        except TimeoutError:
            raise BudgetExhaustedError(
                "the run reached its deadline while waiting for the model", limit="deadline"
            ) from None

    async def _wait(self, seconds: float, deadline: float | None, error: ModelError) -> None:
        if deadline is not None and self.clock.monotonic() + seconds >= deadline:
            raise BudgetExhaustedError(
                f"the run's deadline falls before the model can be retried "
                f"(waiting {seconds:g} s after: {error.message})",
                limit="deadline",
            )
        await self._sleep(seconds)
