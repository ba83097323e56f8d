"""``plait sessions fork|show|tree``: branches of a session and what they are bound to."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from plait.adapters.shapes import fork_json, iso, parent_json, session_json, workspace_json
from plait.adapters.system import RandomIds
from plait.domain.errors import ConfigError, MessageNotFoundError
from plait.domain.forks import ForkRecord
from plait.domain.session import Session
from plait.domain.subagents import ParentCall
from plait.entrypoints.cli import _loop

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


def _run(args: argparse.Namespace, fn: Callable[[Queries, ForkService], Awaitable[int]]) -> int:
    # lazy: plait.runtime loads the application layer (~50 ms); --help does not need it
    from plait.runtime import Runtime

    async def go() -> int:
        # Every command here needs an existing session: never create a store to find none.
        runtime = Runtime.open(db=getattr(args, "db", None), store_only=True)
        try:
            if runtime.forks is None:
                where = runtime.queries.store_info().location
                raise ConfigError(f"the store {where} cannot fork sessions")
            return await fn(runtime.queries, runtime.forks)
        finally:
            await runtime.close()

    return _loop.run(go())


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


def _count(count: int) -> str:
    return f"{count} message" if count == 1 else f"{count} messages"


# --- commands -------------------------------------------------------------------------------


def _fork(args: argparse.Namespace, out: _Output) -> int:
    request_id = args.request_id or RandomIds().new("req")

    async def go(queries: Queries, forks: ForkService) -> int:
        through = await _message_id(queries, args.session_id, args.through)
        result = await forks.fork_session(
            args.session_id, through, request_id, snapshot=args.snapshot
        )
        branch, record = result.branch, result.record

        def text() -> str:
            head = "created" if result.created else "already created by this request id:"
            return "\n".join(
                [
                    f"{head} branch {branch.id}",
                    *branch_lines(branch, record),
                    f"request id {record.request_id} (repeat it to get this same branch)",
                    f"continue with: plait send {branch.id} TEXT",
                ]
            )

        out.emit(
            {
                "session": session_json(branch),
                "created": result.created,
                "fork": fork_json(record),
                "workspace": workspace_json(branch, record),
            },
            text,
        )
        return 0

    return _run(args, go)


async def _message_id(queries: Queries, session_id: str, given: str) -> str:
    """``--through`` takes a message id or a message number (seq) as history prints it."""
    if not given.isdigit() or await queries.message_seq(session_id, given) is not None:
        return given
    number = int(given)
    found = await queries.message_numbered(session_id, number)
    if found is None:
        raise MessageNotFoundError(
            f"session {session_id!r} has no message number {number}; see: plait history "
            f"{session_id}",
            session_id=session_id,
            message_id=given,
        )
    return found.message.id


def _show(args: argparse.Namespace, out: _Output) -> int:
    async def go(queries: Queries, forks: ForkService) -> int:
        session = await forks.readable(args.session_id, None)
        record = await queries.fork_record(session.id)
        children = [
            c
            for c in await queries.list_sessions()
            if c.fork_origin is not None and c.fork_origin.parent_session_id == session.id
        ]
        children.sort(key=lambda child: child.created_at)

        def text() -> str:
            lines = [
                f"session {session.id}",
                f"  created     {iso(session.created_at)}",
                f"  title       {session.title or '-'}",
                f"  owner       {session.owner or '-'}",
                f"  version     {_count(session.version)}",
                f"  active run  {session.active_run_id or '-'}",
            ]
            if session.fork_origin is not None:
                at = "" if record is None else f" (#{record.through_seq})"
                lines.append(
                    f"  parent      {session.fork_origin.parent_session_id} through "
                    f"{session.fork_origin.fork_point_message_id}{at}"
                )
            lines.append(f"  workspace   {session.workspace or '-'}")
            note = workspace_json(session, record)["note"]
            if note:
                lines.append(f"              {note}")
            lines += [
                f"  fork        {c.id} through {c.fork_origin.fork_point_message_id}"
                for c in children
                if c.fork_origin is not None
            ]
            return "\n".join(lines)

        out.emit(
            session_json(session)
            | {
                "fork": fork_json(record),
                "workspace_binding": workspace_json(session, record),
                "forks": [c.id for c in children],
            },
            text,
        )
        return 0

    return _run(args, go)


def _tree(args: argparse.Namespace, out: _Output) -> int:
    async def go(queries: Queries, forks: ForkService) -> int:
        family = await forks.family(args.session_id)
        ids = {session.id for session in family}
        kids: dict[str | None, list[Session]] = {}
        for session in family:
            parent = session.fork_origin.parent_session_id if session.fork_origin else None
            kids.setdefault(parent if parent in ids else None, []).append(session)
        delegated = await _delegated(queries, family)
        for session, link in delegated.values():
            if session.id not in ids:  # a fork-context child is in the family already
                kids.setdefault(link.session_id, []).append(session)
        links = {sid: link for sid, (_, link) in delegated.items()}

        def node(session: Session) -> dict[str, Any]:
            return {
                "session_id": session.id,
                "fork_point_message_id": session.fork_origin.fork_point_message_id
                if session.fork_origin
                else None,
                "version": session.version,
                "workspace": session.workspace,
                "delegated_by": parent_json(links.get(session.id)),
                "children": [node(child) for child in kids.get(session.id, [])],
            }

        def draw(session: Session, prefix: str, last: bool, top: bool) -> list[str]:
            mark = "" if top else ("└── " if last else "├── ")
            where = (
                f"  through {session.fork_origin.fork_point_message_id}"
                if session.fork_origin
                else ""
            )
            if (link := links.get(session.id)) is not None:
                where = f"  sub-agent {link.agent} for call {link.call_id} of {link.run_id}"
            here = "  ← this session" if session.id == args.session_id else ""
            lines = [f"{prefix}{mark}{session.id}{where}  ({_count(session.version)}){here}"]
            below = prefix if top else prefix + ("    " if last else "│   ")
            children = kids.get(session.id, [])
            for index, child in enumerate(children):
                lines += draw(child, below, index == len(children) - 1, False)
            return lines

        roots = kids.get(None, [])
        out.emit(
            {"roots": [node(r) for r in roots]},
            lambda: "\n".join(line for r in roots for line in draw(r, "", True, True)),
        )
        return 0

    return _run(args, go)


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
