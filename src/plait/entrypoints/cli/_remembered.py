"""The model a session remembers (issue 26): a command that runs a session's model and is
given no ``--model`` uses the session's (the one ``sessions new --model`` set, else the
one its first run recorded), before ``$PLAIT_MODEL`` and ``plait.toml``."""

from __future__ import annotations

import argparse

from plait.entrypoints.cli import _loop

__all__ = ["remember_model"]


def remember_model(
    args: argparse.Namespace, *, session_id: str | None = None, run_id: str | None = None
) -> None:
    """Set ``args.model`` to the model of ``session_id`` (or of ``run_id``'s session) when
    the command line names none; unchanged when the session remembers none. An unknown
    session or run raises its not-found error, as the command would."""
    if getattr(args, "model", None) is not None or (session_id is None and run_id is None):
        return
    # lazy: plait.runtime loads the application layer (~50 ms); only to look the model up
    from plait.runtime import Runtime

    async def look_up() -> str | None:
        runtime = Runtime.open(db=getattr(args, "db", None), store_only=True)
        try:
            sid = session_id
            if sid is None:
                assert run_id is not None
                sid = (await runtime.queries.get_run(run_id)).session_id
            return await runtime.queries.session_model(sid)
        finally:
            await runtime.close()

    args.model = _loop.run(look_up())
