"""The contract of :class:`~plait.application.ports.RetentionStore` and of the retention
policy applied through it (:class:`~plait.application.retention.RetentionService`), run
on every store: tombstones keep a message's place and structure, say when and why its
content went, show in every branch, and never break a fork (nor a fork of a fork)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from plait.adapters.stores import Store
from plait.application.compaction.recall_offer import recall_tool
from plait.application.ports import Commit, ForkCommit, ToolInvocation
from plait.application.retention import (
    ARCHIVE_MEDIA_TYPE,
    RetentionRequest,
    RetentionService,
)
from plait.domain.errors import MessageNotFoundError, SessionNotFoundError, ValidationError
from plait.domain.forks import ForkRecord
from plait.domain.messages import (
    ArtifactRef,
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    UserMessage,
)
from plait.domain.retention import EXPIRED_TEXT, Tombstone, body_digest, tombstone
from plait.domain.session import ForkOrigin, StoredMessage
from plait.domain.summary import Summary, SummaryBody, source_digest
from plait.testing import FixedClock
from tests.contract.base import ContractBase, started
from tests.contract.builders import new_session, user

NOW = 1_700_000_000.0
DAY = 86_400.0
OLD = NOW - 40 * DAY


def history(created_at: float = OLD) -> list[Message]:
    """Six messages, 40 days old: a request, a tool unit with an artifact, an answer, a
    follow-up and its answer."""
    return [
        UserMessage(id="m1", text="fix the failing parser test", created_at=created_at),
        AssistantMessage(
            id="m2",
            text="running the tests",
            created_at=created_at + 1,
            step=1,
            model="scripted:test",
            tool_calls=(ToolCall.create(id="c1", name="run_tests", arguments={"cmd": "pytest"}),),
        ),
        ToolResultMessage(
            id="m3",
            tool_name="run_tests",
            created_at=created_at + 2,
            step=1,
            result=ToolResult(
                call_id="c1",
                status=ToolStatus.FAILED,
                content="FAILED tests/t.py::test_parser 42 != 41",
                artifact=ArtifactRef(id="art_log", sha256="0" * 64, size=5000),
            ),
        ),
        AssistantMessage(id="m4", text="the parser is off by one", created_at=created_at + 3),
        UserMessage(id="m5", text="go on", created_at=created_at + 4),
        AssistantMessage(id="m6", text="fixed", created_at=created_at + 5),
    ]


def summary_of(session_id: str, through: int, messages: list[Message]) -> Summary:
    ids = [m.id for m in messages[:through]]
    return Summary(
        id=f"sum-{session_id}-{through}",
        session_id=session_id,
        generation=1,
        covered_through_seq=through,
        covered_through_message_id=ids[-1],
        source_digest=source_digest(ids),
        body=SummaryBody(goal="fix the parser test"),
        model="scripted",
        template_version="summary-v1",
        created_at=OLD + 10,
    )


async def seed(store: Store, session_id: str = "s1", *, summarized: int | None = 4) -> None:
    messages = history()
    await store.create_session(new_session(session_id))
    await store.commit(Commit(session_id=session_id, expected_version=0, messages=tuple(messages)))
    if summarized is not None:
        await store.activate_summary(
            summary_of(session_id, summarized, messages), expected_generation=0
        )


async def fork(store: Store, source: str, branch: str, through: int) -> None:
    point = (await store.read_messages(source, after=through - 1, limit=1))[0].message.id
    version = (await store.get_session(source)).version
    await store.fork_session(
        ForkCommit(
            branch=new_session(
                branch,
                fork_origin=ForkOrigin(parent_session_id=source, fork_point_message_id=point),
            ),
            record=ForkRecord(
                branch_session_id=branch,
                request_id=f"req-{branch}",
                caller=None,
                source_session_id=source,
                through_message_id=point,
                through_seq=through,
                source_version=version,
                created_at=NOW - DAY,
            ),
        )
    )


def stones(messages: list[Message], *, mode: str = "expire") -> list[Tombstone]:
    return [
        tombstone(m, expired_at=NOW, policy="raw_history_days=30", mode=mode)  # type: ignore[arg-type]
        for m in messages
    ]


def service(store: Store) -> RetentionService:
    return RetentionService(store=store, clock=FixedClock(NOW))


async def recall(store: Store, session_id: str, **arguments: object) -> tuple[str, bool]:
    tool = recall_tool(store)
    call = ToolCall.create(id="r1", name="recall", arguments=dict(arguments))
    out = await tool.execute(
        ToolInvocation(
            call=call, session_id=session_id, run_id="run", workspace=None, idempotency_key="k"
        )
    )
    return out.content, out.failed


class RetentionContract(ContractBase):
    shares_bodies = True
    """A branch shares its parent's message bodies (all but the JSONL store, which copies
    the prefix into the branch's file)."""

    # --- the store port -------------------------------------------------------------------

    def test_expiring_in_the_parent_reaches_branches_that_share_bodies(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            await fork(store, "s1", "b1", 4)
            await fork(store, "b1", "c1", 3)
            await store.expire_messages("s1", stones(history()[:2]))
            parent = await store.read_messages("s1")
            if self.shares_bodies:
                for sid, through in (("b1", 4), ("c1", 3)):
                    assert await store.read_messages(sid) == parent[:through]
                    assert sorted(await store.expiries(sid)) == ["m1", "m2"]
            else:  # each copy is expired by its own call (the service makes them all)
                assert [sm.message for sm in await store.read_messages("c1")] == history()[:3]
                assert await store.expiries("c1") == {}
                assert await store.expire_messages("c1", stones(history()[:2])) == ["m1", "m2"]
                assert await store.read_messages("c1") == parent[:3]

        self.run(go)

    def test_expire_replaces_bodies_keeps_places_and_records_why(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            messages = history()
            done = await store.expire_messages("s1", stones(messages[:3]))
            assert done == ["m1", "m2", "m3"]
            stored = await store.read_messages("s1")
            expected = [StoredMessage(i + 1, t.message) for i, t in enumerate(stones(messages[:3]))]
            assert stored[:3] == expected
            assert stored[3:] == [StoredMessage(i + 4, m) for i, m in enumerate(messages[3:])]
            # structure stays: the call still pairs with its result, ids and times unchanged
            m2, m3 = stored[1].message, stored[2].message
            assert isinstance(m2, AssistantMessage) and isinstance(m3, ToolResultMessage)
            assert [c.id for c in m2.tool_calls] == ["c1"] and m3.call_id == "c1"
            assert m2.text == EXPIRED_TEXT and m2.tool_calls[0].arguments() == {}
            assert m3.result.content == EXPIRED_TEXT and m3.result.status is ToolStatus.FAILED
            records = await store.expiries("s1")
            assert sorted(records) == ["m1", "m2", "m3"]
            assert records["m1"] == stones(messages[:1])[0].expiry
            assert records["m1"].digest == body_digest(messages[0])
            assert records["m1"].created_at == OLD and records["m1"].kind == "user"

        self.run(go)

    def test_expire_again_changes_nothing(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            messages = history()
            await store.expire_messages("s1", stones(messages[:2]))
            before = (await store.read_messages("s1"), await store.expiries("s1"))
            later = [
                replace(t, expiry=replace(t.expiry, expired_at=NOW + 5))
                for t in stones(messages[:2])
            ]
            assert await store.expire_messages("s1", later) == []
            assert (await store.read_messages("s1"), await store.expiries("s1")) == before

        self.run(go)

    def test_expiring_a_message_not_held_writes_nothing(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            ghost = UserMessage(id="elsewhere", text="x", created_at=OLD)
            with pytest.raises(MessageNotFoundError):
                await store.expire_messages("s1", stones([history()[0], ghost]))
            assert await store.read_messages("s1") == [
                StoredMessage(i + 1, m) for i, m in enumerate(history())
            ]
            assert await store.expiries("s1") == {}

        self.run(go)

    def test_unknown_session(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            with pytest.raises(SessionNotFoundError):
                await store.expire_messages("nope", stones(history()[:1]))
            with pytest.raises(SessionNotFoundError):
                await store.expiries("nope")

        self.run(go)

    def test_search_no_longer_finds_expired_content(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            assert [sm.message.id for sm in await store.search_history("s1", "parser")] == [
                "m4",
                "m3",
                "m1",
            ]
            await store.expire_messages("s1", stones(history()[:3]))
            found = await store.search_history("s1", "parser")
            assert [sm.message.id for sm in found] == ["m4"]

        self.run(go)

    def test_a_second_handle_reads_the_tombstones(self) -> None:
        async def go(a: Store, b: Store) -> None:
            await seed(a)
            await b.read_messages("s1")  # b has read the originals before
            await a.expire_messages("s1", stones(history()[:1]))
            assert (await b.read_messages("s1", limit=1))[0].message.text == EXPIRED_TEXT  # type: ignore[union-attr]
            assert list(await b.expiries("s1")) == ["m1"]

        self.run2(go)

    # --- the policy -----------------------------------------------------------------------

    def test_policy_expires_only_old_summarized_messages(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)  # summary covers m1..m4
            await store.create_session(new_session("s2"))
            await store.commit(
                Commit(
                    session_id="s2",
                    expected_version=0,
                    messages=tuple(history(created_at=NOW - 10 * DAY)),
                )
            )
            await store.activate_summary(summary_of("s2", 6, history()), expected_generation=0)
            report = await service(store).apply(RetentionRequest(older_than_days=30))
            assert [(x.session_id, x.seq, x.message_id) for x in report.expired] == [
                ("s1", 1, "m1"),
                ("s1", 2, "m2"),
                ("s1", 3, "m3"),
                ("s1", 4, "m4"),
            ]
            assert [(h.reason, h.messages) for h in report.held_back] == [
                ("not covered by an active summary of session s1", 2)
            ]
            assert sorted(await store.expiries("s1")) == ["m1", "m2", "m3", "m4"]
            assert await store.expiries("s2") == {}  # 10 days old: kept
            assert [sm.message for sm in await store.read_messages("s2")] == history(
                created_at=NOW - 10 * DAY
            )

        self.run(go)

    def test_dry_run_changes_nothing(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            report = await service(store).apply(RetentionRequest(older_than_days=30, dry_run=True))
            assert report.dry_run and len(report.expired) == 4
            assert await store.expiries("s1") == {}
            assert [sm.message for sm in await store.read_messages("s1")] == history()

        self.run(go)

    def test_force_expires_unsummarized_messages(self) -> None:
        async def go(store: Store) -> None:
            await seed(store, summarized=None)
            kept = await service(store).apply(RetentionRequest(older_than_days=30))
            assert kept.expired == () and kept.held_back[0].messages == 6
            forced = await service(store).apply(RetentionRequest(older_than_days=30, force=True))
            assert len(forced.expired) == 6 and forced.policy == "raw_history_days=30, forced"

        self.run(go)

    def test_a_session_with_a_live_run_is_never_touched(self) -> None:
        async def go(store: Store) -> None:
            await started(store, *history())  # s1 with running run r1
            await store.activate_summary(summary_of("s1", 4, history()), expected_generation=0)
            report = await service(store).apply(RetentionRequest(older_than_days=30, force=True))
            assert report.expired == ()
            assert [(h.reason, h.messages) for h in report.held_back] == [
                ("session s1 has a live run (r1)", 6)
            ]
            assert await store.expiries("s1") == {}

        self.run(go)

    def test_bad_age_and_mode_are_refused(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            for days in (-1, 0, float("nan"), float("inf")):
                with pytest.raises(ValidationError, match="days"):
                    await service(store).apply(RetentionRequest(older_than_days=days))
            with pytest.raises(ValidationError, match="mode"):
                await service(store).apply(
                    RetentionRequest(older_than_days=30, mode="delete")  # type: ignore[arg-type]
                )
            assert await store.expiries("s1") == {}

        self.run(go)

    def test_archive_keeps_the_originals_first(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            report = await service(store).apply(
                RetentionRequest(older_than_days=30, mode="archive")
            )
            assert report.archive_id is not None
            ref, data = await store.get_artifact(report.archive_id)
            assert ref.media_type == ARCHIVE_MEDIA_TYPE
            archive = json.loads(data)
            records = await store.expiries("s1")
            assert [x["message"]["id"] for x in archive["messages"]] == ["m1", "m2", "m3", "m4"]
            for entry in archive["messages"]:
                assert entry["digest"] == records[entry["message"]["id"]].digest
                assert records[entry["message"]["id"]].archive_id == report.archive_id
            assert archive["messages"][0]["message"]["text"] == "fix the failing parser test"
            assert records["m1"].mode == "archive"

        self.run(go)

    def test_restore_puts_the_originals_back(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            assert await store.search_history("s1", "running")  # indexed before (SQLite)
            await store.expire_messages("s1", stones(history()[:3]))
            assert await store.search_history("s1", "running") == []
            assert await store.restore_messages("s1", history()[1:2]) == ["m2"]
            stored = await store.read_messages("s1")
            assert stored[1] == StoredMessage(2, history()[1])
            assert stored[0].message.text == EXPIRED_TEXT  # type: ignore[union-attr]
            assert sorted(await store.expiries("s1")) == ["m1", "m3"]
            assert await store.restore_messages("s1", history()[1:2]) == []  # not expired
            assert [sm.message.id for sm in await store.search_history("s1", "running")] == ["m2"]
            with pytest.raises(MessageNotFoundError):
                await store.restore_messages("s1", [*history()[:1], user("ghost")])
            assert sorted(await store.expiries("s1")) == ["m1", "m3"]

        self.run(go)

    def test_an_archive_is_restorable_everywhere_it_was_expired(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            await fork(store, "s1", "b1", 4)
            await store.activate_summary(summary_of("b1", 4, history()), expected_generation=0)
            retention = service(store)
            archived = await retention.apply(RetentionRequest(older_than_days=30, mode="archive"))
            assert archived.archive_id is not None
            await fork(store, "s1", "late", 3)  # made from the tombstones
            dry = await retention.restore(archived.archive_id, dry_run=True)
            assert [(x.message_id, x.held_by) for x in dry.restored] == [
                ("m1", ("s1", "b1", "late")),
                ("m2", ("s1", "b1", "late")),
                ("m3", ("s1", "b1", "late")),
                ("m4", ("s1", "b1")),
            ]
            assert len(await store.expiries("s1")) == 4
            done = await retention.restore(archived.archive_id)
            assert done.restored == dry.restored and done.held_back == ()
            assert [sm.message for sm in await store.read_messages("s1")] == history()
            for sid, through in (("b1", 4), ("late", 3)):
                assert [sm.message for sm in await store.read_messages(sid)] == history()[:through]
                assert await store.expiries(sid) == {}
            again = await retention.restore(archived.archive_id)
            assert again.restored == ()
            assert [(h.reason, h.messages) for h in again.held_back] == [
                ("not expired by this archive (restored already?)", 4)
            ]

        self.run(go)

    def test_restoring_something_that_is_not_an_archive_is_refused(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            plain = await store.put_artifact(b"{}", media_type="text/plain")
            with pytest.raises(ValidationError, match="not a plait history archive"):
                await service(store).restore(plain.id)
            fake = await store.put_artifact(b"[1]", media_type=ARCHIVE_MEDIA_TYPE)
            with pytest.raises(ValidationError, match="not a plait history archive"):
                await service(store).restore(fake.id)

        self.run(go)

    # --- forks ----------------------------------------------------------------------------

    def test_a_branch_without_its_own_summary_holds_the_parent_back(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            await fork(store, "s1", "b1", 4)  # b1 has no summary: its model would lose m1..m4
            report = await service(store).apply(RetentionRequest(older_than_days=30))
            assert report.expired == ()
            assert ("not covered by an active summary of session b1", 4) in [
                (h.reason, h.messages) for h in report.held_back
            ]

        self.run(go)

    def test_expiry_shows_in_every_branch_and_forks_still_work(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            await fork(store, "s1", "b1", 5)  # before the expiry
            await store.activate_summary(summary_of("b1", 4, history()), expected_generation=0)
            await fork(store, "b1", "c1", 4)  # a fork of a fork, before the expiry
            await store.activate_summary(summary_of("c1", 4, history()), expected_generation=0)
            await fork(store, "s1", "late", 2)  # at a point inside the expired region
            await store.activate_summary(summary_of("late", 2, history()), expected_generation=0)
            report = await service(store).apply(RetentionRequest(older_than_days=30))
            assert [(x.message_id, x.held_by) for x in report.expired] == [
                ("m1", ("s1", "b1", "c1", "late")),
                ("m2", ("s1", "b1", "c1", "late")),
                ("m3", ("s1", "b1", "c1")),
                ("m4", ("s1", "b1", "c1")),
            ]
            parent = await store.read_messages("s1")
            for sid, through in (("b1", 5), ("c1", 4), ("late", 2)):
                assert await store.read_messages(sid) == parent[:through], sid
                assert sorted(await store.expiries(sid)) == ["m1", "m2", "m3", "m4"][:through]
            # forking at and after the expired region still works, fork of fork too
            await fork(store, "s1", "after", 3)
            await fork(store, "after", "after2", 2)
            for sid, through in (("after", 3), ("after2", 2)):
                assert await store.read_messages(sid) == parent[:through]
                assert sorted(await store.expiries(sid)) == ["m1", "m2", "m3"][:through]
            # a branch keeps going after its shared prefix expired
            await store.commit(
                Commit(session_id="after", expected_version=3, messages=(user("n4"),))
            )
            assert [sm.message.id for sm in await store.read_messages("after")] == [
                "m1",
                "m2",
                "m3",
                "n4",
            ]
            assert await store.read_messages("s1") == parent

        self.run(go)

    # --- readers: recall reports "expired", never "missing" -------------------------------

    def test_recall_reports_expired_sources_as_expired(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            await fork(store, "s1", "b1", 4)
            await store.activate_summary(summary_of("b1", 4, history()), expected_generation=0)
            await service(store).apply(RetentionRequest(older_than_days=30, mode="archive"))
            for sid in ("s1", "b1"):
                text, failed = await recall(store, sid, message_id="m3")
                assert failed and text.startswith("expired: message 'm3' (tool_result #3")
                assert "raw_history_days=30" in text and "archived in artifact" in text
                assert "missing" not in text and "42 != 41" not in text
                text, failed = await recall(store, sid, artifact_id="art_log")
                assert failed and "is not served: expired: message 'm3'" in text
                assert "missing" not in text
            text, failed = await recall(store, "s1", query="parser")
            assert failed and "42 != 41" not in text  # the content is gone, not searchable
            text, failed = await recall(store, "s1", query="go")
            assert not failed and "m5" in text and "m1" not in text
            text, failed = await recall(store, "s1", message_id="m99")
            assert failed and text.startswith("missing:")  # a real absence stays missing
            text, failed = await recall(store, "s1", message_id="m5")
            assert not failed and "go on" in text

        self.run(go)
