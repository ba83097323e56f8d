"""Forks in the JSONL store: a branch is a whole new session file (its create line holding
the fork record, then one line with the copied prefix), written under a temporary name,
fsynced and linked into place, so a crash leaves no branch or a whole one."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from plait.adapters.stores.jsonl.files import fsync_dir
from plait.adapters.stores.jsonl.lines import change_line, create_line
from plait.adapters.stores.shared import codec
from plait.adapters.stores.shared.fork import record_from_dict, record_to_dict
from plait.adapters.stores.shared.state import Change, SessionState
from plait.application.ports import ForkCommit
from plait.domain.errors import CorruptStoreError
from plait.domain.forks import ForkRecord

__all__ = ["fork_record", "link_branch"]


def link_branch(
    path: Path, commit: ForkCommit, state: SessionState, extra: tuple[dict[str, Any], ...] = ()
) -> bool:
    """Write the branch file at ``path``; False (nothing written) if ``path`` exists.
    ``extra``: lines after the prefix (the expiry records of its expired messages)."""
    create: dict[str, Any] = create_line(commit.branch)
    create["fork"] = record_to_dict(commit.record)
    prefix = change_line("commit", Change(messages=tuple(state.messages)))
    data = "".join(codec.dumps(x) + "\n" for x in (create, prefix, *extra)).encode()
    directory = path.parent
    tmp = directory / f".{commit.branch.id}.{os.getpid()}.{threading.get_ident()}.tmp"
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
            return False
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(directory)
    return True


def fork_record(path: Path) -> ForkRecord | None:
    """The fork record in the first line of a session file (None: not a branch)."""
    try:
        with path.open("rb") as file:
            first = file.readline()
    except FileNotFoundError:
        return None
    if not first.endswith(b"\n"):
        return None
    try:
        fork = codec.loads(first.decode()).get("fork")
        return None if fork is None else record_from_dict(fork)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise CorruptStoreError(
            f"{path}, line 1: bad fork record ({error})", path=str(path), line=1
        ) from error
