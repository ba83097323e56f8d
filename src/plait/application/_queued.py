"""Service mode: a queued run, submitted and then taken in hand by a worker.

:func:`queued` builds the commit that stores a user message with a ``queued`` run.

:func:`begin_claimed`: a run a worker claimed, in hand and persisted as ``running``
(already so when the queue started it, :class:`~plait.application.claiming.ClaimedRun`).

:func:`take_claimed`: the queue's claim (``RunQueue.claim_queued_run``) already gave the
run's lease to this process, so claiming it again (as :meth:`RunDriver.take_over` does for
a run found some other way) would only cost a round trip. The run's next commit is fenced
by that lease like every other: if it expired meanwhile and another process took the
run, that commit fails with :class:`~plait.domain.errors.LeaseLostError` before writing.
"""

from __future__ import annotations

from dataclasses import replace

from plait.application._history import session_history
from plait.application._journal import RunJournal
from plait.application._run_state import ActiveRun
from plait.application.claiming import ClaimedRun
from plait.application.driver import RunDriver
from plait.application.events import RunObserver
from plait.application.ports import Clock, Commit, IdGenerator, SessionStore, TextSink
from plait.domain.answers import OutputSchema
from plait.domain.errors import ConfigError
from plait.domain.messages import UserMessage
from plait.domain.runs import Budget, Run, RunStatus

__all__ = ["begin_claimed", "can_queue", "check_can_queue", "queued", "take_claimed"]


def can_queue(store: SessionStore) -> bool:
    """Whether a worker can serve ``store`` (it has a run queue; JSONL has none)."""
    return store.capabilities.run_queue


def check_can_queue(store: SessionStore, what: str) -> None:
    """Refuse to leave a run ``queued`` on a store no worker can serve (it has no run
    queue: JSONL), before anything is written: the run would wait for a worker that can
    never come. ``what`` names the refused action and how to go on instead."""
    if not can_queue(store):
        raise ConfigError(
            f"{what}: this store has no run queue, so no worker (`plait worker`, "
            "`plait serve`) can continue a queued run; continue it in this process "
            "instead (leave out --queue)",
            store=type(store).__name__,
        )


def queued(
    session_id: str,
    text: str,
    budget: Budget,
    ids: IdGenerator,
    now: float,
    *,
    owner: str | None,
    output_schema: OutputSchema | None = None,
    mcp_servers: tuple[str, ...] | None = None,
) -> tuple[Run, Commit]:
    """A ``queued`` run for ``text`` and the commit storing it with the user message,
    appended after the session's last message (no read of the session first), refused
    as not found if the session is not ``owner``'s (``None``: anyone's)."""
    run = Run(
        id=ids.new("run"),
        session_id=session_id,
        status=RunStatus.QUEUED,
        budget=budget,
        started_at=now,
        output_schema=output_schema,
        mcp_servers=mcp_servers,
    )
    user = UserMessage(id=ids.new("msg"), text=text, created_at=now, run_id=run.id)
    commit = Commit(
        session_id=session_id,
        expected_version=None,
        messages=(user,),
        run=run,
        session_owner=owner,
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
    session, history = await session_history(driver.store, run.session_id)
    running = replace(run, status=RunStatus.RUNNING, error=None)
    return driver.activate(running, session, session.version, history, observer, on_text)


async def begin_claimed(
    driver: RunDriver,
    journal: RunJournal,
    clock: Clock,
    run: Run | ClaimedRun,
    *,
    model: tuple[str, str | None],
    observer: RunObserver | None,
    on_text: TextSink | None,
) -> ActiveRun:
    """The claimed run in hand, persisted as ``running`` with ``model`` (name, spec) and
    its deadline: from here on a dead worker's run is recovered. A
    :class:`ClaimedRun` was persisted so by its claim (nothing is written here)."""
    if isinstance(run, ClaimedRun):
        history = [s.message for s in run.history]
        return driver.activate(
            run.run, run.session, run.session.version, history, observer, on_text
        )
    active = await take_claimed(driver, run, observer=observer, on_text=on_text)
    window = active.run.budget.deadline_seconds  # counted from when a worker starts it
    deadline_at = None if window is None else clock.now() + window
    active.run = replace(active.run, model=model[0], model_spec=model[1], deadline_at=deadline_at)
    if window is not None:
        active.deadline = clock.monotonic() + window
    await journal.commit(active, (), run=active.run)
    return active
