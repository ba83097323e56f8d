"""Opening real adapters against fake provider servers."""

from __future__ import annotations

from typing import Any

from plait.adapters.models import open_model
from plait.application.ports import ModelClient, ModelRequest, ModelResponse
from plait.config import Config, ModelEntry
from plait.domain.context import Context
from plait.domain.errors import ModelError, ModelErrorCode
from plait.domain.messages import AssistantMessage, UserMessage
from plait.domain.tools import ToolSpec

SPECS = {
    "openai": "openai:gpt-4o",
    "openai-responses": "openai-responses:gpt-5",
    "anthropic": "anthropic:claude-haiku-4-5",
    "gemini": "gemini:gemini-2.5-pro",
}
KEYS = {
    "openai:gpt-4o": "OPENAI_API_KEY",
    "openai-responses:gpt-5": "OPENAI_API_KEY",
    "anthropic:claude-haiku-4-5": "ANTHROPIC_API_KEY",
    "gemini:gemini-2.5-pro": "GEMINI_API_KEY",
}


def client_for(dialect: str, base_url: str, **settings: Any) -> ModelClient:
    spec = SPECS[dialect]
    entry = ModelEntry(name=spec, source="test", base_url=base_url, settings=settings)
    config = Config(models={spec: entry})
    return open_model(spec, config=config, env={KEYS[spec]: "test-key"})


def ask(tools: tuple[ToolSpec, ...] = (), text: str = "hello") -> ModelRequest:
    context: Context[Any] = Context(
        instructions="Be brief.",
        tools=tools,
        items=[UserMessage(id="msg_u", text=text, created_at=0.0)],
        output_type=AssistantMessage,
    )
    return ModelRequest(role="assistant", context=context)


class Retrying:
    """Stands in for the ModelCaller's retry policy in these tests: retries retryable
    codes (waiting what the provider asked) and streams, collecting what was shown."""

    def __init__(self, model: ModelClient, attempts: int = 4) -> None:
        self.model = model
        self.attempts = attempts
        self.errors: list[ModelError] = []
        self.shown: list[str] = []

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def capabilities(self) -> Any:
        return self.model.capabilities

    async def complete(self, request: ModelRequest) -> ModelResponse:
        from dataclasses import replace

        streaming = replace(request, on_text=self.shown.append)
        for _ in range(self.attempts - 1):
            try:
                return await self.model.complete(streaming)
            except ModelError as e:
                if e.model_code not in (ModelErrorCode.TRANSIENT, ModelErrorCode.RATE_LIMITED):
                    raise
                self.errors.append(e)
        return await self.model.complete(streaming)
