"""The shell every thin model client calls through: SDK errors translated, transport
errors retryable, everything else untouched, the original always kept as the cause."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from plait.adapters.models._driver import mapped_errors
from plait.domain.errors import ModelError, ModelErrorCode


class SdkError(Exception):
    pass


def _translate(e: Exception) -> ModelError | None:
    if isinstance(e, SdkError):
        return ModelError(
            "acme: HTTP 401: bad key", model_code=ModelErrorCode.AUTHENTICATION, status=401,
            body=None, provider="acme",
        )  # fmt: skip
    return None


def _raise_through(error: Exception) -> BaseException:
    async def go() -> None:
        async with mapped_errors("acme", _translate):
            raise error

    with pytest.raises(Exception) as caught:  # noqa: PT011 - each test checks what left
        asyncio.run(go())
    return caught.value


def test_an_sdk_error_leaves_as_its_translation_with_the_original_as_cause() -> None:
    original = SdkError("401")
    error = _raise_through(original)
    assert isinstance(error, ModelError)
    assert (error.model_code, error.details["status"], error.__cause__) == (
        ModelErrorCode.AUTHENTICATION,
        401,
        original,
    )


def test_a_transport_failure_is_transient() -> None:
    original = httpx.RemoteProtocolError("peer closed connection")
    error = _raise_through(original)
    assert isinstance(error, ModelError)
    assert (error.model_code, error.details["provider"], error.__cause__) == (
        ModelErrorCode.TRANSIENT,
        "acme",
        original,
    )


def test_anything_else_passes_through_unchanged() -> None:
    original = ValueError("a bug in a converter")
    assert _raise_through(original) is original


def test_a_successful_call_returns_its_value() -> None:
    async def go() -> str:
        async with mapped_errors("acme", _translate):
            return "done"

    assert asyncio.run(go()) == "done"


def test_a_transport_error_without_text_still_says_what_failed() -> None:
    from plait.adapters.models._driver import transport_error

    class ReadTimeout(Exception):
        pass

    assert transport_error("x", ReadTimeout()).message.endswith("(ReadTimeout)")
    assert transport_error("x", ReadTimeout("boom")).message.endswith("(ReadTimeout: boom)")
