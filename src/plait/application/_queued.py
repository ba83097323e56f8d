"""Service mode: a queued run, submitted and then taken in hand by a worker.

:func:`queued` builds the commit that stores a user message with a ``queued`` run.

:func:`take_claimed`: the queue's claim (``RunQueue.claim_queued_run``) already gave the
run's lease to this process, so claiming it again (as :meth:`RunDriver.take_over` does for
a run found some other way) would only cost a round trip. The run's next commit is fenced
by that lease like every other: if it expired meanwhile and another process took the
run, that commit fails with :class:`~plait.domain.errors.LeaseLostError` before writing.
"""

from __future__ import annotations

from dataclasses import replace

from plait.application._run_state import ActiveRun
from plait.application.driver import RunDriver
from plait.application.events import RunObserver
from plait.application.ports import Commit, IdGenerator, TextSink
from plait.domain.messages import UserMessage
from plait.domain.runs import Budget, Run, RunStatus
from plait.domain.session import Session

__all__ = ["queued", "take_claimed"]


def queued(
    session: Session, text: str, budget: Budget, ids: IdGenerator, now: float
) -> tuple[Run, Commit]:
    """A ``queued`` run for ``text`` and the commit storing it with the user message."""
    run = Run(
        id=ids.new("run"), session_id=session.id, status=RunStatus.QUEUED, budget=budget,
        started_at=now,
    )  # fmt: skip
    user = UserMessage(id=ids.new("msg"), text=text, created_at=now, run_id=run.id)
    commit = Commit(
        session_id=session.id, expected_version=session.version, messages=(user,), run=run
    )
    return run, commit


async def take_claimed(
    driver: RunDriver, run: Run, *, observer: RunObserver | None, on_text: TextSink | None
) -> ActiveRun:
    """The run in hand, status ``running`` (not yet persisted), its history read."""
    lease = run.lease
    if lease is None or lease.owner != driver.owner or lease.expires_at <= driver.clock.now():
        return await driver.take_over(
            run, observer=observer, status=RunStatus.RUNNING, on_text=on_text
        )
    session = await driver.store.get_session(run.session_id)
    stored = await driver.store.read_messages(run.session_id)
    running = replace(run, status=RunStatus.RUNNING, error=None)
    history = [s.message for s in stored]
    return driver.activate(running, session, session.version, history, observer, on_text)
