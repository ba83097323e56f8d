"""``plait sessions fork|show|tree``: branches of a session and what they are bound to."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from plait.adapters.shapes import fork_json, iso, parent_json, session_json, workspace_json
from plait.domain.errors import ConfigError, MessageNotFoundError
from plait.domain.forks import ForkRecord
from plait.domain.session import Session
from plait.domain.subagents import ParentCall

if TYPE_CHECKING:
    from plait.application.fork import ForkService
    from plait.application.queries import Queries

__all__ = ["COMMANDS", "branch_lines", "register", "workspace_json"]


class _Output(Protocol):
    json: bool

    def emit(self, data: Any, text: str | Callable[[], str]) -> None: ...


Command = Callable[[argparse.Namespace, Any], int]


def register(ssub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``fork``, ``show`` and ``tree`` to the ``plait sessions`` sub-commands."""
    fork = ssub.add_parser("fork", help="branch a session from a complete point in its history")
    fork.add_argument("session_id", metavar="SESSION")
    fork.add_argument(
        "--through",
        required=True,
        metavar="MESSAGE",
        help="the last message the branch keeps: its id, or its number as `plait history` "
        "prints it (it must end a complete unit)",
    )
    fork.add_argument(
        "--request-id",
        metavar="ID",
        help="makes a retry return the same branch (default: a new id, printed)",
    )
    fork.add_argument(
        "--snapshot",
        action="store_true",
        help="git workspaces: commit the working tree on a private ref and bind the branch "
        "to a separate worktree checked out from it",
    )
    common(fork)
    show = ssub.add_parser("show", help="show a session: parent, fork point, workspace")
    show.add_argument("session_id", metavar="SESSION")
    common(show)
    tree = ssub.add_parser("tree", help="draw a session's family of forks")
    tree.add_argument("session_id", metavar="SESSION")
    common(tree)


def _run(a: argparse.Namespace, fn: Callable[[Queries, ForkService], Awaitable[int]]) -> int:
    from plait.runtime import Runtime

    async def go() -> int:
        # Every command here needs an existing session: never create a store to find none.
        runtime = Runtime.open(db=getattr(a, "db", None), store_only=True)
        try:
            if runtime.forks is None:
                where = runtime.queries.store_info().location
                raise ConfigError(f"the store {where} cannot fork sessions")
            return await fn(runtime.queries, runtime.forks)
        finally:
            await runtime.close()

    return asyncio.run(go())


def branch_lines(session: Session, record: ForkRecord | None) -> list[str]:
    """What a branch is, for people: parent, fork point and workspace binding."""
    origin = session.fork_origin
    if origin is None:
        return []
    at = "" if record is None else f" (#{record.through_seq})"
    lines = [
        f"branch of session {origin.parent_session_id} through {origin.fork_point_message_id}{at}"
    ]
    ws = workspace_json(session, record)
    lines.append(f"workspace {session.workspace or '(none)'}: {ws['note']}")
    return lines


def _count(n: int) -> str:
    return f"{n} message" if n == 1 else f"{n} messages"


# --- commands -------------------------------------------------------------------------------


def _fork(a: argparse.Namespace, out: _Output) -> int:
    from plait.adapters.system import RandomIds

    request_id = a.request_id or RandomIds().new("req")

    async def go(queries: Queries, forks: ForkService) -> int:
        through = await _message_id(queries, a.session_id, a.through)
        result = await forks.fork_session(a.session_id, through, request_id, snapshot=a.snapshot)
        b, r = result.branch, result.record

        def text() -> str:
            head = "created" if result.created else "already created by this request id:"
            return "\n".join(
                [
                    f"{head} branch {b.id}",
                    *branch_lines(b, r),
                    f"request id {r.request_id} (repeat it to get this same branch)",
                    f"continue with: plait send {b.id} TEXT",
                ]
            )

        out.emit(
            {
                "session": session_json(b),
                "created": result.created,
                "fork": fork_json(r),
                "workspace": workspace_json(b, r),
            },
            text,
        )
        return 0

    return _run(a, go)


async def _message_id(queries: Queries, session_id: str, given: str) -> str:
    """``--through`` takes a message id or a message number (seq) as history prints it."""
    if not given.isdigit() or await queries.message_seq(session_id, given) is not None:
        return given
    n = int(given)
    found = await queries.message_numbered(session_id, n)
    if found is None:
        raise MessageNotFoundError(
            f"session {session_id!r} has no message number {n}; see: plait history {session_id}",
            session_id=session_id,
            message_id=given,
        )
    return found.message.id


def _show(a: argparse.Namespace, out: _Output) -> int:
    async def go(queries: Queries, forks: ForkService) -> int:
        s = await forks.readable(a.session_id, None)
        record = await queries.fork_record(s.id)
        children = [
            c
            for c in await queries.list_sessions()
            if c.fork_origin is not None and c.fork_origin.parent_session_id == s.id
        ]
        children.sort(key=lambda c: c.created_at)

        def text() -> str:
            lines = [
                f"session {s.id}",
                f"  created     {iso(s.created_at)}",
                f"  title       {s.title or '-'}",
                f"  owner       {s.owner or '-'}",
                f"  version     {_count(s.version)}",
                f"  active run  {s.active_run_id or '-'}",
            ]
            if s.fork_origin is not None:
                at = "" if record is None else f" (#{record.through_seq})"
                lines.append(
                    f"  parent      {s.fork_origin.parent_session_id} through "
                    f"{s.fork_origin.fork_point_message_id}{at}"
                )
            lines.append(f"  workspace   {s.workspace or '-'}")
            note = workspace_json(s, record)["note"]
            if note:
                lines.append(f"              {note}")
            lines += [
                f"  fork        {c.id} through {c.fork_origin.fork_point_message_id}"
                for c in children
                if c.fork_origin is not None
            ]
            return "\n".join(lines)

        out.emit(
            session_json(s)
            | {
                "fork": fork_json(record),
                "workspace_binding": workspace_json(s, record),
                "forks": [c.id for c in children],
            },
            text,
        )
        return 0

    return _run(a, go)


def _tree(a: argparse.Namespace, out: _Output) -> int:
    async def go(queries: Queries, forks: ForkService) -> int:
        family = await forks.family(a.session_id)
        ids = {s.id for s in family}
        kids: dict[str | None, list[Session]] = {}
        for s in family:
            parent = s.fork_origin.parent_session_id if s.fork_origin else None
            kids.setdefault(parent if parent in ids else None, []).append(s)
        delegated = await _delegated(queries, family)
        for s, link in delegated.values():
            if s.id not in ids:  # a fork-context child is in the family already
                kids.setdefault(link.session_id, []).append(s)
        links = {sid: link for sid, (_, link) in delegated.items()}

        def node(s: Session) -> dict[str, Any]:
            return {
                "session_id": s.id,
                "fork_point_message_id": s.fork_origin.fork_point_message_id
                if s.fork_origin
                else None,
                "version": s.version,
                "workspace": s.workspace,
                "delegated_by": parent_json(links.get(s.id)),
                "children": [node(c) for c in kids.get(s.id, [])],
            }

        def draw(s: Session, prefix: str, last: bool, top: bool) -> list[str]:
            mark = "" if top else ("└── " if last else "├── ")
            where = f"  through {s.fork_origin.fork_point_message_id}" if s.fork_origin else ""
            if (link := links.get(s.id)) is not None:
                where = f"  sub-agent {link.agent} for call {link.call_id} of {link.run_id}"
            here = "  ← this session" if s.id == a.session_id else ""
            lines = [f"{prefix}{mark}{s.id}{where}  ({_count(s.version)}){here}"]
            below = prefix if top else prefix + ("    " if last else "│   ")
            children = kids.get(s.id, [])
            for i, c in enumerate(children):
                lines += draw(c, below, i == len(children) - 1, False)
            return lines

        roots = kids.get(None, [])
        out.emit(
            {"roots": [node(r) for r in roots]},
            lambda: "\n".join(line for r in roots for line in draw(r, "", True, True)),
        )
        return 0

    return _run(a, go)


async def _delegated(
    queries: Queries, family: list[Session]
) -> dict[str, tuple[Session, ParentCall]]:
    """The sessions of sub-agent runs started from the family's sessions (and from
    theirs), by id, each with the call that started it."""
    runs = [r for r in await queries.list_runs() if r.parent is not None]
    out: dict[str, tuple[Session, ParentCall]] = {}
    todo = [s.id for s in family]
    while todo:
        here = todo.pop()
        for run in runs:
            link = run.parent
            if link is not None and link.session_id == here and run.session_id not in out:
                out[run.session_id] = (await queries.get_session(run.session_id), link)
                todo.append(run.session_id)
    return out


COMMANDS: dict[tuple[str, ...], Command] = {
    ("sessions", "fork"): _fork,
    ("sessions", "show"): _show,
    ("sessions", "tree"): _tree,
}
