"""The HTTP client that sends webhook deliveries (httpx, one connection pool per worker)."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

__all__ = ["HttpxSender"]


class HttpxSender:
    """POST with a total ``timeout``; no redirects followed (a redirect is a failure,
    like any status outside 2xx). Transport errors become ``OSError``."""

    def __init__(self, timeout: float = 10.0) -> None:
        self._client = httpx.AsyncClient(timeout=timeout, follow_redirects=False)

    async def post(self, url: str, *, body: str, headers: Mapping[str, str]) -> int:
        try:
            response = await self._client.post(url, content=body.encode(), headers=dict(headers))
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
            raise OSError(f"{type(exc).__name__}: {exc}") from exc
        return response.status_code

    async def close(self) -> None:
        await self._client.aclose()
