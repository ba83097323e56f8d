"""The contract every store adapter passes (SessionStore + ArtifactStore).

Subclass :class:`StoreContract`, implement :meth:`create_store` and, when the backend can
be opened twice, :meth:`second_handle` (another handle on the same data, as another
process would have). Tests are plain sync methods that drive the store with
``asyncio.run``. The run, execution and lease rules live in :mod:`.run_contract`.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import cast

import pytest

from plait.adapters.stores import Store
from plait.application._history import session_history
from plait.application.ports import Commit, CommitResult, HistoryRead
from plait.domain.answers import OutputSchema
from plait.domain.errors import (
    ArtifactNotFoundError,
    ConfigError,
    ConflictError,
    LeaseLostError,
    PlaitError,
    SessionBusyError,
    SessionNotFoundError,
)
from plait.domain.messages import AssistantMessage
from plait.domain.runs import RunStatus
from plait.domain.session import ForkOrigin, Session
from plait.domain.subagents import ParentCall
from tests.contract.approval_contract import ApprovalContract
from tests.contract.base import started, stored
from tests.contract.builders import (
    assistant,
    execution,
    lease,
    mixed_history,
    new_run,
    new_session,
    user,
)
from tests.contract.fence_contract import FenceContract
from tests.contract.owner_contract import OwnerPagesContract
from tests.contract.pipeline_contract import PipelineContract
from tests.contract.run_contract import RunContract
from tests.contract.submit_contract import SubmitContract


class StoreContract(
    RunContract,
    ApprovalContract,
    OwnerPagesContract,
    SubmitContract,
    FenceContract,
    PipelineContract,
):
    """Everything a store must do; subclass it once per adapter."""

    # --- sessions -------------------------------------------------------------------------

    def test_create_and_get_session(self) -> None:
        async def go(store: Store) -> None:
            s = new_session(
                "s-full",
                owner="ana",
                workspace="/ws",
                title="Café ☕",
                model="scripted:m.json",
                fork_origin=ForkOrigin(parent_session_id="p", fork_point_message_id="m9"),
            )
            await store.create_session(s)
            assert await store.get_session("s-full") == s
            await store.create_session(new_session("s-bare"))
            assert await store.get_session("s-bare") == new_session("s-bare")

        self.run(go)

    def test_a_run_reads_its_session_and_history_in_one_go(self) -> None:
        async def go(store: Store) -> None:
            await store.create_session(new_session("s-h"))
            assert await session_history(store, "s-h") == (await store.get_session("s-h"), [])
            written = mixed_history()
            await store.commit(
                Commit(session_id="s-h", expected_version=0, messages=tuple(written))
            )
            session, history = await session_history(store, "s-h")
            assert session == await store.get_session("s-h")
            assert session.version == len(written)
            # every field of every kind decodes as written, and as read_messages decodes it
            assert history == written
            assert history == [sm.message for sm in await store.read_messages("s-h")]
            assert [type(m) for m in history] == [type(m) for m in written]
            with pytest.raises(SessionNotFoundError):
                await session_history(store, "s-missing")
            if store.capabilities.history_read:  # the store's own read says the same
                own = await cast(HistoryRead, store).read_history("s-h")
                assert own == (session, written)
                with pytest.raises(SessionNotFoundError):
                    await cast(HistoryRead, store).read_history("s-missing")

        self.run(go)

    def test_duplicate_session_conflicts(self) -> None:
        async def go(store: Store) -> None:
            await store.create_session(new_session())
            with pytest.raises(ConflictError):
                await store.create_session(new_session(title="again"))
            assert await store.get_session("s1") == new_session()

        self.run(go)

    def test_new_session_must_be_empty(self) -> None:
        async def go(store: Store) -> None:
            with pytest.raises(ConfigError):
                await store.create_session(new_session(version=3))
            with pytest.raises(SessionNotFoundError):
                await store.get_session("s1")

        self.run(go)

    def test_unknown_session(self) -> None:
        async def go(store: Store) -> None:
            with pytest.raises(SessionNotFoundError) as info:
                await store.get_session("nope")
            assert info.value.details["session_id"] == "nope"
            with pytest.raises(SessionNotFoundError):
                await store.read_messages("nope")
            with pytest.raises(SessionNotFoundError):
                await store.commit(
                    Commit(session_id="nope", expected_version=0, messages=(user("m1"),))
                )
            with pytest.raises(SessionNotFoundError):
                await store.start_run(
                    Commit(session_id="nope", expected_version=0, run=new_run(session_id="nope"))
                )
            with pytest.raises(SessionNotFoundError):
                await store.list_runs(session_id="nope")

        self.run(go)

    def test_list_sessions_newest_first(self) -> None:
        async def go(store: Store) -> None:
            assert await store.list_sessions() == []
            for i, t in enumerate([5.0, 9.0, 1.0, 7.0]):
                await store.create_session(new_session(f"s{i}", created_at=t))
            ids = [s.id for s in await store.list_sessions()]
            assert ids == ["s1", "s3", "s0", "s2"]
            assert [s.id for s in await store.list_sessions(limit=2)] == ["s1", "s3"]

        self.run(go)

    def test_list_sessions_of_one_owner_page_by_page(self) -> None:
        async def go(store: Store) -> None:
            made: list[Session] = []
            for i in range(55):  # interleaved owners; equal times in threes
                who = "alice" if i % 11 < 6 else "bob"
                s = new_session(f"s{i:03d}", created_at=1_000.0 + i // 3, owner=who)
                await store.create_session(s)
                made.append(s)
            newest_first = made[::-1]
            for who in ("alice", "bob"):
                want = [s.id for s in newest_first if s.owner == who]
                got: list[str] = []
                before = None
                while True:
                    page = await store.list_sessions(owner=who, before=before, limit=7)
                    got += [s.id for s in page]
                    if len(page) < 7:
                        break
                    before = page[-1].id
                assert got == want
            everyone = await store.list_sessions(before="s040", limit=3)
            assert [s.id for s in everyone] == ["s039", "s038", "s037"]
            assert await store.list_sessions(owner="carol") == []
            with pytest.raises(SessionNotFoundError):
                await store.list_sessions(owner="alice", before="s-missing")

        self.run(go)

    # --- messages -------------------------------------------------------------------------

    def test_messages_round_trip_exactly(self) -> None:
        async def go(store: Store) -> None:
            history = mixed_history()
            await store.create_session(new_session())
            r = await store.commit(
                Commit(session_id="s1", expected_version=0, messages=tuple(history[:3]))
            )
            assert r == CommitResult(3, False)
            r = await store.commit(
                Commit(session_id="s1", expected_version=3, messages=tuple(history[3:]))
            )
            assert r.version == len(history)
            assert await store.read_messages("s1") == stored(*history)
            assert (await store.get_session("s1")).version == len(history)

        self.run(go)

    def test_a_typed_answer_and_its_run_schema_round_trip(self) -> None:
        schema = OutputSchema.create(
            {"type": "object", "properties": {"n": {"type": ["integer", "null"]}}}, name="Count"
        )
        answer = AssistantMessage(
            id="m2",
            text='{"n": null}',
            created_at=1_003.0,
            run_id="r1",
            step=1,
            output={"n": None, "ä": [1, 2.5, "🔍"]},
        )

        async def go(store: Store) -> None:
            await store.create_session(new_session())
            run = new_run(output_schema=schema)
            await store.start_run(
                Commit(session_id="s1", expected_version=0, run=run, messages=(user("m1"),))
            )
            await store.commit(Commit(session_id="s1", expected_version=1, messages=(answer,)))
            assert await store.read_messages("s1") == stored(user("m1"), answer)
            assert (await store.get_run("r1")).output_schema == schema

        self.run(go)

    def test_a_sub_agent_run_keeps_its_parent_call(self) -> None:
        link = ParentCall(session_id="s0", run_id="r0", call_id="call_ä")

        async def go(store: Store) -> None:
            await store.create_session(new_session())
            run = new_run(parent=link)
            await store.start_run(
                Commit(session_id="s1", expected_version=0, run=run, messages=(user("m1"),))
            )
            assert (await store.get_run("r1")).parent == link
            (listed,) = await store.list_runs(session_id="s1")
            assert listed.parent == link

        self.run(go)

    def test_read_after_and_limit(self) -> None:
        async def go(store: Store) -> None:
            msgs = [user(f"m{i}", text=str(i)) for i in range(1, 8)]
            await store.create_session(new_session())
            version = 0
            for m in msgs:
                version = (
                    await store.commit(
                        Commit(session_id="s1", expected_version=version, messages=(m,))
                    )
                ).version
            assert version == 7
            assert await store.read_messages("s1", after=3) == stored(*msgs[3:], first=4)
            assert await store.read_messages("s1", after=2, limit=2) == stored(*msgs[2:4], first=3)
            assert await store.read_messages("s1", after=7) == []
            assert await store.read_messages("s1", limit=0) == []

        self.run(go)

    def test_version_conflict_applies_nothing(self) -> None:
        async def go(store: Store) -> None:
            await started(store, user("m1"), owner="w")
            before = (await store.get_run("r1"), await store.read_messages("s1"))
            bad = Commit(
                session_id="s1",
                expected_version=0,
                lease_owner="w",
                messages=(assistant("m2", ("c1", "read_file", {"path": "a.txt"})),),
                run=replace(new_run(lease=lease("w")), status=RunStatus.COMPLETED),
                executions=(execution("c1"),),
            )
            with pytest.raises(ConflictError) as info:
                await store.commit(bad)
            assert not isinstance(info.value, SessionBusyError | LeaseLostError)
            assert info.value.details["expected"] == 0
            assert info.value.details["actual"] == 1
            assert (await store.get_run("r1"), await store.read_messages("s1")) == before
            assert await store.get_executions("r1") == []
            session = await store.get_session("s1")
            assert (session.version, session.active_run_id) == (1, "r1")

        self.run(go)

    def test_empty_commit_checks_version_and_keeps_it(self) -> None:
        async def go(store: Store) -> None:
            await started(store, user("m1"))
            r = await store.commit(
                Commit(session_id="s1", expected_version=1, executions=(execution("c1"),))
            )
            assert r.version == 1
            with pytest.raises(ConflictError):
                await store.commit(Commit(session_id="s1", expected_version=0))
            assert (await store.get_session("s1")).version == 1

        self.run(go)

    def test_duplicate_message_id_conflicts(self) -> None:
        async def go(store: Store) -> None:
            await started(store, user("m1"))
            with pytest.raises(ConflictError):
                await store.commit(
                    Commit(
                        session_id="s1",
                        expected_version=1,
                        messages=(user("m2"), user("m1", text="x")),
                    )
                )
            with pytest.raises(ConflictError):
                await store.commit(
                    Commit(session_id="s1", expected_version=1, messages=(user("m3"), user("m3")))
                )
            assert await store.read_messages("s1") == stored(user("m1"))
            assert (await store.get_session("s1")).version == 1

        self.run(go)

    # --- artifacts ------------------------------------------------------------------------

    def test_artifacts_are_content_addressed(self) -> None:
        async def go(store: Store) -> None:
            data = bytes(range(256)) * 40
            ref = await store.put_artifact(data, media_type="application/octet-stream")
            assert (ref.size, ref.media_type) == (len(data), "application/octet-stream")
            assert await store.put_artifact(data, media_type="application/octet-stream") == ref
            assert await store.get_artifact(ref.id) == (ref, data)
            text = await store.put_artifact(data, media_type="text/plain")
            assert text.id != ref.id
            assert text.sha256 == ref.sha256
            empty = await store.put_artifact(b"", media_type="text/plain")
            assert await store.get_artifact(empty.id) == (empty, b"")
            with pytest.raises(ArtifactNotFoundError):
                await store.get_artifact("art_missing")

        self.run(go)

    # --- lifecycle ------------------------------------------------------------------------

    def test_close_is_idempotent_and_final(self) -> None:
        async def go() -> None:
            store = self.create_store()
            await store.create_session(new_session())
            await store.close()
            await store.close()
            with pytest.raises(PlaitError):
                await store.get_session("s1")
            with pytest.raises(PlaitError):
                await store.commit(Commit(session_id="s1", expected_version=0))
            with pytest.raises(PlaitError):
                await store.put_artifact(b"x", media_type="text/plain")

        asyncio.run(go())

    # --- two handles on the same data -----------------------------------------------------

    def test_second_handle_sees_writes_and_conflicts(self) -> None:
        async def go(a: Store, b: Store) -> None:
            await a.create_session(new_session())
            assert await b.get_session("s1") == new_session()
            await a.start_run(
                Commit(session_id="s1", expected_version=0, run=new_run(), messages=(user("m1"),))
            )
            assert await b.read_messages("s1") == stored(user("m1"))
            await b.commit(Commit(session_id="s1", expected_version=1, messages=(user("m2"),)))
            with pytest.raises(ConflictError) as info:
                await a.commit(Commit(session_id="s1", expected_version=1, messages=(user("m3"),)))
            assert info.value.details["actual"] == 2
            with pytest.raises(SessionBusyError):
                await b.start_run(Commit(session_id="s1", expected_version=2, run=new_run("r2")))
            assert await a.read_messages("s1") == stored(user("m1"), user("m2"))

        self.run2(go)

    def test_second_handle_leases_and_cancel(self) -> None:
        async def go(a: Store, b: Store) -> None:
            await started(a)
            await a.claim_run("r1", owner="a", now=0.0, expires_at=100.0)
            with pytest.raises(LeaseLostError):
                await b.claim_run("r1", owner="b", now=50.0, expires_at=150.0)
            await b.request_cancel("r1")
            r = await a.commit(
                Commit(
                    session_id="s1",
                    expected_version=0,
                    lease_owner="a",
                    run=new_run(lease=lease("a", 100.0)),
                )
            )
            assert r.cancel_requested
            await b.claim_run("r1", owner="b", now=100.0, expires_at=150.0)
            with pytest.raises(LeaseLostError):
                await a.commit(
                    Commit(
                        session_id="s1",
                        expected_version=0,
                        lease_owner="a",
                        run=new_run(lease=lease("a", 100.0)),
                    )
                )
            ref = await a.put_artifact(b"blob", media_type="text/plain")
            assert await b.get_artifact(ref.id) == (ref, b"blob")
            assert [x.id for x in await b.list_runs()] == ["r1"]

        self.run2(go)
