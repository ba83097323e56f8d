"""The HTTP API (FastAPI, served by ``plait serve``): sessions, messages, queued runs,
resumable server-sent events, API keys. See :func:`plait.entrypoints.http.app.create_app`.

FastAPI is imported only when the API is used, so ``import plait`` stays fast."""
