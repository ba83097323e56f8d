"""The in-process run event feed: wake-ups are hints keyed by sequence, never lost to a
race between reading the store and starting to wait."""

from __future__ import annotations

import asyncio

from plait.application.event_feed import LocalEventFeed


def test_a_notification_before_the_wait_is_not_missed() -> None:
    async def go() -> None:
        feed = LocalEventFeed()
        feed.notify("r1", 3)
        assert await feed.wait("r1", after=2, at_most=60) is True
        assert await feed.wait("r1", after=3, at_most=0.01) is False  # nothing newer
        assert await feed.wait("r2", after=0, at_most=0.01) is False  # another run

    asyncio.run(go())


def test_a_waiting_stream_wakes_on_its_run_only() -> None:
    async def go() -> None:
        feed = LocalEventFeed()
        r1 = asyncio.create_task(feed.wait("r1", after=0, at_most=60))
        r2 = asyncio.create_task(feed.wait("r2", after=0, at_most=60))
        await asyncio.sleep(0)
        feed.notify("r1", 1)
        assert await r1 is True
        assert not r2.done()
        feed.notify("r1", 1)  # not newer: nobody is woken, nothing changes
        feed.wake_all()  # e.g. a listener reconnected: everyone re-reads
        assert await r2 is False  # woken, but there is nothing new for r2

    asyncio.run(go())


def test_while_not_live_waits_end_after_the_poll_interval() -> None:
    async def go() -> None:
        feed = LocalEventFeed(poll_seconds=0.01)
        feed.live = False
        assert await asyncio.wait_for(feed.wait("r1", after=0, at_most=3600), 30) is False

    asyncio.run(go())


def test_it_remembers_a_bounded_number_of_runs() -> None:
    async def go() -> None:
        feed = LocalEventFeed(remember=2)
        for i in range(3):
            feed.notify(f"r{i}", 1)
        assert await feed.wait("r0", after=0, at_most=0.01) is False  # forgotten: poll
        assert await feed.wait("r2", after=0, at_most=0.01) is True

    asyncio.run(go())
