"""The iteration timer fires once per arming, never after a cancel, and falls back to loop.call_at off Linux."""

from __future__ import annotations

import asyncio
import time

from engines import iteration_timer
from engines.iteration_timer import IterationTimer


async def _fires(timer: IterationTimer, fired: list[float], when: float) -> None:
    before = len(fired)
    timer.set(when)
    for _ in range(200):
        if len(fired) > before:
            return
        await asyncio.sleep(0.005)


async def test_fires_once_after_its_time_and_can_be_rearmed():
    fired: list[float] = []
    timer = IterationTimer(asyncio.get_running_loop(), lambda: fired.append(time.monotonic()))
    try:
        start = time.monotonic()
        await _fires(timer, fired, start + 0.01)
        assert len(fired) == 1 and fired[0] >= start + 0.01
        await _fires(timer, fired, time.monotonic() - 1)  # a time already past fires at once
        assert len(fired) == 2
        await asyncio.sleep(0.03)
        assert len(fired) == 2  # one shot per arming
    finally:
        timer.close()


async def test_a_cancelled_timer_never_fires():
    fired: list[float] = []
    timer = IterationTimer(asyncio.get_running_loop(), lambda: fired.append(time.monotonic()))
    try:
        timer.set(time.monotonic() + 0.01)
        timer.cancel()
        await asyncio.sleep(0.05)
        assert fired == []
    finally:
        timer.close()


async def test_without_timerfd_it_uses_the_loops_timers(monkeypatch):
    monkeypatch.setattr(iteration_timer, "_libc", lambda: None)
    fired: list[float] = []
    timer = IterationTimer(asyncio.get_running_loop(), lambda: fired.append(time.monotonic()))
    try:
        assert not timer.precise
        start = time.monotonic()
        await _fires(timer, fired, start + 0.01)
        assert len(fired) == 1 and fired[0] >= start + 0.009  # loop.time() and monotonic agree to rounding
    finally:
        timer.close()
