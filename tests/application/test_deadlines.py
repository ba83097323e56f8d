"""Time limits with one timer per task (plait.application._deadlines): the semantics of
``asyncio.timeout`` for each await, without a timer armed and cancelled per await."""

from __future__ import annotations

import asyncio

import pytest

from plait.application._deadlines import within

from .conftest import run


async def quick() -> str:
    return "done"


async def slow(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "slow done"


def test_an_await_past_its_limit_raises_timeout_error() -> None:
    async def go() -> None:
        with pytest.raises(TimeoutError):
            await within(0.02, slow(5))
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
        assert await within(1.0, quick()) == "done"  # the task goes on, still limited

    run(go())


def test_many_quick_awaits_keep_one_timer() -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        before = len(loop._scheduled)  # type: ignore[attr-defined]
        for _ in range(500):
            assert await within(60.0, quick()) == "done"
        assert len(loop._scheduled) - before == 1  # type: ignore[attr-defined]

    run(go())


def test_a_shorter_limit_after_a_longer_one_still_fires() -> None:
    async def go() -> None:
        assert await within(60.0, quick()) == "done"  # the timer is armed for 60 s
        with pytest.raises(TimeoutError):
            await within(0.02, slow(5))

    run(go())


def test_a_longer_limit_after_a_shorter_one_is_not_cut_short() -> None:
    async def go() -> None:
        assert await within(0.02, quick()) == "done"  # the timer is armed for 20 ms
        assert await within(5.0, slow(0.1)) == "slow done"  # outlives that timer

    run(go())


def test_the_timer_firing_between_awaits_cancels_nothing() -> None:
    async def go() -> None:
        assert await within(0.01, quick()) == "done"
        await asyncio.sleep(0.05)  # the timer fires here, with no await under a limit
        assert await within(None, slow(0.01)) == "slow done"

    run(go())


def test_a_cancel_from_elsewhere_stays_a_cancel() -> None:
    async def go() -> None:
        async def limited() -> str:
            return await within(5.0, slow(5))

        task = asyncio.create_task(limited())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(go())


def test_a_cancel_from_elsewhere_as_the_limit_expires_stays_a_cancel() -> None:
    async def limited() -> str:
        inner = asyncio.current_task()
        assert inner is not None
        asyncio.get_running_loop().call_later(0.01, inner.cancel)  # both in one iteration
        return await within(0.01, slow(5))

    async def go() -> None:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(limited())

    run(go())


def test_an_expired_await_that_swallows_its_cancel_leaves_no_cancel_pending() -> None:
    async def stubborn() -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return "kept going"
        return "slept"

    async def go() -> None:
        assert await within(0.01, stubborn()) == "kept going"
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        assert await within(1.0, slow(0.01)) == "slow done"

    run(go())


def test_a_limit_inside_a_limited_await_of_the_same_task() -> None:
    async def outer(inner_limit: float, inner_sleep: float) -> str:
        return await within(inner_limit, slow(inner_sleep))

    async def go() -> None:
        # the inner limit expires: the inner await times out, the outer one sees that
        with pytest.raises(TimeoutError):
            await within(5.0, outer(0.02, 5))
        # the outer limit expires first
        with pytest.raises(TimeoutError):
            await within(0.02, outer(5.0, 5))
        assert await within(5.0, outer(5.0, 0.01)) == "slow done"

    run(go())


def test_tasks_have_their_own_limits() -> None:
    async def go() -> None:
        results = await asyncio.gather(
            within(5.0, slow(0.05)),
            within(0.01, slow(5)),
            within(5.0, slow(0.02)),
            return_exceptions=True,
        )
        assert results[0] == "slow done" and results[2] == "slow done"
        assert isinstance(results[1], TimeoutError)

    run(go())
