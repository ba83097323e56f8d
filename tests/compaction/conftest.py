"""A compaction bench: an in-memory store, a scripted model, a predictable meter."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.compaction import CompactionService, ModelProfile, ModelProfiles
from plait.application.ports import Commit, ModelClient
from plait.domain.compaction import CompactionSettings
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    UserMessage,
)
from plait.domain.session import Session, StoredMessage
from plait.testing import CharMeter, FixedClock, ScriptedModel, SequentialIds

T = TypeVar("T")

MODEL = "scripted"
WINDOW = 4_000
SETTINGS = CompactionSettings(summary_max_tokens=600, retained_tokens=400)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def good_summary(*, goal: str = "修复失败的测试", cite: str = "m1", **extra: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "goal": goal,
        "constraints": [{"text": "不要修改部署配置", "source_ids": [cite]}],
        "decisions": [{"text": "run the parser tests first", "source_ids": [cite]}],
        "open_questions": [
            {
                "text": "whether the failure comes from the dependency version",
                "uncertainty": "not verified",
                "source_ids": [cite],
            }
        ],
        "evidence": [],
    }
    value.update(extra)
    return value


def coding_history(
    rounds: int, *, first: str = "修复失败的测试。不要修改部署配置。"
) -> list[Message]:
    """m1 the request; then per round: an assistant call, its result (~400 chars), and an
    assistant note. Ids m1, m2, ...; call ids c1, c2, ..."""
    out: list[Message] = [UserMessage(id="m1", text=first, created_at=1.0)]
    for r in range(1, rounds + 1):
        n = len(out)
        out.append(
            AssistantMessage(
                id=f"m{n + 1}",
                text="",
                created_at=1.0 + n,
                model=MODEL,
                tool_calls=(
                    ToolCall.create(
                        id=f"c{r}",
                        name="run_command",
                        arguments={"command": f"pytest -q tests/t{r}.py"},
                    ),
                ),
            )
        )
        body = f"FAILED tests/t{r}.py::test_case_{r} - AssertionError: {r} != {r + 1}\n"
        out.append(
            ToolResultMessage(
                id=f"m{n + 2}",
                tool_name="run_command",
                created_at=1.0 + n,
                result=ToolResult(
                    call_id=f"c{r}",
                    status=ToolStatus.FAILED,
                    content=body + "x" * 360 + "\nexit status 1",
                ),
            )
        )
        out.append(
            AssistantMessage(
                id=f"m{n + 3}",
                text=f"Round {r}: test_case_{r} fails.",
                created_at=1.0 + n,
                model=MODEL,
            )
        )
    return out


SUMMARIZER = "summarizer-model"


def scripted(
    summaries: list[Any], *, window: int = 16_000, name: str = SUMMARIZER
) -> ScriptedModel:
    """A summarizer model (its own name and window: 16,000 tokens by default)."""
    return ScriptedModel(
        {
            "version": 1,
            "model": name,
            "capabilities": {"context_window": window, "max_output_tokens": 500},
            "summarizer": [{"structured": s} if "goal" in s else s for s in summaries],
        },
        name=name,
    )


@dataclass
class Bench:
    summarizer: ModelClient
    settings: CompactionSettings = SETTINGS
    store: MemoryStore = field(default_factory=MemoryStore)
    meter: CharMeter = field(default_factory=CharMeter)
    clock: FixedClock = field(default_factory=FixedClock)
    window: int = WINDOW
    extra_profiles: tuple[ModelProfile, ...] = ()

    def __post_init__(self) -> None:
        own = ModelProfile(
            model=MODEL, meter=self.meter, context_window=self.window, max_output_tokens=500
        )
        profiles = [own, *self.extra_profiles]
        window = self.summarizer.capabilities.context_window
        if self.summarizer.name != MODEL and window is not None:
            profiles.append(
                ModelProfile(model=self.summarizer.name, meter=self.meter, context_window=window)
            )
        self.profiles = ModelProfiles(profiles)
        self.service = CompactionService(
            store=self.store,
            profiles=self.profiles,
            summarizer=self.summarizer,
            clock=self.clock,
            ids=SequentialIds(),
            settings=self.settings,
        )

    async def seed(self, messages: list[Message], session_id: str = "s1") -> None:
        await self.store.create_session(Session(id=session_id, created_at=0.0))
        await self.append(messages, session_id)

    async def append(self, messages: list[Message], session_id: str = "s1") -> None:
        session = await self.store.get_session(session_id)
        await self.store.commit(
            Commit(
                session_id=session_id, expected_version=session.version, messages=tuple(messages)
            )
        )

    async def history(self, session_id: str = "s1") -> list[StoredMessage]:
        return await self.store.read_messages(session_id)

    async def messages(self, session_id: str = "s1") -> list[Message]:
        return [sm.message for sm in await self.history(session_id)]
