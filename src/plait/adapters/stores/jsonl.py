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

The rules themselves live in :mod:`._state` and are shared with the memory store. The
blocking file I/O runs directly inside the ``async def`` methods: each call is a few small
reads and one append, cheaper than a thread hop.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from plait.adapters.stores import _codec
from plait.adapters.stores._approvals import (
    duplicate_approval,
    not_found,
    plan_consume,
    plan_decision,
    plan_request,
)
from plait.adapters.stores._approvals_jsonl import ApprovalFile
from plait.adapters.stores._fork import (
    check_fork_commit,
    fork_state,
    prefix_seq,
    record_from_dict,
    record_to_dict,
    reject_plain_session,
)
from plait.adapters.stores._jsonl_summaries import SummaryFiles, constraints_line, summary_line
from plait.adapters.stores._state import (
    ARTIFACT_CHUNK,
    Change,
    SessionState,
    artifact_not_found,
    artifact_ref,
    artifact_ref_of_file,
    check_new_session,
    claimed,
    closed_error,
    duplicate_run,
    duplicate_session,
    renewed,
    run_not_found,
    session_not_found,
    stale_runs,
    validate_commit,
)
from plait.adapters.stores._summary_state import SummaryBook, duplicate_summary, new_constraints
from plait.application.ports import Commit, CommitResult, ForkCommit
from plait.domain.errors import (
    ConfigError,
    CorruptStoreError,
    RunNotFoundError,
    SessionNotFoundError,
    StoreError,
)
from plait.domain.forks import ForkRecord
from plait.domain.governance import Approval, ApprovalStatus, ApprovalUse
from plait.domain.messages import ArtifactRef
from plait.domain.recall import matches, search_terms
from plait.domain.runs import Run
from plait.domain.session import ExecutionRecord, Session, StoredMessage
from plait.domain.summary import Constraint, Summary

__all__ = ["JsonlStore", "StoreWarning"]

T = TypeVar("T")

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


class StoreWarning(UserWarning):
    """The store recovered from something odd on disk (e.g. a torn last line)."""


def _left_out(error: CorruptStoreError, what: str) -> None:
    """A listing goes on without one damaged session file, and says so."""
    warnings.warn(
        f"damaged session file, {what} left out of this listing: {error.message}",
        StoreWarning,
        stacklevel=3,
    )


@dataclass(slots=True)
class _Tracked:
    """How far this process has read one file."""

    ino: int
    offset: int = 0
    lines: int = 0
    state: SessionState | None = None
    warned: set[int] = field(default_factory=set)


class JsonlStore:
    """:class:`~plait.application.ports.SessionStore` and
    :class:`~plait.application.ports.ArtifactStore` in a directory of JSONL files."""

    def __init__(
        self, directory: str | Path, *, checkpoint: Callable[[str], None] | None = None
    ) -> None:
        """``checkpoint`` is a test-only hook: called with ``"mid_line"`` after the first
        half of a line reached the file and before the rest, so crash tests can kill the
        process in the middle of a write."""
        self._checkpoint = checkpoint
        self._dir = Path(directory)
        self._sessions_dir = self._dir / "sessions"
        self._artifacts_dir = self._dir / "artifacts"
        self._index_path = self._dir / "runs.jsonl"
        try:
            self._sessions_dir.mkdir(parents=True, exist_ok=True)
            self._artifacts_dir.mkdir(exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the store directory {self._dir}: {e}") from e
        self._lock = threading.Lock()
        self._closed = False
        self._tracked: dict[str, _Tracked] = {}
        self._index: _Tracked | None = None
        self._run_index: dict[str, list[str]] = {}
        self._approvals = ApprovalFile(self)
        self._summaries = SummaryFiles(self._dir / "summaries")

    def __repr__(self) -> str:
        return f"JsonlStore({str(self._dir)!r})"

    @property
    def directory(self) -> Path:
        return self._dir

    # --- files ----------------------------------------------------------------------------

    @contextmanager
    def _op(self) -> Iterator[None]:
        with self._lock:
            if self._closed:
                raise closed_error("jsonl")
            try:
                yield
            except OSError as e:
                raise StoreError(f"{self._dir}: file system error: {e}", path=str(self._dir)) from e

    @contextmanager
    def _locked(self, path: Path, *, write: bool, create: bool = False) -> Iterator[int]:
        flags = (os.O_RDWR if write else os.O_RDONLY) | os.O_CLOEXEC
        if create:
            flags |= os.O_CREAT
        fd = os.open(path, flags, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
            yield fd
        finally:
            os.close(fd)  # also releases the lock

    def _read_new(
        self, fd: int, path: Path, tracked: _Tracked | None
    ) -> tuple[_Tracked, list[tuple[int, dict[str, Any]]], int, int]:
        """Complete lines appended since ``tracked``: ``(tracked, [(line_no, obj)], end,
        torn_bytes)``. The caller applies the lines, advances ``tracked`` to ``end``, then
        hands a torn tail to :meth:`_discard_tail`.
        """
        st = os.fstat(fd)
        if tracked is None or tracked.ino != st.st_ino or st.st_size < tracked.offset:
            tracked = _Tracked(ino=st.st_ino)
        if st.st_size == tracked.offset:
            return tracked, [], tracked.offset, 0
        data = os.pread(fd, st.st_size - tracked.offset, tracked.offset)
        cut = data.rfind(b"\n") + 1
        records: list[tuple[int, dict[str, Any]]] = []
        line_no = tracked.lines
        for raw in data[: cut - 1].split(b"\n") if cut else ():
            line_no += 1
            try:
                obj = _codec.loads(raw.decode())
            except ValueError as e:
                raise CorruptStoreError(
                    f"{path}, line {line_no}: not valid JSON ({e}); the file was not changed",
                    path=str(path),
                    line=line_no,
                ) from e
            if not isinstance(obj, dict):
                raise CorruptStoreError(
                    f"{path}, line {line_no}: not a JSON object", path=str(path), line=line_no
                )
            records.append((line_no, obj))
        return tracked, records, tracked.offset + cut, len(data) - cut

    def _discard_tail(
        self, fd: int, path: Path, tracked: _Tracked, torn: int, *, write: bool
    ) -> None:
        """Warn (once per handle) about a torn last line; cut it off under the write lock."""
        if tracked.offset not in tracked.warned:
            tracked.warned.add(tracked.offset)
            warnings.warn(
                f"{path}: discarding a torn last line ({torn} bytes after line "
                f"{tracked.lines}), left by a write that never completed",
                StoreWarning,
                stacklevel=2,
            )
        if write:
            os.ftruncate(fd, tracked.offset)
            os.fsync(fd)

    def _append(self, fd: int, path: Path, tracked: _Tracked, obj: dict[str, Any]) -> None:
        line = (_codec.dumps(obj) + "\n").encode()
        try:
            written = 0
            if self._checkpoint is not None:
                written = os.pwrite(fd, line[: len(line) // 2], tracked.offset)
                self._checkpoint("mid_line")
            while written < len(line):
                written += os.pwrite(fd, line[written:], tracked.offset + written)
            os.fsync(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, tracked.offset)
            raise StoreError(f"{path}: write failed: {e}", path=str(path)) from e
        tracked.offset += len(line)
        tracked.lines += 1

    def _fsync_dir(self, directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # --- sessions on disk -----------------------------------------------------------------

    def _session_path(self, session_id: str) -> Path | None:
        if not isinstance(session_id, str) or not _SAFE_NAME.match(session_id):
            return None
        return self._sessions_dir / f"{session_id}.jsonl"

    def _sync_session(self, sid: str, fd: int, path: Path, *, write: bool) -> _Tracked:
        tracked, records, end, torn = self._read_new(fd, path, self._tracked.get(sid))
        self._tracked[sid] = tracked
        try:
            for line_no, obj in records:
                _replay(tracked, obj, path, line_no)
        except BaseException:
            del self._tracked[sid]  # reload from scratch next time
            raise
        tracked.offset = end
        tracked.lines += len(records)
        if torn:
            self._discard_tail(fd, path, tracked, torn, write=write)
        return tracked

    def _read_session(self, sid: str) -> SessionState:
        path = self._session_path(sid)
        if path is None:
            raise session_not_found(sid)
        try:
            with self._locked(path, write=False) as fd:
                state = self._sync_session(sid, fd, path, write=False).state
        except FileNotFoundError:
            state = None
        if state is None:
            raise session_not_found(sid)
        return state

    def _write_session(
        self,
        sid: str,
        plan: Callable[[_Tracked], tuple[dict[str, Any], Change | Session, T]],
        *,
        create: bool = False,
    ) -> T:
        path = self._session_path(sid)
        if path is None:
            if create:
                raise ConfigError(
                    f"session id {sid!r} cannot be used as a file name "
                    f"(allowed: {_SAFE_NAME.pattern})",
                    session_id=str(sid),
                )
            raise session_not_found(sid)
        try:
            with self._locked(path, write=True, create=create) as fd:
                tracked = self._sync_session(sid, fd, path, write=True)
                if tracked.state is None and not create:
                    raise session_not_found(sid)
                line, change, result = plan(tracked)
                self._append(fd, path, tracked, line)
                if isinstance(change, Session):
                    tracked.state = SessionState(change)
                    self._fsync_dir(self._sessions_dir)
                else:
                    assert tracked.state is not None
                    tracked.state.apply(change)
                return result
        except FileNotFoundError:
            raise session_not_found(sid) from None

    # --- the run index --------------------------------------------------------------------

    def _sync_index(self, fd: int, *, write: bool) -> None:
        tracked, records, end, torn = self._read_new(fd, self._index_path, self._index)
        if tracked is not self._index:
            self._index = tracked
            self._run_index = {}
        for line_no, obj in records:
            try:
                obj = _codec.check_schema(obj, "run index line")
                rid, sid = obj["run_id"], obj["session_id"]
                if not isinstance(rid, str) or not isinstance(sid, str):
                    raise TypeError("run_id and session_id must be strings")
            except (KeyError, TypeError, CorruptStoreError) as e:
                self._index = None
                raise CorruptStoreError(
                    f"{self._index_path}, line {line_no}: {e}",
                    path=str(self._index_path),
                    line=line_no,
                ) from e
            sids = self._run_index.setdefault(rid, [])
            if sid not in sids:
                sids.append(sid)
        tracked.offset = end
        tracked.lines += len(records)
        if torn:
            self._discard_tail(fd, self._index_path, tracked, torn, write=write)

    def _refresh_index(self) -> None:
        try:
            with self._locked(self._index_path, write=False) as fd:
                self._sync_index(fd, write=False)
        except FileNotFoundError:
            pass

    def _index_run(self, run_id: str, session_id: str) -> None:
        with self._locked(self._index_path, write=True, create=True) as fd:
            self._sync_index(fd, write=True)
            if session_id in self._run_index.get(run_id, ()):
                return
            assert self._index is not None
            line = {"schema_version": _codec.SCHEMA_VERSION, "run_id": run_id}
            line["session_id"] = session_id
            first = self._index.offset == 0
            self._append(fd, self._index_path, self._index, line)
            if first:
                self._fsync_dir(self._dir)
            self._run_index.setdefault(run_id, []).append(session_id)

    def _find_run(self, run_id: str) -> tuple[str, Run]:
        self._refresh_index()
        for sid in reversed(self._run_index.get(run_id, ())):
            try:
                run = self._read_session(sid).runs.get(run_id)
            except SessionNotFoundError:
                continue
            if run is not None:
                return sid, run
        raise run_not_found(run_id)

    def _all_runs(self) -> list[Run]:
        self._refresh_index()
        runs: list[Run] = []
        damaged: set[str] = set()
        for rid, sids in self._run_index.items():
            if damaged.intersection(sids):
                continue
            try:
                runs.append(self._find_run(rid)[1])
            except RunNotFoundError:
                continue  # indexed, but its session line never landed
            except CorruptStoreError as e:
                damaged.update(sids)
                _left_out(e, "its runs")
        return runs

    def _run_write(self, run_id: str, op: str, change: Callable[[Run], Run]) -> Run:
        sid, _ = self._find_run(run_id)

        def plan(tracked: _Tracked) -> tuple[dict[str, Any], Change, Run]:
            assert tracked.state is not None
            run = tracked.state.runs.get(run_id)
            if run is None:
                raise run_not_found(run_id)
            new = change(run)
            return _line(op, Change(run=new)), Change(run=new), new

        return self._write_session(sid, plan)

    # --- sessions -------------------------------------------------------------------------

    async def create_session(self, session: Session) -> None:
        check_new_session(session)

        def plan(tracked: _Tracked) -> tuple[dict[str, Any], Session, None]:
            if tracked.state is not None:
                raise duplicate_session(session.id)
            line = {"schema_version": _codec.SCHEMA_VERSION, "op": "create"}
            line["session"] = _codec.session_to_dict(session)
            return line, session, None

        with self._op():
            self._write_session(session.id, plan, create=True)

    async def get_session(self, session_id: str) -> Session:
        with self._op():
            return self._read_session(session_id).session

    async def list_sessions(self, *, limit: int | None = None) -> list[Session]:
        with self._op():
            sessions = []
            for name in sorted(os.listdir(self._sessions_dir), reverse=True):
                if name.endswith(".jsonl"):
                    try:
                        sessions.append(self._read_session(name[: -len(".jsonl")]).session)
                    except SessionNotFoundError:
                        continue  # an empty file left by a create that never completed
                    except CorruptStoreError as e:
                        _left_out(e, "it")
        sessions.sort(key=lambda s: s.created_at, reverse=True)
        return sessions if limit is None else sessions[: max(limit, 0)]

    async def read_messages(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[StoredMessage]:
        with self._op():
            return self._read_session(session_id).read(after, limit)

    # --- writes ---------------------------------------------------------------------------

    async def start_run(self, commit: Commit) -> CommitResult:
        validate_commit(commit, start=True)
        run = commit.run
        assert run is not None
        sid = commit.session_id

        def plan(tracked: _Tracked) -> tuple[dict[str, Any], Change, CommitResult]:
            assert tracked.state is not None
            change = tracked.state.plan_start(commit)
            return (
                _line("start_run", change),
                change,
                CommitResult(tracked.state.session.version + len(change.messages), False),
            )

        with self._op():
            self._read_session(sid).plan_start(commit)  # fail early, before indexing
            self._refresh_index()
            for other in self._run_index.get(run.id, ()):
                if other != sid and run.id in self._read_session_or_empty(other):
                    raise duplicate_run(run.id)
            self._index_run(run.id, sid)
            return self._write_session(sid, plan)

    async def commit(self, commit: Commit) -> CommitResult:
        validate_commit(commit, start=False)

        def plan(tracked: _Tracked) -> tuple[dict[str, Any], Change, CommitResult]:
            assert tracked.state is not None
            change = tracked.state.plan_commit(commit)
            return (
                _line("commit", change),
                change,
                CommitResult(
                    tracked.state.session.version + len(change.messages), change.cancel_requested
                ),
            )

        with self._op():
            return self._write_session(commit.session_id, plan)

    def _read_session_or_empty(self, sid: str) -> dict[str, Run]:
        try:
            return self._read_session(sid).runs
        except SessionNotFoundError:
            return {}

    # --- forks ----------------------------------------------------------------------------

    async def message_seq(self, session_id: str, message_id: str) -> int | None:
        with self._op():
            return prefix_seq(self._read_session(session_id), message_id)

    async def fork_session(self, commit: ForkCommit) -> ForkRecord:
        """The branch's whole file (its create line with the fork record, then one line
        with the prefix) is written under a temporary name, fsynced, and linked into place
        (which fails if the name exists): a crash leaves no branch or a whole one."""
        check_fork_commit(commit)
        branch_id = commit.branch.id
        with self._op():
            path = self._session_path(branch_id)
            if path is None:
                raise ConfigError(f"session id {branch_id!r} cannot be used as a file name")
            if path.exists():
                return self._fork_record(path) or reject_plain_session(branch_id)
            state = fork_state(self._read_session(commit.record.source_session_id), commit)
            create = {"schema_version": _codec.SCHEMA_VERSION, "op": "create"}
            create["session"] = _codec.session_to_dict(commit.branch)
            create["fork"] = record_to_dict(commit.record)
            prefix = _line("commit", Change(messages=tuple(state.messages)))
            data = "".join(_codec.dumps(x) + "\n" for x in (create, prefix)).encode()
            tmp = self._sessions_dir / f".{branch_id}.{os.getpid()}.{threading.get_ident()}.tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                try:
                    os.write(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    return self._fork_record(path) or reject_plain_session(branch_id)
            finally:
                tmp.unlink(missing_ok=True)
            self._fsync_dir(self._sessions_dir)
            return commit.record

    async def get_fork_record(self, session_id: str) -> ForkRecord | None:
        with self._op():
            path = self._session_path(session_id)
            return None if path is None else self._fork_record(path)

    def _fork_record(self, path: Path) -> ForkRecord | None:
        try:
            with path.open("rb") as f:
                first = f.readline()
        except FileNotFoundError:
            return None
        if not first.endswith(b"\n"):
            return None
        try:
            fork = _codec.loads(first.decode()).get("fork")
            return None if fork is None else record_from_dict(fork)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptStoreError(
                f"{path}, line 1: bad fork record ({e})", path=str(path), line=1
            ) from e

    # --- runs -----------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run:
        with self._op():
            return self._find_run(run_id)[1]

    async def list_runs(self, *, session_id: str | None = None) -> list[Run]:
        with self._op():
            if session_id is None:
                runs = self._all_runs()
            else:
                runs = list(self._read_session(session_id).runs.values())
        runs.reverse()
        runs.sort(key=lambda r: r.started_at, reverse=True)
        return runs

    async def request_cancel(self, run_id: str) -> Run:
        with self._op():
            return self._run_write(run_id, "cancel", lambda r: replace(r, cancel_requested=True))

    async def get_executions(self, run_id: str) -> list[ExecutionRecord]:
        with self._op():
            sid, _ = self._find_run(run_id)
            return self._read_session(sid).execution_list(run_id)

    async def claim_run(self, run_id: str, *, owner: str, now: float, expires_at: float) -> Run:
        with self._op():
            return self._run_write(
                run_id, "lease", partial(claimed, owner=owner, now=now, expires_at=expires_at)
            )

    async def renew_lease(self, run_id: str, *, owner: str, expires_at: float) -> None:
        with self._op():
            self._run_write(run_id, "lease", partial(renewed, owner=owner, expires_at=expires_at))

    async def list_stale_runs(self, *, now: float) -> list[Run]:
        with self._op():
            return stale_runs(self._all_runs(), now)

    # --- artifacts ------------------------------------------------------------------------

    async def put_artifact(self, data: bytes, *, media_type: str) -> ArtifactRef:
        ref = artifact_ref(data, media_type)
        return self._put_artifact(ref, lambda f: f.write(data))

    async def put_artifact_file(self, path: str, *, media_type: str) -> ArtifactRef:
        """Copies the file in chunks (never whole in memory); the caller removes it."""
        ref = artifact_ref_of_file(path, media_type)

        def copy(out: BinaryIO) -> None:
            with open(path, "rb") as src:
                shutil.copyfileobj(src, out, ARTIFACT_CHUNK)

        return self._put_artifact(ref, copy)

    def _put_artifact(self, ref: ArtifactRef, write: Callable[[BinaryIO], object]) -> ArtifactRef:
        with self._op():
            path = self._artifacts_dir / ref.id
            if path.exists():
                return ref
            header = {"schema_version": _codec.SCHEMA_VERSION, "id": ref.id}
            header.update(sha256=ref.sha256, size=ref.size, media_type=ref.media_type)
            tmp = self._artifacts_dir / f".{ref.id}.{os.getpid()}.{threading.get_ident()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                with os.fdopen(fd, "wb", closefd=True) as f:
                    f.write((_codec.dumps(header) + "\n").encode())
                    write(f)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            self._fsync_dir(self._artifacts_dir)
            return ref

    async def get_artifact(self, artifact_id: str) -> tuple[ArtifactRef, bytes]:
        with self._op():
            if not isinstance(artifact_id, str) or not _SAFE_NAME.match(artifact_id):
                raise artifact_not_found(str(artifact_id))
            path = self._artifacts_dir / artifact_id
            try:
                blob = path.read_bytes()
            except FileNotFoundError:
                raise artifact_not_found(artifact_id) from None
        head, sep, data = blob.partition(b"\n")
        try:
            if not sep:
                raise ValueError("no header line")
            h = _codec.check_schema(_codec.loads(head.decode()), "artifact header")
            ref = _codec.artifact_from_dict(h)
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptStoreError(f"{path}: bad artifact header: {e}", path=str(path)) from e
        if ref.id != artifact_id or len(data) != ref.size:
            raise CorruptStoreError(f"{path}: artifact size or id mismatch", path=str(path))
        if hashlib.sha256(data).hexdigest() != ref.sha256:
            raise CorruptStoreError(f"{path}: artifact content does not match its sha256")
        return ref, data

    # --- approvals (rules in _approvals, file in _approvals_jsonl) --------------------------

    async def request_approval(self, approval: Approval) -> Approval:
        def plan(records: dict[str, Approval]) -> tuple[Approval, bool]:
            key = (approval.session_id, approval.run_id, approval.call_id)
            pending = next(
                (
                    a
                    for a in reversed(records.values())
                    if (a.session_id, a.run_id, a.call_id) == key
                    and a.status is ApprovalStatus.PENDING
                ),
                None,
            )
            new = plan_request(pending, approval)
            if new is None:
                assert pending is not None
                return pending, False
            if new.id in records:
                raise duplicate_approval(new.id)
            return new, True

        with self._op():
            self._read_session(approval.session_id)
            return self._approvals.write(plan)

    async def get_approval(self, approval_id: str) -> Approval:
        with self._op():
            found = self._approvals.read().get(approval_id)
        if found is None:
            raise not_found(approval_id)
        return found

    async def list_approvals(
        self, *, session_id: str | None = None, run_id: str | None = None
    ) -> list[Approval]:
        with self._op():
            records = self._approvals.read()
        found = [
            a
            for a in reversed(records.values())
            if (session_id is None or a.session_id == session_id)
            and (run_id is None or a.run_id == run_id)
        ]
        found.sort(key=lambda a: a.requested_at, reverse=True)
        return found

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
        def plan(records: dict[str, Approval]) -> tuple[Approval, bool]:
            current = records.get(approval_id)
            if current is None:
                raise not_found(approval_id)
            new = plan_decision(
                current, approve=approve, grantor=grantor, at=at, ttl_seconds=ttl_seconds,
                reason=reason,
            )  # fmt: skip
            return new, True

        with self._op():
            return self._approvals.write(plan)

    async def consume_approval(self, approval_id: str, use: ApprovalUse) -> Approval:
        def plan(records: dict[str, Approval]) -> tuple[Approval, bool]:
            current = records.get(approval_id)
            if current is None:
                raise not_found(approval_id)
            new = plan_consume(current, use)
            return (current, False) if new is None else (new, True)

        with self._op():
            return self._approvals.write(plan)

    # --- summaries, constraints, search (see _jsonl_summaries) -----------------------------

    def _summary_book(self, session_id: str) -> SummaryBook:
        self._read_session(session_id)  # unknown session -> SessionNotFoundError
        return self._summaries.read(session_id)

    async def activate_summary(self, summary: Summary, *, expected_generation: int) -> None:
        def plan(book: SummaryBook) -> tuple[dict[str, Any], None]:
            book.check(session, summary, expected_generation)
            if any(s.id == summary.id for s in book.summaries):
                raise duplicate_summary(summary.id)
            return summary_line(summary), None

        with self._op():
            session = self._read_session(summary.session_id).session
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
            self._read_session(session_id)
            return self._summaries.write(session_id, plan)

    async def list_constraints(self, session_id: str) -> list[Constraint]:
        with self._op():
            return self._summary_book(session_id).constraints

    async def search_history(
        self, session_id: str, query: str, *, through_seq: int | None = None, limit: int = 20
    ) -> list[StoredMessage]:
        terms = search_terms(query)
        with self._op():
            history = self._read_session(session_id).read(0, through_seq)
        hits = [sm for sm in reversed(history) if matches(terms, sm.message)]
        return hits[: max(limit, 0)]

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            self._tracked.clear()


# --- lines ----------------------------------------------------------------------------------


def _line(op: str, change: Change) -> dict[str, Any]:
    line: dict[str, Any] = {"schema_version": _codec.SCHEMA_VERSION, "op": op}
    if change.messages:
        line["messages"] = [
            {"seq": sm.seq, "message": _codec.message_to_dict(sm.message)} for sm in change.messages
        ]
    if change.run is not None:
        line["run"] = _codec.run_to_dict(change.run)
    if change.executions:
        line["executions"] = [_codec.execution_to_dict(e) for e in change.executions]
    if change.set_active:
        line["active_run_id"] = change.active_run_id
    return line


def _replay(tracked: _Tracked, obj: dict[str, Any], path: Path, line_no: int) -> None:
    """Apply one persisted line to ``tracked.state``."""
    try:
        obj = _codec.check_schema(obj, "jsonl line")
        op = obj["op"]
        if op == "create":
            if tracked.state is not None:
                raise ValueError("a second 'create' line")
            tracked.state = SessionState(_codec.session_from_dict(obj["session"]))
            return
        state = tracked.state
        if state is None:
            raise ValueError(f"a {op!r} line before the 'create' line")
        messages = tuple(
            StoredMessage(x["seq"], _codec.message_from_dict(x["message"]))
            for x in obj.get("messages", ())
        )
        for i, sm in enumerate(messages):
            if sm.seq != state.session.version + 1 + i:
                raise ValueError(f"message seq {sm.seq} does not follow {state.session.version}")
        run = obj.get("run")
        active = "active_run_id" in obj
        state.apply(
            Change(
                messages=messages,
                run=None if run is None else _codec.run_from_dict(run),
                executions=tuple(_codec.execution_from_dict(e) for e in obj.get("executions", ())),
                set_active=active,
                active_run_id=obj["active_run_id"] if active else None,
            )
        )
    except (CorruptStoreError, ValueError, KeyError, TypeError) as e:
        raise CorruptStoreError(
            f"{path}, line {line_no}: {e}; the file was not changed",
            path=str(path),
            line=line_no,
        ) from e
