"""A one-shot timer on the event loop that fires within tens of microseconds of its time, not a millisecond late.

asyncio's epoll selector waits whole milliseconds, rounded up (``selectors.EpollSelector.select``), and libuv
(uvloop) counts time in milliseconds, so ``loop.call_at`` fires 0-1 ms after its time: at a 3 ms decode step
that is a sixth more. On Linux a ``timerfd`` armed at an absolute CLOCK_MONOTONIC time becomes readable at that
time, and epoll returns as soon as a registered descriptor is ready, whatever its own timeout. Elsewhere (or if
the calls are missing) it falls back to ``loop.call_at``.

Times are ``time.monotonic()`` seconds (CLOCK_MONOTONIC), never ``loop.time()``, which uvloop caches in ms.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import sys
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.timerfd_create  # noqa: B018 (present?)
        libc.timerfd_settime  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


class IterationTimer:
    """Calls ``callback`` once at the time given to :meth:`set` (re-arm it for the next one)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None
        self._armed = False
        self._fd = -1
        self._libc = _libc()
        if self._libc is not None:
            fd = self._libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
            if fd >= 0:
                self._fd = fd
                loop.add_reader(fd, self._on_ready)
            else:
                logger.info(
                    "timerfd_create failed (errno %d): iteration timers fall back to loop.call_at", ctypes.get_errno()
                )

    @property
    def precise(self) -> bool:
        return self._fd >= 0

    def set(self, when: float) -> None:
        """Fires at ``when`` (``time.monotonic()`` seconds); a time already past fires at once."""
        self._armed = True
        if self._fd < 0:
            if self._handle is not None:
                self._handle.cancel()
            self._handle = self._loop.call_at(self._loop.time() + (when - time.monotonic()), self._fire)
            return
        self._settime(max(when, 1e-9))  # (an all-zero value would disarm it); re-arming resets its count

    def cancel(self) -> None:
        self._armed = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._fd >= 0:
            self._settime(0.0)  # disarmed

    def _settime(self, when: float) -> None:
        sec = int(when)
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(sec, int((when - sec) * 1e9)))
        assert self._libc is not None
        if self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def close(self) -> None:
        self.cancel()
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1

    def _on_ready(self) -> None:
        try:
            os.read(self._fd, 8)  # the expiration count: reading it makes the descriptor wait again
        except BlockingIOError:
            return
        self._fire()

    def _fire(self) -> None:
        self._handle = None
        if self._armed:
            self._armed = False
            self._callback()
