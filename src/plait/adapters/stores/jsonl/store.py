"""A store of plain JSON Lines files, for inspection and teaching.

Layout under the store directory::

    sessions/<session_id>.jsonl   one line per write to that session (create, start_run,
                                  commit, cancel, lease), replayed in order on load
    runs.jsonl                    run id -> session id, so a run is found without scanning
    artifacts/<artifact_id>       a JSON header line, then the bytes (written atomically)

Every port write appends exactly one line holding everything that write does, then
``fsync``\\ s; a torn write can therefore only leave a partial *last* line. Loading
detects it (no trailing newline), warns with :class:`StoreWarning` and ignores it; the
next write under the lock truncates it away. Any complete line that does not decode is
corruption: :class:`~plait.domain.errors.CorruptStoreError` names the file and line, and
nothing is modified.

Several processes may share the directory: each write takes ``flock(LOCK_EX)`` on the
session file, first reads the lines other processes appended since this process last
looked (tracked by byte offset), then checks versions, leases and keys against that
state, appends and fsyncs. Reads take ``LOCK_SH``. A run's index line is written (and
fsynced) before the session line that creates the run, so the index never misses a run;
an index entry whose session line never landed is simply not found there.

The rules themselves live in :mod:`..shared.state` and are shared with the memory store. The
blocking file I/O runs directly inside the ``async def`` methods: each call is a few small
reads and one append, cheaper than a thread hop.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from plait.adapters.stores.jsonl.approvals import ApprovalFile
from plait.adapters.stores.jsonl.artifacts import ArtifactFiles, decode_artifact
from plait.adapters.stores.jsonl.files import (
    Checkpoint,
    StoreWarning,
    Tracked,
    left_out,
)
from plait.adapters.stores.jsonl.fork import fork_record, link_branch
from plait.adapters.stores.jsonl.index import RunIndex
from plait.adapters.stores.jsonl.lines import change_line, create_line
from plait.adapters.stores.jsonl.owners import SessionIndex
from plait.adapters.stores.jsonl.retention import (
    expire_line,
    plan_expiry,
    plan_restore,
    read_expiries,
)
from plait.adapters.stores.jsonl.sessions import SessionFiles
from plait.adapters.stores.jsonl.summaries import SummaryFiles, constraints_line, summary_line
from plait.adapters.stores.shared.approvals import (
    consume_in,
    decide_in,
    get_in,
    request_in,
    select,
)
from plait.adapters.stores.shared.fork import (
    check_fork_commit,
    fork_state,
    prefix_seq,
    reject_plain_session,
)
from plait.adapters.stores.shared.pipeline import PipelinedCommits
from plait.adapters.stores.shared.session_pages import page
from plait.adapters.stores.shared.state import (
    ARTIFACT_CHUNK,
    Change,
    artifact_ref,
    artifact_ref_of_file,
    check_new_session,
    check_token,
    claimed,
    closed_error,
    duplicate_run,
    duplicate_session,
    leased_runs,
    renewed,
    run_not_found,
    stale_runs,
    validate_commit,
)
from plait.adapters.stores.shared.summary_state import (
    SummaryBook,
    duplicate_summary,
    new_constraints,
)
from plait.application.ports import Commit, CommitResult, ForkCommit, StoreCapabilities
from plait.domain.errors import (
    ConfigError,
    CorruptStoreError,
    RunNotFoundError,
    SessionNotFoundError,
    StoreError,
)
from plait.domain.forks import ForkRecord
from plait.domain.governance import Approval, ApprovalUse
from plait.domain.messages import ArtifactRef, Message
from plait.domain.recall import matches, search_terms
from plait.domain.retention import Expiry, Tombstone
from plait.domain.runs import Run, RunStatus
from plait.domain.session import ExecutionRecord, Session, StoredMessage
from plait.domain.summary import Constraint, Summary

__all__ = ["JsonlStore", "StoreWarning"]


class JsonlStore(PipelinedCommits):
    """:class:`~plait.application.ports.SessionStore` and
    :class:`~plait.application.ports.ArtifactStore` in a directory of JSONL files; what else it
    keeps is in :attr:`capabilities`."""

    capabilities = StoreCapabilities(
        approvals=True,
        forks=True,
        summaries=True,
        retention=True,
        second_handle=True,
    )

    def __init__(self, directory: str | Path, *, checkpoint: Checkpoint | None = None) -> None:
        """``checkpoint`` is a test-only hook: called with ``"mid_line"`` after the first
        half of a line reached the file and before the rest, so crash tests can kill the
        process in the middle of a write."""
        self._checkpoint = checkpoint
        self._dir = Path(directory)
        self._sessions_dir = self._dir / "sessions"
        try:
            self._sessions_dir.mkdir(parents=True, exist_ok=True)
            (self._dir / "artifacts").mkdir(exist_ok=True)
        except OSError as error:
            raise StoreError(f"cannot create the store directory {self._dir}: {error}") from error
        self._lock = threading.Lock()
        self._closed = False
        self._files = SessionFiles(self._sessions_dir, checkpoint)
        self._index = RunIndex(self._dir / "runs.jsonl", checkpoint)
        self._owners = SessionIndex(self._dir / "sessions.jsonl", checkpoint)
        self._artifacts = ArtifactFiles(self._dir / "artifacts")
        self._approvals = ApprovalFile(self._dir, checkpoint)
        self._summaries = SummaryFiles(self._dir / "summaries")

    def __repr__(self) -> str:
        return f"JsonlStore({str(self._dir)!r})"

    @property
    def directory(self) -> Path:
        return self._dir

    @contextmanager
    def _op(self) -> Iterator[None]:
        with self._lock:
            if self._closed:
                raise closed_error("jsonl")
            try:
                yield
            except OSError as error:
                raise StoreError(
                    f"{self._dir}: file system error: {error}", path=str(self._dir)
                ) from error

    # --- the run index --------------------------------------------------------------------

    def _find_run(self, run_id: str) -> tuple[str, Run]:
        self._index.refresh()
        for sid in reversed(self._index.sessions_of(run_id)):
            try:
                run = self._files.read(sid).runs.get(run_id)
            except SessionNotFoundError:
                continue
            if run is not None:
                return sid, run
        raise run_not_found(run_id)

    def _all_runs(self) -> list[Run]:
        self._index.refresh()
        runs: list[Run] = []
        damaged: set[str] = set()
        for rid, sids in self._index.items():
            if damaged.intersection(sids):
                continue
            try:
                runs.append(self._find_run(rid)[1])
            except RunNotFoundError:
                continue  # indexed, but its session line never landed
            except CorruptStoreError as error:
                damaged.update(sids)
                left_out(error, "its runs")
        return runs

    def _run_write(self, run_id: str, op: str, change: Callable[[Run], Run]) -> Run:
        sid, _ = self._find_run(run_id)

        def plan(tracked: Tracked) -> tuple[dict[str, Any], Change, Run]:
            assert tracked.state is not None
            run = tracked.state.runs.get(run_id)
            if run is None:
                raise run_not_found(run_id)
            new = change(run)
            return change_line(op, Change(run=new)), Change(run=new), new

        return self._files.write(sid, plan)

    # --- sessions -------------------------------------------------------------------------

    async def create_session(self, session: Session) -> None:
        check_new_session(session)

        def plan(tracked: Tracked) -> tuple[dict[str, Any], Session, None]:
            if tracked.state is not None:
                raise duplicate_session(session.id)
            return create_line(session), session, None

        with self._op():
            if self._files.path(session.id) is not None and not self._exists(session.id):
                self._owners.add(session, self._scan)  # before the file: never missed
            self._files.write(session.id, plan, create=True)

    def _exists(self, session_id: str) -> bool:
        try:
            self._files.read(session_id)
        except SessionNotFoundError:
            return False
        return True

    async def get_session(self, session_id: str) -> Session:
        with self._op():
            return self._files.read(session_id).session

    async def list_sessions(
        self, *, limit: int | None = None, owner: str | None = None, before: str | None = None
    ) -> list[Session]:
        """From the session index: only the page's session files are read."""
        with self._op():
            if not self._owners.refresh():  # a store from before the index, not written yet
                newest = sorted(self._scan(), key=lambda session: session.created_at, reverse=True)
                return page(newest, owner=owner, before=before, limit=limit)
            found: list[Session] = []
            for sid in self._owners.newest_first(owner=owner, before=before):
                if limit is not None and len(found) >= limit:
                    break
                try:
                    session = self._files.read(sid).session
                except SessionNotFoundError:
                    continue  # indexed, but its create never completed
                except CorruptStoreError as error:
                    left_out(error, "it")
                    continue
                if owner is None or session.owner == owner:
                    found.append(session)
            return found

    def _scan(self) -> list[Session]:
        """Every session, by reading every file (newest id first)."""
        sessions = []
        for name in sorted(os.listdir(self._sessions_dir), reverse=True):
            if name.endswith(".jsonl"):
                try:
                    sessions.append(self._files.read(name[: -len(".jsonl")]).session)
                except SessionNotFoundError:
                    continue  # an empty file left by a create that never completed
                except CorruptStoreError as error:
                    left_out(error, "it")
        return sessions

    async def read_messages(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[StoredMessage]:
        with self._op():
            return self._files.read(session_id).read(after, limit)

    # --- writes ---------------------------------------------------------------------------

    async def start_run(self, commit: Commit) -> CommitResult:
        validate_commit(commit, start=True)
        run = commit.run
        assert run is not None
        sid = commit.session_id

        def plan(tracked: Tracked) -> tuple[dict[str, Any], Change, CommitResult]:
            assert tracked.state is not None
            change = tracked.state.plan_start(commit)
            return (
                change_line("start_run", change),
                change,
                CommitResult(tracked.state.session.version + len(change.messages), False),
            )

        with self._op():
            self._files.read(sid).plan_start(commit)  # fail early, before indexing
            self._index.refresh()
            for other in self._index.sessions_of(run.id):
                if other != sid and run.id in self._read_session_or_empty(other):
                    raise duplicate_run(run.id)
            self._index.add(run.id, sid)
            return self._files.write(sid, plan)

    async def commit(self, commit: Commit) -> CommitResult:
        validate_commit(commit, start=False)

        def plan(tracked: Tracked) -> tuple[dict[str, Any], Change, CommitResult]:
            assert tracked.state is not None
            change = tracked.state.plan_commit(commit)
            return (
                change_line("commit", change),
                change,
                CommitResult(
                    tracked.state.session.version + len(change.messages), change.cancel_requested
                ),
            )

        with self._op():
            return self._files.write(commit.session_id, plan)

    def _read_session_or_empty(self, sid: str) -> dict[str, Run]:
        try:
            return self._files.read(sid).runs
        except SessionNotFoundError:
            return {}

    # --- retention (see retention.py) -----------------------------------------------------

    async def expire_messages(self, session_id: str, tombstones: Sequence[Tombstone]) -> list[str]:
        with self._op():
            path = self._files.path(session_id)
            plan = plan_expiry(tombstones, str(path))
            done: list[str] = self._files.rewrite(session_id, plan)
            return done

    async def restore_messages(self, session_id: str, messages: Sequence[Message]) -> list[str]:
        with self._op():
            plan = plan_restore(messages, str(self._files.path(session_id)))
            done: list[str] = self._files.rewrite(session_id, plan)
            return done

    async def expiries(self, session_id: str) -> dict[str, Expiry]:
        with self._op():
            self._files.read(session_id)  # an unknown session is an error
            path = self._files.path(session_id)
            assert path is not None
            return read_expiries(path)

    # --- forks ----------------------------------------------------------------------------

    async def message_seq(self, session_id: str, message_id: str) -> int | None:
        with self._op():
            return prefix_seq(self._files.read(session_id), message_id)

    async def fork_session(self, commit: ForkCommit) -> ForkRecord:
        """The branch's whole file (its create line with the fork record, then one line
        with the prefix) is written under a temporary name, fsynced, and linked into place
        (which fails if the name exists): a crash leaves no branch or a whole one."""
        check_fork_commit(commit)
        branch_id = commit.branch.id
        with self._op():
            path = self._files.path(branch_id)
            if path is None:
                raise ConfigError(f"session id {branch_id!r} cannot be used as a file name")
            if path.exists():
                return fork_record(path) or reject_plain_session(branch_id)
            source = commit.record.source_session_id
            state = fork_state(self._files.read(source), commit)
            source_path = self._files.path(source)
            assert source_path is not None  # read() found it
            held = [
                e for e in read_expiries(source_path).values() if e.message_id in state.message_ids
            ]
            extra = (expire_line(held),) if held else ()
            self._owners.add(commit.branch, self._scan)
            if not link_branch(path, commit, state, extra):
                return fork_record(path) or reject_plain_session(branch_id)
            return commit.record

    async def get_fork_record(self, session_id: str) -> ForkRecord | None:
        with self._op():
            path = self._files.path(session_id)
            return None if path is None else fork_record(path)

    # --- runs -----------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run:
        with self._op():
            return self._find_run(run_id)[1]

    async def list_runs(self, *, session_id: str | None = None) -> list[Run]:
        with self._op():
            if session_id is None:
                runs = self._all_runs()
            else:
                runs = list(self._files.read(session_id).runs.values())
        runs.reverse()
        runs.sort(key=lambda run: run.started_at, reverse=True)
        return runs

    async def request_cancel(self, run_id: str) -> Run:
        with self._op():
            return self._run_write(
                run_id, "cancel", lambda run: replace(run, cancel_requested=True)
            )

    async def get_executions(self, run_id: str) -> list[ExecutionRecord]:
        with self._op():
            sid, _ = self._find_run(run_id)
            return self._files.read(sid).execution_list(run_id)

    async def claim_run(self, run_id: str, *, owner: str, now: float, expires_at: float) -> Run:
        with self._op():
            return self._run_write(
                run_id, "lease", partial(claimed, owner=owner, now=now, expires_at=expires_at)
            )

    async def renew_lease(
        self, run_id: str, *, owner: str, expires_at: float, lease_token: int | None = None
    ) -> None:
        renew = partial(renewed, owner=owner, expires_at=expires_at, lease_token=lease_token)
        with self._op():
            self._run_write(run_id, "lease", renew)

    async def list_stale_runs(self, *, now: float, status: RunStatus | None = None) -> list[Run]:
        with self._op():
            return stale_runs(self._all_runs(), now, status)

    async def list_leased_runs(self, *, now: float, status: RunStatus | None = None) -> list[Run]:
        with self._op():
            return leased_runs(self._all_runs(), now, status)

    # --- artifacts ------------------------------------------------------------------------

    async def put_artifact(self, data: bytes, *, media_type: str) -> ArtifactRef:
        ref = artifact_ref(data, media_type)
        return self._put_artifact(ref, lambda file: file.write(data))

    async def put_artifact_file(self, path: str, *, media_type: str) -> ArtifactRef:
        """Copies the file in chunks (never whole in memory); the caller removes it."""
        ref = artifact_ref_of_file(path, media_type)

        def copy(out: BinaryIO) -> None:
            with open(path, "rb") as src:
                shutil.copyfileobj(src, out, ARTIFACT_CHUNK)

        return self._put_artifact(ref, copy)

    def _put_artifact(self, ref: ArtifactRef, write: Callable[[BinaryIO], object]) -> ArtifactRef:
        with self._op():
            return self._artifacts.put(ref, write)

    async def get_artifact(self, artifact_id: str) -> tuple[ArtifactRef, bytes]:
        with self._op():
            path, blob = self._artifacts.read(artifact_id)
        return decode_artifact(path, artifact_id, blob)

    # --- approvals (rules in _approvals, file in _approvals_jsonl) ------------------------

    async def request_approval(
        self, approval: Approval, *, lease_token: int | None = None
    ) -> Approval:
        with self._op():
            state = self._files.read(approval.session_id)
            if lease_token is not None:
                run = state.runs.get(approval.run_id)
                check_token(
                    approval.run_id,
                    None if run is None else run.lease_token,
                    lease_token,
                    ended=run is not None and run.status.terminal,
                    wanted=None,
                )
            return self._approvals.write(partial(request_in, approval=approval))

    async def get_approval(self, approval_id: str) -> Approval:
        with self._op():
            records = self._approvals.read()
        return get_in(records, approval_id)

    async def list_approvals(
        self, *, session_id: str | None = None, run_id: str | None = None
    ) -> list[Approval]:
        with self._op():
            records = self._approvals.read()
        return select(records, session_id=session_id, run_id=run_id)

    async def decide_approval(
        self,
        approval_id: str,
        *,
        approve: bool,
        grantor: str,
        at: float,
        ttl_seconds: float | None = None,
        reason: str | None = None,
    ) -> Approval:
        plan = partial(
            decide_in,
            approval_id=approval_id,
            approve=approve,
            grantor=grantor,
            at=at,
            ttl_seconds=ttl_seconds,
            reason=reason,
        )
        with self._op():
            return self._approvals.write(plan)

    async def consume_approval(self, approval_id: str, use: ApprovalUse) -> Approval:
        with self._op():
            return self._approvals.write(partial(consume_in, approval_id=approval_id, use=use))

    # --- summaries, constraints, search (see summaries.py) --------------------------------

    def _summary_book(self, session_id: str) -> SummaryBook:
        self._files.read(session_id)  # unknown session -> SessionNotFoundError
        return self._summaries.read(session_id)

    async def activate_summary(self, summary: Summary, *, expected_generation: int) -> None:
        def plan(book: SummaryBook) -> tuple[dict[str, Any], None]:
            book.check(session, summary, expected_generation)
            if any(s.id == summary.id for s in book.summaries):
                raise duplicate_summary(summary.id)
            return summary_line(summary), None

        with self._op():
            session = self._files.read(summary.session_id).session
            self._summaries.write(summary.session_id, plan)

    async def get_summary(self, session_id: str) -> Summary | None:
        with self._op():
            return self._summary_book(session_id).active

    async def list_summaries(self, session_id: str) -> list[Summary]:
        with self._op():
            return self._summary_book(session_id).summaries

    async def add_constraints(
        self, session_id: str, constraints: Sequence[Constraint]
    ) -> list[Constraint]:
        def plan(book: SummaryBook) -> tuple[dict[str, Any] | None, list[Constraint]]:
            added = new_constraints(book.constraints, constraints)
            return (constraints_line(added) if added else None), added

        with self._op():
            self._files.read(session_id)
            return self._summaries.write(session_id, plan)

    async def list_constraints(self, session_id: str) -> list[Constraint]:
        with self._op():
            return self._summary_book(session_id).constraints

    async def search_history(
        self, session_id: str, query: str, *, through_seq: int | None = None, limit: int = 20
    ) -> list[StoredMessage]:
        terms = search_terms(query)
        with self._op():
            history = self._files.read(session_id).read(0, through_seq)
        hits = [sm for sm in reversed(history) if matches(terms, sm.message)]
        return hits[: max(limit, 0)]

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            self._files.clear()
