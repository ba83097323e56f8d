"""The contract of :class:`~plait.application.ports.SummaryStore`: summary activation by
compare-and-set, constraint records, and full-text search over raw history."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import pytest

from plait.adapters.stores import Store
from plait.application.ports import Commit, ContextRead
from plait.domain.errors import (
    SessionNotFoundError,
    SummaryConflictError,
    ValidationError,
)
from plait.domain.messages import Message, ToolStatus
from plait.domain.summary import (
    CommandFact,
    Constraint,
    EvidenceRef,
    Facts,
    FailingTest,
    FileFact,
    OpenQuestion,
    SourcedNote,
    Summary,
    SummaryBody,
    source_digest,
)
from tests.contract.base import ContractBase, started
from tests.contract.builders import assistant, new_session, tool_result, user


def summary(
    through: int, generation: int = 1, *, id: str | None = None, session_id: str = "s1"
) -> Summary:
    ids = [f"m{i}" for i in range(1, through + 1)]
    return Summary(
        id=id or f"sum-{generation}-{through}",
        session_id=session_id,
        generation=generation,
        covered_through_seq=through,
        covered_through_message_id=ids[-1],
        source_digest=source_digest(ids),
        body=SummaryBody(
            goal="修复失败的测试",
            constraints=(SourcedNote(text="不要修改部署配置", source_ids=("m1",)),),
            decisions=(SourcedNote(text="pin the parser", source_ids=("m2", "m3")),),
            open_questions=(
                OpenQuestion(
                    text="dependency version?", uncertainty="not verified", source_ids=("m3",)
                ),
            ),
            evidence=(EvidenceRef(message_id="m3", note="log", artifact_id="art_1"),),
        ),
        facts=Facts(
            files=(
                FileFact(path="a.py", action="read", content_hash=None, source_message_id="m3"),
            ),
            commands=(
                CommandFact(
                    command="pytest -q", exit_status=1, tool_status="failed", source_message_id="m3"
                ),
            ),
            failing_tests=(FailingTest(name="tests/t.py::test_x", source_message_id="m3"),),
            constraints=(Constraint(text="不要修改部署配置", source_message_id="m1"),),
        ),
        model="scripted",
        template_version="summary-v1",
        created_at=1_234.5,
        source_tokens=900,
        summary_tokens=120,
        meter="chars/4",
        trigger="pressure",
    )


def history() -> list[Message]:
    return [
        user("m1", "修复失败的测试，不要修改部署配置"),
        assistant("m2", ("c1", "run_tests", {"command": "pytest -q tests/Parser"})),
        tool_result(
            "m3", "c1", "FAILED tests/t.py::test_x - AssertionError: 42 != 41", ToolStatus.FAILED
        ),
        assistant("m4", text="The parser test fails with 42 != 41.", step=2),
        user("m5", "ok, go on"),
        assistant("m6", text="Done.", step=3),
    ]


class SummaryContract(ContractBase):
    async def _seed(self, store: Store) -> None:
        await started(store, *history())

    def test_no_summary_yet(self) -> None:
        async def go(store: Store) -> None:
            await self._seed(store)
            assert await store.get_summary("s1") is None
            assert await store.list_summaries("s1") == []
            assert await store.list_constraints("s1") == []

        self.run(go)

    def test_activate_round_trips_every_field_and_leaves_history(self) -> None:
        async def go(store: Store) -> None:
            await self._seed(store)
            before = await store.read_messages("s1")
            s = summary(4)
            await store.activate_summary(s, expected_generation=0)
            assert await store.get_summary("s1") == s
            assert await store.list_summaries("s1") == [s]
            assert await store.read_messages("s1") == before

        self.run(go)

    def test_stale_generation_conflicts_and_changes_nothing(self) -> None:
        async def go(store: Store) -> None:
            await self._seed(store)
            first = summary(4)
            await store.activate_summary(first, expected_generation=0)
            with pytest.raises(SummaryConflictError) as e:
                await store.activate_summary(summary(5, id="late"), expected_generation=0)
            assert e.value.details["actual"] == 1
            assert await store.get_summary("s1") == first

        self.run(go)

    def test_a_shorter_prefix_never_replaces_a_longer_one(self) -> None:
        async def go(store: Store) -> None:
            await self._seed(store)
            longer = summary(5)
            await store.activate_summary(longer, expected_generation=0)
            with pytest.raises(SummaryConflictError):
                await store.activate_summary(summary(4, 2), expected_generation=1)
            with pytest.raises(SummaryConflictError):
                await store.activate_summary(summary(5, 2, id="same"), expected_generation=1)
            assert await store.get_summary("s1") == longer
            newer = summary(6, 2)
            await store.activate_summary(newer, expected_generation=1)
            assert await store.get_summary("s1") == newer
            assert await store.list_summaries("s1") == [longer, newer]

        self.run(go)

    def test_bad_generation_or_range_is_rejected(self) -> None:
        async def go(store: Store) -> None:
            await self._seed(store)
            with pytest.raises(ValidationError, match="generation 1"):
                await store.activate_summary(summary(4, 3), expected_generation=0)
            with pytest.raises(ValidationError, match="has 6 messages"):
                await store.activate_summary(
                    replace(summary(4), covered_through_seq=7), expected_generation=0
                )
            assert await store.get_summary("s1") is None

        self.run(go)

    def test_unknown_session(self) -> None:
        async def go(store: Store) -> None:
            with pytest.raises(SessionNotFoundError):
                await store.get_summary("nope")
            with pytest.raises(SessionNotFoundError):
                await store.list_summaries("nope")
            with pytest.raises(SessionNotFoundError):
                await store.list_constraints("nope")
            with pytest.raises(SessionNotFoundError):
                await store.add_constraints("nope", [Constraint(text="x", source_message_id="m")])
            with pytest.raises(SessionNotFoundError):
                await store.search_history("nope", "x")
            with pytest.raises(SessionNotFoundError):
                await store.activate_summary(summary(1, session_id="nope"), expected_generation=0)

        self.run(go)

    def test_constraints_are_stored_once_in_order(self) -> None:
        async def go(store: Store) -> None:
            await self._seed(store)
            a = Constraint(text="不要修改部署配置", source_message_id="m1")
            b = Constraint(text="never push to main", source_message_id="m5")
            assert await store.add_constraints("s1", [a, b, a]) == [a, b]
            c = Constraint(text="不要修改部署配置", source_message_id="m5")
            assert await store.add_constraints("s1", [b, c]) == [c]
            assert await store.add_constraints("s1", []) == []
            assert await store.list_constraints("s1") == [a, b, c]

        self.run(go)

    def test_summary_and_constraints_read_together_agree_with_each_read(self) -> None:
        async def go(store: Store) -> None:
            if not store.capabilities.context_read:
                pytest.skip("this store reads them one at a time")
            both = cast("ContextRead", store).summary_and_constraints
            await self._seed(store)
            assert await both("s1") == (None, [])
            a = Constraint(text="不要修改部署配置", source_message_id="m1")
            b = Constraint(text="never push to main", source_message_id="m5")
            await store.add_constraints("s1", [a, b])
            assert await both("s1") == (None, [a, b])
            s = summary(4)
            await store.activate_summary(s, expected_generation=0)
            assert (
                await both("s1")
                == (s, [a, b])
                == (
                    await store.get_summary("s1"),
                    await store.list_constraints("s1"),
                )
            )
            with pytest.raises(SessionNotFoundError):
                await both("nope")

        self.run(go)

    def test_search_matches_every_term_ignoring_case_newest_first(self) -> None:
        async def go(store: Store) -> None:
            await self._seed(store)
            seqs = [sm.seq for sm in await store.search_history("s1", "PARSER")]
            assert seqs == [4, 2]
            assert [sm.seq for sm in await store.search_history("s1", "parser 42")] == [4]
            assert [sm.seq for sm in await store.search_history("s1", "部署配置")] == [1]
            # tool output and call arguments are searchable; short terms work too
            assert [sm.seq for sm in await store.search_history("s1", "test_x")] == [3]
            assert [sm.seq for sm in await store.search_history("s1", "ok")] == [5]
            assert [sm.seq for sm in await store.search_history("s1", "41")] == [4, 3]
            assert await store.search_history("s1", "parser nowhere") == []
            hits = await store.search_history("s1", "parser")
            assert hits[0] == (await store.read_messages("s1", after=3, limit=1))[0]

        self.run(go)

    def test_search_limit_and_branch_prefix(self) -> None:
        async def go(store: Store) -> None:
            await self._seed(store)
            assert [sm.seq for sm in await store.search_history("s1", "o", limit=2)] == [6, 5]
            assert await store.search_history("s1", "parser", limit=0) == []
            assert [sm.seq for sm in await store.search_history("s1", "parser", through_seq=3)] == [
                2
            ]
            await store.create_session(new_session("s2"))
            assert await store.search_history("s2", "parser") == []

        self.run(go)

    def test_search_sees_messages_appended_later(self) -> None:
        async def go(store: Store) -> None:
            await self._seed(store)
            assert await store.search_history("s1", "zebra") == []
            await store.commit(
                Commit(session_id="s1", expected_version=6, messages=(user("m7", "a Zebra"),))
            )
            assert [sm.seq for sm in await store.search_history("s1", "zebra")] == [7]

        self.run(go)

    def test_empty_query_is_a_clear_error(self) -> None:
        async def go(store: Store) -> None:
            await self._seed(store)
            with pytest.raises(ValidationError, match="query is empty"):
                await store.search_history("s1", "   ")

        self.run(go)

    def test_second_handle_sees_summaries_and_constraints(self) -> None:
        async def go(a: Store, b: Store) -> None:
            await self._seed(a)
            s = summary(4)
            await a.activate_summary(s, expected_generation=0)
            await a.add_constraints("s1", [Constraint(text="x must", source_message_id="m1")])
            assert await b.get_summary("s1") == s
            with pytest.raises(SummaryConflictError):
                await b.activate_summary(summary(5, id="other"), expected_generation=0)
            assert await b.list_constraints("s1") == await a.list_constraints("s1")
            assert [sm.seq for sm in await b.search_history("s1", "parser")] == [4, 2]

        self.run2(go)
